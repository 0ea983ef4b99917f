# SPDX-License-Identifier: Apache-2.0
"""Where a node's robot comes from: one order, the same for every node of this package.

1. the ``robot_description`` parameter (URDF XML): when set, nothing else is looked at;
2. the ``/robot_description`` topic (std_msgs/String, transient local, as
   robot_state_publisher publishes it): the newest message; a later one replaces the model at
   run time (or is refused, and the old model kept);
3. the ``urdf_path`` parameter (a URDF file);
4. the bundled 6-DoF arm (``rb_dynamics/urdf/default_arm.urdf``).

Each node takes the steps it can use: the control node 1–3 (with none it waits: driving a
real arm with a made-up model is never right); the simulator and the demo's reference publisher
1, 3 and 4 (they must have a robot at start, and a simulator that swapped robots under a
running controller would surprise it). Both parameters are in each node's schema
(``parameters.yaml`` of its subpackage), which the node declares them from.
"""

from __future__ import annotations

from collections.abc import Callable

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from rb_dynamics import DEFAULT_URDF

__all__ = ["DESCRIPTION_TOPIC", "ModelSource"]

DESCRIPTION_TOPIC = "/robot_description"
Install = Callable[[str, str], None]


class ModelSource:
    """Finds the node's description in the documented order and hands it to ``install``
    (``install(source, origin)``: an XML string or a file path, and where it came from)."""

    def __init__(self, node: Node, install: Install, *, follow_topic: bool,
                 use_bundled: bool) -> None:
        self.node, self.install = node, install
        description = node.get_parameter("robot_description").value
        path = node.get_parameter("urdf_path").value
        if description:
            install(description, "the robot_description parameter")
            return
        if follow_topic:
            latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                                 reliability=ReliabilityPolicy.RELIABLE,
                                 history=HistoryPolicy.KEEP_LAST)
            node.create_subscription(String, DESCRIPTION_TOPIC, self._on_topic, latched)
        if path:
            install(path, f"urdf_path {path!r}")
        elif use_bundled:
            install(str(DEFAULT_URDF), "the bundled default arm")
        else:
            node.get_logger().info(
                f"waiting for a robot description (robot_description parameter, "
                f"{DESCRIPTION_TOPIC} topic or urdf_path)")

    def _on_topic(self, msg: String) -> None:
        self.install(msg.data, f"the {DESCRIPTION_TOPIC} topic")
