# SPDX-License-Identifier: Apache-2.0
"""The simulator node: a forward-dynamics simulation of a URDF on topics (effort commands or
a ``<ros2_control>`` block in, joint states out).

Run it with ``python -m rb_dynamics.ros.simulator_node`` or ``ros2 run rb_dynamics rb_simulator``.
"""

from .node import NODE_NAME, SimulatorNode, main

__all__ = ["NODE_NAME", "SimulatorNode", "main"]
