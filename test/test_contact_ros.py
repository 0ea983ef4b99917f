# SPDX-License-Identifier: Apache-2.0
"""Contact across processes: the simulator (lock-step, its own /clock) pushed on its tool through
~/external_wrench, the control node in computed torque on sim time, real DDS.

- The simulator's ~/true_external_efforts are Jᵀ F with Pinocchio's Jacobian of the tool; a
  refused wrench changes nothing; a timed-out wrench ends by itself.
- The control node's ~/external_efforts follow the truth (5 % once settled), its
  ~/external_wrench gives the force back (5 %, 5°) in the tool's frame, ~/collision names the
  joints, their estimates and thresholds; with reaction ``none`` each new push is a new event.
- Each reaction (hold, compliant, stop) on a goal being followed: the goal aborts naming the
  collision, new goals are refused until ~/reset_collision, then taken again; hold keeps the
  pose, compliant commands the gravity effort, stop sends no command until the reset.
- Bad input: joint states without efforts (no estimate, the reason on /diagnostics, commands go
  on), then with NaN efforts (skipped: the observer restarts once and says so), then good ones
  (it recovers).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import WrenchStamped
from pin_oracle import arm_torques, pinocchio_arm
from ros_harness import control_node, fresh_name, simulator
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool, Trigger

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import default_payload_link, link_pose
from rb_dynamics.model import load_model
from rb_dynamics.ros.control_node.trajectory_action import MISSING
from rb_dynamics_interfaces.msg import Collision

MODEL = load_model(DEFAULT_URDF)
JOINTS = MODEL.actuated_joint_names
LINK = default_payload_link(MODEL)  # tool0
Q0 = np.array([0.3, -1.2, 1.4, -0.8, 0.9, 0.2])
FORCE = np.array([20.0, 0.0, 0.0])  # N, world axes


def _stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def _wrench(link: str, force, torque=(0.0, 0.0, 0.0)) -> WrenchStamped:
    msg = WrenchStamped()
    msg.header.frame_id = link
    msg.wrench.force.x, msg.wrench.force.y, msg.wrench.force.z = (float(x) for x in force)
    msg.wrench.torque.x, msg.wrench.torque.y, msg.wrench.torque.z = (float(x) for x in torque)
    return msg


def _pinocchio_wrench_effort(q: np.ndarray, wrench: np.ndarray) -> np.ndarray:
    """Jᵀ F with Pinocchio's LOCAL Jacobian of the link (the oracle)."""
    pm = pinocchio_arm(str(DEFAULT_URDF))
    pd = pm.createData()
    qp = np.zeros(pm.nq)
    for name, value in zip(JOINTS, q):
        qp[pm.joints[pm.getJointId(name)].idx_q] = value
    J = pin.computeFrameJacobian(pm, pd, qp, pm.getFrameId(LINK), pin.LOCAL)
    tau = J.T @ wrench
    return np.array([tau[pm.joints[pm.getJointId(n)].idx_v] for n in JOINTS])


