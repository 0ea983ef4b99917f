# SPDX-License-Identifier: Apache-2.0
"""The simulator's ``~/set_payload`` (rb_dynamics_interfaces/SetPayload): a payload on the
simulated robot, the state kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rclpy.node import Node

from rb_dynamics.dynamics import Dynamics, Payload, PayloadDynamics, default_payload_link
from rb_dynamics.ros.payload_messages import describe, payload_from_fields, payload_message
from rb_dynamics.ros.runtime import failed_response
from rb_dynamics_interfaces.srv import SetPayload

__all__ = ["SimulatorPayload"]


class SimulatorPayload:
    """``carry(dynamics)`` makes the simulated robot the bare one (``bare``, its dynamics) with
    the payload (``PayloadDynamics``), or the bare one for mass 0; ``current`` is the payload
    carried (None: none)."""

    def __init__(self, node: Node, bare: Dynamics, carry: Callable[[Dynamics], None]) -> None:
        self.node, self.bare, self.carry = node, bare, carry
        self.current: Payload | None = None
        node.create_service(SetPayload, "~/set_payload", self._set_payload)

    def _set_payload(self, request: Any, response: Any) -> Any:
        try:
            model = self.bare.model
            payload, _ = payload_from_fields(model, default_payload_link(model), request.link,
                                             request.mass, request.com, request.inertia)
            self.carry(self.bare if payload.is_empty else PayloadDynamics(self.bare, payload))
            self.current = None if payload.is_empty else payload
            response.payload = payload_message(payload)
            response.success = True
            response.message = f"simulating the robot with payload: {describe(payload)}"
            self.node.get_logger().info(response.message)
        except Exception as exc:  # noqa: BLE001 - see failed_response
            return failed_response(response, exc, self.node.get_logger(), "set_payload")
        return response
