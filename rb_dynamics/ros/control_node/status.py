# SPDX-License-Identifier: Apache-2.0
"""The control node's status on /diagnostics, once a second (what it says: ros/diagnostics.py).

OK while the node answers fresh states or serves only its dynamics services (floating base, no
actuated joints) or is not active; WARN while it waits for a description, or when the drive
settings do not fit the efforts at rest (``drive_check.py``); WARN or ERROR from the
controller's period (late, missing or stale states: ``diagnostics.controller_level``). The
move into ERROR is also logged, once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node

from rb_dynamics.control import JointController
from rb_dynamics.ros.diagnostics import controller_level, period_values, status

from .control_loop import ControlLoop
from .model_loader import ModelLoader

__all__ = ["ControlStatus", "soft_limits"]


def soft_limits(controller: JointController) -> str:
    """What bounds the efforts besides the effort limits: "off", or "on" and the commanded
    joints the URDF gives velocity or <safety_controller> limits (the joints the limits acted
    on are among "clamped joints")."""
    if not controller.soft_limits:
        return "off"
    model = controller.model
    limited = [name for name, k in zip(controller.joints, controller.index)
               if np.isfinite(model.velocity_limit[k]) or np.isfinite(model.k_velocity[k])]
    return f"on ({', '.join(limited) or 'no limits in the URDF'})"


class ControlStatus:
    """Publishes one DiagnosticStatus for ``node`` each second.

    ``lifecycle_state`` returns the node's state; ``extra_values`` more key/values (the
    payload's).
    """

    def __init__(self, node: Node, loop: ControlLoop, loader: ModelLoader,
                 lifecycle_state: Callable[[], str],
                 extra_values: Callable[[], dict[str, str]]) -> None:
        self.node, self.loop, self.loader = node, loop, loader
        self.lifecycle_state, self.extra_values = lifecycle_state, extra_values
        self._error_reported = False
        self.publisher = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        node.create_timer(1.0, self.publish)

    def publish(self) -> None:
        stats, ages, totals = self.loop.take_period()
        model, dynamics = self.loader.model, self.loader.dynamics
        values = {"model source": self.loader.origin or "none",
                  "dynamics kernels": dynamics.kind if dynamics else "none",
                  **self.extra_values()}
        controller = self.loop.controller
        state = self.lifecycle_state()
        if model is None:
            level = DiagnosticStatus.WARN
            message = self.loader.refused or "waiting for a robot description"
        elif controller is None:
            values["model"] = model.name
            level = DiagnosticStatus.OK
            message = "dynamics services only, no efforts published (" + (
                "floating base)" if self.node.get_parameter("floating_base").value
                else "no actuated joints)")
        else:
            age = controller.state_age(self.loop.now())
            values.update({"model": model.name, "mode": controller.mode,
                           "lifecycle state": state, "soft limits": soft_limits(controller),
                           **period_values(stats, totals, ages, age)})
            if self.loop.time.jumps:
                values["time went back (total)"] = str(self.loop.time.jumps)
                values["last time jump"] = self.loop.time.last_jump
            level, message = controller_level(stats, age, controller.max_state_age)
            check = self.loop.drive_check
            values["drive check"] = check.verdict
            if check.finding:  # first: it explains what else may be wrong
                level = max(level, DiagnosticStatus.WARN)
                message = f"drive settings: {check.finding}" + (
                    "" if message == "publishing" else f"; {message}")
            if state != "active":
                level, message = DiagnosticStatus.OK, f"{state}: publishing no efforts"
            if level == DiagnosticStatus.ERROR and not self._error_reported:
                self.node.get_logger().error(message)
            self._error_reported = level == DiagnosticStatus.ERROR
        if self.loader.refused and model is not None:
            values["last description refused"] = self.loader.refused
        array = DiagnosticArray(status=[status(self.node.get_name(), level, message, values)])
        array.header.stamp = self.node.get_clock().now().to_msg()
        self.publisher.publish(array)
