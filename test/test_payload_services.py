# SPDX-License-Identifier: Apache-2.0
"""The control node's payload services as a real process: ~/set_payload changes the control law
and the dynamics services (against Pinocchio with the same payload), the payload.* start-up
parameters, ~/trajectory_efforts against pin.rnea and its feasibility report, and
~/identify_payload from data given in the request. The closed loop with the simulator is in
test_payload_closed_loop.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from payload_rig import set_payload_request as set_request
from pin_oracle import REAL_ROBOTS, Oracle, rel_err, robots_dir
from ros_harness import Session, refused_start
from test_payload_dynamics import pin_oracle
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.control import feasibility as F
from rb_dynamics.dynamics import Payload, with_payload
from rb_dynamics.dynamics import reference as D
from rb_dynamics.identification import END_MARGIN, rest_poses, suggest_identification_poses
from rb_dynamics.model import load_model
from rb_dynamics_interfaces.srv import (
    DynamicsTerms,
    IdentifyPayload,
    InverseDynamics,
    SetPayload,
    TrajectoryEfforts,
)

PANDA = Path(robots_dir(), REAL_ROBOTS["panda"][0])
TOL = 1e-9


def pin_rnea(oracle: Oracle, q, v, a) -> np.ndarray:
    return oracle.from_v(pin.rnea(oracle.pm, oracle.pd, oracle.q(q), oracle.v(v), oracle.v(a)))


class Rig:
    """The control node (a ``Session``), the test playing the robot driver and calling its
    services."""

    def __init__(self, tmp_path: Path, urdf: Path, **params):
        self.model = load_model(urdf)
        self.xml = Path(urdf).read_text()
        self.node = Session("rb_dynamics.ros.control_node", tmp_path,
                            {"urdf_path": str(urdf), "state_timeout": 0.5, **params})
        self.services = {"set_payload": SetPayload, "identify_payload": IdentifyPayload,
                         "trajectory_efforts": TrajectoryEfforts,
                         "inverse_dynamics": InverseDynamics, "dynamics_terms": DynamicsTerms}

    def call(self, name: str, request, timeout: float = 20.0):
        return self.node.call(self.services[name], f"~/{name}", request, timeout)

    def command_after(self, q) -> np.ndarray:
        """The command answering joint state q (every joint, at rest)."""
        command = self.node.command_after(self.model.joint_names, q, np.zeros(len(q)), 10.0)
        assert command is not None, self.node.output()
        return command

    def diagnostic_values(self) -> dict[str, str]:
        statuses = self.node.statuses()
        count = len(statuses)
        assert self.node.wait_for(lambda: len(self.node.statuses()) > count, 5.0)
        status = self.node.statuses()[-1][1]
        return {kv.key: kv.value for kv in status.values}

    def close(self) -> None:
        self.node.close()


@pytest.fixture()
def panda(tmp_path):
    rig = Rig(tmp_path, PANDA)
    yield rig
    rig.close()


def test_set_payload_changes_the_law_and_the_services_answer_for_the_loaded_robot(panda):
    model, rng = panda.model, np.random.default_rng(190)
    q = rng.uniform(model.position_lower, model.position_upper)
    bare = pin_oracle(panda.xml, model)
    zero = np.zeros(model.nv)
    assert rel_err(panda.command_after(q), pin_rnea(bare, q, zero, zero)) <= TOL

    R = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    payload = Payload("panda_hand_tcp", 1.5, [0.02, -0.01, 0.05],
                      R @ np.diag([4e-3, 3e-3, 2e-3]) @ R.T)
    answer = panda.call("set_payload", set_request("", payload.mass, payload.com,
                                                   payload.inertia))
    assert answer.success, answer.message
    assert answer.payload.link == "panda_hand_tcp"  # "" is the end of the first chain
    loaded = pin_oracle(panda.xml, model, payload)
    # the control law: gravity compensation now holds the payload too
    assert rel_err(panda.command_after(q), pin_rnea(loaded, q, zero, zero)) <= TOL
    # the dynamics services answer for the loaded robot
    v, a = rng.normal(size=model.nv), rng.normal(size=model.nv)
    names = model.joint_names
    inverse = panda.call("inverse_dynamics", InverseDynamics.Request(
        joint_names=names, positions=q.tolist(), velocities=v.tolist(),
        accelerations=a.tolist()))
    assert inverse.success, inverse.message
    assert rel_err(np.array(inverse.efforts), pin_rnea(loaded, q, v, a)) <= TOL
    terms = panda.call("dynamics_terms", DynamicsTerms.Request(joint_names=names,
                                                               positions=q.tolist()))
    M = loaded.matrix(pin.crba(loaded.pm, loaded.pd, loaded.q(q)))
    M = np.triu(M) + np.triu(M, 1).T
    assert rel_err(np.array(terms.mass_matrix).reshape(model.nv, model.nv), M) <= TOL
    values = panda.diagnostic_values()
    assert values["payload"].startswith("1.5 kg on panda_hand_tcp, COM [0.02, -0.01, 0.05] m")

    # refusals name the field and change nothing
    for request, expected in (
            (set_request("", -1.0, [0, 0, 0]), "mass must be ≥ 0"),
            (set_request("hand", 1.0, [0, 0, 0]), "unknown payload link 'hand'; links that"),
            (set_request("panda_link0", 1.0, [0, 0, 0]), "welded to the world"),
            (set_request("", 1.0, [0, 0, 0], [[1, 0.5, 0], [0, 1, 0], [0, 0, 1]]),
             "not symmetric"),
            (set_request("", 1.0, [0, 0, 0], np.diag([1.0, 1.0, 3.0])), "triangle inequality"),
            (set_request("", 0.0, [0, 0, 0.1]), "mass 0 (no payload) cannot have a COM"),
            (set_request("", float("nan"), [0, 0, 0]), "NaN")):
        answer = panda.call("set_payload", request)
        assert not answer.success and expected in answer.message, answer.message
    assert rel_err(panda.command_after(q), pin_rnea(loaded, q, zero, zero)) <= TOL

    # mass 0 removes it
    assert panda.call("set_payload", set_request("", 0.0, [0, 0, 0])).success
    assert rel_err(panda.command_after(q), pin_rnea(bare, q, zero, zero)) <= TOL
    inverse = panda.call("inverse_dynamics", InverseDynamics.Request(
        joint_names=names, positions=q.tolist()))
    assert rel_err(np.array(inverse.efforts), pin_rnea(bare, q, zero, zero)) <= TOL
    assert panda.diagnostic_values()["payload"] == "none"


def test_start_up_payload_parameters(tmp_path):
    """payload.* give the payload from the first command; a bad value stops the node at start;
    a link the robot lacks leaves it without payload, said on /diagnostics."""
    payload = Payload("wrist_3_link", 2.0, [0.0, 0.05, 0.01],
                      [[0.01, 0.001, 0.0], [0.001, 0.02, 0.002], [0.0, 0.002, 0.015]])
    rig = Rig(tmp_path, DEFAULT_URDF, **{
        "payload.link": "wrist_3_link", "payload.mass": 2.0, "payload.com": [0.0, 0.05, 0.01],
        "payload.inertia": [0.01, 0.001, 0.0, 0.02, 0.002, 0.015]})  # URDF order
    try:
        q = np.array([0.3, -1.0, 1.2, -0.4, 0.8, 0.5])
        zero = np.zeros(6)
        expected = pin_rnea(pin_oracle(rig.xml, rig.model, payload), q, zero, zero)
        assert rel_err(rig.command_after(q), expected) <= TOL
        assert rig.diagnostic_values()["payload"].startswith("2 kg on wrist_3_link")
    finally:
        rig.close()
    refused = refused_start("rb_dynamics.ros.control_node", tmp_path, {
        "urdf_path": str(DEFAULT_URDF), "payload.mass": 1.0, "payload.com": [0.1, 0.2]})
    assert "payload com must have shape (3,)" in refused
    rig = Rig(tmp_path, DEFAULT_URDF, **{"payload.link": "gripper", "payload.mass": 1.0})
    try:
        q = np.zeros(6)
        assert rel_err(rig.command_after(q), D.gravity(rig.model, q)) <= TOL
        values = rig.diagnostic_values()
        assert values["payload"] == "none"
        assert "start-up payload dropped" in values["payload problem"]
        assert "unknown payload link 'gripper'" in values["payload problem"]
    finally:
        rig.close()


# ----------------------------------------------------------------------------- trajectories


def _duration(t: float):
    sec = int(np.floor(t))
    return sec, int(round((t - sec) * 1e9))


def trajectory_msg(names, t, q, v=None, a=None) -> JointTrajectory:
    msg = JointTrajectory(joint_names=list(names))
    for k in range(len(t)):
        point = JointTrajectoryPoint(positions=q[k].tolist())
        if v is not None:
            point.velocities = v[k].tolist()
        if a is not None:
            point.accelerations = a[k].tolist()
        point.time_from_start.sec, point.time_from_start.nanosec = _duration(t[k])
        msg.points.append(point)
    return msg


def arm_trajectory(model, arm: list[int], n: int, duration: float, rng):
    """q(t) = centre + A sin(ω t + φ) on the ``arm`` coordinates, with exact q̇ and q̈."""
    lower, upper = model.position_lower[arm], model.position_upper[arm]
    centre, amp = 0.5 * (lower + upper), np.minimum(0.4, 0.3 * (upper - lower))
    omega, phase = rng.uniform(1.0, 2.5, len(arm)), rng.uniform(0, 2 * np.pi, len(arm))
    t = np.linspace(0.0, duration, n)[:, None]
    q = centre + amp * np.sin(omega * t + phase)
    return (t[:, 0], q, amp * omega * np.cos(omega * t + phase),
            -amp * omega**2 * np.sin(omega * t + phase))


def test_trajectory_efforts_agree_with_pinocchio_and_name_the_first_infeasible_point(panda):
    """The arm's seven joints along a smooth trajectory (the finger, not named, is held where
    the node last measured it): efforts = pin.rnea at every point, bare, with the node's
    payload and with one given in the request; then a trajectory too fast for the motors."""
    model, rng = panda.model, np.random.default_rng(191)
    arm = [model.joint_v_index[model.joint_index(f"panda_joint{k}")] for k in range(1, 8)]
    names = [f"panda_joint{k}" for k in range(1, 8)]
    measured = model.neutral_configuration()
    measured[model.joint_index("panda_finger_joint1")] = 0.03
    panda.command_after(measured)
    q_arm = check_efforts_for_each_payload_choice(panda, arm, names, measured, rng)
    t, q_arm = check_first_infeasible_point(panda, arm, names, measured, q_arm[0])
    check_bad_trajectory_requests(panda, names, t, q_arm)


def arm_rows(x, base, arm: list[int]) -> np.ndarray:
    """Rows of ``base`` (every coordinate) with the ``arm`` coordinates taken from x's rows."""
    out = np.tile(base, (len(x), 1))
    out[:, arm] = x
    return out


