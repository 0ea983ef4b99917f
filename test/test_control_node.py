# SPDX-License-Identifier: Apache-2.0
"""The control node as a real process: torques equal Pinocchio's for the same state.

A test process plays the robot driver (joint_states), the trajectory publisher and the effort
controller (listening to ~/effort_commands), all on loopback DDS with a random domain.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pin_oracle import REAL_ROBOTS, arm_torques, rel_err, robots_dir
from ros_harness import Session, control_node
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics.model import load_model

UR5 = Path(robots_dir(), REAL_ROBOTS["ur5"][0])
PANDA = Path(robots_dir(), REAL_ROBOTS["panda"][0])
MODEL = load_model(UR5)
JOINTS = MODEL.actuated_joint_names
Q_GOAL = np.array([0.2, -1.0, 1.1, -0.3, 0.4, 0.5])
Q = np.array([0.1, -1.2, 1.0, -0.5, 0.3, 0.2])


STALE_AFTER = 0.5  # s: state_timeout where a test checks what a stale state stream does


def _rig(tmp_path, state_timeout: float):
    # set-points far from the measured state (jumps the node refuses as infeasible by default)
    session = control_node(tmp_path, {"urdf_path": str(UR5), "kp": [100.0], "kd": [20.0],
                                      "state_timeout": state_timeout,
                                      "refuse_infeasible_trajectories": False})
    yield session
    session.close()


@pytest.fixture()
def rig(tmp_path):
    """The node, with the test process as its only state source, sending states one at a
    time: a state_timeout a busy test process cannot outlast between two of its calls (a
    timeout drops the reference, and the test would wait for a command that never comes)."""
    yield from _rig(tmp_path, 5.0)


@pytest.fixture()
def stale_rig(tmp_path):
    """The node with a short state_timeout (``STALE_AFTER``), for tests of staleness."""
    yield from _rig(tmp_path, STALE_AFTER)


def toward(goal: np.ndarray, q: np.ndarray, kp=100.0) -> np.ndarray:
    """Pinocchio's computed torque at rest toward a set-point (kd does not act at q̇ = 0)."""
    return arm_torques(UR5, JOINTS, q, a=kp * (goal - q), limit=MODEL.effort_limit)


def publish_set_point(rig: Session, goal: np.ndarray, names=JOINTS) -> None:
    order = [JOINTS.index(n) for n in names]
    rig.publish_matched(JointTrajectory, "~/joint_trajectory", JointTrajectory(
        joint_names=list(names), points=[JointTrajectoryPoint(positions=goal[order].tolist())]))


def steers(rig: Session, ref: np.ndarray, q: np.ndarray = Q, **state) -> bool:
    """Whether the command answering the state ``q`` comes to equal ``ref`` within 10 s (the
    node has taken the reference just sent)."""
    def equal() -> bool:
        tau = rig.command_after(JOINTS, q, **state)
        return tau is not None and rel_err(tau, ref) <= 1e-9

    return rig.wait_for(equal, 10.0)


def only_the_stop_command(new_commands: list, q: np.ndarray,
                          control: np.ndarray | None = None) -> bool:
    """Whether the commands published after the last usable state (``q``) are the default stop
    command (once state_timeout passed: the gravity effort at ``q``) or a late answer to a copy
    of that state still in flight (``control``; default: gravity compensation's) — none is an
    answer to anything else."""
    gravity = arm_torques(UR5, JOINTS, q, limit=MODEL.effort_limit)
    control = gravity if control is None else control
    return all(min(rel_err(np.array(c.data), gravity), rel_err(np.array(c.data), control))
               <= 1e-9 for _, c in new_commands)


def test_gravity_torques_equal_pinocchio_for_permuted_names(rig):
    rng = np.random.default_rng(40)
    for _ in range(5):
        q = rng.uniform(-1.5, 1.5, 6)
        order = rng.permutation(6)
        names = ["some_other_joint"] + [JOINTS[k] for k in order]
        tau = rig.command_after(names, [0.3, *q[order]])
        assert tau is not None, rig.output()
        assert rel_err(tau, arm_torques(UR5, JOINTS, q)) <= 1e-9


