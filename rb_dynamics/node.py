"""The rb_dynamics ROS 2 node: a thin layer over ``rb_dynamics.dynamics``.

Parameters
    robot_description (string, '')   URDF XML; wins over urdf_path when set.
    urdf_path (string, '')           URDF file; '' means the bundled default_arm.urdf.
    joints (string[], unset)         joints of ~/effort_commands, in this order
                                     (default: every joint of the model, in tree order).
    publish_rate (double, 0.0)       0: publish once per joint_states message;
                                     > 0: publish at this rate from the latest joint state.

Topics
    joint_states (sub, sensor_msgs/JointState)    mapped by name; extra names are ignored;
                                                  a message missing joints is skipped (warning).
    ~/effort_commands (pub, std_msgs/Float64MultiArray)
                                                  gravity torques g(q) ordered as ``joints``,
                                                  clamped to the URDF effort limits.

Services
    ~/inverse_dynamics (rb_dynamics_interfaces/InverseDynamics)   τ = RNEA(q, v, a), g(q)
    ~/forward_dynamics (rb_dynamics_interfaces/ForwardDynamics)   a = ABA(q, v, τ, wrenches)

Bad input never raises out of a callback: a service answers success=false with a message
naming the field, a topic callback logs a throttled warning and skips the message.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension

from rb_dynamics_interfaces.srv import ForwardDynamics, InverseDynamics

from . import DEFAULT_URDF
from .conversions import (
    ConversionError,
    clamp_efforts,
    missing_joints,
    named_state,
    values_by_name,
    wrenches_by_link,
)
from .dynamics import aba, gravity, rnea
from .model import Model, load_model

NODE_NAME = "rb_dynamics"
WARN_PERIOD_S = 2.0


def load_robot(robot_description: str, urdf_path: str) -> Model:
    """The model from URDF text, else a URDF file, else the bundled default arm."""
    model = load_model(robot_description or urdf_path or str(DEFAULT_URDF))
    unsupported = [n for n, k in zip(model.joint_names, model.joint_kinds)
                   if k not in ("revolute", "prismatic")]
    if model.floating_base or unsupported:
        raise ValueError(
            f"{model.name!r}: this node handles fixed-base robots whose joints are revolute, "
            f"continuous or prismatic; unsupported joints: {unsupported}")
    return model


class DynamicsNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self.declare_parameter("robot_description", "")
        self.declare_parameter("urdf_path", "")
        self.declare_parameter("joints", Parameter.Type.STRING_ARRAY)
        self.declare_parameter("publish_rate", 0.0)

        self.model = load_robot(self.get_parameter("robot_description").value,
                                self.get_parameter("urdf_path").value)
        self.joints = self._command_joints()
        # where each joint of self.joints sits in the model's v (= q, fixed base, 1-DoF joints)
        self.command_index = np.array(
            [self.model.joint_v_index[self.model.joint_index(n)] for n in self.joints], dtype=int)
        self.effort_limit = self.model.effort_limit[self.command_index]
        self._last_warning: dict[str, float] = {}
        self._latest_q: np.ndarray | None = None
        unlimited = [n for n, lim in zip(self.joints, self.effort_limit) if math.isinf(lim)]
        if unlimited:
            self.get_logger().warning(f"no effort limit in the URDF for {unlimited}: not clamped")

        self.effort_pub = self.create_publisher(Float64MultiArray, "~/effort_commands", 10)
        self.create_subscription(JointState, "joint_states", self._on_joint_state, 10)
        self.create_service(InverseDynamics, "~/inverse_dynamics", self._on_inverse_dynamics)
        self.create_service(ForwardDynamics, "~/forward_dynamics", self._on_forward_dynamics)

        rate = float(self.get_parameter("publish_rate").value)
        if not (math.isfinite(rate) and rate >= 0.0):
            raise ValueError(f"publish_rate must be >= 0 (0: on every joint_states), got {rate}")
        self.publish_rate = rate
        if rate > 0.0:
            self.create_timer(1.0 / rate, self._on_timer)

        self.get_logger().info(
            f"{self.model.summary().splitlines()[0]}; gravity torques for {self.joints} on "
            f"{self.resolve_topic_name('~/effort_commands')}")

    # ------------------------------------------------------------------ set-up

    def _command_joints(self) -> list[str]:
        try:
            joints = list(self.get_parameter("joints").value)
        except ParameterUninitializedException:
            joints = []
        if not joints:
            return list(self.model.joint_names)
        unknown = [n for n in joints if n not in self.model.joint_names]
        if unknown or len(set(joints)) != len(joints):
            raise ValueError(f"parameter joints: unknown or repeated joints "
                             f"{unknown or joints}; the model's joints are "
                             f"{self.model.joint_names}")
        return joints

    def _warn(self, text: str, key: str | None = None) -> None:
        """A warning at most every WARN_PERIOD_S per kind (``key``, default: the text)."""
        key = key or text
        now = time.monotonic()
        if now - self._last_warning.get(key, -math.inf) >= WARN_PERIOD_S:
            self._last_warning[key] = now
            self.get_logger().warning(text)

    # ------------------------------------------------------------------ topics

    def _on_joint_state(self, msg: JointState) -> None:
        missing = missing_joints(self.model.joint_names, msg.name)
        if missing:
            self._warn(f"joint_states: missing joints {missing}; not publishing", "missing")
            return
        try:
            q = values_by_name(self.model.joint_names, list(msg.name), list(msg.position),
                               "position")
        except ConversionError as exc:
            self._warn(f"joint_states: {exc}; ignored", "bad joint_states")
            return
        self._latest_q = q
        if self.publish_rate == 0.0:
            self._publish_gravity(q)

    def _on_timer(self) -> None:
        if self._latest_q is not None:
            self._publish_gravity(self._latest_q)

    def _publish_gravity(self, q: np.ndarray) -> None:
        tau = gravity(self.model, q)[self.command_index]
        clamped, clipped = clamp_efforts(tau, self.effort_limit)
        if clipped.any():
            names = [n for n, c in zip(self.joints, clipped) if c]
            self._warn(f"gravity torque clamped to the URDF effort limits on {names}", "clamp")
        msg = Float64MultiArray()
        msg.layout.dim = [MultiArrayDimension(label="joints", size=len(self.joints),
                                              stride=len(self.joints))]
        msg.data = clamped.tolist()
        self.effort_pub.publish(msg)

    # ------------------------------------------------------------------ services

    def _answer(self, name: str, response: Any, compute: Callable[[], None]) -> Any:
        """Run ``compute`` (which fills ``response``); turn any error into success=false."""
        try:
            compute()
            response.success, response.message = True, ""
        except (ValueError, KeyError) as exc:  # ConversionError, URDF/dynamics argument errors
            response.success, response.message = False, str(exc).strip("'\"")
        except Exception as exc:  # noqa: BLE001 - a service must answer, never crash the node
            self.get_logger().error(f"{name}: internal error: {exc!r}")
            response.success, response.message = False, f"internal error: {exc!r}"
        return response

    def _request_order(self, names: list[str]) -> np.ndarray:
        return np.array([self.model.joint_v_index[self.model.joint_index(n)] for n in names],
                        dtype=int)

    def _on_inverse_dynamics(self, request: Any, response: Any) -> Any:
        def compute() -> None:
            q, v, a = named_state(self.model.joint_names, request,
                                  ("positions", "velocities", "accelerations"))
            order = self._request_order(list(request.joint_names))
            response.joint_names = list(request.joint_names)
            response.efforts = rnea(self.model, q, v, a)[order].tolist()
            response.gravity = gravity(self.model, q)[order].tolist()

        return self._answer("inverse_dynamics", response, compute)

    def _on_forward_dynamics(self, request: Any, response: Any) -> Any:
        def compute() -> None:
            q, v, tau = named_state(self.model.joint_names, request,
                                    ("positions", "velocities", "efforts"))
            f_ext = wrenches_by_link(list(request.wrench_links), list(request.wrenches),
                                     known_links=list(self.model.frames))
            order = self._request_order(list(request.joint_names))
            response.joint_names = list(request.joint_names)
            response.accelerations = aba(self.model, q, v, tau, f_ext or None)[order].tolist()

        return self._answer("forward_dynamics", response, compute)


def main(args: list[str] | None = None) -> int:
    from .ros_runtime import run_node

    return run_node(DynamicsNode, args)


if __name__ == "__main__":
    sys.exit(main())
