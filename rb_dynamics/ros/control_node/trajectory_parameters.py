# SPDX-License-Identifier: Apache-2.0
"""The parameters of ``~/follow_joint_trajectory`` and ``~/controller_state``, with
ros2_controllers' joint_trajectory_controller names where it has them (described in the node's
schema, docs/parameters.md): declared on the control node, checked when set, and the per-joint
``constraints.<joint>.trajectory|goal`` declared once a model names its joints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rclpy.node import Node
from rclpy.parameter import Parameter

from rb_dynamics.ros import parameters as ros_params

from .goal_tracking import Tolerances

__all__ = ["JOINT_TOLERANCES", "TRAJECTORY_PARAMETERS", "TrajectoryParameters"]

SCHEMA = ros_params.node_schema("control_node")
TRAJECTORY_PARAMETERS = SCHEMA.select(
    "constraints.goal_time", "constraints.stopped_velocity_tolerance",
    "allow_nonzero_velocity_at_trajectory_end", "action_monitor_rate", "state_publish_rate",
    "action_result_timeout")
JOINT_TOLERANCES = SCHEMA.maps["constraints"]  # constraints.<joint>.trajectory|goal


class TrajectoryParameters:
    """Declares the parameters on ``node``; ``settings`` holds their checked values, kept
    current by the changes the node's parameter callback applies (``validate``)."""

    def __init__(self, node: Node) -> None:
        self.node, self.log = node, node.get_logger()
        ros_params.declare(node, TRAJECTORY_PARAMETERS)
        self.settings = ros_params.read(node, TRAJECTORY_PARAMETERS)

    def declare_joint_constraints(self, joints: list[str]) -> None:
        """``constraints.<joint>.trajectory|goal`` for ``joints`` not declared yet (on the
        executor)."""
        for joint in joints:
            for name, spec in JOINT_TOLERANCES.specs(joint).items():
                if self.node.has_parameter(name):
                    continue
                try:
                    self.node.declare_parameter(name, spec.default, spec.descriptor())
                except Exception as exc:  # noqa: BLE001 - a bad value from a file
                    self.log.error(f"{name}: {exc}; using {spec.default} (not checked)")
                    self.node.declare_parameter(name, spec.default, spec.descriptor(),
                                                ignore_override=True)

    def validate(self, changes: Mapping[str, Any]) -> Callable[[], None] | None:
        """This part's parameters among ``changes`` (name → value) checked, with no side
        effect: ValueError naming a refused value; else what sets them (None: none of
        them is set)."""
        checked = {}
        for name, value in changes.items():
            if name in TRAJECTORY_PARAMETERS:
                checked[name] = ros_params.check(name, TRAJECTORY_PARAMETERS[name], value)
            elif (spec := JOINT_TOLERANCES.spec_of(name)) is not None:
                ros_params.check(name, spec, value)  # read from the node when a goal comes
        if not checked:
            return None
        return lambda: self.settings.update(checked)  # in place: the action holds it

    def default_tolerances(self, joints: list[str]) -> Tolerances:
        """The tolerances of ``joints`` from the parameters (a goal's entries go over them)."""
        def value(name: str) -> float:
            return float(self.node.get_parameter_or(name, Parameter(name, value=0.0)).value)

        return Tolerances.defaults(
            [value(f"constraints.{j}.trajectory") for j in joints],
            [value(f"constraints.{j}.goal") for j in joints],
            self.settings["constraints.stopped_velocity_tolerance"],
            self.settings["constraints.goal_time"])