def test_computed_torque_equals_pinocchio_rnea_and_gains_are_validated(rig):
    assert rig.command_after(JOINTS, np.zeros(6)) is not None, rig.output()
    assert rig.set_parameters(mode="computed_torque").successful
    # a bad gain is refused with a reason, and nothing changes
    result = rig.set_parameters(kp=[-1.0] * 6, kd=[1.0] * 6)
    assert not result.successful and "kp" in result.reason
    assert not rig.set_parameters(mode="admittance").successful
    assert rig.set_parameters(kp=[50.0, 60, 70, 80, 90, 100]).successful
    kp, kd = np.array([50.0, 60, 70, 80, 90, 100]), np.full(6, 20.0)
    v = np.array([0.1, -0.2, 0.3, 0.0, 0.1, -0.1])
    a_cmd = kp * (Q_GOAL - Q) - kd * v  # a set-point: q̇_d = q̈_d = 0
    ref = arm_torques(UR5, JOINTS, Q, v, a_cmd, limit=MODEL.effort_limit)
    publish_set_point(rig, Q_GOAL, JOINTS[::-1])
    assert steers(rig, ref, v=v), (ref, rig.output())


def test_a_state_stamped_before_the_set_point_arrived_is_answered_toward_it(rig):
    """The reference is sampled at the state's stamp: one from before the set-point came is
    sampled at the set-point's start (this once raised inside the control loop)."""
    assert rig.command_after(JOINTS, np.zeros(6)) is not None, rig.output()
    assert rig.set_parameters(mode="computed_torque").successful
    stamp_ns = rig.peer.node.get_clock().now().nanoseconds  # measured before the set-point
    publish_set_point(rig, Q_GOAL)
    assert steers(rig, toward(Q_GOAL, Q), v=np.zeros(6), stamp_ns=stamp_ns), rig.output()
    assert rig.process.proc.poll() is None


def test_bad_states_publish_nothing_and_are_reported(stale_rig):
    rig = stale_rig
    commands = rig.commands
    assert rig.command_after(JOINTS, np.zeros(6)) is not None, rig.output()
    count = rig.settle(commands)  # answers to states still in flight
    # one at a time: of states queued together, the node handles only the newest
    for k, (names, positions) in enumerate(((JOINTS[:5], np.zeros(5)),
                                            (JOINTS, [0.0] * 5 + [float("nan")]),
                                            (JOINTS, np.zeros(5)))):
        rig.send_state(names, positions)
        assert rig.wait_for_log("; not publishing", 5.0, count=k + 1), rig.output()
    rig.wait_for(lambda: False, STALE_AFTER + 0.2)
    assert only_the_stop_command(commands[count:], np.zeros(6))
    assert all(np.all(np.isfinite(c.data)) for _, c in commands)
    log = rig.output()
    assert "missing joints" in log and "NaN" in log and "6 names but 5 positions" in log


def hostile_trajectories() -> list[JointTrajectory]:
    """Out of order, NaN, negative time, repeated names, too few positions, negative stamp."""
    def point(positions, seconds):
        p = JointTrajectoryPoint(positions=[float(x) for x in positions])
        p.time_from_start.sec = seconds
        return p

    nan = float("nan")
    negative = JointTrajectory(joint_names=JOINTS, points=[point(np.zeros(6), 1)])
    negative.header.stamp.sec = -5
    return [
        JointTrajectory(joint_names=JOINTS, points=[point(np.zeros(6), 2), point(np.ones(6), 1)]),
        JointTrajectory(joint_names=JOINTS, points=[point([nan] * 6, 1)]),
        JointTrajectory(joint_names=JOINTS, points=[point(np.zeros(6), -1)]),
        JointTrajectory(joint_names=JOINTS[:5] + JOINTS[:1], points=[point(np.zeros(6), 1)]),
        JointTrajectory(joint_names=JOINTS, points=[point(np.zeros(5), 1)]),
        negative,
    ]


