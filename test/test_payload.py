# SPDX-License-Identifier: Apache-2.0
"""Payloads: the model with a payload against Pinocchio with the same payload, the runtime
payload effort against the reference, the regressors against Pinocchio's, identification from
noisy resting efforts, and the refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, Oracle, random_state, rel_err, robots_dir
from urdf_samples import kitchen_sink_urdf, two_link_arm_urdf

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


# ----------------------------------------------------------------------------- identification


@pytest.mark.parametrize("name", ["default_arm", "panda"])
def test_identify_payload_from_noisy_resting_efforts(name):
    """Efforts = gravity with the payload + a constant offset per joint + 0.05 N·m noise:
    mass within 1 %, COM within 5 mm, and the reported deviations cover the errors."""
    model = load_model(_xml(name))
    link = P.default_payload_link(model)
    for seed in range(5):
        rng = np.random.default_rng(100 + seed)
        payload = P.Payload(link, rng.uniform(0.5, 3.0), rng.uniform(-0.05, 0.05, 3),
                            np.eye(3) * 2e-3)
        poses = P.suggest_identification_poses(model, link, 40, rng)
        efforts = (D.gravity(P.with_payload(model, payload), poses)
                   + rng.uniform(-1.0, 1.0, model.nv) + rng.normal(0.0, 0.05, poses.shape))
        est = P.identify_payload(model, poses, efforts, link)
        assert abs(est.mass - payload.mass) <= 0.01 * payload.mass
        assert np.linalg.norm(est.com - payload.com) <= 5e-3
        assert abs(est.mass - payload.mass) <= 5 * est.mass_std
        assert np.all(np.abs(est.com - payload.com) <= 5 * est.com_std)
        assert est.noise_std == pytest.approx(0.05, rel=0.3)
        assert est.condition < 10 and est.n_poses == 40 and est.bias.shape == (model.nv,)
        assert est.as_payload().mass == est.mass


def test_identify_payload_with_reference_efforts_and_without_bias():
    model = load_model(DEFAULT_URDF)
    rng = np.random.default_rng(7)
    payload = P.Payload("tool0", 1.2, [0.01, -0.02, 0.06])
    poses = P.suggest_identification_poses(model, None, 25, rng)
    offset = rng.uniform(-1.0, 1.0, model.nv)
    # the model's own gravity is 3 % off: the difference of two measurements cancels it
    wrong = D.gravity(model, poses) * 1.03
    empty = wrong + offset + rng.normal(0.0, 0.05, poses.shape)
    loaded = (wrong + P.payload_gravity(model, poses, payload) + offset
              + rng.normal(0.0, 0.05, poses.shape))
    est = P.identify_payload(model, poses, loaded, reference_efforts=empty)
    assert est.bias is None and est.link == "tool0"
    assert abs(est.mass - 1.2) <= 0.012 and np.linalg.norm(est.com - payload.com) <= 5e-3
    exact = D.gravity(model, poses) + P.payload_gravity(model, poses, payload)
    est = P.identify_payload(model, poses, exact, bias="none")
    assert abs(est.mass - 1.2) <= 1e-9 and np.linalg.norm(est.com - payload.com) <= 1e-9
    assert est.mass_std > 0  # the noise floor keeps the deviations honest on exact data


def test_identify_payload_refusals():
    model = load_model(DEFAULT_URDF)
    rng = np.random.default_rng(8)
    payload = P.Payload("tool0", 1.0, [0.0, 0.0, 0.05])
    poses = P.suggest_identification_poses(model, "tool0", 10, rng)
    efforts = D.gravity(P.with_payload(model, payload), poses)
    with pytest.raises(P.IdentificationError, match="at least 2"):
        P.identify_payload(model, poses[:1], efforts[:1])
    same = np.repeat(poses[:1], 10, axis=0)
    with pytest.raises(P.IdentificationError, match="cannot separate"):
        P.identify_payload(model, same, D.gravity(P.with_payload(model, payload), same))
    spun = np.repeat(poses[:1], 10, axis=0)
    spun[:, 0] = np.linspace(-3, 3, 10)  # turning about the vertical axis shows nothing new
    with pytest.raises(P.IdentificationError, match="cannot separate"):
        P.identify_payload(model, spun, D.gravity(P.with_payload(model, payload), spun))
    noisy = D.gravity(model, poses) + rng.normal(0.0, 0.05, poses.shape)
    with pytest.raises(P.IdentificationError, match="no significant payload"):
        P.identify_payload(model, poses, noisy)
    two_link = load_model(two_link_arm_urdf(1.0, 1.0, 0.5, 0.25, 0.25, 0.01, 0.01),
                          gravity=(0.0, -9.81, 0.0))
    with pytest.raises(P.IdentificationError, match="too few poses"):  # 4 equations, 6 unknowns
        P.identify_payload(two_link, [[0.1, 0.2], [0.5, -0.3]], np.ones((2, 2)), "link2")
    with pytest.raises(ValueError, match="efforts contains NaN"):
        P.identify_payload(model, poses, np.where(efforts > 0, np.nan, efforts))
    with pytest.raises(ValueError, match="rows"):
        P.identify_payload(model, poses, efforts[:-1])
    with pytest.raises(ValueError, match="bias must be"):
        P.identify_payload(model, poses, efforts, bias="linear")
    with pytest.raises(ValueError, match="more than the limit"):
        too_many = np.zeros((P.MAX_IDENTIFICATION_POSES + 1, model.nq))
        P.identify_payload(model, too_many, too_many)
    with pytest.raises(ValueError, match="unknown payload link"):
        P.identify_payload(model, poses, efforts, "hand")


def test_suggested_poses_are_inside_the_limits_and_holdable():
    for name in ("default_arm", "panda"):
        model = load_model(_xml(name))
        poses = P.suggest_identification_poses(model, count=40, rng=np.random.default_rng(9))
        assert poses.shape == (40, model.nq)
        assert np.all(poses >= model.position_lower) and np.all(poses <= model.position_upper)
        assert np.all(np.abs(D.gravity(model, poses)) <= 0.8 * model.effort_limit)
        assert len({tuple(p) for p in poses}) == 40
    with pytest.raises(ValueError, match="count must be"):
        P.suggest_identification_poses(model, count=1)


def exciting_motion(model, n: int, duration: float, rng):
    """Three harmonics per joint around the middle of its range, with exact q̇ and q̈."""
    lower = np.where(np.isfinite(model.position_lower), model.position_lower, -np.pi)
    upper = np.where(np.isfinite(model.position_upper), model.position_upper, np.pi)
    t = np.linspace(0.0, duration, n)[:, None]
    q = np.tile(0.5 * (lower + upper), (n, 1))
    v, a = np.zeros_like(q), np.zeros_like(q)
    for h in range(1, 4):
        amp = np.minimum(0.9, 0.15 * (upper - lower)) / h * rng.uniform(0.5, 1.0, model.nv)
        w = 2 * np.pi * h * rng.uniform(0.15, 0.3, model.nv)
        phase = rng.uniform(0, 2 * np.pi, model.nv)
        q += amp * np.sin(w * t + phase)
        v += amp * w * np.cos(w * t + phase)
        a -= amp * w**2 * np.sin(w * t + phase)
    return q, v, a


@pytest.mark.parametrize("name", ["default_arm", "panda"])
def test_identify_payload_inertia_from_motion(name):
    """Efforts along an exciting motion = rnea with the payload + offset + viscous and Coulomb
    friction + 0.05 N·m noise: all ten parameters; a 3 kg box of 30×20×10 cm, turned, has its
    inertia (~0.04 kg·m²) within 5 %, each parameter within 5 of its standard deviations."""
    model = load_model(_xml(name))
    link = P.default_payload_link(model)
    rng = np.random.default_rng(10)
    q, v, a = exciting_motion(model, 2000, 20.0, rng)
    R = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    box = 3.0 / 12 * np.diag([0.2**2 + 0.1**2, 0.3**2 + 0.1**2, 0.3**2 + 0.2**2])
    payload = P.Payload(link, 3.0, [0.03, -0.02, 0.06], R @ box @ R.T)
    efforts = (D.rnea(P.with_payload(model, payload), q, v, a) + rng.uniform(-1, 1, model.nv)
               + model.damping * v + model.friction * np.sign(v)
               + rng.normal(0.0, 0.05, q.shape))
    est = P.identify_payload_inertia(model, q, v, a, efforts, link)
    assert abs(est.mass - payload.mass) <= 0.01 * payload.mass
    assert np.linalg.norm(est.com - payload.com) <= 5e-3
    assert np.linalg.norm(est.inertia - payload.inertia) <= 0.05 * np.linalg.norm(payload.inertia)
    truth = payload.inertial_parameters()
    assert np.all(np.abs(est.parameters - truth) <= 5 * est.parameters_std)
    assert est.friction.shape == (model.nv, 3)
    arm = [vi for vi, kind in zip(model.joint_v_index, model.joint_kinds) if kind == "revolute"]
    assert np.allclose(est.friction[arm, 1], model.damping[arm], atol=0.05)  # viscous
    assert est.as_payload().mass == est.mass
    # the same motion without the payload, measured: the difference needs no friction model
    empty = (D.rnea(model, q, v, a) * 1.02 + model.damping * v
             + rng.normal(0.0, 0.05, q.shape))
    loaded = empty + P.payload_wrench_effort(model, q, v, a, payload)
    est = P.identify_payload_inertia(model, q, v, a, loaded, link, reference_efforts=empty)
    assert est.friction is None
    assert abs(est.mass - payload.mass) <= 1e-9 * payload.mass


def test_identify_payload_inertia_refuses_resting_data():
    model = load_model(DEFAULT_URDF)
    rng = np.random.default_rng(11)
    poses = P.suggest_identification_poses(model, "tool0", 30, rng)
    payload = random_payload("tool0", rng)
    zero = np.zeros_like(poses)
    efforts = D.gravity(P.with_payload(model, payload), poses)
    with pytest.raises(P.IdentificationError, match="never depend on Ixx.*identify_payload"):
        P.identify_payload_inertia(model, poses, zero, zero, efforts, "tool0")
    with pytest.raises(ValueError, match="same number of rows"):
        P.identify_payload_inertia(model, poses, zero[:-1], zero, efforts)
    with pytest.raises(ValueError, match="bias must be one of"):
        P.identify_payload_inertia(model, poses, zero, zero, efforts, bias="per_joint")
