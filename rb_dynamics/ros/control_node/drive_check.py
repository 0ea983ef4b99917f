# SPDX-License-Identifier: Apache-2.0
"""The start-up plausibility check of the drive settings (``drive.*``), on the control loop's
thread before the first command (no rclpy import).

The first joint state the controller takes decides: at rest (every |q̇| below
``REST_VELOCITY``) and with efforts, they are compared with g(q) (``control.rest_mismatch``);
a mismatch a drive setting explains is logged and stays on /diagnostics ("drive check"),
naming the setting, and the node commands as it is set (an arm resting on its brakes reports
what a drive leaving gravity out does: the check says, it does not decide). A first state that
is moving or carries no efforts gives no verdict; nothing waits for a better one, so the first
command goes out when it did without the check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rb_dynamics.control import JointController, rest_mismatch

__all__ = ["REST_VELOCITY", "DriveCheck"]

REST_VELOCITY = 0.01  # rad/s or m/s: a first state slower than this on every joint is at rest


class DriveCheck:
    """Checks the drive settings once, on the first state (see the module docstring)."""

    def __init__(self) -> None:
        self.enabled = True  # drive.check_at_start
        self.done = False  # the first state was looked at
        self.finding = ""  # what is wrong ("": nothing found)
        self.verdict = "not yet"  # for /diagnostics

    def observe(self, msg: Any, controller: JointController,
                say: Callable[[str, str], None] | None = None) -> str:
        """Look at ``msg`` (a sensor_msgs/JointState ``controller`` has just taken); the
        finding, "" when the efforts fit the settings or tell nothing, also told to ``say``
        (text, key: the loop's ``problem``) when there is one. Once."""
        self.done = True
        if not self.enabled:
            self.verdict = "off (drive.check_at_start)"
            return ""
        if len(msg.effort) != len(msg.name):
            self.verdict = "no verdict: the first state carried no efforts"
            return ""
        q, v, index = controller.q, controller.v, controller.index
        if np.abs(v).max(initial=0.0) > REST_VELOCITY:
            self.verdict = "no verdict: the arm moved at the first state"
            return ""
        reported = controller.state_reader.model_order(msg.name, msg.effort)
        gravity = controller.law.gravity_effort(q)
        self.finding = rest_mismatch(controller.law.drive, reported[index], gravity[index])
        self.verdict = self.finding or "the efforts at rest fit the drive settings"
        if self.finding and say is not None:
            say(f"drive settings: {self.finding}", "drive check")
        return self.finding
