# SPDX-License-Identifier: Apache-2.0
"""MuJoCo behind its small driver node (test/mujoco_driver.py, lock-step on its own step) and
the control node on its /clock, in closed loop: an arm simulated by an engine this package did
not write."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from ros_harness import Session, close_all, control_node, fresh_name
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

TEST_DIR = Path(__file__).resolve().parent


class MujocoLoop:
    """The MuJoCo driver (on ``urdf``) and the control node (on ``model_urdf``, default the
    same) in closed loop; the peer listens to joint_states (simulated time, positions by
    joint)."""

    def __init__(self, tmp_path: Path, urdf: Path, q0, driver: dict, control: dict,
                 model_urdf: Path | None = None):
        name = fresh_name("mujoco_driver")
        # the loop's own joint_states and /clock: nothing else on the domain can reach it
        own = ["-r", f"joint_states:=/{name}/joint_states", "-r", f"/clock:=/{name}/clock"]
        self.driver = Session("mujoco_driver", tmp_path, {
            "urdf_path": str(urdf), "initial_positions": [float(x) for x in q0], **driver},
            *own, name=name, prelude=f"import sys; sys.path.insert(0, {str(TEST_DIR)!r})")
        self.control = control_node(tmp_path, {
            "urdf_path": str(model_urdf or urdf), "use_sim_time": True, "state_timeout": 0.1,
            **control},
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
        self.peer.run_sim_time(lambda: self.now, seconds, stall, self.logs)

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