class Loop:
    """The simulator and the control node in closed loop (lock-step, sim time)."""

    def __init__(self, tmp_path: Path, contact: dict, sim: dict | None = None) -> None:
        self.sim = simulator(tmp_path, {
            "initial_positions": Q0.tolist(), "publish_clock": True, "lockstep": True,
            "lockstep_timeout": 5.0, "start_paused": True, "command_timeout": 0.2,
            "effort_noise": 0.05, **(sim or {})})
        self.control = control_node(tmp_path, {
            "urdf_path": str(DEFAULT_URDF), "mode": "computed_torque", "kp": [400.0],
            "kd": [40.0], "state_timeout": 0.5, "use_sim_time": True,
            "contact.publish_rate": 0.0,
            **{f"contact.{k}": v for k, v in contact.items()}},
            "-r", f"~/effort_commands:=/{self.sim.name}/commands",
            name=fresh_name("rb_dynamics_contact"), peer=self.sim.peer)
        self.truth = self.sim.received(JointState, "~/true_external_efforts")
        self.states = self.sim.received(JointState, "joint_states")
        self.estimates = self.control.received(JointState, "~/external_efforts")
        self.wrenches = self.control.received(WrenchStamped, "~/external_wrench")
        self.collisions = self.control.received(Collision, "~/collision")
        self.commands = self.sim.received(Float64MultiArray, "~/commands")
        ready = self.sim.wait_for(lambda: self.states and self.commands and
                                  self.control.client(Trigger, "~/reset_collision")
                                  .service_is_ready(), 60.0)
        assert ready, self.logs()
        assert self.sim.call(SetBool, "~/pause", SetBool.Request(data=False)).success
        self.run_for(0.3)  # the observer has started, the hold settled

    def logs(self) -> str:
        return (f"--- simulator:\n{self.sim.output()[-3000:]}\n--- control node:\n"
                f"{self.control.output()[-3000:]}")

    @property
    def now(self) -> float:
        return _stamp(self.states[-1][1]) if self.states else -math.inf

    def run_for(self, seconds: float) -> None:
        self.sim.peer.run_sim_time(lambda: self.now, seconds, logs=self.logs)

    def push(self, force=FORCE) -> np.ndarray:
        """A force along ``force`` (world axes, now) at the tool, in the tool's frame as the
        simulator takes it (it turns with the tool); that force."""
        R = link_pose(MODEL, self.position(), LINK)[:3, :3]
        local = R.T @ np.asarray(force, dtype=float)
        self.sim.publish_matched(WrenchStamped, "~/external_wrench", _wrench(LINK, local))
        return local

    def release(self) -> None:
        self.sim.publish_matched(WrenchStamped, "~/external_wrench", _wrench("", (0, 0, 0)))

    def first_pushed(self) -> float:
        """The instant the first push began: the step before the first state the simulator
        published a true external effort for (the loop runs on while the test pushes)."""
        return min(t for t, tau in _by_stamp(self.truth).items() if tau.any()) - 0.001

    def position(self) -> np.ndarray:
        msg = self.states[-1][1]
        by_name = dict(zip(msg.name, msg.position))
        return np.array([by_name[n] for n in JOINTS])

    def close(self) -> None:
        from ros_harness import close_all

        close_all(self.control, self.sim)


def _by_stamp(messages: list) -> dict[float, np.ndarray]:
    return {round(_stamp(m), 6): np.array(m.effort) for _, m in messages}


def test_push_estimated_published_and_detected(tmp_path):
    loop = Loop(tmp_path, {"reaction": "none"})
    try:
        local = loop.push()
        loop.run_for(0.3)
        start = loop.first_pushed()
        # the truth is Pinocchio's Jᵀ F at the published state
        states = {round(_stamp(m), 6): m for _, m in loop.states}
        checked = 0
        for t, tau in _by_stamp(loop.truth).items():
            if t in states and tau.any():
                msg = states[t]
                q = np.array([dict(zip(msg.name, msg.position))[n] for n in JOINTS])
                np.testing.assert_allclose(tau, _pinocchio_wrench_effort(q, np.r_[local, 0, 0, 0]),
                                           rtol=1e-9, atol=1e-9)
                checked += 1
        assert checked > 100, loop.logs()
        # the estimate follows it (K = 200/s: settled 50 ms after the push)
        truth, estimates = _by_stamp(loop.truth), _by_stamp(loop.estimates)
        settled = [t for t in truth if t > start + 0.08 and t in estimates and truth[t].any()]
        assert len(settled) > 100
        worst = max(np.linalg.norm(estimates[t] - truth[t]) / np.linalg.norm(truth[t])
                    for t in settled)
        assert worst < 0.05, worst
        # the wrench: the force in the tool's axes
        last = loop.wrenches[-1][1]
        assert last.header.frame_id == LINK
        f = np.array([last.wrench.force.x, last.wrench.force.y, last.wrench.force.z])
        assert abs(np.linalg.norm(f) / 20.0 - 1) < 0.05, f
        assert math.degrees(math.acos(f @ local / np.linalg.norm(f) / 20.0)) < 5.0
        # one event, naming the joints over their thresholds, within 20 ms
        assert len(loop.collisions) == 1, loop.logs()
        event = loop.collisions[0][1]
        assert event.reaction == "none" and event.joint_names
        assert set(event.joint_names) <= set(JOINTS)
        assert all(abs(e) > t for e, t in zip(event.external_efforts, event.thresholds))
        assert 0.0 < _stamp(event) - start <= 0.02 + 0.002, _stamp(event) - start
        # released: the estimate falls back, no event; pushed again: a new event
        loop.release()
        loop.run_for(0.3)
        assert np.abs(loop.estimates[-1][1].effort).max() < 0.5
        assert len(loop.collisions) == 1
        loop.push()
        loop.run_for(0.1)
        assert len(loop.collisions) == 2, loop.logs()
    finally:
        loop.close()


