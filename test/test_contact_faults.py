# SPDX-License-Identifier: Apache-2.0
"""Contact monitoring under the faults of a real deployment, across processes (real nodes, real
DDS; the shape of test_contact_ros.py):

- a robot with a gripper, `joints` naming only its arm (Panda's seven joints; the finger in the
  joint states, position-controlled by the simulator): a push on the hand is detected;
- NaN efforts in the joint states: the observer restarts once, naming the efforts, never
  starts from such a state; a flood of restarts is logged throttled and counted;
- a restart of the observer (a gap in the states, then a state that moves differently): its
  first estimates are not taken for a collision; a real push afterwards is;
- sim time that jumps back (a simulator reset): logged once and said on /diagnostics, the
  reference dropped and the measured position held, commands (rate-limited) and contact
  outputs go on from the new time; a goal being followed aborts naming the jump.
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import WrenchStamped
from pin_oracle import arm_torques
from ros2_control_samples import PANDA_ARM, panda_block, robot_xml, with_blocks
from ros_harness import close_all, control_node, fresh_name, simulator
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import default_payload_link, link_pose
from rb_dynamics.model import load_model
from rb_dynamics.ros.control_node.trajectory_action import MISSING
from rb_dynamics_interfaces.msg import Collision

PANDA_XML = robot_xml("panda")
PANDA = load_model(PANDA_XML)
PANDA_READY = [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785]
PANDA_HAND = default_payload_link(PANDA)  # panda_hand_tcp

ARM = load_model(DEFAULT_URDF)
JOINTS = ARM.actuated_joint_names
Q0 = np.array([0.3, -1.2, 1.4, -0.8, 0.9, 0.2])


def _stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def _contact_statuses(diagnostics: list, node_name: str) -> list:
    return [s for _, array in diagnostics for s in array.status
            if s.hardware_id == f"{node_name}: contact"]


def test_a_push_is_detected_with_joints_naming_only_the_arm(tmp_path):
    """Panda, `joints` its seven arm joints (the finger held in position by the simulator, in
    the joint states but not commanded): a 20 N push on the hand → ~/collision naming arm
    joints, the estimates and thresholds per commanded joint; the node logs no failure."""
    sim = simulator(tmp_path, {
        "robot_description": with_blocks(PANDA_XML, panda_block(initial=PANDA_READY)),
        "publish_clock": True, "lockstep": True, "lockstep_timeout": 60.0,
        "start_paused": True, "command_timeout": 0.2, "effort_noise": 0.05})
    control = control_node(tmp_path, {
        "robot_description": PANDA_XML, "joints": PANDA_ARM, "mode": "computed_torque",
        "kp": [400.0], "kd": [40.0], "state_timeout": 0.5, "use_sim_time": True,
        "contact.publish_rate": 0.0, "contact.reaction": "none"},
        name=fresh_name("rb_dynamics_contact_panda"), peer=sim.peer)
    # (lockstep_timeout 60 s: a relay held up on a loaded machine never lets the simulator
    # run on by itself, whose states would then report efforts held over other intervals)
    # the arm's effort controller: the node's commands, by name, to the simulator
    to_sim = sim.publisher(JointState, "~/joint_commands")
    control.peer.node.create_subscription(
        Float64MultiArray, control.topic("~/effort_commands"),
        lambda m: to_sim.publish(JointState(name=PANDA_ARM, effort=list(m.data))), 10)
    states = sim.received(JointState, "joint_states")
    forwarded = control.commands
    collisions = control.received(Collision, "~/collision")
    estimates = control.received(JointState, "~/external_efforts")

    def logs() -> str:
        return f"--- simulator:\n{sim.output()[-3000:]}\n--- control:\n{control.output()[-4000:]}"

    def run_for(seconds: float) -> None:
        until = _stamp(states[-1][1]) + seconds
        assert sim.wait_for(lambda: _stamp(states[-1][1]) >= until, 120.0), logs()

    try:
        assert sim.wait_for(lambda: states and forwarded and control.client(
            Trigger, "~/reset_collision").service_is_ready(), 120.0), logs()
        assert sim.call(SetBool, "~/pause", SetBool.Request(data=False)).success
        run_for(0.3)  # the hold settled, the observer running
        assert estimates and list(estimates[-1][1].name) == PANDA_ARM, logs()
        assert not collisions, logs()
        msg = states[-1][1]
        by_name = dict(zip(msg.name, msg.position))
        q = np.array([by_name[n] for n in PANDA.joint_names])
        local = link_pose(PANDA, q, PANDA_HAND)[:3, :3].T @ np.array([20.0, 0.0, 0.0])
        push = WrenchStamped()
        push.header.frame_id = PANDA_HAND
        push.wrench.force.x, push.wrench.force.y, push.wrench.force.z = local.tolist()
        sim.publisher(WrenchStamped, "~/external_wrench").publish(push)
        run_for(0.3)
        assert len(collisions) == 1, logs()
        event = collisions[0][1]
        assert event.joint_names and set(event.joint_names) <= set(PANDA_ARM), event
        assert len(event.external_efforts) == len(event.thresholds) == len(event.joint_names)
        assert all(abs(e) > t for e, t in zip(event.external_efforts, event.thresholds))
        assert "callback failed" not in control.output(), logs()
    finally:
        close_all(control, sim)


class StateSender:
    """Joint states of the bundled arm from the test's peer, stamped 2 ms apart (state time:
    the observer's clock), each sent once the node has answered the one before with a command
    (so that the node takes every one)."""

    def __init__(self, node, stamp_ns: int = 10**12) -> None:
        self.node, self.stamp_ns = node, stamp_ns

    def send(self, efforts, velocity=None, q=Q0, after: float = 0.002) -> None:
        """One state, ``after`` s of state time after the last; its command awaited."""
        self.stamp_ns += round(after * 1e9)
        msg = JointState(name=JOINTS, position=[float(x) for x in q],
                         effort=[float(e) for e in efforts],
                         velocity=[0.0] * 6 if velocity is None else [float(x) for x in velocity])
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(self.stamp_ns, 1_000_000_000)
        commands = self.node.commands
        count = len(commands)
        self.node.publish_state(msg)
        assert self.node.wait_for(lambda: len(commands) > count, 60.0), self.node.output()

    def stream(self, efforts, states: int) -> None:
        """``states`` states; ``efforts``: one list, or a function of the state's count."""
        for k in range(states):
            self.send(efforts(k) if callable(efforts) else efforts)


