# SPDX-License-Identifier: Apache-2.0
"""Constrained dynamics against Pinocchio, and a four-bar linkage closed by a loop constraint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, Oracle, random_state, rel_err, robots_dir

from rb_dynamics.dynamics import (
    Baumgarte,
    FixedPoint,
    FrameWeld,
    LoopClosurePoint,
    constrained_forward_dynamics,
    make_dynamics,
)
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import load_model
from rb_dynamics.simulation import step

EXACT = Baumgarte(0.0, 0.0)


@pytest.mark.parametrize("robot", ["ur5", "panda"])
def test_fixed_point_matches_pinocchio_kkt(robot):
    """Pinocchio's own frame Jacobian and classical drift in its KKT forward dynamics."""
    xml = Path(robots_dir(), REAL_ROBOTS[robot][0]).read_text()
    model = load_model(xml)
    oracle = Oracle(model, xml)
    pm, pd = oracle.pm, oracle.pd
    link = model.body_names[-1] if robot == "ur5" else "panda_link7"
    fid = pm.getFrameId(link, pin.BODY)
    rng = np.random.default_rng(60)
    worst = {"udwadia_kalaba": 0.0, "rosenberg": 0.0}
    for _ in range(50):
        q, v, _, tau = random_state(model, rng)
        qp, vp = oracle.q(q), oracle.v(v)
        pin.computeJointJacobians(pm, pd, qp)
        pin.forwardKinematics(pm, pd, qp, vp, np.zeros(pm.nv))
        pin.updateFramePlacements(pm, pd)
        J = pin.getFrameJacobian(pm, pd, fid, pin.LOCAL_WORLD_ALIGNED)[:3]
        drift = pin.getFrameClassicalAcceleration(pm, pd, fid, pin.LOCAL_WORLD_ALIGNED).linear
        M = pin.crba(pm, pd, qp)
        M = np.triu(M) + np.triu(M, 1).T
        b = pin.rnea(pm, pd, qp, vp, np.zeros(pm.nv))
        kkt = np.block([[M, J.T], [J, np.zeros((3, 3))]])
        ref = np.linalg.solve(kkt, np.concatenate([oracle.v(tau) - b, -drift]))[:pm.nv]
        for method in worst:
            ours = constrained_forward_dynamics(model, q, v, tau, [FixedPoint(link)],
                                                method=method, gains=EXACT)
            worst[method] = max(worst[method], rel_err(ours.qdd, oracle.from_v(ref)))
    print(f"\n{robot} fixed point vs pin KKT, worst relative q̈ error: {worst}")
    assert max(worst.values()) <= 1e-8, worst


def four_bar_urdf() -> str:
    """Crank (0.1 m), coupler (0.25 m), rocker (0.2 m) as an open chain from the ground pivot
    at the origin; the loop closes at the rocker's ground pivot, 0.2 m along x."""
    def link(name, length):
        izz = length**2 / 12
        return (f'<link name="{name}"><inertial><origin xyz="{length / 2} 0 0"/>'
                f'<mass value="1"/><inertia ixx="1e-5" iyy="{izz}" izz="{izz}" ixy="0" '
                'ixz="0" iyz="0"/></inertial></link>')

    def joint(name, parent, child, x):
        return (f'<joint name="{name}" type="continuous"><parent link="{parent}"/>'
                f'<child link="{child}"/><origin xyz="{x} 0 0"/><axis xyz="0 0 1"/></joint>')

    return ('<robot name="four_bar"><link name="ground"/>' + link("crank", 0.1)
            + link("coupler", 0.25) + link("rocker", 0.2)
            + joint("j_crank", "ground", "crank", 0.0) + joint("j_coupler", "crank", "coupler", 0.1)
            + joint("j_rocker", "coupler", "rocker", 0.25) + "</robot>")


def test_four_bar_stays_closed_for_10_s():
    model = load_model(four_bar_urdf(), gravity=(0.0, -9.81, 0.0))
    fast = make_dynamics(model)
    # a closed configuration: crank at 60°, then solve the coupler/rocker angles
    a, l1, l2, l3, ground = np.pi / 3, 0.1, 0.25, 0.2, np.array([0.2, 0.0])
    crank_tip = l1 * np.array([np.cos(a), np.sin(a)])
    d = np.linalg.norm(ground - crank_tip)
    gamma = np.arccos((l2**2 + d**2 - l3**2) / (2 * l2 * d))
    base = np.arctan2(*(ground - crank_tip)[::-1])
    coupler = base + gamma
    coupler_tip = crank_tip + l2 * np.array([np.cos(coupler), np.sin(coupler)])
    rocker = np.arctan2(*(ground - coupler_tip)[::-1])
    q = np.array([a, coupler - a, rocker - coupler])
    loop = LoopClosurePoint("rocker", "ground", (l3, 0.0, 0.0), (0.2, 0.0, 0.0))
    gains = Baumgarte(20.0, 20.0)
    rows = loop.rows(model, q, np.zeros(3), 0.0, gains)
    assert np.abs(rows.violation).max() < 1e-12

    class ClosedFourBar:
        """The tree's dynamics with q̈ closed by the loop (planar: the z row is identically 0,
        so Rosenberg takes the first two)."""

        kind = "test"

        def __init__(self) -> None:
            self.model, self.crba = fast.model, fast.crba
            self.nonlinear_effects = fast.nonlinear_effects

        def aba(self, qs, vs, tau, f_ext=None):
            from rb_dynamics.dynamics import rosenberg

            F = tau - fast.nonlinear_effects(qs, vs)
            r = loop.rows(model, qs, vs, 0.0, gains)
            return rosenberg(fast.crba(qs), F, r.A[:2], r.b[:2])[0]

    v, worst = np.zeros(3), 0.0
    for k in range(2000):  # 10 s at 5 ms
        s = step(ClosedFourBar(), q, v, np.zeros(3), 5e-3, "rk4", losses=False, limits=False)
        q, v = s.q, s.v
        if k % 20 == 0:
            worst = max(worst, float(np.abs(loop.rows(model, q, v, 0.0, gains).violation).max()))
    print(f"\nfour-bar, worst loop violation over 10 s: {worst:.2e} m")
    assert worst <= 1e-6, worst
    assert np.abs(v).max() > 0.1  # it swings