REACTIONS = ["hold", "compliant", "stop"]


@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
@pytest.mark.parametrize("reaction", REACTIONS)
def test_each_reaction_ends_the_goal_and_holds_until_reset(tmp_path, reaction):
    from control_msgs.action import FollowJointTrajectory
    from rclpy.action import ActionClient
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    # lock-step time stands still while nothing is commanded (stop): no fall before the reset
    loop = Loop(tmp_path, {"reaction": reaction}, {"lockstep_timeout": 60.0})
    client = ActionClient(loop.sim.peer.node, FollowJointTrajectory,
                          f"/{loop.control.name}/follow_joint_trajectory")
    try:
        assert loop.sim.peer.wait_for(client.server_is_ready, 30.0), loop.logs()

        # (long enough to be running when the push lands: the loop runs on during the
        # handshake)
        def send(q_goal: np.ndarray, seconds: float = 10.0):
            point = JointTrajectoryPoint(positions=q_goal.tolist(), velocities=[0.0] * 6)
            point.time_from_start.sec = int(seconds)
            goal = FollowJointTrajectory.Goal(trajectory=JointTrajectory(
                joint_names=JOINTS, points=[point]))
            sent = client.send_goal_async(goal)
            assert loop.sim.wait_for(sent.done, 30.0), loop.logs()
            return sent.result()

        handle = send(Q0 + 0.4)
        assert handle.accepted
        result = handle.get_result_async()
        loop.run_for(0.3)
        loop.push()
        # (with stop, lock-step time stands still once the commands stop: wait in wall time)
        assert loop.sim.wait_for(lambda: loop.collisions, 10.0), loop.logs()
        assert len(loop.collisions) == 1, loop.logs()
        assert loop.collisions[0][1].reaction == reaction
        assert loop.sim.wait_for(result.done, 10.0), loop.logs()
        assert "collision" in result.result().result.error_string
        loop.release()
        # refused while latched
        refused = send(Q0)
        assert not refused.accepted
        assert loop.control.wait_for_log("a collision is latched"), loop.logs()
        commands = len(loop.commands)
        if reaction == "stop":
            # (this process may still be behind on what was sent before the stop: a loaded
            # machine leaves up to a queue's depth of commands in flight; those are not after)
            commands = loop.sim.settle(loop.commands)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                loop.sim.peer.executor.spin_once(timeout_sec=0.01)
            assert len(loop.commands) == commands, "commands went on after a stop"
        else:
            held = loop.position()
            loop.run_for(0.3)
            if reaction == "hold":
                assert np.abs(loop.position() - held).max() < 0.02, loop.position() - held
            else:  # compliant: the gravity effort at the measured pose
                assert loop.sim.call(SetBool, "~/pause", SetBool.Request(data=True)).success
                loop.sim.settle(loop.commands)
                # gravity compensation: g(q); friction_compensation (on by default) adds, at
                # the measured velocity, only friction an overlay gave, and this arm has the
                # URDF's alone (docs/drives.md)
                assert not MODEL.identified_friction.any()
                expected = np.clip(arm_torques(DEFAULT_URDF, JOINTS, loop.position()),
                                   -MODEL.effort_limit, MODEL.effort_limit)
                np.testing.assert_allclose(loop.commands[-1][1].data, expected, rtol=1e-6,
                                           atol=1e-6)
                assert loop.sim.call(SetBool, "~/pause", SetBool.Request(data=False)).success
        answer = loop.control.call(Trigger, "~/reset_collision", Trigger.Request())
        assert answer.success and "cleared" in answer.message, answer.message
        loop.run_for(0.1)
        assert len(loop.commands) > commands
        again = send(loop.position() + 0.05, 2.0)  # taken again, from wherever the arm is
        assert again.accepted, loop.logs()
    finally:
        client.destroy()
        loop.close()