def _value(status, key: str) -> str:
    return next((kv.value for kv in status.values if kv.key == key), "")


def test_nan_efforts_restart_the_observer_once_with_their_reason(tmp_path):
    """A stream of states with a NaN effort: one restart, "efforts not finite" (none of them
    taken as the new start, so the first good state after them is no "overflow"), the
    estimate back at zero with good efforts; NaN and good states alternating: a restart each
    time, counted on /diagnostics, the warning throttled (once per 2 s, not once per restart)."""
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque",
                                   "state_timeout": 2.0, "contact.publish_rate": 0.0},
                        name=fresh_name("rb_dynamics_contact_nan"), state_qos=100)
    estimates = node.received(JointState, "~/external_efforts")
    diagnostics = node.received(DiagnosticArray, "/diagnostics")
    sender = StateSender(node)
    gravity = arm_torques(DEFAULT_URDF, JOINTS, Q0)
    bad = gravity.copy()
    bad[2] = math.nan
    try:
        assert node.wait_for(lambda: node.commands or node.send_state(JOINTS, Q0) or False,
                             120.0), node.output()
        sender.stream(gravity, 100)
        assert estimates and np.abs(estimates[-1][1].effort).max() < 1e-6, node.output()
        flood_started = time.monotonic()
        sender.stream(bad, 100)
        count = len(estimates)
        sender.stream(gravity, 100)
        assert len(estimates) > count and np.abs(estimates[-1][1].effort).max() < 1e-6
        output = node.output()
        assert output.count("observer restarted") == 1, output
        assert "observer restarted: efforts not finite" in output, output
        assert "overflowed" not in output, output
        # alternating: each NaN state after a good one restarts it; the log says it once
        sender.stream(lambda k: bad if k % 2 else gravity, 100)
        sender.stream(gravity, 10)

        def counted() -> dict | None:
            contact = _contact_statuses(diagnostics, node.name)
            if not contact:
                return None
            restarts = int(_value(contact[-1], "observer restarts (total)") or 0)
            skipped = int(_value(contact[-1], "states with NaN or inf efforts (total)") or 0)
            return (restarts, skipped) if restarts == 51 and skipped == 150 else None

        assert node.wait_for(counted, 5.0), (
            [(kv.key, kv.value) for kv in _contact_statuses(diagnostics, node.name)[-1].values],
            node.output())
        # one warning per 2 s (ThrottledLogger) over the flood's span, not one per restart
        allowed = 2 + int((time.monotonic() - flood_started) / 2.0)
        assert node.output().count("observer restarted") <= min(allowed, 25), node.output()
        assert "overflowed" not in node.output(), node.output()
    finally:
        node.close()