def check_efforts_for_each_payload_choice(panda, arm, names, measured, rng) -> np.ndarray:
    """Efforts = pin.rnea at every point of a smooth trajectory: bare, with the node's payload
    (set here) and with one given in the request. Returns the arm's positions."""
    model = panda.model
    t, q_arm, v_arm, a_arm = arm_trajectory(model, arm, 40, 4.0, rng)
    q, v, a = (arm_rows(q_arm, measured, arm), arm_rows(v_arm, np.zeros(8), arm),
               arm_rows(a_arm, np.zeros(8), arm))
    request = TrajectoryEfforts.Request(trajectory=trajectory_msg(names, t, q_arm, v_arm,
                                                                  a_arm))
    node_payload = Payload("panda_hand_tcp", 2.0, [0.0, 0.03, 0.06], np.diag([5e-3] * 3))
    asked = Payload("panda_link7", 0.8, [0.05, 0.0, 0.1])
    assert panda.call("set_payload", set_request("", node_payload.mass, node_payload.com,
                                                 node_payload.inertia)).success
    cases = {"none": None, "": node_payload, "current": node_payload, "request": asked}
    request.request_payload.link, request.request_payload.mass = "panda_link7", 0.8
    request.request_payload.com.x, request.request_payload.com.z = 0.05, 0.1
    worst = 0.0
    for choice, payload in cases.items():
        request.payload = choice
        answer = panda.call("trajectory_efforts", request)
        assert answer.success, answer.message
        oracle = pin_oracle(panda.xml, model, payload)
        got = np.array([p.effort for p in answer.trajectory.points])
        assert got.shape == (len(t), 7)
        for k in range(len(t)):
            ref = pin_rnea(oracle, q[k], v[k], a[k])[arm]
            worst = max(worst, rel_err(got[k], ref))
        assert answer.feasible and not answer.violations, answer.report
        assert answer.joint_names == model.joint_names
        assert 0.05 < max(answer.effort_ratio) < 1 and max(answer.velocity_ratio) < 1
        assert "'panda_finger_joint1'] at the last measured position" in answer.report
    assert worst <= TOL
    print(f"\n~/trajectory_efforts against pin.rnea: worst relative error {worst:.1e}")
    return q_arm


