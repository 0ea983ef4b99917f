# SPDX-License-Identifier: Apache-2.0
"""``~/joint_trajectory`` (trajectory_msgs/JointTrajectory): a reference for computed torque, taken
as the controller's new trajectory.

The message is taken as bytes: one larger than ``MAX_TRAJECTORY_POINTS`` points can take is
refused before rclpy turns it into objects. A trajectory that arrives before the controller's
first joint state waits for that state (a reference publisher started with the driver must not
lose its one message). A header stamp 0 means "start now", as in ros2_controllers. Refusals are
throttled warnings and the period's last problem on /diagnostics.
"""

from __future__ import annotations

from collections.abc import Callable

from rclpy.node import Node
from rclpy.serialization import deserialize_message
from trajectory_msgs.msg import JointTrajectory

from rb_dynamics.control import MAX_TRAJECTORY_POINTS, ControllerError
from rb_dynamics.model import Model
from rb_dynamics.ros.conversions import ConversionError, to_seconds, trajectory_points
from rb_dynamics.ros.runtime import release_gradually

from .control_loop import ControlLoop

__all__ = ["TrajectoryTopic"]


class TrajectoryTopic:
    """The ``~/joint_trajectory`` subscription of a control node driving ``loop``.

    ``lifecycle_state`` returns the node's state (only an active node takes trajectories),
    ``get_model`` its model (None: not loaded yet).
    """

    def __init__(self, node: Node, loop: ControlLoop, lifecycle_state: Callable[[], str],
                 get_model: Callable[[], Model | None]) -> None:
        self.node, self.loop = node, loop
        self.lifecycle_state, self.get_model = lifecycle_state, get_model
        self._early: JointTrajectory | None = None
        first_state = node.create_guard_condition(self._start_early)
        loop.set_first_state_callback(first_state.trigger)
        node.create_subscription(JointTrajectory, "~/joint_trajectory", self._on_bytes, 10,
                                 raw=True)

    def _on_bytes(self, data: bytes) -> None:
        model = self.get_model()
        nv = model.nv if model is not None else 0
        # four arrays of nv doubles and a duration per point, plus the names and the header
        limit = 65536 + MAX_TRAJECTORY_POINTS * (8 + 4 * (4 + 8 * nv))
        if len(data) > limit:
            self.loop.problem(f"trajectory: {len(data)} bytes, more than {MAX_TRAJECTORY_POINTS} "
                              "points can take; ignored unread", "trajectory")
            return
        msg = deserialize_message(data, JointTrajectory)
        self._on_trajectory(msg)
        if msg is not self._early:  # used (the sampler has its arrays) or refused
            release_gradually(msg.points)

    def _start_early(self) -> None:
        msg, self._early = self._early, None
        if msg is not None:
            self._on_trajectory(msg)

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        controller = self.loop.controller
        state = self.lifecycle_state()
        if state != "active":
            self.loop.problem(f"trajectory ignored: the node is {state}", "trajectory")
            return
        if controller is None:
            why = "no model loaded yet" if self.get_model() is None else "nothing to command"
            self.loop.problem(f"trajectory ignored: {why}", "trajectory")
            return
        if msg.header.stamp.sec < 0:
            self.loop.problem(f"trajectory: negative header stamp {msg.header.stamp.sec} s; "
                              "ignored", "trajectory")
            return
        if controller.q is None:
            self._early = msg
            self.node.get_logger().info("trajectory received before the first joint state: it "
                                        "starts with that state")
            return
        now = self.loop.now()
        stamp = to_seconds(msg.header.stamp)
        try:
            # built outside the lock: the control loop keeps running meanwhile
            sampler = controller.prepare_trajectory(
                list(msg.joint_names), trajectory_points(msg.points), stamp if stamp > 0
                else now, now)  # a zero stamp means "now" (as in ros2_controllers)
        except (ControllerError, ConversionError) as exc:
            self.loop.problem(f"{exc}; ignored", "trajectory")
            return
        with self.loop.lock:
            if self.loop.controller is controller:
                controller.follow(sampler)
                self.loop.reference_changed()
