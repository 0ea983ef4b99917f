# SPDX-License-Identifier: Apache-2.0
"""The control node: joint states in, effort commands out (gravity compensation, computed
torque), the FollowJointTrajectory action, the dynamics and payload services.

Run it with ``python -m rb_dynamics.ros.control_node`` or ``ros2 run rb_dynamics rb_dynamics_node``.
"""

from .node import NODE_NAME, ControlNode, main

__all__ = ["NODE_NAME", "ControlNode", "main"]