def check_first_infeasible_point(panda, arm, names, measured, start):
    """Positions only, too fast between points 3 and 4: the same first violation as the engine.
    Returns the trajectory's times and the arm's positions."""
    t = np.array([0.0, 1.0, 2.0, 3.0, 3.3, 4.3])
    q_arm = np.tile(start, (6, 1))
    q_arm[:, 1] = [-0.5, -0.4, -0.3, -0.2, 1.0, 1.0]  # 1.2 rad in 0.3 s: 4 rad/s > 2.175
    answer = panda.call("trajectory_efforts", TrajectoryEfforts.Request(
        trajectory=trajectory_msg(names, t, q_arm), payload="none"))
    assert answer.success and not answer.feasible
    first = answer.violations[0]
    assert (first.kind, first.joint, first.point, first.between, first.time) == (
        "velocity", "panda_joint2", 3, False, 3.0), answer.report
    assert first.value == pytest.approx(4.0) and first.limit == pytest.approx(2.175)
    engine = F.feasibility_report(panda.model, t, arm_rows(q_arm, measured, arm))
    assert str(engine.first_violation) in answer.message
    assert "NOT feasible: velocity limit of panda_joint2 exceeded at point 3" in answer.report
    return t, q_arm


def check_bad_trajectory_requests(panda, names, t, q_arm) -> None:
    """Bad requests name the field."""
    mixed = trajectory_msg(names, t, q_arm, np.zeros((6, 7)))
    mixed.points[2].velocities = []
    reversed_times = trajectory_msg(names, t[::-1], q_arm)
    unknown = trajectory_msg(["panda_joint1", "elbow"], t, q_arm[:, :2])
    short = trajectory_msg(names, t, q_arm)
    short.points[4].positions = [0.0] * 6
    for trajectory, choice, expected in (
            (mixed, "none", "trajectory.points[2].velocities: empty"),
            (reversed_times, "none", "trajectory: times: point 1"),
            (unknown, "none", "joint_names: unknown joints ['elbow']"),
            (short, "none", "point 4: positions has 6 values, expected 7"),
            (JointTrajectory(joint_names=names), "none", "trajectory.points: empty"),
            (trajectory_msg(names, t, q_arm), "maybe", "payload must be")):
        answer = panda.call("trajectory_efforts", TrajectoryEfforts.Request(
            trajectory=trajectory, payload=choice))
        assert not answer.success and expected in answer.message, answer.message


