# SPDX-License-Identifier: Apache-2.0
"""The control node: joint states in, effort commands out (gravity compensation, computed
torque), the FollowJointTrajectory action, the dynamics and payload services.

Run it with ``python -m rb_dynamics.ros.control_node`` or ``ros2 run rb_dynamics rb_dynamics_node``.
"""

from rb_dynamics.ros.early_stop import stop_at_once_until_running

__all__ = ["run", "NODE_NAME", "ControlNode", "main"]


def __getattr__(name: str):
    # the node's module is imported when first used, never by ``run`` before the stop
    # signals are handled
    if name in __all__:
        from . import node

        return getattr(node, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run() -> int:
    """``rb_dynamics_node``: the process (its exit code); a stop signal during the imports ends it
    at once (``ros.early_stop``)."""
    stop_at_once_until_running()
    from .node import main

    return main()
