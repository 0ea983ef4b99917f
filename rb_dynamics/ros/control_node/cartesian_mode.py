# SPDX-License-Identifier: Apache-2.0
"""The control node's Cartesian impedance (``mode: cartesian_impedance``,
docs/cartesian_impedance.md): the ``cartesian.*`` parameters, the target topic, the state
topics and the status on /diagnostics.

    ~/target_pose       (sub, geometry_msgs/PoseStamped)  the pose to hold ``cartesian.link``
                        at, in any frame the model knows (header.frame_id: a link; '' = the
                        model's root); the held target moves to it at cartesian.max_linear_rate
                        and max_angular_rate
    ~/cartesian/pose    (pub, geometry_msgs/PoseStamped)  the link's pose (root frame)
    ~/cartesian/target  (pub, geometry_msgs/PoseStamped)  the target held (after the rate limit)
    ~/cartesian/error   (pub, geometry_msgs/TwistStamped)  the error e: linear = p_d − p (m),
                        angular = log(R_d Rᵀ) (rad, the rotation vector), root axes
    ~/cartesian/wrench  (pub, geometry_msgs/WrenchStamped)  the spring-damper wrench on the link
                        (root axes, about the link origin)
    /diagnostics        one status "<node>: cartesian", about once a second

``CartesianMode.attach`` gives a controller being built its ``CartesianImpedance``
(``control.cartesian``; the law's ``cartesian``). The law holds the link where it is when the
node activates, when the mode is switched to, after a collision's ``hold`` and when joint states
come back after going stale, as the joint modes hold the measured position. Targets are taken
only while the node is active in ``cartesian_impedance`` and no collision is latched. A change
of ``cartesian.*`` is validated whole (values, link, posture, and the gains against the sampled
loop's stability at the measured state period) before it applies, or refused naming why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from rclpy.node import Node

from rb_dynamics.control import (
    CartesianGains,
    CartesianImpedance,
    CartesianState,
    ControllerError,
    JointController,
)
from rb_dynamics.dynamics import default_payload_link, link_pose
from rb_dynamics.model import quat_to_matrix, rotation_log
from rb_dynamics.ros import parameters as ros_params
from rb_dynamics.ros.conversions import to_seconds
from rb_dynamics.ros.diagnostics import status

from .control_loop import ControlLoop

__all__ = ["CARTESIAN_PARAMETERS", "CartesianMode", "pose_from_message"]

CARTESIAN_PARAMETERS = ros_params.node_schema("control_node").select("cartesian.*")
MODE = "cartesian_impedance"


def pose_from_message(msg: PoseStamped) -> np.ndarray:
    """The 4×4 transform of ``msg.pose``; ControllerError for a value that is not finite or
    a quaternion of zero norm (any other norm is normalised)."""
    p, o = msg.pose.position, msg.pose.orientation
    values = np.array([p.x, p.y, p.z, o.x, o.y, o.z, o.w], dtype=float)
    if not np.isfinite(values).all():
        raise ControllerError(f"the pose is not finite: {values.tolist()}")
    norm = float(np.linalg.norm(values[3:]))
    if norm < 1e-9:
        raise ControllerError("the orientation quaternion has zero norm")
    T = np.eye(4)
    T[:3, :3] = quat_to_matrix(values[3:] / norm)
    T[:3, 3] = values[:3]
    return T


def _fill_pose(msg: PoseStamped, T: np.ndarray) -> None:
    """``msg.pose`` from a 4×4 transform (quaternion from the rotation vector)."""
    phi = rotation_log(T[:3, :3])
    angle = float(np.linalg.norm(phi))
    axis = phi / angle if angle > 0.0 else np.zeros(3)
    s = math.sin(0.5 * angle)
    o, p = msg.pose.orientation, msg.pose.position
    o.x, o.y, o.z, o.w = (float(x) for x in (*(s * axis), math.cos(0.5 * angle)))
    p.x, p.y, p.z = (float(x) for x in T[:3, 3])


class CartesianMode:
    """The Cartesian impedance's ROS side for ``node`` (module docstring), on ``loop``;
    ``lifecycle_state`` gives the node's state."""

    def __init__(self, node: Node, loop: ControlLoop, lifecycle_state: Callable[[], str]
                 ) -> None:
        self.node, self.loop, self.lifecycle_state = node, loop, lifecycle_state
        ros_params.declare(node, CARTESIAN_PARAMETERS)
        self.settings = ros_params.read(node, CARTESIAN_PARAMETERS)
        _gains(self.settings)  # a bad file: the node does not start
        self.problem = ""  # why the controller has no Cartesian law ("": it has one)
        self.targets = 0  # taken since start
        self._published: CartesianState | None = None
        node.create_subscription(PoseStamped, "~/target_pose", self._on_target, 10)
        # per state, from the loop's thread (skipped while nobody listens)
        self.pose_pub = loop.publisher(PoseStamped, "~/cartesian/pose")
        self.target_pub = loop.publisher(PoseStamped, "~/cartesian/target")
        self.error_pub = loop.publisher(TwistStamped, "~/cartesian/error")
        self.wrench_pub = loop.publisher(WrenchStamped, "~/cartesian/wrench")
        self.diagnostics_pub = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._last_output = -math.inf  # the stamp (s) of the state last published for
        # the state topics go out from the loop's thread, after the command: a timer on the main
        # node would cost a pass over all its entities at every tick, in every mode
        loop.set_state_recorder(self._on_state, "cartesian")
        node.create_timer(1.0, self.publish_diagnostics)

    # ------------------------------------------------------------------ building

    def _build(self, controller: JointController, settings: dict[str, Any]
               ) -> CartesianImpedance:
        """The law for ``controller`` with ``settings``; ControllerError naming what is
        wrong."""
        model = controller.model
        link = settings["cartesian.link"] or default_payload_link(model)
        posture = settings["cartesian.posture"]
        if len(posture) not in (0, model.nq):
            raise ControllerError(f"cartesian.posture needs {model.nq} values (one per joint "
                                  f"coordinate, model order: {model.joint_names}), got "
                                  f"{len(posture)}")
        return CartesianImpedance(
            controller.law.dynamics, link, _gains(settings), list(posture) or None,
            settings["cartesian.singular_value_threshold"],
            settings["cartesian.max_linear_rate"], settings["cartesian.max_angular_rate"])

    def attach(self, controller: JointController) -> None:
        """Give a controller about to be swapped in its Cartesian law (none, and said, when
        the settings do not fit its model)."""
        try:
            controller.set_cartesian(self._build(controller, self.settings))
            self.problem = ""
        except (ControllerError, ValueError) as exc:
            controller.set_cartesian(None)
            self.problem = f"no Cartesian impedance for {controller.model.name!r}: {exc}"
            self.node.get_logger().error(self.problem)

    # ------------------------------------------------------------------ the target

    def _on_target(self, msg: PoseStamped) -> None:
        controller = self.loop.controller
        state = self.lifecycle_state()
        try:
            if state != "active":
                raise ControllerError(f"the node is {state}")
            if controller is None or controller.law.cartesian is None:
                raise ControllerError(self.problem or "no model loaded yet")
            if controller.mode != MODE:
                raise ControllerError(f"the controller is in {controller.mode!r} mode; set "
                                      f"mode to {MODE}")
            if controller.refusing:
                raise ControllerError(controller.refusing)
            T = pose_from_message(msg)
            frame = msg.header.frame_id
            model = controller.model
            if frame and frame != model.root_link:
                if frame not in model.frames:
                    raise ControllerError(f"unknown frame {frame!r}: a link of the model, or "
                                          f"'' for its root {model.root_link!r}")
                if controller.q is None:
                    raise ControllerError(f"frame {frame!r} moves and no joint state has "
                                          "come yet")
                T = link_pose(model, controller.q, frame) @ T
            with self.loop.lock:
                if self.loop.controller is controller and controller.set_cartesian_target(T):
                    self.targets += 1
        except (ControllerError, ValueError) as exc:
            # throttled per reason (its first clause), not per value
            self.loop.problem(f"target_pose ignored: {exc}",
                              f"target_pose: {str(exc).split(':')[0]}")

    # ------------------------------------------------------------------ parameters

    def validate_parameters(self, changes: Mapping[str, Any]) -> Callable[[], None] | None:
        """cartesian.* among ``changes`` (name → value) checked whole, with no side effect:
        ValueError naming a refused value; else what sets them (under the loop's lock; None:
        none is set)."""
        mine = {name: value for name, value in changes.items() if name in CARTESIAN_PARAMETERS}
        if not mine:
            return None
        settings = dict(self.settings)
        for name, value in mine.items():
            settings[name] = ros_params.check(name, CARTESIAN_PARAMETERS[name], value)
        _gains(settings)
        controller = self.loop.controller
        candidate = None
        if controller is not None:
            candidate = self._build(controller, settings)
            q = controller.q if controller.q is not None \
                else controller.model.neutral_configuration()
            why = candidate.gain_problem(q, self.loop.stability.loop_period)
            if why is not None:
                raise ControllerError(why)

        def apply() -> None:
            self.settings = settings
            if controller is not None and self.loop.controller is controller:
                self._apply(controller, candidate)

        return apply

    def _apply(self, controller: JointController, candidate: CartesianImpedance) -> None:
        """The checked law's settings on the running one (same link: the target stays), or
        the candidate in its place (under the loop's lock)."""
        if controller.tune_cartesian(candidate):
            self.problem = ""
        self.loop.stability.recheck()

    # ------------------------------------------------------------------ outputs

    def _on_state(self, msg: Any, controller: JointController | None) -> None:
        """With each joint state, after its command is out (the loop's thread): the last
        evaluation on the state topics, at most ``cartesian.publish_rate`` times per second of
        the states' stamps (each evaluation once)."""
        if controller is None or controller.mode != MODE or controller.law.cartesian is None:
            return
        last = controller.law.cartesian.last
        t = to_seconds(msg.header.stamp)
        if last is None or last is self._published \
                or 0.0 <= t - self._last_output < 1.0 / self.settings["cartesian.publish_rate"]:
            return  # (a stamp that went back publishes)
        self._published, self._last_output = last, t
        self._publish_state(controller, last)

    def _publish_state(self, controller: JointController, last: CartesianState) -> None:
        """The evaluation ``last`` on the state topics."""
        stamp = self.node.get_clock().now().to_msg()
        frame = controller.model.root_link
        for publisher, T in ((self.pose_pub, last.pose), (self.target_pub, last.target)):
            if publisher.listened():
                msg = PoseStamped()
                msg.header.stamp, msg.header.frame_id = stamp, frame
                _fill_pose(msg, T)
                publisher.publish(msg)
        if self.error_pub.listened():
            error = TwistStamped()
            error.header.stamp, error.header.frame_id = stamp, frame
            t = error.twist
            t.linear.x, t.linear.y, t.linear.z = (float(x) for x in last.error[:3])
            t.angular.x, t.angular.y, t.angular.z = (float(x) for x in last.error[3:])
            self.error_pub.publish(error)
        if self.wrench_pub.listened():
            wrench = WrenchStamped()
            wrench.header.stamp, wrench.header.frame_id = stamp, frame
            w = wrench.wrench
            w.force.x, w.force.y, w.force.z = (float(x) for x in last.wrench[:3])
            w.torque.x, w.torque.y, w.torque.z = (float(x) for x in last.wrench[3:])
            self.wrench_pub.publish(wrench)

    def publish_diagnostics(self) -> None:
        """The status "<node>: cartesian" on /diagnostics: the link, how near a singularity
        it came over the period (and whether the Jacobian was damped), the error."""
        controller = self.loop.controller
        law = None if controller is None else controller.law.cartesian
        active = controller is not None and controller.mode == MODE
        values = {"targets taken (total)": str(self.targets)}
        level, message = DiagnosticStatus.OK, "not in cartesian_impedance"
        if law is None:
            level = DiagnosticStatus.ERROR if active else DiagnosticStatus.OK
            message = self.problem or "no model loaded yet"
        else:
            with self.loop.lock:
                smallest, damped = law.take_period()
            values.update({"link": law.link, "singular value threshold": f"{law.threshold:.3g}",
                           "smallest singular value (period)": f"{smallest:.4g}",
                           "evaluations damped (period)": str(damped)})
            last = law.last
            if last is not None:
                values["position error (m)"] = f"{np.linalg.norm(last.error[:3]):.4g}"
                values["rotation error (rad)"] = f"{np.linalg.norm(last.error[3:]):.4g}"
            if active:
                message = "holding the link at the target"
                if damped:
                    level = DiagnosticStatus.WARN
                    message = (f"near a singularity: smallest singular value {smallest:.3g} < "
                               f"{law.threshold:.3g}, damped least squares in {damped} "
                               "evaluations")
        array = DiagnosticArray()
        array.header.stamp = self.node.get_clock().now().to_msg()
        item = status(self.node.get_name(), level, message, values)
        # its own hardware_id, as the contact status: "the node's status" stays the controller's
        item.name = item.hardware_id = f"{self.node.get_name()}: cartesian"
        array.status = [item]
        self.diagnostics_pub.publish(array)


def _gains(settings: dict[str, Any]) -> CartesianGains:
    """The gains of ``settings`` (ControllerError naming a bad one)."""
    damping = settings["cartesian.damping"]
    posture_damping = settings["cartesian.posture_damping"]
    return CartesianGains(
        list(settings["cartesian.translational_stiffness"]),
        list(settings["cartesian.rotational_stiffness"]), settings["cartesian.frame"],
        list(damping) if len(damping) else None, settings["cartesian.damping_ratio"],
        list(settings["cartesian.posture_stiffness"]),
        list(posture_damping) if len(posture_damping) else None)