# ----------------------------------------------------------------------------- identification


def identify_request(model, poses, efforts, **fields) -> IdentifyPayload.Request:
    return IdentifyPayload.Request(joint_names=model.joint_names,
                                   positions=np.asarray(poses).ravel().tolist(),
                                   efforts=np.asarray(efforts).ravel().tolist(), **fields)


def test_identify_payload_from_given_data(tmp_path):
    """Poses and efforts in the request: mass and COM at rest (per-joint offsets absorbed),
    applied on request; all ten parameters from data in motion; the refusals say why."""
    rig = Rig(tmp_path, DEFAULT_URDF)
    try:
        rng = np.random.default_rng(192)
        poses, efforts = check_identification_at_rest(rig, rng)
        check_identification_in_motion(rig, rng)
        check_identification_refusals(rig, rng, poses, efforts)
    finally:
        rig.close()


def check_identification_at_rest(rig, rng):
    """Mass and COM from resting poses with per-joint offsets, reported and then applied on
    request. Returns the poses and efforts given."""
    model = rig.model
    payload = Payload("tool0", 1.8, [0.015, -0.02, 0.07])
    poses = suggest_identification_poses(model, count=15, rng=rng)
    offset = rng.uniform(-0.5, 0.5, model.nv)
    efforts = (D.gravity(with_payload(model, payload), poses) + offset
               + rng.normal(0.0, 0.05, poses.shape))
    answer = rig.call("identify_payload", identify_request(model, poses, efforts))
    assert answer.success, answer.message
    com = np.array([answer.payload.com.x, answer.payload.com.y, answer.payload.com.z])
    assert abs(answer.payload.mass - 1.8) <= 0.018 and np.linalg.norm(com - payload.com) <= 5e-3
    assert abs(answer.payload.mass - 1.8) <= 5 * answer.mass_std
    assert answer.poses == 15 and answer.condition < 10 and not answer.applied
    assert answer.noise_std == pytest.approx(0.05, rel=0.4)
    assert np.allclose(answer.bias, offset, atol=0.1) and len(answer.bias_std) == 6
    assert answer.joint_names == model.joint_names
    q = poses[0]
    assert rel_err(rig.command_after(q), D.gravity(model, q)) <= TOL  # not applied

    answer = rig.call("identify_payload", identify_request(model, poses, efforts,
                                                           apply=True))
    assert answer.success and answer.applied and answer.message.endswith("applied")
    estimate = Payload("tool0", answer.payload.mass, [answer.payload.com.x,
                       answer.payload.com.y, answer.payload.com.z])
    assert rel_err(rig.command_after(q),
                   D.gravity(with_payload(model, estimate), q)) <= TOL
    return poses, efforts


