# SPDX-License-Identifier: Apache-2.0
"""Constraints declared as ROS parameters (the YAML of a node), turned into a ConstraintSet.

    loop_constraints:
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

(``loop_constraints``, not ``constraints``: ros2_controllers' trajectory controller owns
``constraints.*`` for its tolerances.) Keys per type are in
``rb_dynamics.constraints.CONSTRAINT_TYPES``; a constraint's keys are declared once its type
is known, each with a value ("" / [] = not given), so that ``ros2 param dump`` lists them all.
The parameters are read-only: the set is built again (and checked) against every model the
node loads.
"""

from __future__ import annotations

from typing import Any

from rclpy.node import Node

from rb_dynamics.dynamics import CONSTRAINT_TYPES, Baumgarte, ConstraintSet
from rb_dynamics.model import Model

from . import parameters as ros_params
from .parameters import ParameterSpec

__all__ = ["PREFIX", "ConstraintParameters"]

PREFIX = "loop_constraints"
_VECTOR_KEYS = ("point", "point_a", "point_b", "target")
_NUMBER_KEYS = {"ratio": 1.0, "offset": 0.0}


def _key_spec(name: str, key: str) -> ParameterSpec:
    text = f"constraint {name!r}: {key}"
    if key in _VECTOR_KEYS:
        return ParameterSpec("double[]", [], text + " (3 numbers; [] = default)", read_only=True)
    if key in _NUMBER_KEYS:
        return ParameterSpec("double", _NUMBER_KEYS[key], text, read_only=True)
    return ParameterSpec("string", "", text, read_only=True)


class ConstraintParameters:
    """Declares ``loop_constraints.*`` on ``node`` and builds the set for a model.

    A spec that cannot even be read (an unknown type) is kept as the error it is, and
    ``build`` raises it for every model: the node decides what a misfit means for it.
    """

    def __init__(self, node: Node) -> None:
        common = {
            f"{PREFIX}.names": ParameterSpec(
                "string[]", [], "names of the declared constraints (loop_constraints.<name>.type,"
                " ...); [] = none", read_only=True),
            f"{PREFIX}.solver": ParameterSpec(
                "string", "udwadia_kalaba", "constraint solver", read_only=True,
                choices=("udwadia_kalaba", "rosenberg")),
            f"{PREFIX}.baumgarte_alpha": ParameterSpec(
                "double", 10.0, "1/s: drift damping, b gets −2α φ̇", read_only=True),
            f"{PREFIX}.baumgarte_beta": ParameterSpec(
                "double", 10.0, "1/s: drift stiffness, b gets −β² φ", read_only=True),
        }
        ros_params.declare(node, common)
        self.problem: ValueError | None = None
        self.specs: dict[str, dict[str, Any]] = {}
        try:
            settings = ros_params.read(node, common)
            self.solver = settings[f"{PREFIX}.solver"]
            self.gains = Baumgarte(settings[f"{PREFIX}.baumgarte_alpha"],
                                   settings[f"{PREFIX}.baumgarte_beta"])
            for name in settings[f"{PREFIX}.names"]:
                self.specs[name] = self._declare_constraint(node, name)
        except ValueError as exc:
            self.problem = exc

    @staticmethod
    def _declare_constraint(node: Node, name: str) -> dict[str, Any]:
        type_key = f"{PREFIX}.{name}.type"
        ros_params.declare(node, {type_key: ParameterSpec(
            "string", "", f"constraint {name!r}: its type", read_only=True,
            choices=("", *CONSTRAINT_TYPES))})
        kind = ros_params.check(type_key, ParameterSpec("string", "", ""),
                                node.get_parameter(type_key).value)
        if kind not in CONSTRAINT_TYPES:
            raise ValueError(f"{type_key}: {kind!r} is not one of {sorted(CONSTRAINT_TYPES)}")
        required, optional = CONSTRAINT_TYPES[kind]
        keys = {f"{PREFIX}.{name}.{key}": _key_spec(name, key) for key in (*required, *optional)}
        ros_params.declare(node, keys)
        spec: dict[str, Any] = {"type": kind}
        for full, value in ros_params.read(node, keys).items():
            if value not in ("", []):
                spec[full.rsplit(".", 1)[1]] = value
        return spec

    def build(self, model: Model) -> ConstraintSet:
        """The declared constraints on ``model``; ValueError naming the parameter if wrong."""
        if self.problem is not None:
            raise self.problem
        return ConstraintSet.from_specs(model, self.specs, self.solver, self.gains,
                                        prefix=PREFIX)
