"""Constrained dynamics against Pinocchio, and a four-bar linkage closed by a loop constraint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, Oracle, random_state, rel_err, robots_dir

from rb_dynamics.codegen import compile_dynamics
from rb_dynamics.constraints import (
    Baumgarte,
    FixedPoint,
    LoopClosurePoint,
    constrained_forward_dynamics,
)
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
    fast = compile_dynamics(model)
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

    def forward(m, qs, vs, tau, *_):
        M = fast.crba(qs)
        F = tau - fast.nonlinear_effects(qs, vs)
        r = loop.rows(m, qs, vs, 0.0, gains)
        from rb_dynamics.constraints import rosenberg

        return rosenberg(M, F, r.A[:2], r.b[:2])[0]  # planar: the z row is identically 0

    v, worst = np.zeros(3), 0.0
    for k in range(2000):  # 10 s at 5 ms
        s = step(model, q, v, np.zeros(3), 5e-3, "rk4", forward_dynamics=forward,
                 losses=False, limits=False)
        q, v = s.q, s.v
        if k % 20 == 0:
            worst = max(worst, float(np.abs(loop.rows(model, q, v, 0.0, gains).violation).max()))
    assert worst <= 1e-6, worst
    assert np.abs(v).max() > 0.1  # it swings
