# SPDX-License-Identifier: Apache-2.0
"""Payloads: the model with a payload against Pinocchio with the same payload, the runtime
payload effort against the reference, the regressors against Pinocchio's, and the refusals.
Identification from measured efforts is in test_identification.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, Oracle, random_state, rel_err, robots_dir
from urdf_samples import kitchen_sink_urdf

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import payload as P
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import load_model

TOL = 1e-9
N_STATES = 25


def _xml(name: str) -> str:
    if name == "default_arm":
        return DEFAULT_URDF.read_text()
    if name == "kitchen_sink":
        return kitchen_sink_urdf()
    return Path(robots_dir(), REAL_ROBOTS[name][0]).read_text()


@pytest.fixture(scope="module", params=["ur5", "panda", "default_arm", "kitchen_sink"])
def robot(request):
    xml = _xml(request.param)
    model = load_model(xml)
    if request.param == "kitchen_sink":
        model.gravity = np.array([1.2, -2.0, -9.5])  # a tilted mount
    return request.param, model, xml


def random_payload(link: str, rng: np.random.Generator) -> P.Payload:
    """A solid box of 0.5–3 kg, a few cm off the link origin, turned arbitrarily."""
    mass = rng.uniform(0.5, 3.0)
    d = rng.uniform(0.02, 0.2, 3)
    box = mass / 12 * np.diag([d[1] ** 2 + d[2] ** 2, d[0] ** 2 + d[2] ** 2, d[0] ** 2 + d[1] ** 2])
    R = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    return P.Payload(link, mass, rng.uniform(-0.08, 0.08, 3), R @ box @ R.T)


def _moving_links(model) -> list[str]:
    return [name for name, frame in model.frames.items() if frame.body >= 0]


def _pin_with_payload(model, xml, payload: P.Payload) -> Oracle:
    """A fresh oracle whose Pinocchio model carries the payload on the link's joint."""
    oracle = Oracle(model, xml)
    pm = oracle.pm
    frame = pm.frames[pm.getFrameId(payload.link, pin.BODY)]
    inertia = pin.Inertia(payload.mass, np.array(payload.com), np.array(payload.inertia))
    pm.inertias[frame.parentJoint] = pm.inertias[frame.parentJoint] + frame.placement.act(
        inertia
    )
    oracle.pd = pm.createData()
    return oracle


# ----------------------------------------------------------------------------- the payload


def test_payload_validation_names_the_problem():
    with pytest.raises(ValueError, match="mass must be ≥ 0"):
        P.Payload("tool0", -1.0)
    with pytest.raises(ValueError, match="NaN or inf"):
        P.Payload("tool0", 1.0, [0.0, np.nan, 0.0])
    with pytest.raises(ValueError, match=r"com must have shape \(3,\)"):
        P.Payload("tool0", 1.0, [0.0, 0.0])
    with pytest.raises(ValueError, match="not symmetric"):
        P.Payload("tool0", 1.0, inertia=[[1, 0.5, 0], [0, 1, 0], [0, 0, 1]])
    with pytest.raises(ValueError, match="not positive semi-definite"):
        P.Payload("tool0", 1.0, inertia=np.diag([1.0, 1.0, -0.1]))
    with pytest.raises(ValueError, match="triangle inequality"):
        P.Payload("tool0", 1.0, inertia=np.diag([0.1, 0.1, 1.0]))
    with pytest.raises(ValueError, match="mass 0"):
        P.Payload("tool0", 0.0, [0.0, 0.0, 0.1])
    with pytest.raises(ValueError, match="implausibly large"):
        P.Payload("tool0", 1e12)
    with pytest.raises(ValueError, match="link name"):
        P.Payload("", 1.0)
    payload = P.Payload("tool0", 2.0, [0.0, 0.0, 0.1], np.eye(3) * 1e-3)
    with pytest.raises(ValueError):
        payload.com[0] = 1.0  # frozen all the way down
    assert P.Payload.none("tool0").is_empty


def test_payload_link_must_exist_and_move():
    model = load_model(DEFAULT_URDF)
    with pytest.raises(ValueError, match=r"unknown payload link 'gripper'.*'tool0'"):
        P.with_payload(model, P.Payload("gripper", 1.0))
    with pytest.raises(ValueError, match="welded to the world"):
        P.PayloadEffort(model, P.Payload("base_link", 1.0))


def test_default_payload_link():
    assert P.default_payload_link(load_model(DEFAULT_URDF)) == "tool0"
    assert P.default_payload_link(load_model(_xml("ur5"))) == "tool0"
    # the Panda's hand holds two finger bodies: the payload goes on the hand's TCP frame
    assert P.default_payload_link(load_model(_xml("panda"))) == "panda_hand_tcp"
    # l4 carries two leaf bodies (l5 and the mimic finger): stop there, at its welded tip
    assert P.default_payload_link(load_model(_xml("kitchen_sink"))) == "tool_tip"


