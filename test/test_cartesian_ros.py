# SPDX-License-Identifier: Apache-2.0
"""Cartesian impedance across processes: the simulator (lock-step, its own /clock) and the
control node in ``cartesian_impedance`` on sim time, real DDS.

- ~/target_pose moves the tool to the target (in the root frame and in the tool's own frame);
  ~/cartesian/pose, ~/cartesian/error and ~/cartesian/wrench report it; a target in a frame the
  model does not know, with NaN or with a zero quaternion is ignored, saying why.
- A node in another mode ignores targets and says which mode to set; switched to
  cartesian_impedance it holds the tool where it is, then takes targets.
- A stiffness the sampled loop cannot take is refused naming the axis and the bound; a bad value
  naming the parameter; a stable one is taken.
- At a singular pose /diagnostics says so and the commands stay within the effort limits; the
  lifecycle stops and holds as in the joint modes; so does a collision's hold.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from ros_harness import control_node, fresh_name, simulator
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool, Trigger

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import ReferenceDynamics, default_payload_link, link_pose
from rb_dynamics.model import load_model
from rb_dynamics_interfaces.msg import Collision

MODEL = load_model(DEFAULT_URDF)
JOINTS = MODEL.actuated_joint_names
LINK = default_payload_link(MODEL)  # tool0
Q0 = np.array([0.3, -1.2, 1.4, -0.8, 0.9, 0.2])


def _stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def _pose(position, frame: str = "", quaternion=(0.0, 0.0, 0.0, 1.0)) -> PoseStamped:
    msg = PoseStamped()
    msg.header.frame_id = frame
    p, o = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = (float(x) for x in position)
    o.x, o.y, o.z, o.w = (float(x) for x in quaternion)
    return msg


def _quaternion(R: np.ndarray) -> tuple[float, float, float, float]:
    """[x, y, z, w] of a rotation matrix (its largest-magnitude form, w ≥ 0 here)."""
    w = math.sqrt(max(0.0, 1.0 + np.trace(R))) / 2.0
    if w > 1e-3:
        return ((R[2, 1] - R[1, 2]) / (4 * w), (R[0, 2] - R[2, 0]) / (4 * w),
                (R[1, 0] - R[0, 1]) / (4 * w), w)
    raise AssertionError("rotation too close to π for this test's conversion")


class Loop:
    """The simulator and the control node in closed loop (lock-step, sim time)."""

    def __init__(self, tmp_path: Path, params: dict, initial: np.ndarray = Q0,
                 sim: dict | None = None) -> None:
        self.sim = simulator(tmp_path, {
            "initial_positions": initial.tolist(), "publish_clock": True, "lockstep": True,
            "lockstep_timeout": 5.0, "start_paused": True, "command_timeout": 0.2,
            **(sim or {})})
        self.control = control_node(tmp_path, {
            "urdf_path": str(DEFAULT_URDF), "state_timeout": 0.5, "use_sim_time": True,
            "contact.enabled": False, "cartesian.publish_rate": 50.0,
            # the tool's own rotation (wrist_3 alone, 1.3e-4 kg·m²) takes little stiffness:
            # this much is stable at the periods a busy machine's lock-step /clock shows
            "cartesian.rotational_stiffness": [0.5], **params},
            "-r", f"~/effort_commands:=/{self.sim.name}/commands",
            name=fresh_name("rb_dynamics_cartesian"), peer=self.sim.peer)
        self.states = self.sim.received(JointState, "joint_states")
        self.commands = self.sim.received(Float64MultiArray, "~/commands")
        self.poses = self.control.received(PoseStamped, "~/cartesian/pose")
        self.errors = self.control.received(TwistStamped, "~/cartesian/error")
        self.wrenches = self.control.received(WrenchStamped, "~/cartesian/wrench")
        self.targets = self.control.publisher(PoseStamped, "~/target_pose")
        assert self.sim.wait_for(lambda: self.states and self.commands, 60.0), self.logs()
        assert self.sim.call(SetBool, "~/pause", SetBool.Request(data=False)).success
        self.run_for(0.3)

    def logs(self) -> str:
        return (f"--- simulator:\n{self.sim.output()[-3000:]}\n--- control node:\n"
                f"{self.control.output()[-3000:]}")

    @property
    def now(self) -> float:
        return _stamp(self.states[-1][1]) if self.states else -math.inf

    def run_for(self, seconds: float) -> None:
        self.sim.peer.run_sim_time(lambda: self.now, seconds, logs=self.logs)

    def position(self) -> np.ndarray:
        msg = self.states[-1][1]
        by_name = dict(zip(msg.name, msg.position))
        return np.array([by_name[n] for n in JOINTS])

    def tool(self) -> np.ndarray:
        return link_pose(MODEL, self.position(), LINK)

    def send(self, msg: PoseStamped) -> None:
        self.targets.publish(msg)
        self.run_for(0.05)

    def reach(self, start: np.ndarray, offset, what: str) -> float:
        """Send a target ``offset`` (m, root axes) from the pose ``start``, its orientation
        kept; after 2 s of simulated time, how far (m) the tool is from it (printed)."""
        goal = start[:3, 3] + offset
        self.send(_pose(goal, "", _quaternion(start[:3, :3])))
        self.run_for(2.0)
        gap = float(np.linalg.norm(self.tool()[:3, 3] - goal))
        print(f"{what}: {gap * 1e3:.3f} mm from the target after 2 s")
        return gap

    def close(self) -> None:
        from ros_harness import close_all
        close_all(self.control, self.sim)


def test_target_pose_moves_the_tool_and_the_state_topics_report_it(tmp_path):
    loop = Loop(tmp_path, {"mode": "cartesian_impedance",
                           "cartesian.translational_stiffness": [800.0]})
    try:
        start = loop.tool()
        loop.run_for(0.5)
        held = loop.tool()
        print(f"\nheld: the tool moved {np.linalg.norm(held[:3, 3] - start[:3, 3]) * 1e3:.3f} mm")
        assert np.linalg.norm(held[:3, 3] - start[:3, 3]) < 1e-3, loop.logs()
        # 3 cm along x of the root frame, the orientation kept
        goal = start[:3, 3] + [0.03, 0.0, 0.0]
        loop.send(_pose(goal, "", _quaternion(start[:3, :3])))
        loop.run_for(2.0)
        reached = loop.tool()
        gap = np.linalg.norm(reached[:3, 3] - goal)
        print(f"root-frame target: {gap * 1e3:.3f} mm away after 2 s")
        assert gap < 2e-3, loop.logs()
        # the state topics: the pose where the tool is, the error small, the wrench with it
        assert loop.control.wait_for(lambda: loop.poses and loop.errors and loop.wrenches, 10.0)
        pose = loop.poses[-1][1]
        assert pose.header.frame_id == MODEL.root_link
        published = np.array([pose.pose.position.x, pose.pose.position.y, pose.pose.position.z])
        assert np.linalg.norm(published - reached[:3, 3]) < 2e-3
        error = loop.errors[-1][1].twist.linear
        assert math.hypot(error.x, error.y, error.z) < 2e-3
        # 2 cm along the tool's own z axis (frame_id tool0: the pose of the target in it)
        loop.send(_pose([0.0, 0.0, 0.02], LINK))
        expected = reached[:3, 3] + reached[:3, 2] * 0.02
        loop.run_for(2.0)
        gap = np.linalg.norm(loop.tool()[:3, 3] - expected)
        print(f"tool-frame target: {gap * 1e3:.3f} mm away after 2 s")
        assert gap < 2e-3, loop.logs()
        # a frame the model does not know: ignored, named
        before = loop.tool()
        loop.send(_pose([0.3, 0.0, 0.0], "camera_link"))
        assert loop.control.wait_for_log("target_pose ignored: unknown frame 'camera_link'",
                                         10.0), loop.logs()
        loop.send(_pose([math.nan, 0.0, 0.0]))
        assert loop.control.wait_for_log("target_pose ignored: the pose is not finite", 10.0), \
            loop.logs()
        loop.send(_pose([0.0, 0.0, 0.0], "", (0.0, 0.0, 0.0, 0.0)))
        assert loop.control.wait_for_log("target_pose ignored: the orientation quaternion has "
                                         "zero norm", 10.0), loop.logs()
        loop.run_for(0.5)
        assert np.linalg.norm(loop.tool()[:3, 3] - before[:3, 3]) < 1e-3
    finally:
        loop.close()


def test_a_mode_switch_holds_the_tool_then_takes_targets(tmp_path):
    loop = Loop(tmp_path, {"mode": "impedance"})
    try:
        start = loop.tool()
        loop.send(_pose(start[:3, 3] + [0.0, 0.03, 0.0], "", _quaternion(start[:3, :3])))
        assert loop.control.wait_for_log(
            "target_pose ignored: the controller is in 'impedance' mode; set mode to "
            "cartesian_impedance", 10.0), loop.logs()
        result = loop.control.set_parameters(mode="cartesian_impedance")
        assert result.successful, result
        switched = loop.tool()
        loop.run_for(1.0)
        drift = np.linalg.norm(loop.tool()[:3, 3] - switched[:3, 3])
        print(f"\nafter the switch the tool moved {drift * 1e3:.3f} mm")
        assert drift < 1e-3, loop.logs()  # held where it was, not sent anywhere
        gap = loop.reach(switched, [0.0, 0.03, 0.0], "target after the switch")
        assert gap < 2e-3, loop.logs()
    finally:
        loop.close()


def test_a_stiffness_the_loop_cannot_take_is_refused(tmp_path):
    loop = Loop(tmp_path, {"mode": "cartesian_impedance"})
    try:
        loop.run_for(0.3)  # the state period is measured
        result = loop.control.set_parameters(**{"cartesian.translational_stiffness": [5.0e6]})
        assert not result.successful, result
        assert "cartesian stiffness 5e+06" in result.reason, result.reason
        assert "makes the sampled loop unstable" in result.reason, result.reason
        result = loop.control.set_parameters(**{"cartesian.rotational_stiffness": [-1.0]})
        assert not result.successful
        assert "cartesian.rotational_stiffness must be finite and ≥ 0" in result.reason, result
        result = loop.control.set_parameters(**{"cartesian.translational_stiffness": [300.0],
                                                "cartesian.frame": "target"})
        assert result.successful, result
        start = loop.tool()
        loop.run_for(0.5)
        assert np.linalg.norm(loop.tool()[:3, 3] - start[:3, 3]) < 1e-3
        assert loop.commands and np.isfinite(loop.commands[-1][1].data).all()
    finally:
        loop.close()


# the bundled arm's wrist singularity (UR-like): wrist_2 at 0 aligns wrist_1's and wrist_3's
# axes, so the tool's Jacobian loses a rank
Q_SINGULAR = np.array([0.3, -1.2, 1.4, -0.8, 0.0, 0.2])


def _transition(loop: Loop, transition: int) -> None:
    answer = loop.control.call(ChangeState, "~/change_state",
                               ChangeState.Request(transition=Transition(id=transition)))
    assert answer.success, loop.logs()


def test_at_a_singularity_and_through_the_lifecycle_the_mode_behaves_as_the_others(tmp_path):
    """Held at the wrist singularity, the status "<node>: cartesian" on /diagnostics warns of
    it and names the threshold, and every command is finite and within the URDF's effort limits,
    also while a target 10 cm away is followed through it. Deactivated, the node sends its stop
    command (gravity at the measured pose) and ignores targets, naming why; activated again it
    holds the tool where it is and takes targets."""
    loop = Loop(tmp_path, {"mode": "cartesian_impedance",
                           "cartesian.translational_stiffness": [800.0]},
                initial=Q_SINGULAR)
    limits = MODEL.effort_limit
    try:
        statuses = loop.control.received(DiagnosticArray, "/diagnostics")
        cartesian = f"{loop.control.name}: cartesian"

        def warned() -> list[DiagnosticStatus]:
            return [s for _, array in statuses for s in array.status
                    if s.hardware_id == cartesian and "near a singularity" in s.message]

        start = loop.tool()
        loop.send(_pose(start[:3, 3] + [0.1, 0.0, 0.0], "", _quaternion(start[:3, :3])))
        loop.run_for(1.0)
        assert loop.control.wait_for(warned, 15.0), loop.logs()
        status = warned()[-1]
        assert status.level == DiagnosticStatus.WARN
        assert "< 0.01" in status.message, status.message
        sent = np.array([msg.data for _, msg in loop.commands])
        print(f"\nat the singularity: {len(sent)} commands, largest |τ|/limit "
              f"{np.max(np.abs(sent) / limits):.3f}; status: {status.message}")
        assert np.isfinite(sent).all()
        assert (np.abs(sent) <= limits + 1e-9).all(), np.max(np.abs(sent) / limits)

        before = len(loop.commands)
        _transition(loop, Transition.TRANSITION_DEACTIVATE)
        assert loop.control.wait_for_log("stop command 'gravity'", 10.0), loop.logs()
        # the last command: the stop command, gravity at the measured pose (the lock-step
        # simulator has stepped once on it and waits: the pose is the one it was computed at)
        assert loop.sim.wait_for(lambda: len(loop.commands) > before, 10.0)
        loop.sim.peer.settle(loop.commands, quiet=0.5)
        stop = np.array(loop.commands[-1][1].data)
        gravity = ReferenceDynamics(MODEL).gravity(loop.position())
        assert np.allclose(stop, gravity, atol=1e-3 * np.abs(gravity).max()), (stop, gravity)
        loop.send(_pose(start[:3, 3] + [0.0, 0.05, 0.0], "", _quaternion(start[:3, :3])))
        assert loop.control.wait_for_log("target_pose ignored: the node is inactive", 10.0), \
            loop.logs()

        _transition(loop, Transition.TRANSITION_ACTIVATE)
        loop.run_for(0.5)
        held = loop.tool()
        loop.run_for(1.0)
        drift = np.linalg.norm(loop.tool()[:3, 3] - held[:3, 3])
        print(f"activated again: the tool moved {drift * 1e3:.3f} mm in 1 s")
        assert drift < 1e-3, loop.logs()
        assert loop.reach(held, [0.0, 0.0, 0.03], "activated again") < 2e-3, loop.logs()
    finally:
        loop.close()


def _wrench(link: str, force) -> WrenchStamped:
    msg = WrenchStamped()
    msg.header.frame_id = link
    msg.wrench.force.x, msg.wrench.force.y, msg.wrench.force.z = (float(x) for x in force)
    return msg


def test_a_collision_holds_the_tool_and_refuses_targets_until_reset(tmp_path):
    """contact.reaction hold in cartesian_impedance, as in the joint modes: a 20 N push at the
    tool is a collision; the node holds the measured pose, ignores targets naming the latched
    collision, and takes them again after ~/reset_collision."""
    loop = Loop(tmp_path, {"mode": "cartesian_impedance",
                           "cartesian.translational_stiffness": [800.0],
                           "contact.enabled": True, "contact.reaction": "hold",
                           "contact.publish_rate": 0.0},
                sim={"effort_noise": 0.05})
    collisions = loop.control.received(Collision, "~/collision")
    try:
        assert loop.control.wait_for(
            lambda: loop.control.client(Trigger, "~/reset_collision").service_is_ready(), 30.0)
        loop.run_for(0.3)  # the observer settled
        assert not collisions, loop.logs()
        R = loop.tool()[:3, :3]
        loop.sim.publish_matched(WrenchStamped, "~/external_wrench",
                                 _wrench(LINK, R.T @ np.array([20.0, 0.0, 0.0])))
        assert loop.sim.wait_for(lambda: collisions, 10.0), loop.logs()
        assert collisions[0][1].reaction == "hold"
        loop.sim.publish_matched(WrenchStamped, "~/external_wrench", _wrench("", (0, 0, 0)))
        loop.run_for(0.2)
        held = loop.tool()
        loop.send(_pose(held[:3, 3] + [0.0, 0.03, 0.0], "", _quaternion(held[:3, :3])))
        assert loop.control.wait_for_log("target_pose ignored: a collision is latched", 10.0), \
            loop.logs()
        loop.run_for(1.0)
        drift = np.linalg.norm(loop.tool()[:3, 3] - held[:3, 3])
        print(f"\nlatched (hold): the tool moved {drift * 1e3:.3f} mm in 1 s")
        assert drift < 1e-3, loop.logs()
        answer = loop.control.call(Trigger, "~/reset_collision", Trigger.Request())
        assert answer.success, answer.message
        gap = loop.reach(held, [0.0, 0.03, 0.0], "after the reset")
        assert gap < 2e-3, loop.logs()
    finally:
        loop.close()