def check_identification_in_motion(rig, rng) -> None:
    """The ten inertial parameters (and viscous/Coulomb friction per joint) from motion."""
    model = rig.model
    box = Payload("tool0", 2.5, [0.01, 0.02, 0.05], np.diag([0.02, 0.015, 0.01]))
    t = np.linspace(0.0, 20.0, 1500)[:, None]
    w, phase = rng.uniform(0.6, 1.8, 6), rng.uniform(0, 6, 6)
    q = np.array([0.0, -1.2, 1.2, -1.0, -1.5, 0.0]) + 0.8 * np.sin(w * t + phase)
    v, a = 0.8 * w * np.cos(w * t + phase), -0.8 * w**2 * np.sin(w * t + phase)
    tau = (D.rnea(with_payload(model, box), q, v, a) + model.damping * v
           + model.friction * np.sign(v) + rng.normal(0.0, 0.05, q.shape))
    answer = rig.call("identify_payload", identify_request(
        model, q, tau, velocities=v.ravel().tolist(), accelerations=a.ravel().tolist()))
    assert answer.success and answer.inertia_identified, answer.message
    assert abs(answer.payload.mass - 2.5) <= 0.025
    inertia = np.array(answer.payload.inertia).reshape(3, 3)
    assert np.linalg.norm(inertia - box.inertia) <= 0.1 * np.linalg.norm(box.inertia)


