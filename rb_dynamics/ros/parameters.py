# SPDX-License-Identifier: Apache-2.0
"""A node's parameters, declared, validated and described from its schema file.

Each node has one schema, ``parameters.yaml`` in its subpackage (``control_node``,
``simulator_node``), written in the format of ros2_controllers' generate_parameter_library:
per parameter its type, default, description, read-only-ness and validation (``bounds<>``,
``one_of<>``); ``__map_<name>`` blocks hold the parameters declared once per value of a
string-array parameter (``constraints.<joint>.goal``). ``node_schema`` reads it into a
``Schema`` of ``ParameterSpec``; ``declare``, ``read`` and ``check`` are the one way the nodes
declare and validate them; config/*.yaml and docs/parameters.md are generated from the same
schemas (``rb_dynamics.ros.parameter_docs``).

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

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
)
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile

from .rclpy_private import declare_qos_override_parameters, parameter_overrides

__all__ = ["ParameterMap", "ParameterSpec", "Schema", "SchemaError", "check", "declare",
           "node_schema", "qos_with_overrides", "read", "schema_file"]

# the schema types (generate_parameter_library's names): ROS type, Python type of a value
_TYPES = {
    "bool": (ParameterType.PARAMETER_BOOL, bool),
    "int": (ParameterType.PARAMETER_INTEGER, int),
    "double": (ParameterType.PARAMETER_DOUBLE, float),
    "string": (ParameterType.PARAMETER_STRING, str),
    "double_array": (ParameterType.PARAMETER_DOUBLE_ARRAY, float),
    "string_array": (ParameterType.PARAMETER_STRING_ARRAY, str),
}
# the keys of a parameter's block in a schema file
_KEYS = {"type", "default_value", "description", "read_only", "validation", "declared_by",
         "commented_in_config"}
_MAP_KEY = "__map_"


class SchemaError(ValueError):
    """A schema file that does not say what a parameter is (names the parameter)."""


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
    declared_by_rclpy: bool = False  # a parameter rclpy declares (listed to be documented)
    commented_in_config: bool = False  # the generated parameter file shows it commented out

    @property
    def is_array(self) -> bool:
        return self.type.endswith("_array")

    def constraints_text(self) -> str:
        """The allowed values in words ("" when only the type limits them)."""
        if self.choices:
            return "one of: " + ", ".join(repr(c) if c == "" else c for c in self.choices)
        if self.low is not None:
            return f"in [{self.low:g}, {self.high:g}]"
        return ""

    def descriptor(self) -> ParameterDescriptor:
        """What ``ros2 param describe`` shows; rclpy enforces its type, range and
        read-only-ness (``check`` the rest)."""
        kind, _ = _TYPES[self.type]
        descriptor = ParameterDescriptor(description=self.description,
                                         additional_constraints=self.constraints_text(),
                                         read_only=self.read_only)
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


@dataclass(frozen=True)
class ParameterMap:
    """Parameters declared once per key: ``<prefix>.<key>.<entry>`` for every value ``key`` of
    the string-array parameter ``keys_from`` (a ``__map_<keys_from>`` block of the schema)."""

    prefix: str
    keys_from: str
    entries: dict[str, ParameterSpec]

    def specs(self, key: str) -> dict[str, ParameterSpec]:
        """The parameters of ``key``, by full name."""
        return {f"{self.prefix}.{key}.{entry}": spec for entry, spec in self.entries.items()}

    def spec_of(self, name: str) -> ParameterSpec | None:
        """The entry a full parameter name is one of (None: not of this map)."""
        head, _, entry = name.rpartition(".")
        if head.startswith(f"{self.prefix}.") and len(head) > len(self.prefix) + 1:
            return self.entries.get(entry)
        return None


@dataclass(frozen=True)
class Schema:
    """A node's parameters: the node's default name (the file's one top-level key),
    ``parameters`` by full name in the file's order, and the ``maps`` of per-key parameters by
    their prefix."""

    node_name: str
    parameters: dict[str, ParameterSpec]
    maps: dict[str, ParameterMap] = field(default_factory=dict)

    def select(self, *patterns: str, exclude: tuple[str, ...] = ()) -> dict[str, ParameterSpec]:
        """The parameters the node declares itself whose names match one of ``patterns`` (all
        when none is given) and none of ``exclude``: a full name, or ``prefix.*``."""
        def matches(name: str, pattern: str) -> bool:
            return name.startswith(pattern[:-1]) if pattern.endswith(".*") else name == pattern

        return {name: spec for name, spec in self.parameters.items()
                if not spec.declared_by_rclpy
                and (not patterns or any(matches(name, p) for p in patterns))
                and not any(matches(name, p) for p in exclude)}

    @classmethod
    def from_file(cls, path: Path) -> Schema:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(tree, dict) or len(tree) != 1:
            raise SchemaError(f"{path}: one block, named after the node, expected")
        (node_name, body), = tree.items()
        parameters: dict[str, ParameterSpec] = {}
        maps: dict[str, ParameterMap] = {}
        for name, block in _leaves(body, ""):
            if _MAP_KEY in name:
                prefix, _, rest = name.partition(f".{_MAP_KEY}")
                keys_from, _, entry = rest.rpartition(".")
                owner = maps.setdefault(prefix, ParameterMap(prefix, keys_from, {}))
                if owner.keys_from != keys_from:
                    raise SchemaError(f"{name}: a second map under {prefix}")
                owner.entries[entry] = _spec(name, block)
            else:
                parameters[name] = _spec(name, block)
        for prefix, owner in maps.items():
            source = parameters.get(owner.keys_from)
            if source is None or source.type != "string_array":
                raise SchemaError(f"{prefix}.{_MAP_KEY}{owner.keys_from}: {owner.keys_from} is "
                                  "not a string_array parameter of this schema")
        return cls(node_name, parameters, maps)


def _leaves(block: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, dict]]:
    """(full name, block) of every parameter under ``block``; a map's entries are named
    ``<prefix>.__map_<keys_from>.<entry>``."""
    for key, value in block.items():
        name = f"{prefix}{key}"
        if not isinstance(value, dict):
            raise SchemaError(f"{name}: a block expected, got {value!r}")
        if "type" in value and not isinstance(value["type"], dict):
            yield name, value
        else:
            yield from _leaves(value, f"{name}.")


def _spec(name: str, block: Mapping[str, Any]) -> ParameterSpec:
    """The spec of one parameter block; SchemaError naming it when it is not one."""
    unknown = set(block) - _KEYS
    if unknown or block.get("type") not in _TYPES or "default_value" not in block \
            or not isinstance(block.get("description"), str):
        raise SchemaError(f"{name}: needs type (one of {list(_TYPES)}), default_value and "
                          f"description, and no other key than {sorted(_KEYS)}; got "
                          f"{sorted(block)}")
    validation = dict(block.get("validation") or {})
    low = high = None
    if "bounds<>" in validation:
        low, high = (float(x) for x in validation.pop("bounds<>"))
    choices = tuple(validation.pop("one_of<>", [()])[0])
    if validation:
        raise SchemaError(f"{name}: validation {sorted(validation)} is not known "
                          "(bounds<>, one_of<>)")
    spec = ParameterSpec(
        block["type"], block["default_value"], " ".join(block["description"].split()),
        read_only=bool(block.get("read_only", False)), low=low, high=high, choices=choices,
        declared_by_rclpy=block.get("declared_by") == "rclpy",
        commented_in_config=bool(block.get("commented_in_config", False)))
    try:
        checked = check(name, spec, spec.default)
    except ValueError as exc:
        raise SchemaError(f"the default of {exc}") from None
    # rclpy types a parameter by its default: 0 would make a double an integer
    if not all(type(a) is type(b) for a, b in zip(_items(checked), _items(spec.default))):
        raise SchemaError(f"{name}: the default {spec.default!r} is not written as a "
                          f"{spec.type} (0.0, not 0)")
    return spec


def _items(value: Any) -> list:
    return list(value) if isinstance(value, list) else [value]


def schema_file(package: str) -> Path:
    """The schema file of the node in ``rb_dynamics.ros.<package>`` (``control_node``,
    ``simulator_node``)."""
    return Path(__file__).resolve().parent / package / "parameters.yaml"


@functools.cache
def node_schema(package: str) -> Schema:
    """The schema of the node in ``rb_dynamics.ros.<package>``, read once."""
    return Schema.from_file(schema_file(package))


def declare(node: Node, specs: Mapping[str, ParameterSpec]) -> None:
    """Declare every parameter of ``specs`` on ``node`` (overrides from files apply)."""
    overrides = parameter_overrides(node)
    for name, spec in specs.items():
        override = overrides.get(name)
        untyped = override is not None and override.type_ == Parameter.Type.NOT_SET
        node.declare_parameter(name, spec.default, spec.descriptor(), ignore_override=untyped)


def check(name: str, spec: ParameterSpec, value: Any) -> Any:
    """``value`` as the spec's type, or a ValueError saying what is allowed."""
    _, element = _TYPES[spec.type]
    if spec.is_array:
        what = spec.type.removesuffix("_array")
        if not isinstance(value, (list, tuple)) and not hasattr(value, "tolist"):
            raise ValueError(f"{name} must be a list of {what}s, got {value!r}")
        items = list(value)
        if element is float and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                    for x in items):
            items = [float(x) for x in items]
        if not all(isinstance(x, element) for x in items):
            raise ValueError(f"{name} must be a list of {what}s, got {value!r}")
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
    declare_qos_override_parameters(node, topic, qos)
    return qos
