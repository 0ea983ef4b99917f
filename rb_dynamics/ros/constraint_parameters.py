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
``constraints.*`` for its tolerances.) The parameters are described in the node's schema (the
``loop_constraints`` block of its ``parameters.yaml``: the common ones and a map of the
per-constraint keys); which keys a type takes is ``rb_dynamics.dynamics.CONSTRAINT_TYPES``. A
constraint's keys are declared once its type is known, each with a value ("" / [] = not
given), so that ``ros2 param dump`` lists them all. The parameters are read-only: the set is
built again (and checked) against every model the node loads.
"""

from __future__ import annotations

from typing import Any

from rclpy.node import Node

from rb_dynamics.dynamics import CONSTRAINT_TYPES, Baumgarte, ConstraintSet
from rb_dynamics.model import Model

from . import parameters as ros_params
from .parameters import Schema

__all__ = ["PREFIX", "ConstraintParameters"]

PREFIX = "loop_constraints"


class ConstraintParameters:
    """Declares ``loop_constraints.*`` on ``node`` and builds the set for a model.

    A spec that cannot even be read (an unknown type) is kept as the error it is, and
    ``build`` raises it for every model: the node decides what a misfit means for it.
    """

    def __init__(self, node: Node, schema: Schema) -> None:
        common = schema.select(f"{PREFIX}.*")
        self._keys = schema.maps[PREFIX]
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

    def _declare_constraint(self, node: Node, name: str) -> dict[str, Any]:
        specs = self._keys.specs(name)
        type_key = f"{PREFIX}.{name}.type"
        ros_params.declare(node, {type_key: specs[type_key]})
        kind = ros_params.check(type_key, specs[type_key], node.get_parameter(type_key).value)
        if kind not in CONSTRAINT_TYPES:
            raise ValueError(f"{type_key}: {kind!r} is not one of {sorted(CONSTRAINT_TYPES)}")
        required, optional = CONSTRAINT_TYPES[kind]
        keys = {f"{PREFIX}.{name}.{key}": specs[f"{PREFIX}.{name}.{key}"]
                for key in (*required, *optional)}
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