def test_missing_and_nan_efforts(tmp_path):
    """No efforts: no estimate, the reason on /diagnostics, commands go on; NaN: the observer
    restarts and says so; good efforts again: estimates again."""
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque",
                                   "state_timeout": 2.0, "contact.publish_rate": 0.0},
                        name=fresh_name("rb_dynamics_contact_input"), state_qos=100)
    estimates = node.received(JointState, "~/external_efforts")
    diagnostics = node.received(DiagnosticArray, "/diagnostics")

    def contact_statuses() -> list:
        return [s for _, array in diagnostics for s in array.status
                if s.hardware_id == f"{node.name}: contact"]
    try:
        gravity = arm_torques(DEFAULT_URDF, JOINTS, Q0)
        step = [0]

        def send(efforts) -> None:
            step[0] += 1
            msg = JointState(name=JOINTS, position=Q0.tolist(), velocity=[0.0] * 6,
                             effort=list(efforts))
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(
                10**12 + step[0] * 2_000_000, 1_000_000_000)
            node.publish_state(msg)

        def stream(efforts, seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                send(efforts)
                node.peer.executor.spin_once(timeout_sec=0.002)

        assert node.wait_for(lambda: node.commands or send([]) or False, 30.0), node.output()
        stream([], 2.5)
        assert node.commands and not estimates, node.output()
        contact = contact_statuses()
        assert contact and "carry 0 efforts" in contact[-1].message, contact
        assert contact[-1].level == DiagnosticStatus.WARN
        stream(gravity.tolist(), 0.5)
        assert estimates and np.abs(estimates[-1][1].effort).max() < 1e-6
        bad = gravity.copy()
        bad[2] = math.nan
        stream(bad.tolist(), 0.2)
        assert node.wait_for_log("observer restarted: efforts not finite"), node.output()
        count = len(estimates)
        stream(gravity.tolist(), 0.5)
        assert len(estimates) > count and np.abs(estimates[-1][1].effort).max() < 1e-6
    finally:
        node.close()


def test_simulator_wrench_refused_and_timed_out(tmp_path):
    sim = simulator(tmp_path, {"initial_positions": Q0.tolist(), "publish_clock": True,
                               "external_wrench_timeout": 0.2})  # stamps: simulated time
    truth = sim.received(JointState, "~/true_external_efforts")
    states = sim.received(JointState, "joint_states")
    try:
        assert sim.wait_for(lambda: states, 30.0), sim.output()
        wrenches = sim.publisher(WrenchStamped, "~/external_wrench")
        sim.peer.wait_for(lambda: wrenches.get_subscription_count() > 0, 10.0)
        wrenches.publish(_wrench("no_such_link", (1, 0, 0)))
        assert sim.wait_for_log("~/external_wrench refused: unknown link 'no_such_link'")
        wrenches.publish(_wrench("base_link", (1, 0, 0)))
        assert sim.wait_for_log("is welded to the world")
        assert not truth
        wrenches.publish(_wrench(LINK, (0, 0, -30.0), (0.0, 0.5, 0.0)))
        assert sim.wait_for(lambda: truth and not np.any(truth[-1][1].effort), 10.0), \
            (len(truth), sim.output())
        pushed = [m for _, m in truth if np.any(m.effort)]
        assert pushed and not np.any(truth[-1][1].effort)
        # 0.2 s of simulated time from the message (between two publications) to the first
        # step after it; a busy machine's catch-up steps up to 0.1 s at once
        span = _stamp(truth[-1][1]) - _stamp(pushed[0])
        assert 0.1 <= span <= 0.35, span
        count = len(truth)
        sim.peer.spin_for(0.3)
        assert len(truth) == count  # nothing after the zero message
    finally:
        sim.close()
