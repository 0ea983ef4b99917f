# SPDX-License-Identifier: Apache-2.0
"""Publishes a smooth reference trajectory for the demo: each joint swings on a period of its
own (less near its limits) about where the arm is, as a JointTrajectory with exact velocities
and accelerations (rb_dynamics.demo.main_job.reference).

Parameters: robot_description / urdf_path (the robot), duration (s of motion, default 60).
"""

from __future__ import annotations

import sys

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import load_model
from rb_dynamics.ros.conversions import JointLayout

from .main_job import reference_amplitude, reference_trajectory


class ReferenceNode(Node):
    """Sends one reference trajectory once it sees the arm's state."""
    def __init__(self, **kwargs) -> None:
        super().__init__("rb_reference", **kwargs)
        self.declare_parameter("robot_description", "")
        self.declare_parameter("urdf_path", "")
        self.declare_parameter("duration", 60.0)
        source = (self.get_parameter("robot_description").value
                  or self.get_parameter("urdf_path").value or str(DEFAULT_URDF))
        self.model = load_model(source)
        self.joints = self.model.actuated_joint_names
        self.publisher = self.create_publisher(JointTrajectory, "/rb_dynamics/joint_trajectory", 10)
        self.create_subscription(JointState, "joint_states", self._on_state, 10)
        self.sent = False

    def _on_state(self, msg: JointState) -> None:
        if self.sent or self.publisher.get_subscription_count() == 0:
            return
        by_name = dict(zip(msg.name, msg.position))
        if not all(n in by_name for n in self.joints):
            return
        q0 = np.array([by_name[n] for n in self.joints])
        layout = JointLayout(self.model, self.joints, "joints", every_joint=False)
        index, v_index = layout.q_index, layout.v_index
        amp = reference_amplitude(q0, self.model.position_lower[index],
                                  self.model.position_upper[index],
                                  self.model.velocity_limit[v_index])
        duration = self.get_parameter("duration").value
        self.publisher.publish(reference_trajectory(self.joints, q0, amp, duration))
        self.sent = True
        self.get_logger().info(f"sent a {duration:.0f} s reference for {self.joints}")


def main(args: list[str] | None = None) -> int:
    """``rb_reference``."""
    from rb_dynamics.ros.runtime import run_node

    return run_node(ReferenceNode, args, events=True)


if __name__ == "__main__":
    sys.exit(main())