def test_no_collision_from_the_transient_after_a_restart(tmp_path):
    """The arm at rest, its states answered one by one; a gap longer than state_timeout
    restarts the observer, and the state it restarts from carries a velocity the next ones
    do not (a transient of ~47 N·m on shoulder_lift, e^{−K t} after it): no ~/collision
    (detection is disarmed for 5/K = 25 ms of state time after a start, the transient is then
    ~0.3 N·m); then a real push of 5 N·m on shoulder_lift: ~/collision naming it."""
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque",
                                   "state_timeout": 2.0, "contact.publish_rate": 0.0,
                                   "contact.reaction": "hold"},
                        name=fresh_name("rb_dynamics_contact_restart"), state_qos=100)
    collisions = node.received(Collision, "~/collision")
    estimates = node.received(JointState, "~/external_efforts")
    sender = StateSender(node)
    gravity = arm_torques(DEFAULT_URDF, JOINTS, Q0)
    try:
        assert node.wait_for(lambda: node.commands or node.send_state(JOINTS, Q0) or False,
                             120.0), node.output()
        sender.stream(gravity, 50)
        sender.send(gravity, velocity=[0.1] * 6, after=3.0)  # the restart: 3 s of state time
        sender.stream(gravity, 100)
        assert node.wait_for_log("observer restarted: 3 s between states"), node.output()
        node.settle(estimates)
        assert not collisions, node.output()
        assert np.abs(estimates[-1][1].effort).max() < 0.5, estimates[-1][1]
        pushed = gravity.copy()
        pushed[1] -= 5.0  # the measured effort 5 N·m short of gravity: pushed up by 5 N·m
        sender.stream(pushed, 20)
        assert node.wait_for(lambda: collisions, 5.0), node.output()
        assert len(collisions) == 1 and list(collisions[0][1].joint_names) == [JOINTS[1]], \
            collisions[0][1]
    finally:
        node.close()


class ClockAndStates:
    """A simulator of the test's own on the peer: /clock, then a joint state stamped with it
    (the bundled arm at rest at Q0, gravity efforts), every 2 ms of sim time, as fast as the
    peer goes (free-running: the node's commands are not waited for)."""

    def __init__(self, node, t: float) -> None:
        self.node, self.t = node, t
        self.clock = node.publisher(Clock, "/clock")
        self.efforts = arm_torques(DEFAULT_URDF, JOINTS, Q0).tolist()

    def step(self) -> None:
        self.t += 0.002
        sec, nanosec = divmod(round(self.t * 1e9), 1_000_000_000)
        msg = Clock()
        msg.clock.sec, msg.clock.nanosec = sec, nanosec
        self.clock.publish(msg)
        state = JointState(name=JOINTS, position=Q0.tolist(), velocity=[0.0] * 6,
                           effort=self.efforts)
        state.header.stamp.sec, state.header.stamp.nanosec = sec, nanosec
        self.node.publish_state(state)
        self.node.peer.executor.spin_once(timeout_sec=0.001)

    def run_until(self, t: float) -> None:
        while self.t < t:
            self.step()