def test_inertial_parameters_match_pinocchio():
    rng = np.random.default_rng(0)
    payload = random_payload("tool0", rng)
    ref = pin.Inertia(payload.mass, payload.com, payload.inertia).toDynamicParameters()
    assert rel_err(payload.inertial_parameters(), ref) <= 1e-14


# ----------------------------------------------------------------------------- against Pinocchio


def test_model_with_payload_matches_pinocchio(robot):
    name, model, xml = robot
    rng = np.random.default_rng(1)
    links = [P.default_payload_link(model)] + list(rng.choice(_moving_links(model), 2))
    for link in links:
        payload = random_payload(str(link), rng)
        loaded = P.with_payload(model, payload)
        oracle = _pin_with_payload(model, xml, payload)
        pm, pd = oracle.pm, oracle.pd
        assert rel_err(loaded.total_mass, model.total_mass + payload.mass) <= 1e-14
        for _ in range(N_STATES):
            q, v, a, tau = random_state(model, rng)
            qp, vp, ap = oracle.q(q), oracle.v(v), oracle.v(a)
            ref_rnea = oracle.from_v(pin.rnea(pm, pd, qp, vp, ap))
            assert rel_err(D.rnea(loaded, q, v, a), ref_rnea) <= TOL
            ref_g = oracle.from_v(pin.computeGeneralizedGravity(pm, pd, qp))
            assert rel_err(D.gravity(loaded, q), ref_g) <= TOL
            M = pin.crba(pm, pd, qp)
            M = np.triu(M) + np.triu(M, 1).T
            assert rel_err(D.crba(loaded, q), oracle.matrix(M)) <= TOL
            bias = pin.rnea(pm, pd, qp, vp, np.zeros(pm.nv))
            ref_aba = oracle.from_v(np.linalg.solve(M, oracle.v(tau) - bias))
            assert rel_err(D.aba(loaded, q, v, tau), ref_aba) <= TOL
            if not model.has_mimic:
                ref = oracle.from_v(pin.aba(pm, pd, qp, vp, oracle.v(tau)))
                assert rel_err(D.aba(loaded, q, v, tau), ref) <= TOL


# ----------------------------------------------------------------------------- runtime effort


def test_payload_effort_is_the_difference_of_the_models(robot):
    """τ_model + payload effort = rnea with the payload, to rounding, for every link
    (mimic, prismatic, welded frames; free and planar supports take the reference path)."""
    name, model, _ = robot
    rng = np.random.default_rng(2)
    for link in _moving_links(model):
        payload = random_payload(link, rng)
        loaded = P.with_payload(model, payload)
        effort = P.PayloadEffort(model, payload)
        for _ in range(4):
            q, v, a, _ = random_state(model, rng)
            total = D.rnea(model, q, v, a) + effort.effort(q, v, a)
            assert rel_err(total, D.rnea(loaded, q, v, a)) <= 1e-12, link
            ref = P.payload_effort_reference(model, q, v, a, payload)
            assert rel_err(effort.effort(q, v, a), ref) <= 1e-12, link
            g = D.gravity(model, q) + effort.gravity(q)
            assert rel_err(g, D.gravity(loaded, q)) <= 1e-12, link
        states = [random_state(model, rng) for _ in range(6)]
        Q, V, A = (np.array([s[k] for s in states]) for k in range(3))
        ref = P.payload_effort_reference(model, Q, V, A, payload)
        assert rel_err(effort.effort(Q, V, A), ref) <= 1e-12, link
        zero = np.zeros_like(V)
        assert rel_err(effort.gravity(Q), P.payload_effort_reference(model, Q, zero, zero,
                                                                      payload)) <= 1e-12
        assert rel_err(effort.effort(Q, V[0], A[0]), P.payload_effort_reference(
            model, Q, V[:1], A[:1], payload)) <= 1e-12  # one velocity for a batch of poses


def test_payload_effort_functions_and_empty_payload():
    model = load_model(DEFAULT_URDF)
    rng = np.random.default_rng(3)
    q, v, a, _ = random_state(model, rng)
    payload = random_payload("tool0", rng)
    ref = P.payload_effort_reference(model, q, v, a, payload)
    assert rel_err(P.payload_wrench_effort(model, q, v, a, payload), ref) <= 1e-12
    zero = np.zeros(model.nv)
    g_ref = P.payload_effort_reference(model, q, zero, zero, payload)
    assert rel_err(P.payload_gravity(model, q, payload), g_ref) <= 1e-12
    none = P.PayloadEffort(model, P.Payload.none("tool0"))
    assert np.array_equal(none.effort(q, v, a), np.zeros(model.nv))
    assert none.gravity(np.zeros((3, model.nq))).shape == (3, model.nv)
    with pytest.raises(ValueError, match="q must have length 6"):
        P.payload_gravity(model, np.zeros(5), payload)
    with pytest.raises(ValueError, match="v contains NaN"):
        P.payload_wrench_effort(model, q, [np.nan] * 6, a, payload)


