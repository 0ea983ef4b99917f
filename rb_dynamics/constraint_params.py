"""Constraints declared as ROS parameters (the YAML of a node), turned into a ConstraintSet.

    constraints:
      names: [loop]                  # one entry per constraint below; [] = none
      solver: udwadia_kalaba         # or rosenberg (independent constraints only)
      baumgarte_alpha: 10.0          # 1/s: b gets −2α φ̇ − β² φ
      baumgarte_beta: 10.0
      loop:
        type: loop_point             # fixed_point | loop_point | weld | joint_coupling
        link_a: rocker
        point_a: [0.2, 0.0, 0.0]     # link coordinates, m
        link_b: ground
        point_b: [0.2, 0.0, 0.0]

Keys per type are in ``rb_dynamics.constraints.CONSTRAINT_TYPES``. The parameters are read-only:
the set is built again (and checked) against every model the node loads.
"""

from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import ParameterDescriptor, ParameterType
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter

from .constraints import Baumgarte, ConstraintSet
from .model import Model

__all__ = ["ConstraintParameters"]

_STRING_KEYS = ("type", "link", "link_a", "link_b", "follower", "leader")
_VECTOR_KEYS = ("point", "point_a", "point_b", "target")
_NUMBER_KEYS = ("ratio", "offset")


def _read_only(text: str, type_: int) -> ParameterDescriptor:
    return ParameterDescriptor(description=text, type=type_, read_only=True)


class ConstraintParameters:
    """Declares ``constraints.*`` on ``node`` and builds the set for a model."""

    def __init__(self, node: Node) -> None:
        declare = node.declare_parameter
        declare("constraints.names", Parameter.Type.STRING_ARRAY, _read_only(
            "names of the declared constraints (constraints.<name>.type, ...); empty: none",
            ParameterType.PARAMETER_STRING_ARRAY))
        declare("constraints.solver", "udwadia_kalaba", _read_only(
            "udwadia_kalaba or rosenberg", ParameterType.PARAMETER_STRING))
        declare("constraints.baumgarte_alpha", 10.0, _read_only(
            "1/s: drift damping, b gets −2α φ̇", ParameterType.PARAMETER_DOUBLE))
        declare("constraints.baumgarte_beta", 10.0, _read_only(
            "1/s: drift stiffness, b gets −β² φ", ParameterType.PARAMETER_DOUBLE))
        self.specs: dict[str, dict[str, Any]] = {}
        for name in self._optional(node, "constraints.names") or []:
            spec: dict[str, Any] = {}
            for key in (*_STRING_KEYS, *_VECTOR_KEYS, *_NUMBER_KEYS):
                kind = (ParameterType.PARAMETER_STRING if key in _STRING_KEYS else
                        ParameterType.PARAMETER_DOUBLE_ARRAY if key in _VECTOR_KEYS else
                        ParameterType.PARAMETER_DOUBLE)
                default = {ParameterType.PARAMETER_STRING: Parameter.Type.STRING,
                           ParameterType.PARAMETER_DOUBLE_ARRAY: Parameter.Type.DOUBLE_ARRAY,
                           ParameterType.PARAMETER_DOUBLE: Parameter.Type.DOUBLE}[kind]
                full = f"constraints.{name}.{key}"
                node.declare_parameter(full, default, _read_only(
                    f"constraint {name!r}: {key}", kind))
                value = self._optional(node, full)
                if value is not None:
                    spec[key] = list(value) if key in _VECTOR_KEYS else value
            self.specs[name] = spec
        self.solver = node.get_parameter("constraints.solver").value
        self.gains = Baumgarte(float(node.get_parameter("constraints.baumgarte_alpha").value),
                               float(node.get_parameter("constraints.baumgarte_beta").value))

    @staticmethod
    def _optional(node: Node, name: str) -> Any:
        try:
            return node.get_parameter(name).value
        except ParameterUninitializedException:
            return None

    def build(self, model: Model) -> ConstraintSet:
        """The declared constraints on ``model``; ValueError naming the parameter if wrong."""
        return ConstraintSet.from_specs(model, self.specs, self.solver, self.gains)
