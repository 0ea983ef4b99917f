# SPDX-License-Identifier: Apache-2.0
"""The parameters of ``~/follow_joint_trajectory`` and ``~/controller_state``, with
ros2_controllers' joint_trajectory_controller names where it has them (described in the node's
schema, docs/parameters.md): declared on the control node, checked when set, and the per-joint
``constraints.<joint>.trajectory|goal`` declared once a model names its joints.
"""

from __future__ import annotations

from rcl_interfaces.msg import SetParametersResult
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
    current as they are set."""

    def __init__(self, node: Node) -> None:
        self.node, self.log = node, node.get_logger()
        ros_params.declare(node, TRAJECTORY_PARAMETERS)
        self.settings = ros_params.read(node, TRAJECTORY_PARAMETERS)
        node.add_on_set_parameters_callback(self._on_set_parameters)

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

    def _on_set_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        try:
            for p in parameters:
                if p.name in TRAJECTORY_PARAMETERS:
                    self.settings[p.name] = ros_params.check(
                        p.name, TRAJECTORY_PARAMETERS[p.name], p.value)
                elif (spec := JOINT_TOLERANCES.spec_of(p.name)) is not None:
                    ros_params.check(p.name, spec, p.value)
        except ValueError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def default_tolerances(self, joints: list[str]) -> Tolerances:
        """The tolerances of ``joints`` from the parameters (a goal's entries go over them)."""
        def value(name: str) -> float:
            return float(self.node.get_parameter_or(name, Parameter(name, value=0.0)).value)

        return Tolerances.defaults(
            [value(f"constraints.{j}.trajectory") for j in joints],
            [value(f"constraints.{j}.goal") for j in joints],
            self.settings["constraints.stopped_velocity_tolerance"],
            self.settings["constraints.goal_time"])