def test_hostile_states_and_trajectories_never_move_the_command(rig):
    """Duplicated names, inf, wrong lengths, negative stamps, out-of-order or non-finite
    trajectory points: nothing is published for a bad state, a bad trajectory leaves the
    reference as it was, and every command that does go out is finite and within the limits."""
    commands = rig.commands
    rig.statuses()  # subscribed from here on
    assert rig.command_after(JOINTS, np.zeros(6)) is not None, rig.output()
    assert rig.set_parameters(mode="computed_torque").successful
    nan = float("nan")
    assert not rig.set_parameters(kp=[nan] * 6).successful  # NaN gains are refused too
    publish_set_point(rig, Q_GOAL)
    assert steers(rig, toward(Q_GOAL, Q)), rig.output()
    stream = rig.stream_states(JOINTS, Q, 0.02)  # the driver goes on meanwhile (else stale)
    for msg in hostile_trajectories():
        rig.publish_matched(JointTrajectory, "~/joint_trajectory", msg)
    # one writer's messages arrive in order: the last one refused means all were handled (the
    # trajectory warnings share one throttle, so the log shows only the first)
    assert rig.wait_for(lambda: any("negative header stamp -5" in kv.value
                                    for _, s in rig.statuses() for kv in s.values), 30.0), \
        [s.values for _, s in rig.statuses()]
    stream.stop()
    # the set-point still stands: the command is computed torque toward Q_GOAL
    tau = rig.command_after(JOINTS, Q, np.zeros(6))
    assert rel_err(tau, toward(Q_GOAL, Q)) <= 1e-9, (tau, rig.output())
    assert rig.set_parameters(state_timeout=STALE_AFTER).successful  # staleness from here on
    count = rig.settle(commands)
    bad_states = [
        JointState(name=JOINTS[:5] + JOINTS[:1], position=[0.0] * 6),
        JointState(name=list(JOINTS), position=[0.0] * 6, velocity=[0.0] * 5 + [float("inf")]),
        JointState(name=list(JOINTS), position=[0.0] * 6, velocity=[0.0] * 4),
    ]
    stamped = JointState(name=list(JOINTS), position=[0.0] * 6)
    stamped.header.stamp.sec = -3
    for k, msg in enumerate(bad_states + [stamped]):  # one at a time: of a queue only the
        rig.publish_state(msg)                        # newest is handled
        assert rig.wait_for_log("; not publishing", 5.0, count=k + 1), rig.output()
    rig.wait_for(lambda: False, STALE_AFTER + 0.2)
    assert only_the_stop_command(commands[count:], Q, toward(Q_GOAL, Q)), \
        "a command was published for a bad state"

    # no usable state for state_timeout dropped the reference: the next state is held
    tau = rig.command_after(JOINTS, Q, np.zeros(6))
    assert rel_err(tau, toward(Q, Q)) <= 1e-9, (tau, rig.output())
    # huge but finite positions: a command goes out, clamped
    tau = rig.command_after(JOINTS, np.full(6, 1e12))
    assert tau is not None and np.all(np.abs(tau) <= MODEL.effort_limit), rig.output()
    for _, command in commands:
        assert np.all(np.isfinite(command.data))
        assert np.all(np.abs(command.data) <= MODEL.effort_limit + 1e-12)
    log = rig.output()
    # (trajectory warnings share one throttle: the first refusal is the one logged)
    for words in ("repeated joint names", "NaN or inf in positions", "6 names but 4 velocities",
                  "negative stamp -3", "is not after", "kp must be finite"):
        assert words in log, (words, log)
    assert rig.process.proc.poll() is None


def test_positions_only_states_are_refused_with_the_reason_on_diagnostics(stale_rig):
    """A driver that publishes no velocities: no command (the code this was written against
    took q̇ = 0 and published), the reason on /diagnostics and in the log."""
    rig = stale_rig
    commands = rig.commands
    rig.statuses()  # subscribed from here on
    assert rig.command_after(JOINTS, Q) is not None, rig.output()
    count = rig.settle(commands)
    for _ in range(5):
        # at another pose: a command answering them would be gravity there, not at Q
        rig.publish_state(JointState(name=list(JOINTS), position=Q_GOAL.tolist()))
    assert rig.wait_for(lambda: any("no velocities" in kv.value for _, s in rig.statuses()
                                    for kv in s.values), 5.0), \
        [s.values for _, s in rig.statuses()]
    rig.wait_for(lambda: False, STALE_AFTER + 0.2)
    assert only_the_stop_command(commands[count:], Q), "a command was published"
    assert "missing_velocity: differentiate" in rig.output()


def test_velocity_from_positions_follows_a_ramp(rig):
    """missing_velocity: differentiate: positions-only states of a ramp q = Q + w·t, stamped
    every 10 ms; the computed-torque command for a set-point, M(kp(q_d − q) − kd·q̇) + C q̇ + g,
    equals Pinocchio's at the ramp's true velocity w (the filter starts from the first
    difference quotient: a ramp has no lag); the first state gives no command."""
    assert rig.command_after(JOINTS, Q) is not None, rig.output()
    assert rig.set_parameters(mode="computed_torque", missing_velocity="differentiate").successful
    publish_set_point(rig, Q_GOAL)
    assert steers(rig, toward(Q_GOAL, Q)), rig.output()
    commands = rig.commands
    count = rig.settle(commands)
    w = np.array([0.3, -0.2, 0.25, 0.1, -0.4, 0.5])
    start = rig.peer.node.get_clock().now().nanoseconds
    for k in range(12):
        q = Q + w * k * 0.01
        msg = JointState(name=list(JOINTS), position=q.tolist())
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(start + k * 10_000_000,
                                                                1_000_000_000)
        rig.publish_state(msg)
        if k == 0:
            assert not rig.wait_for(lambda n=count: len(commands) > n, 0.2)
        else:
            assert rig.wait_for(lambda n=count: len(commands) > n, 5.0), rig.output()
        count = len(commands)
    tau = np.array(commands[-1][1].data)
    ref = arm_torques(UR5, JOINTS, q, w, 100.0 * (Q_GOAL - q) - 20.0 * w,
                      limit=MODEL.effort_limit)
    assert rel_err(tau, ref) <= 1e-9, (tau, ref)  # stamps differenced exactly
    still = arm_torques(UR5, JOINTS, q, np.zeros(6), 100.0 * (Q_GOAL - q),
                        limit=MODEL.effort_limit)
    assert rel_err(tau, still) > 1e-3  # the velocity terms do count here