def test_payload_gravity_sags_only_what_it_should():
    """Physics: a point payload straight below the flange origin of the default arm loads the
    shoulder by m·g·(horizontal reach) and the base yaw joint not at all."""
    model = load_model(DEFAULT_URDF)
    q = np.array([0.4, -0.3, 0.2, 0.1, 0.6, -0.2])
    tool = D.link_pose(model, q, "tool0")
    payload = P.Payload("tool0", 2.0)
    g = P.payload_gravity(model, q, payload)
    assert abs(g[0]) < 1e-12  # the pan axis is vertical
    shoulder = D.link_pose(model, q, "upper_arm_link")
    axis = shoulder[:3, :3] @ np.array([0.0, 1.0, 0.0])
    lever = tool[:3, 3] - shoulder[:3, 3]
    expected = axis @ np.cross(lever, np.array([0.0, 0.0, 9.81 * 2.0]))
    assert g[1] == pytest.approx(expected, rel=1e-12)


# ----------------------------------------------------------------------------- regressors


def test_regressors_reproduce_the_payload_effort(robot):
    name, model, _ = robot
    rng = np.random.default_rng(4)
    for link in _moving_links(model):
        if not P._chain(model, link).fast:
            with pytest.raises(ValueError, match="free or planar"):
                P.payload_gravity_regressor(model, random_state(model, rng)[0], link)
            continue
        payload = random_payload(link, rng)
        theta = np.r_[payload.mass, payload.mass * payload.com]
        states = [random_state(model, rng) for _ in range(5)]
        Q, V, A = (np.array([s[k] for s in states]) for k in range(3))
        zero = np.zeros_like(V)
        Y = P.payload_gravity_regressor(model, Q, link)
        assert Y.shape == (5, model.nv, 4)
        ref_g = D.gravity(P.with_payload(model, payload), Q) - D.gravity(model, Q)
        assert rel_err(Y @ theta, P.payload_effort_reference(model, Q, zero, zero, payload)) \
            <= 1e-12
        assert rel_err(Y @ theta, ref_g) <= 1e-9
        Y10 = P.payload_inertial_regressor(model, Q, V, A, link)
        ref = P.payload_effort_reference(model, Q, V, A, payload)
        assert rel_err(Y10 @ payload.inertial_parameters(), ref) <= 1e-12


def _frame_change(link_frame: pin.SE3) -> np.ndarray:
    """10×10 T with π_joint = T π_link (the inertial parameters are linear in the inertia)."""
    links, joints = [], []
    for _ in range(30):
        inertia = pin.Inertia.Random()
        links.append(inertia.toDynamicParameters())
        joints.append(link_frame.act(inertia).toDynamicParameters())
    return np.linalg.lstsq(np.array(links), np.array(joints), rcond=None)[0].T


def _fold_mimics(model, pm) -> np.ndarray:
    """Gᵀ for a Pinocchio model without mimic joints: its q̇ = G v, our τ = Gᵀ τ_pin."""
    G = np.zeros((pm.nv, model.nv))
    for name, vi in zip(model.joint_names, model.joint_v_index):
        G[pm.joints[pm.getJointId(name)].idx_v, vi] = 1.0
    for name, (leader, mult, _) in model.mimic_joints.items():
        G[pm.joints[pm.getJointId(name)].idx_v, model.joint_v_index[model.joint_index(leader)]] \
            = mult
    return G.T


@pytest.mark.parametrize("name", ["ur5", "panda", "default_arm"])
def test_regressors_match_pinocchio_joint_torque_regressor(name):
    xml = _xml(name)
    model = load_model(xml)
    oracle = Oracle(model, xml)
    rng = np.random.default_rng(6)
    for link in [P.default_payload_link(model), *rng.choice(_moving_links(model), 2)]:
        for _ in range(5):
            q, v, a, _ = random_state(model, rng)
            pm, pd, qp, vp = oracle.pinocchio_state(q, v)
            _, _, _, ap = oracle.pinocchio_state(q, a)
            frame = pm.frames[pm.getFrameId(str(link), pin.BODY)]
            T = _frame_change(frame.placement)
            cols = slice(10 * (frame.parentJoint - 1), 10 * frame.parentJoint)
            fold = _fold_mimics(model, pm)  # the Panda's right finger follows the left one
            Y_pin = fold @ pin.computeJointTorqueRegressor(pm, pd, qp, vp, ap)[:, cols] @ T
            Y = P.payload_inertial_regressor(model, q, v, a, str(link))
            assert rel_err(Y, Y_pin) <= TOL, link
            zero = np.zeros(pm.nv)
            Y0_pin = fold @ pin.computeJointTorqueRegressor(pm, pd, qp, zero, zero)[:, cols] @ T
            assert rel_err(P.payload_gravity_regressor(model, q, str(link)), Y0_pin[:, :4]) \
                <= TOL, link
