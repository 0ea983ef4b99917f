# SPDX-License-Identifier: Apache-2.0
"""Parameters declared from one table per node: every one has a value, a type and a description.

Every parameter gets a value (an empty list where "none" is meant), so that tools which read
all of a node's parameters at once (``ros2 param dump``, rqt_reconfigure) see them all: rclpy
answers nothing for the whole request when one parameter is declared without a value.
Empty-list defaults are declared with dynamic typing (rclpy would type ``[]`` as a byte array
and then refuse the list of strings or numbers a parameters file gives); ``check`` holds them
to their documented type instead. A ``[]`` in a parameters file (what ``ros2 param dump``
writes for them) reaches rclpy without a type; such an override is ignored: it means the
default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
)
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile
from rclpy.qos_overriding_options import QoSOverridingOptions, _declare_qos_parameters
from rclpy.subscription import Subscription

__all__ = ["ParameterSpec", "check", "declare", "qos_with_overrides", "read"]

_TYPES = {
    "bool": (ParameterType.PARAMETER_BOOL, bool),
    "int": (ParameterType.PARAMETER_INTEGER, int),
    "double": (ParameterType.PARAMETER_DOUBLE, float),
    "string": (ParameterType.PARAMETER_STRING, str),
    "double[]": (ParameterType.PARAMETER_DOUBLE_ARRAY, float),
    "string[]": (ParameterType.PARAMETER_STRING_ARRAY, str),
}


@dataclass(frozen=True)
class ParameterSpec:
    """One parameter: its type (a key of ``_TYPES``), default, meaning and allowed values."""

    type: str
    default: Any
    description: str
    read_only: bool = False
    low: float | None = None  # inclusive range of a number
    high: float | None = None
    choices: tuple[str, ...] = ()  # allowed values of a string

    def descriptor(self) -> ParameterDescriptor:
        kind, _ = _TYPES[self.type]
        text = self.description
        if self.choices:
            text += f" (one of: {', '.join(self.choices)})"
        descriptor = ParameterDescriptor(description=text, read_only=self.read_only)
        if isinstance(self.default, list) and not self.default:
            descriptor.dynamic_typing = True  # see the module docstring; ``check`` types it
        else:
            descriptor.type = kind
        if self.low is not None and self.type == "double":
            descriptor.floating_point_range = [
                FloatingPointRange(from_value=self.low, to_value=self.high)]
        if self.low is not None and self.type == "int":
            descriptor.integer_range = [IntegerRange(from_value=int(self.low),
                                                     to_value=int(self.high))]
        return descriptor


def declare(node: Node, specs: Mapping[str, ParameterSpec]) -> None:
    """Declare every parameter of ``specs`` on ``node`` (overrides from files apply)."""
    # rclpy keeps the overrides it was given here (the same attribute from Humble to Kilted)
    overrides = getattr(node, "_parameter_overrides", {})
    for name, spec in specs.items():
        override = overrides.get(name)
        untyped = override is not None and override.type_ == Parameter.Type.NOT_SET
        node.declare_parameter(name, spec.default, spec.descriptor(), ignore_override=untyped)


def check(name: str, spec: ParameterSpec, value: Any) -> Any:
    """``value`` as the spec's type, or a ValueError saying what is allowed."""
    _, element = _TYPES[spec.type]
    if spec.type.endswith("[]"):
        if not isinstance(value, (list, tuple)) and not hasattr(value, "tolist"):
            raise ValueError(f"{name} must be a list of {spec.type[:-2]}s, got {value!r}")
        items = list(value)
        if element is float and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                    for x in items):
            items = [float(x) for x in items]
        if not all(isinstance(x, element) for x in items):
            raise ValueError(f"{name} must be a list of {spec.type[:-2]}s, got {value!r}")
        return items
    if element is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, element) or (element is int and isinstance(value, bool)):
        raise ValueError(f"{name} must be a {spec.type}, got {value!r}")
    if element is float and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if spec.low is not None and not (spec.low <= value <= spec.high):
        raise ValueError(f"{name} must be in [{spec.low:g}, {spec.high:g}], got {value!r}")
    if spec.choices and value not in spec.choices:
        raise ValueError(f"{name} must be one of {list(spec.choices)}, got {value!r}")
    return value


def read(node: Node, specs: Mapping[str, ParameterSpec]) -> dict[str, Any]:
    """The checked values of ``specs`` (ValueError naming the first that is wrong)."""
    return {name: check(name, spec, node.get_parameter(name).value)
            for name, spec in specs.items()}


def qos_with_overrides(node: Node, topic: str, qos: QoSProfile) -> QoSProfile:
    """``qos`` with the standard overrides of a subscription to ``topic`` applied:
    ``qos_overrides.<resolved topic>.subscription.{history,depth,reliability}``, declared on
    ``node`` (read-only, defaults from ``qos``) exactly as ``create_subscription(...,
    qos_overriding_options=QoSOverridingOptions.with_default_policies())`` declares them. For a
    subscription made by another node, e.g. one created with ``use_global_arguments=False``
    that sees no parameter overrides. A bad value raises (the node does not start)."""
    # rclpy's own helper: what create_subscription calls with qos_overriding_options
    _declare_qos_parameters(Subscription, node, node.resolve_topic_name(topic), qos,
                            QoSOverridingOptions.with_default_policies())
    return qos