def test_stale_state_is_reported_on_diagnostics(stale_rig):
    rig = stale_rig
    rig.statuses()  # subscribed from here on
    assert rig.command_after(JOINTS, np.zeros(6)) is not None, rig.output()

    def stale():
        return any(s.level == s.ERROR and "stale" in s.message for _, s in rig.statuses())

    assert rig.wait_for(stale, 4.0), [s.message for _, s in rig.statuses()]


def test_diagnostics_account_for_every_state_and_report_its_age(rig):
    commands = rig.commands
    rig.statuses()  # subscribed from here on
    assert rig.command_after(JOINTS, np.zeros(6)) is not None, rig.output()
    count = rig.settle(commands)
    clock = rig.peer.node.get_clock()
    for k in range(50):  # stamped, so that the node can tell how old each answered state is
        msg = JointState(name=list(JOINTS), position=[0.0] * 6, velocity=[0.0] * 6)
        msg.header.stamp = clock.now().to_msg()
        rig.publish_state(msg)
        assert rig.wait_for(lambda k=k: len(commands) > count + k, 5.0), rig.output()
    sent_stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec

    def report():
        for _, status in reversed(rig.statuses()):
            values = {kv.key: kv.value for kv in status.values}
            if int(values.get("newest state stamp (ns)", "0")) == sent_stamp:
                return values
        return None

    assert rig.wait_for(lambda: report() is not None, 4.0), rig.output()
    values = report()
    received = int(values["states received (total)"])
    assert received >= 51
    # every state is accounted for: answered, superseded by a newer one, or taken without a
    # command (the states of the model's first moments, before a controller exists, are such)
    assert received == (int(values["commands (total)"]) + int(values["states superseded (total)"])
                        + int(values["states not answered (total)"]))
    aged = [s for _, s in rig.statuses()
            if any(kv.key == "state age at command p99 (ms)" for kv in s.values)]
    assert aged, "no state age reported for stamped states"
    ages = {kv.key: float(kv.value) for kv in aged[-1].values if "age" in kv.key}
    assert 0.0 < ages["state age at command mean (ms)"] <= ages["state age at command max (ms)"]
    assert ages["state age at command max (ms)"] < 1000.0


def test_commands_are_clamped_to_the_scaled_limit(rig):
    assert rig.set_parameters(effort_scale=0.01).successful
    q = np.zeros(6)  # arm stretched out horizontally: large gravity torque
    tau = rig.command_after(JOINTS, q)
    assert tau is not None
    assert np.all(np.abs(tau) <= 0.01 * MODEL.effort_limit + 1e-12)
    assert np.any(np.abs(tau) == 0.01 * MODEL.effort_limit)
    assert not rig.set_parameters(effort_scale=2.0).successful


def test_a_new_description_is_swapped_in_and_a_bad_one_refused(rig):
    panda = load_model(PANDA)
    rig.describe(PANDA.read_text())
    q = np.array([0.1, -0.4, 0.2, -2.0, 0.1, 1.5, 0.7, 0.02])
    tau = None

    def swapped() -> bool:
        nonlocal tau
        tau = rig.command_after(panda.joint_names, q, timeout=0.3)
        return tau is not None and len(tau) == 8

    assert rig.wait_for(swapped, 10.0), rig.output()
    ref = arm_torques(PANDA, panda.joint_names, q, limit=panda.effort_limit)
    assert rel_err(tau, ref) <= 1e-9
    rig.describe("<robot name='broken'><link name='a'>")
    assert rig.wait_for_log("cannot use the description", 5.0), rig.output()
    assert len(rig.command_after(panda.joint_names, q)) == 8  # still panda