def _anchor(pm, link: str, offset: np.ndarray | None = None):
    """Pinocchio joint and placement of a point (or pose) given in a link's frame."""
    frame = pm.frames[pm.getFrameId(link, pin.BODY)]
    local = pin.SE3.Identity() if offset is None else pin.SE3(offset)
    return frame.parentJoint, frame.placement * local


@pytest.mark.parametrize("case", ["ur5_fixed_point", "ur5_loop", "talos_loop", "talos_weld"])
def test_point_loop_and_weld_match_pinocchio_constraint_dynamics(case):
    """``pin.constraintDynamics`` (3-D and 6-D rigid constraints, no Baumgarte) at random
    states whose velocities the constraint allows (where the frames Pinocchio expresses its
    constraints in no longer matter)."""
    robot, kind = case.split("_", 1)
    xml = Path(robots_dir(), REAL_ROBOTS[robot][0]).read_text()
    model = load_model(xml, floating_base=REAL_ROBOTS[robot][1])
    oracle = Oracle(model, xml)
    pm = oracle.pm
    a, b = (("wrist_3_link", "forearm_link") if robot == "ur5" else
            ("gripper_left_base_link", "gripper_right_base_link"))
    point_a, point_b = np.array([0.0, 0.05, 0.02]), np.array([0.1, 0.0, 0.0])
    rng = np.random.default_rng(61)
    worst = 0.0
    for _ in range(10):
        q, v, _, tau = random_state(model, rng)
        if kind == "fixed_point":
            ours = FixedPoint(a, point_a)
            T = np.eye(4)
            T[:3, 3] = point_a
            ja, Pa = _anchor(pm, a, T)
            contact = pin.RigidConstraintModel(pin.ContactType.CONTACT_3D, pm, ja, Pa,
                                               pin.LOCAL)
        elif kind == "loop":
            ours = LoopClosurePoint(a, b, point_a, point_b)
            Ta, Tb = np.eye(4), np.eye(4)
            Ta[:3, 3], Tb[:3, 3] = point_a, point_b
            (ja, Pa), (jb, Pb) = _anchor(pm, a, Ta), _anchor(pm, b, Tb)
            contact = pin.RigidConstraintModel(pin.ContactType.CONTACT_3D, pm, ja, Pa, jb, Pb,
                                               pin.LOCAL)
        else:
            ours = FrameWeld(a, b)  # keeps the relative pose of this state
            ours.rows(model, q, v, 0.0, EXACT)
            (ja, Pa), (jb, Pb) = _anchor(pm, a, ours.relative_pose), _anchor(pm, b)
            contact = pin.RigidConstraintModel(pin.ContactType.CONTACT_6D, pm, ja, Pa, jb, Pb,
                                               pin.LOCAL)
        A = ours.rows(model, q, v, 0.0, EXACT).A
        v = v - np.linalg.pinv(A) @ (A @ v)
        pd = pm.createData()
        models, datas = [contact], [contact.createData()]
        pin.initConstraintDynamics(pm, pd, models, datas)
        reference = pin.constraintDynamics(pm, pd, oracle.q(q), oracle.v(v), oracle.v(tau),
                                           models, datas)
        for method in ("udwadia_kalaba", "rosenberg"):
            result = constrained_forward_dynamics(model, q, v, tau, [ours], method=method,
                                                  gains=EXACT)
            worst = max(worst, rel_err(result.qdd, oracle.from_v(reference)))
    print(f"\n{case} vs pin.constraintDynamics, worst relative q̈ error: {worst:.2e}")
    assert worst <= 1e-8, worst


@pytest.mark.parametrize("robot", ["panda", "talos"])
def test_single_pass_kinematics_equals_the_reference_functions(robot):
    xml = Path(robots_dir(), REAL_ROBOTS[robot][0]).read_text()
    model = load_model(xml, floating_base=REAL_ROBOTS[robot][1])
    rng = np.random.default_rng(62)
    links = [name for name in model.frames][::max(len(model.frames) // 8, 1)]
    point = np.array([0.03, -0.02, 0.05])
    for _ in range(3):
        q, v, _, _ = random_state(model, rng)
        kin = D.Kinematics(model, q, v)
        for link in links:
            np.testing.assert_allclose(kin.pose(link), D.link_pose(model, q, link), atol=1e-12)
            np.testing.assert_allclose(kin.jacobian(link)[3:], D.link_jacobian(
                model, q, link, "local_world_aligned")[3:], atol=1e-12)
            np.testing.assert_allclose(kin.jacobian(link, point)[:3],
                                       D.point_jacobian(model, q, link, point), atol=1e-12)
            np.testing.assert_allclose(kin.bias(link, point), D.link_acceleration(
                model, q, v, np.zeros(model.nv), link, point), atol=1e-10)
