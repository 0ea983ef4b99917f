# SPDX-License-Identifier: Apache-2.0
"""The drive tests against a simulator that is not ours: MuJoCo behind a small driver node
(test/mujoco_driver.py, lock-step on its own step), the control node on its /clock.

- MuJoCo's body ``gravcomp`` plays a drive that compensates gravity (and leaves it out of the
  reported efforts): with the matching ``drive.*`` settings the node holds the bundled arm in
  gravity compensation and follows a goal in computed torque; with the defaults it says what is
  wrong on /diagnostics, naming ``drive.effort_includes_gravity``.
- The xArm7's vendor URDF (``<dynamics damping>`` 10/5/2 N·m·s/rad) on an arm whose true viscous
  friction is 0.8–2.8: gravity compensation with the default ``friction_compensation`` stays
  where it is.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from pin_oracle import robots_dir
from ros_harness import Session, close_all, control_node, fresh_name
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics import DEFAULT_URDF

pytest.importorskip("mujoco")

TEST_DIR = Path(__file__).resolve().parent
HOME = [0.0, -1.2, 1.2, -1.0, -1.57, 0.0]
XARM7 = Path(robots_dir(), "xarm_description/urdf/xarm7.urdf")
XARM7_TRUE_VISCOUS = [2.8, 2.8, 1.5, 1.5, 0.8, 0.8, 0.8]
GRAVCOMP_SETTINGS = {"drive.compensates_gravity": True, "drive.effort_includes_gravity": False}


class MujocoLoop:
    """The MuJoCo driver and the control node in closed loop; the peer listens to
    joint_states (simulated time, positions by joint)."""

    def __init__(self, tmp_path: Path, urdf: Path, q0, driver: dict, control: dict):
        name = fresh_name("mujoco_driver")
        # the loop's own joint_states and /clock: nothing else on the domain can reach it
        own = ["-r", f"joint_states:=/{name}/joint_states", "-r", f"/clock:=/{name}/clock"]
        self.driver = Session("mujoco_driver", tmp_path, {
            "urdf_path": str(urdf), "initial_positions": [float(x) for x in q0], **driver},
            *own, name=name, prelude=f"import sys; sys.path.insert(0, {str(TEST_DIR)!r})")
        self.control = control_node(tmp_path, {
            "urdf_path": str(urdf), "use_sim_time": True, "state_timeout": 0.1, **control},
            "-r", f"~/effort_commands:=/{name}/commands", *own, peer=self.driver.peer)
        self.peer = self.driver.peer
        self.t: list[float] = []
        self.q: list[np.ndarray] = []
        self.joints: list[str] = []
        self.peer.node.create_subscription(JointState, f"/{name}/joint_states", self._on_state,
                                           100)
        self.trajectory = self.peer.node.create_publisher(
            JointTrajectory, self.control.topic("~/joint_trajectory"), 10)

    def _on_state(self, msg: JointState) -> None:
        self.joints = list(msg.name)
        self.t.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)
        self.q.append(np.array(msg.position))

    def logs(self) -> str:
        return (f"--- mujoco driver:\n{self.driver.output()[-3000:]}\n--- control node:\n"
                f"{self.control.output()[-3000:]}")

    def close(self) -> None:
        """Stop the control node (it must stop cleanly, ``Session.close``), then the rig."""
        try:
            close_all(self.control)
        finally:
            self.driver.kill()

    @property
    def now(self) -> float:
        return self.t[-1] if self.t else -math.inf

    def run_for(self, seconds: float, stall: float = 60.0) -> None:
        """``seconds`` of simulated time, however slowly this machine runs the loop; fails
        when simulated time stops (no progress for ``stall`` s of wall time)."""
        assert self.peer.wait_for(lambda: self.t, stall), self.logs()
        until = self.now + seconds
        progress, moved = self.now, time.monotonic()
        while self.now < until:
            if self.now > progress:
                progress, moved = self.now, time.monotonic()
            assert time.monotonic() - moved < stall, "the loop stalled:\n" + self.logs()
            self.peer.executor.spin_once(timeout_sec=0.01)

    def drift(self, seconds: float) -> np.ndarray:
        """The largest |q(t) − q(start)| per joint over ``seconds`` of simulated time."""
        start = len(self.q)
        self.run_for(seconds)
        q = np.array(self.q[start:])
        return np.abs(q - q[0]).max(axis=0)

    def go_to(self, goal: np.ndarray, duration: float) -> None:
        """A rest-to-rest trajectory to ``goal`` over ``duration`` s from the latest state."""
        point = JointTrajectoryPoint(positions=goal.tolist(),
                                     velocities=[0.0] * len(goal))
        point.time_from_start.sec = int(duration)
        point.time_from_start.nanosec = int((duration - int(duration)) * 1e9)
        msg = JointTrajectory(joint_names=self.joints, points=[point])
        start = self.now + 0.02
        msg.header.stamp.sec, msg.header.stamp.nanosec = int(start), int(
            (start - int(start)) * 1e9)
        self.trajectory.publish(msg)


def drive_status(loop: MujocoLoop):
    found = [s for _, s in loop.control.statuses()
             if any(v.key == "drive check" for v in s.values)]
    return found[-1] if found else None


def test_mujoco_gravcomp_holds_and_tracks_with_the_matching_settings(tmp_path):
    loop = MujocoLoop(tmp_path, DEFAULT_URDF, HOME,
                      {"gravcomp": True, "effort_includes_gravity": False,
                       "damping": [0.5], "effort_noise": 0.02},
                      {"mode": "gravity_compensation", "kp": [400.0], "kd": [40.0],
                       **GRAVCOMP_SETTINGS})
    try:
        loop.control.statuses()
        loop.run_for(0.3)
        drift = loop.drift(2.0)
        assert drift.max() <= 0.01, (drift, loop.logs())
        assert loop.control.set_parameters(mode="computed_torque").successful
        # the wrist's last two joints stay: on their light links the URDF's Coulomb friction,
        # which computed torque compensates along the reference and MuJoCo's arm does not
        # have, would leave them behind (a friction mismatch, not the drive's business)
        goal = np.array(HOME) + np.array([0.3, 0.2, -0.2, 0.3, 0.0, 0.0])
        loop.go_to(goal, 1.5)
        loop.run_for(2.5)
        error = np.abs(loop.q[-1] - goal)
        assert error.max() <= 0.01, (error, loop.logs())
        assert loop.control.wait_for(lambda: drive_status(loop) is not None, 30.0)
        verdict = next(v.value for v in drive_status(loop).values if v.key == "drive check")
        assert verdict == "the efforts at rest fit the drive settings", verdict
    finally:
        loop.close()


def test_mujoco_gravcomp_with_the_default_settings_is_said(tmp_path):
    loop = MujocoLoop(tmp_path, DEFAULT_URDF, HOME,
                      {"gravcomp": True, "effort_includes_gravity": False,
                       "damping": [0.5], "effort_noise": 0.02},
                      {"mode": "gravity_compensation"})
    try:
        loop.control.statuses()
        loop.run_for(0.05)
        assert loop.control.wait_for(lambda: drive_status(loop) is not None, 60.0), loop.logs()
        status = drive_status(loop)
        assert status.level >= DiagnosticStatus.WARN
        assert status.message.startswith("drive settings: reported efforts ≈ "), status.message
        assert "drive.effort_includes_gravity false" in status.message
    finally:
        loop.close()


@pytest.mark.parametrize("pose", [
    [0.0, 0.0, 0.0, 0.5, 0.0, 0.5, 0.0],
    [0.3, -0.5, 0.8, 1.2, -0.6, 1.0, 0.4],
])
def test_mujoco_gravity_compensation_with_a_vendor_urdf_stays_where_it_is(tmp_path, pose):
    loop = MujocoLoop(tmp_path, XARM7, pose, {"damping": XARM7_TRUE_VISCOUS},
                      {"mode": "gravity_compensation"})
    try:
        drift = loop.drift(2.0)
        assert drift.max() <= 0.05, (drift, loop.logs())
    finally:
        loop.close()