@pytest.mark.alone  # against a baseline of this run: no other test beside it
def test_sim_time_going_back_is_said_and_the_loop_goes_on_from_it(tmp_path):
    """Sim time jumps back by 5 s while a ~/joint_trajectory reference moves the arm (a
    simulator reset): the node logs it once and says it on /diagnostics; commands, rate
    limited to 100 Hz, go on at once at the pace they had before (the rate limiter waited for
    the old time), holding the measured position (the reference dropped: not sampled on the
    new time); ~/external_efforts go on at their 50 Hz."""
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque",
                                   "use_sim_time": True, "state_timeout": 2.0,
                                   "max_publish_rate": 100.0, "contact.publish_rate": 50.0},
                        name=fresh_name("rb_dynamics_time_back"), state_qos=100)
    sim = ClockAndStates(node, 100.0)
    commands = node.commands
    estimates = node.received(JointState, "~/external_efforts")
    diagnostics = node.received(DiagnosticArray, "/diagnostics")
    gravity = np.clip(arm_torques(DEFAULT_URDF, JOINTS, Q0), -ARM.effort_limit,
                      ARM.effort_limit)
    try:
        deadline = time.monotonic() + 120.0
        while not commands:
            assert time.monotonic() < deadline, node.output()
            sim.step()
        counted = len(commands)
        sim.run_until(sim.t + 1.0)
        baseline = len(commands) - counted  # commands per second of sim time, in this run
        start = sim.t + 0.1
        goal = JointTrajectory(joint_names=JOINTS, points=[JointTrajectoryPoint(
            positions=(Q0 + [0.3, 0, 0, 0, 0, 0]).tolist(), velocities=[0.0] * 6)])
        goal.points[0].time_from_start.sec = 10
        goal.header.stamp.sec, goal.header.stamp.nanosec = divmod(round(start * 1e9), 10**9)
        node.publish_matched(JointTrajectory, "~/joint_trajectory", goal)
        deadline = time.monotonic() + 30.0
        while np.abs(np.array(commands[-1][1].data) - gravity).max() < 1.0:  # it moves
            assert time.monotonic() < deadline, node.output()
            sim.step()
        before = sim.t
        sim.t -= 5.0  # the reset
        jumped = time.monotonic()
        sim.run_until(before - 4.0)  # 1 s of the new time, all before the last command's
        early = sum(1 for t, _ in commands if t > jumped)
        assert early > max(5, baseline / 3), (early, baseline, node.output())
        sim.run_until(before - 3.0)
        after = [m for t, m in commands if t > jumped]
        late = after[len(after) // 2:]
        worst = max(np.abs(np.array(m.data) - gravity).max() for m in late)
        assert worst < 1e-6, ("not holding the measured position", worst, node.output())
        new_time = [m for t, m in estimates if t > jumped and _stamp(m) < before]
        assert len(new_time) > 5, (len(new_time), node.output())  # 50 Hz: ~100
        said_back = re.findall(r"sim time went back by ([0-9.]+) s", node.output())
        assert len(said_back) == 1 and abs(float(said_back[0]) - 5.0) < 0.05, node.output()

        def said() -> bool:
            return any(kv.key == "time went back (total)" and kv.value == "1"
                       for _, array in diagnostics for s in array.status
                       if s.hardware_id == node.name for kv in s.values)

        assert node.wait_for(said, 5.0), node.output()
    finally:
        node.close()


@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
def test_a_goal_running_when_sim_time_goes_back_aborts_naming_it(tmp_path):
    """A FollowJointTrajectory goal being followed when sim time jumps back by 5 s: it ends
    ABORTED naming the jump; a new goal is taken on the new time."""
    from control_msgs.action import FollowJointTrajectory
    from rclpy.action import ActionClient

    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque",
                                   "use_sim_time": True, "state_timeout": 2.0},
                        name=fresh_name("rb_dynamics_time_back_goal"), state_qos=100)
    sim = ClockAndStates(node, 100.0)
    client = ActionClient(node.peer.node, FollowJointTrajectory,
                          f"/{node.name}/follow_joint_trajectory")

    def send(seconds: float):
        point = JointTrajectoryPoint(positions=(Q0 + [0.3, 0, 0, 0, 0, 0]).tolist(),
                                     velocities=[0.0] * 6)
        point.time_from_start.sec = int(seconds)
        sent = client.send_goal_async(FollowJointTrajectory.Goal(
            trajectory=JointTrajectory(joint_names=JOINTS, points=[point])))
        deadline = time.monotonic() + 30.0
        while not sent.done():
            assert time.monotonic() < deadline, node.output()
            sim.step()
        return sent.result()

    try:
        deadline = time.monotonic() + 120.0
        while not node.commands:
            assert time.monotonic() < deadline, node.output()
            sim.step()
        assert client.wait_for_server(timeout_sec=60.0), node.output()
        # an hour long: sim time runs on, free, while the answer comes (on a busy machine the
        # peer steps many seconds of it before the handshake ends)
        handle = send(3600.0)
        assert handle.accepted, node.output()
        result = handle.get_result_async()
        sim.run_until(sim.t + 0.3)
        assert not result.done(), result.result().result.error_string
        sim.t -= 5.0
        deadline = time.monotonic() + 30.0
        while not result.done():
            assert time.monotonic() < deadline, node.output()
            sim.step()
        answer = result.result().result
        assert answer.error_code == FollowJointTrajectory.Result.INVALID_GOAL
        assert answer.error_string.startswith("Aborted: sim time went back by"), \
            answer.error_string
        again = send(3600.0)  # on the new time
        assert again.accepted, node.output()
    finally:
        client.destroy()
        node.close()


