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
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from ros_harness import control_node, fresh_name, simulator
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import default_payload_link, link_pose
from rb_dynamics.model import load_model

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

    def __init__(self, tmp_path: Path, params: dict) -> None:
        self.sim = simulator(tmp_path, {
            "initial_positions": Q0.tolist(), "publish_clock": True, "lockstep": True,
            "lockstep_timeout": 5.0, "start_paused": True, "command_timeout": 0.2})
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

    def run_for(self, seconds: float, wall: float = 180.0) -> None:
        until = self.now + seconds
        deadline = time.monotonic() + wall
        while self.now < until:
            assert time.monotonic() < deadline, "the loop stalled\n" + self.logs()
            self.sim.peer.executor.spin_once(timeout_sec=0.01)

    def position(self) -> np.ndarray:
        msg = self.states[-1][1]
        by_name = dict(zip(msg.name, msg.position))
        return np.array([by_name[n] for n in JOINTS])

    def tool(self) -> np.ndarray:
        return link_pose(MODEL, self.position(), LINK)

    def send(self, msg: PoseStamped) -> None:
        self.targets.publish(msg)
        self.run_for(0.05)

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
        goal = switched[:3, 3] + [0.0, 0.03, 0.0]
        loop.send(_pose(goal, "", _quaternion(switched[:3, :3])))
        loop.run_for(2.0)
        gap = np.linalg.norm(loop.tool()[:3, 3] - goal)
        print(f"target after the switch: {gap * 1e3:.3f} mm away after 2 s")
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