def check_identification_refusals(rig, rng, poses, efforts) -> None:
    """Refusals, with the reason."""
    model = rig.model
    same = np.repeat(poses[:1], 10, axis=0)
    for request, expected in (
            (identify_request(model, same, D.gravity(model, same)), "cannot separate"),
            (identify_request(model, poses[:1], efforts[:1]), "at least 2"),
            (identify_request(model, poses, D.gravity(model, poses)
                              + rng.normal(0.0, 0.05, poses.shape)),
             "no significant payload"),
            (identify_request(model, poses, efforts[:-1]), "efforts: 14 rows for 15 poses"),
            (identify_request(model, poses, efforts, bias="linear"), "bias must be"),
            (identify_request(model, poses, efforts, link="gripper"), "unknown payload link"),
            (IdentifyPayload.Request(joint_names=model.joint_names[:5],
                                     positions=[0.0] * 10, efforts=[0.0] * 10),
             "missing joints ['wrist_3_joint']"),
            (IdentifyPayload.Request(window=5.0), "no resting joint states recorded")):
        answer = rig.call("identify_payload", request)
        assert not answer.success and expected in answer.message, answer.message


def test_rest_poses_keep_the_middle_of_each_rest():
    """Four rests at 1 kHz whose efforts are wrong while the arm settles (the first 0.3 s) and
    once the next move starts (the last 0.1 s): each pose averages only the samples from
    half-way to END_MARGIN before its end; a rest shorter than min_rest does not count, nor
    does a run cut short by the arm sliding away."""
    dt, rows = 1e-3, []
    for k, (hold, pose) in enumerate(((1.0, 0.1), (0.3, 0.5), (1.2, -0.4), (0.8, 1.0))):
        for t in np.arange(0.0, hold - dt / 2, dt):
            wrong = 5.0 if t < 0.3 or t > hold - 0.1 else 0.0
            rows.append((10.0 * k + t, [pose, 2 * pose], [np.sin(pose) + wrong, 0.5 * pose]))
    t = np.array([r[0] for r in rows])
    q = np.array([r[1] for r in rows])
    tau = np.array([r[2] for r in rows])
    poses, efforts, used = rest_poses(t, q, tau, 0.5)
    assert np.allclose(poses[:, 0], [0.1, -0.4, 1.0])  # the 0.3 s rest is too short
    assert np.allclose(efforts[:, 0], np.sin(poses[:, 0]), atol=1e-12)
    assert np.allclose(efforts[:, 1], 0.5 * poses[:, 0], atol=1e-12)
    halves = sum((hold - dt) / 2 - END_MARGIN for hold in (1.0, 1.2, 0.8))
    assert abs(used - halves / dt) <= 3
    slid = q.copy()
    slid[:, 0] += np.where(t % 10 > 0.45, 0.01, 0.0)  # 10 mrad away after 0.45 s of each rest
    poses, efforts, _ = rest_poses(t, slid, tau, 0.5)
    assert np.allclose(poses[:, 0], [0.11, -0.39])  # what is left of rests 1 and 3
    assert np.allclose(efforts[:, 0], np.sin([0.1, -0.4]), atol=1e-12)
    none = rest_poses(t[:10], q[:10], tau[:10], 0.5)
    assert none[0].shape == (0, 2) and none[1].shape == (0, 2) and none[2] == 0