def test_loop_time_counts_a_reset_once_whichever_shows_it_first():
    """The loop sees a jump back at its next clock reading or state: on sim time a state
    stamped after the reset may come before the node has read the reset /clock (or after):
    one jump either way; ages run on the clock until it follows. On the system clock a stamp
    that goes back is the driver's, not a jump of time."""
    from rb_dynamics.ros.control_node.control_loop import LoopTime

    def ns(seconds: float) -> int:
        return round(seconds * 1e9)

    time_base = LoopTime()
    assert not time_base.went_back(ns(100.0), 100.0, True, 0.5)
    time_base.taken(100.0, 100.0)
    assert not time_base.went_back(ns(101.0), 101.0, True, 0.5)
    time_base.taken(101.0, 101.0)
    # the stamp first, the clock still at the old time; then the clock follows
    assert "sim time went back by 1.500 s" in time_base.went_back(ns(101.0), 99.5, True, 0.5)
    assert time_base.age(101.01) == pytest.approx(0.01)  # on the clock until it follows
    time_base.taken(99.5, 101.0)
    assert not time_base.went_back(ns(99.502), 99.502, True, 0.5)
    time_base.taken(99.502, 99.502)
    assert time_base.age(99.6) == pytest.approx(0.098)
    # the clock first (a reading between states), then a state at the new time
    assert time_base.went_back(ns(98.0), None, True, 0.5)
    assert not time_base.went_back(ns(98.002), 98.002, True, 0.5)
    assert time_base.jumps == 2
    # the system clock: a driver's stamps going back are not time going back
    system = LoopTime()
    system.went_back(ns(1000.0), 1000.0, False, 0.1)
    system.taken(1000.0, 1000.0)
    assert not system.went_back(ns(1000.01), 990.0, False, 0.1) and system.jumps == 0
