# SPDX-License-Identifier: Apache-2.0
"""The control node's ``~/set_dynamics_overlay`` (rb_dynamics_interfaces/SetDynamicsOverlay).

A dynamics overlay (``rb_dynamics.model.overlay``: armature, viscous, Coulomb and Stribeck
friction, effort offset per joint, as identification writes it) given as YAML text or as a file
path replaces the node's overlay between two commands (``ModelLoader.set_overlay``): computed
torque's M(q) carries the armature, friction compensation the overlay's friction, gravity
compensation and impedance the new dynamics, and the dynamics services answer for the overlaid
robot (with its payload). Both fields empty: no overlay, the URDF's values. An overlay that
cannot be read or does not fit the robot is refused with what is wrong; nothing changes then.
"""

from __future__ import annotations

from typing import Any

from rclpy.node import Node

from rb_dynamics.model import DynamicsOverlay, Model, read_overlay
from rb_dynamics.ros.runtime import failed_response
from rb_dynamics_interfaces.srv import SetDynamicsOverlay

from .model_loader import ModelLoader

__all__ = ["OverlayService", "describe_overlay"]

MAX_OVERLAY_TEXT = 10_000_000  # characters of YAML in a request (the file limit of read_overlay)


def describe_overlay(overlay: DynamicsOverlay | None, origin: str) -> str:
    """One line: which keys the overlay sets on how many joints, and where it came from."""
    if overlay is None:
        return "none (the URDF's values)"
    keys = sorted({key for values in overlay.joints.values() for key in values})
    return (f"{', '.join(keys) or 'nothing'} on {len(overlay.joints)} joints "
            f"(robot {overlay.robot or '?'!r}, from {origin})")


class OverlayService:
    """Serves ``~/set_dynamics_overlay`` for the node whose robot ``loader`` owns."""

    def __init__(self, node: Node, loader: ModelLoader) -> None:
        self.node, self.loader = node, loader
        node.create_service(SetDynamicsOverlay, "~/set_dynamics_overlay", self._set)

    def diagnostic_values(self) -> dict[str, str]:
        return {"dynamics overlay": describe_overlay(self.loader.overlay,
                                                     self.loader.overlay_origin)}

    def _set(self, request: Any, response: Any) -> Any:
        try:
            overlay, origin = _requested(request)
            model = self.loader.set_overlay(overlay, origin)
            message = f"dynamics overlay: {describe_overlay(overlay, origin)}"
            response.success, response.message = True, message + _robot_note(overlay, model)
            self.node.get_logger().info(response.message)
        except Exception as exc:  # noqa: BLE001 - see failed_response
            return failed_response(response, exc, self.node.get_logger(),
                                   "set_dynamics_overlay")
        return response


def _requested(request: Any) -> tuple[DynamicsOverlay | None, str]:
    """The overlay a request gives (None: none) and where it came from; ValueError naming the
    field, or the file, the joint and the key."""
    text, path = request.overlay, request.path
    if text and path:
        raise ValueError("give the overlay as text (overlay) or as a file (path), not both")
    if path:
        try:
            return read_overlay(path), f"file {path}"
        except OSError as exc:
            raise ValueError(f"path: cannot read {path!r}: {exc.strerror or exc}") from None
    if not text:
        return None, ""
    if len(text) > MAX_OVERLAY_TEXT:
        raise ValueError(f"overlay: longer than {MAX_OVERLAY_TEXT} characters")
    # read_overlay takes a string with a line break as YAML text, one without as a path
    return read_overlay(text if "\n" in text else text + "\n"), "the request's text"


def _robot_note(overlay: DynamicsOverlay | None, model: Model) -> str:
    """A warning when the overlay was made for a robot of another name."""
    if overlay is None or not overlay.robot or overlay.robot == model.name:
        return ""
    return f"; note: it was made for robot {overlay.robot!r}, this is {model.name!r}"
