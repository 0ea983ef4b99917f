# SPDX-License-Identifier: Apache-2.0
"""The simulator node: a forward-dynamics simulation of a URDF on topics (effort commands or
a ``<ros2_control>`` block in, joint states out).

Run it with ``python -m rb_dynamics.ros.simulator_node`` or ``ros2 run rb_dynamics rb_simulator``.
"""

from rb_dynamics.ros.early_stop import lazy_attributes, run_main

__all__ = ["run", "NODE_NAME", "SimulatorNode", "main"]

__getattr__ = lazy_attributes(f"{__name__}.node", ["NODE_NAME", "SimulatorNode", "main"])


def run() -> int:
    """``rb_simulator``: the process (its exit code); a stop signal during the imports ends it
    at once (``ros.early_stop``)."""
    return run_main(f"{__name__}.node")
