# SPDX-License-Identifier: Apache-2.0
"""The control node: joint states in, effort commands out (gravity compensation, computed
torque), the FollowJointTrajectory action, the dynamics and payload services.

Run it with ``python -m rb_dynamics.ros.control_node`` or ``ros2 run rb_dynamics rb_dynamics_node``.
"""

from rb_dynamics.ros.early_stop import lazy_attributes, run_main

__all__ = ["run", "NODE_NAME", "ControlNode", "main"]

__getattr__ = lazy_attributes(f"{__name__}.node", ["NODE_NAME", "ControlNode", "main"])


def run() -> int:
    """``rb_dynamics_node``: the process (its exit code); a stop signal during the imports ends it
    at once (``ros.early_stop``)."""
    return run_main(f"{__name__}.node")
