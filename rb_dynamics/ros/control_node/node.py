# SPDX-License-Identifier: Apache-2.0
"""The rb_dynamics ROS 2 node: gravity compensation and computed torque for a real arm.

A thin layer over the engine: ``JointController`` (the control law, name mapping, staleness,
clamping), ``LiveDynamics`` (the one dynamics object the controller, the services and
``~/simulate`` share), ``DynamicsServices``. Its parts: ``ControlLoop`` (joint_states in,
efforts out, on its own thread), ``ModelSource`` (where the robot comes from: the
``robot_description`` parameter, the ``/robot_description`` topic, ``urdf_path``),
``diagnostics`` (what /diagnostics says), ``ros_params`` (the parameters, declared from
``parameters.yaml`` beside this module: the node's schema).

Topics
    joint_states (sub, sensor_msgs/JointState)      mapped by name, any order, extras ignored
    ~/trajectory (sub, trajectory_msgs/JointTrajectory)  reference for computed torque
    ~/effort_commands (pub, std_msgs/Float64MultiArray)  efforts ordered by ``joints``;
                                                    remap to <effort controller>/commands
    ~/controller_state (pub, control_msgs/JointTrajectoryControllerState)
    /diagnostics (pub, diagnostic_msgs/DiagnosticArray)  about once a second
Services (rb_dynamics_interfaces): ~/inverse_dynamics, ~/forward_dynamics, ~/dynamics_terms,
~/simulate — see rb_dynamics/services.py; ~/set_payload, ~/identify_payload,
~/trajectory_efforts — see rb_dynamics/payload_services.py (the dynamics services answer for
the robot with its payload). Action: ~/follow_joint_trajectory
(control_msgs/FollowJointTrajectory) — see rb_dynamics/trajectory_action.py.

A managed (lifecycle) node: with ``autostart`` (the default) it configures and activates itself
at start; only an active node publishes efforts and takes trajectories and goals. The model,
the services and the joint-state bookkeeping work in every state.

A description is loaded (and its controller built) off the executor thread: parsing a big
URDF never stalls the services, and the control loop goes on with the old model until the new
one is swapped in whole. Every parameter is described in ``parameters.yaml`` beside this
module, and listed with its default in ``config/rb_dynamics.yaml`` and docs/parameters.md
(both generated from it).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.serialization import deserialize_message
from trajectory_msgs.msg import JointTrajectory

from rb_dynamics.control.controller import (
    MAX_TRAJECTORY_POINTS,
    ControllerError,
    JointController,
    check_gains,
)
from rb_dynamics.dynamics import ConstraintSet, LiveDynamics
from rb_dynamics.model import Model, load_model
from rb_dynamics.ros import parameters as ros_params
from rb_dynamics.ros.constraint_parameters import PREFIX, ConstraintParameters
from rb_dynamics.ros.conversions import ConversionError, seconds, trajectory_points
from rb_dynamics.ros.diagnostics import controller_level, period_values, status
from rb_dynamics.ros.model_source import LatestOnly, ModelSource
from rb_dynamics.ros.parameters import qos_with_overrides
from rb_dynamics.ros.runtime import Warnings

from .control_loop import ControlLoop
from .dynamics_services import DynamicsServices
from .payload_services import PAYLOAD_PARAMETERS, PayloadServices
from .trajectory_action import TRAJECTORY_PARAMETERS, TrajectoryAction

SCHEMA = ros_params.node_schema("control_node")  # every parameter: parameters.yaml
NODE_NAME = SCHEMA.node_name
# the parameters this class declares; its parts declare the rest of the schema's
PARAMETERS = SCHEMA.select(exclude=(*TRAJECTORY_PARAMETERS, *PAYLOAD_PARAMETERS,
                                    f"{PREFIX}.*"))


class DynamicsNode(LifecycleNode):
    """The control node: composes the parts listed in the module docstring."""
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        ros_params.declare(self, PARAMETERS)
        settings = ros_params.read(self, PARAMETERS)  # a bad file: the node does not start
        check_gains(settings["kp"], "kp")
        check_gains(settings["kd"], "kd")
        self.model: Model | None = None
        self.dynamics: LiveDynamics | None = None
        self.model_source = ""
        self.refused = ""  # why the last description was refused, until one is taken
        self._retry: tuple[str, str] | None = None  # refused for its gains: tried again
        self._stale_reported = False
        self.warn = Warnings(self.get_logger())
        self.loop = ControlLoop(self, self._joint_states_qos(settings["joint_states_qos"]),
                                self.warn)
        self.loop.publishing = False  # until activated
        # a trajectory that arrives before the first joint state waits for it (a reference
        # publisher started with the driver must not lose its one message)
        self._early_trajectory: JointTrajectory | None = None
        self._first_state = self.create_guard_condition(self._start_early_trajectory)
        self.loop.first_state = self._first_state.trigger
        self.lifecycle_state = "unconfigured"
        self.trajectory_action = TrajectoryAction(self, self.loop,
                                                  lambda: self.lifecycle_state == "active")
        self._set_publish_rate(settings["max_publish_rate"])
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        # taken as bytes: an oversized message is refused before rclpy turns it into objects
        self.create_subscription(JointTrajectory, "~/trajectory", self._on_trajectory_bytes, 10,
                                 raw=True)
        self.loop_constraints = ConstraintParameters(self, SCHEMA)
        self._constraints: tuple[Model, ConstraintSet | ValueError] | None = None
        self.payload = PayloadServices(self, self.loop, lambda: self.dynamics)
        self.dynamics_services = DynamicsServices(self, self.payload.dynamics,
                                                  self._constraints_for)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.create_timer(1.0, self._publish_diagnostics)
        self._loader = LatestOnly(self._install, "model loader")
        self._running = False
        ModelSource(self, self._load, follow_topic=True, use_bundled=False)
        self._running = True
        if settings["autostart"]:
            self.trigger_configure()
            self.trigger_activate()

    def destroy_node(self) -> None:
        self._loader.stop()
        self.trajectory_action.destroy()
        self.loop.stop()
        super().destroy_node()

    # ------------------------------------------------------------------ model

    def _load(self, source: str, origin: str) -> None:
        """At start, load at once; later (a new description on the topic) off this thread."""
        if self._running:
            self._loader.submit(source, origin, {})
        else:
            self._install(source, origin, {})

    def _constraints_for(self, model: Model) -> ConstraintSet:
        """The declared constraints on ``model``, built once per model (ValueError: misfit)."""
        if self._constraints is None or self._constraints[0] is not model:
            try:
                built: ConstraintSet | ValueError = self.loop_constraints.build(model)
            except ValueError as exc:
                built = exc
            self._constraints = (model, built)
        built = self._constraints[1]
        if isinstance(built, ValueError):
            raise ValueError(f"the declared constraints do not fit {model.name!r}: {built}")
        return built

    def _joint_states_qos(self, choice: str) -> QoSProfile:
        """The subscription's QoS: qos_overrides./joint_states.subscription.* (history, depth,
        reliability) over the default, declared here: the companion node takes no parameters."""
        if choice == "best_effort":
            self.get_logger().warning(
                "joint_states_qos is deprecated: set qos_overrides."
                f"{self.resolve_topic_name('joint_states')}.subscription.reliability instead")
            qos = copy.copy(qos_profile_sensor_data)  # the overrides change it in place
        else:  # a deep queue rides out a scheduling hiccup at 1 kHz without dropping states
            qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        return qos_with_overrides(self, "joint_states", qos)

    def _build_controller(self, model: Model, dynamics: LiveDynamics,
                          changes: dict[str, Any]) -> JointController | None:
        """The controller for ``model`` with the current parameters (``changes``: values being
        set right now), or None when there is nothing to command."""
        def value(name: str) -> Any:
            return changes.get(name, self.get_parameter(name).value)

        if self.get_parameter("floating_base").value or not model.actuated_joint_names:
            return None
        joints = list(value("joints")) or None
        controller = JointController(
            model, joints, mode=value("mode"), kp=list(value("kp")), kd=list(value("kd")),
            friction_compensation=value("friction_compensation"),
            max_state_age=value("state_timeout"), dynamics=dynamics)
        controller.effort_scale = value("effort_scale")
        self.payload.attach(controller)
        return controller

    def _install(self, source: str, origin: str, changes: dict[str, Any]) -> None:
        """Load and swap in a new model; on any error keep the old one and say why."""
        try:
            model = load_model(source, floating_base=self.get_parameter("floating_base").value,
                               gravity=self.get_parameter("gravity").value)
            dynamics = LiveDynamics(model, self.get_parameter("dynamics_kernels").value,
                                    on_switch=self._on_kernels)
            controller = self._build_controller(model, dynamics, changes)
        except Exception as exc:  # noqa: BLE001 - a description must never end the node
            kept = f"; keeping {self.model.name!r}" if self.model is not None else ""
            self.refused = f"description from {origin} refused: {exc}"
            self.get_logger().error(f"cannot use the description from {origin}: {exc}{kept}")
            self._retry = (source, origin) if isinstance(exc, ControllerError) else None
            return
        with self.loop.lock:
            self.model, self.dynamics, self.model_source = model, dynamics, origin
            self.loop.controller = controller
            self.loop.hold_reported = False
        self.payload.installed(model)
        self.refused, self._retry = "", None
        self.trajectory_action.controller_installed(controller)
        self._report_install(model, controller, origin)

    def _report_install(self, model: Model, controller: JointController | None,
                        origin: str) -> None:
        for warning in model.warnings:
            self.get_logger().warning(warning)
        try:
            self._constraints_for(model)
        except ValueError as exc:  # the control law does not use them; the services say so
            self.get_logger().error(f"{exc}; ~/forward_dynamics and ~/simulate will refuse")
        headline = f"{model.summary().splitlines()[0]} from {origin}"
        if controller is None:
            why = ("floating base" if self.get_parameter("floating_base").value
                   else "no actuated joints")
            self.get_logger().info(f"{headline}; {why}: serving the dynamics services, "
                                   "publishing no efforts")
            return
        self.get_logger().info(
            f"{headline}; mode {controller.mode}; efforts for {controller.joints} on "
            f"{self.resolve_topic_name('~/effort_commands')}")

    def _on_kernels(self, kind: str) -> None:
        self.get_logger().info(f"dynamics kernels: {kind}")

    # ------------------------------------------------------------------ lifecycle

    def _transition(self, label: str, publishing: bool | None, text: str,
                    extra: Any = None) -> TransitionCallbackReturn:
        """One transition: the state reached, whether efforts are published, what is said.
        (rclpy turns an exception here into a silent ERROR: say it instead.)"""
        try:
            if extra is not None:
                extra()
            if publishing is not None:
                with self.loop.lock:
                    self.loop.publishing = publishing
                    controller = self.loop.controller
                    if publishing and controller is not None:
                        # as ros2_controllers on activation: start by holding where the arm is
                        controller.trajectory, controller.hold_position = None, None
                        self.loop.hold_reported = False
            self.lifecycle_state = label
            self.get_logger().info(text)
            return TransitionCallbackReturn.SUCCESS
        except Exception as exc:  # noqa: BLE001
            self.get_logger().error(f"lifecycle transition to {label} failed: {exc!r}")
            return TransitionCallbackReturn.ERROR

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("inactive", False, "configured (inactive): publishing no "
                                "efforts until activated")

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("active", True, "active: publishing efforts on "
                                f"{self.resolve_topic_name('~/effort_commands')}")

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition(
            "inactive", False, "deactivated (inactive): publishing no efforts",
            lambda: self.trajectory_action.abort_active(
                "Current goal cancelled during deactivate transition."))

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("unconfigured", False, "cleaned up (unconfigured)")

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition(
            "finalized", False, "shut down (finalized): publishing no efforts",
            lambda: self.trajectory_action.abort_active("the node is shutting down"))

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("unconfigured", False, "error: publishing no efforts")


    # ------------------------------------------------------------------ parameters

    def _set_publish_rate(self, rate: float) -> None:
        self.loop.min_period = 1.0 / rate if rate > 0 else 0.0

    def _on_set_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        """Validate every change first: all apply, or none and the reason."""
        changes = {p.name: p.value for p in parameters}
        try:
            for name, value in changes.items():
                if name in PARAMETERS:
                    changes[name] = ros_params.check(name, PARAMETERS[name], value)
            c = self.loop.controller
            count = None if c is None else len(c.joints)
            kp = check_gains(changes["kp"], "kp", count) if "kp" in changes else None
            kd = check_gains(changes["kd"], "kd", count) if "kd" in changes else None
        except ValueError as exc:
            self.get_logger().warning(f"parameter change refused: {exc}")
            return SetParametersResult(successful=False, reason=str(exc))
        with self.loop.lock:  # every change is valid: the control loop sees all or none
            if c is not None:
                c.set_gains(kp, kd)
                if "mode" in changes:
                    c.set_mode(changes["mode"])
                    self.loop.hold_reported = False
                c.law.friction_compensation = changes.get("friction_compensation",
                                                          c.law.friction_compensation)
                c.max_state_age = changes.get("state_timeout", c.max_state_age)
                c.effort_scale = changes.get("effort_scale", c.effort_scale)
            if "max_publish_rate" in changes:
                self._set_publish_rate(changes["max_publish_rate"])
        if self._retry is not None and {"kp", "kd", "mode"} & set(changes):
            self._loader.submit(*self._retry, changes)  # refused for its gains: try again
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ trajectories

    def _on_trajectory_bytes(self, data: bytes) -> None:
        nv = self.model.nv if self.model is not None else 0
        # four arrays of nv doubles and a duration per point, plus the names and the header
        limit = 65536 + MAX_TRAJECTORY_POINTS * (8 + 4 * (4 + 8 * nv))
        if len(data) > limit:
            self.loop.problem(f"trajectory: {len(data)} bytes, more than {MAX_TRAJECTORY_POINTS} "
                              "points can take; ignored unread", "trajectory")
            return
        self._on_trajectory(deserialize_message(data, JointTrajectory))

    def _start_early_trajectory(self) -> None:
        msg, self._early_trajectory = self._early_trajectory, None
        if msg is not None:
            self._on_trajectory(msg)

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        controller = self.loop.controller
        if self.lifecycle_state != "active":
            self.loop.problem(f"trajectory ignored: the node is {self.lifecycle_state}",
                              "trajectory")
            return
        if controller is None:
            why = "no model loaded yet" if self.model is None else "nothing to command"
            self.loop.problem(f"trajectory ignored: {why}", "trajectory")
            return
        if msg.header.stamp.sec < 0:
            self.loop.problem(f"trajectory: negative header stamp {msg.header.stamp.sec} s; "
                              "ignored", "trajectory")
            return
        if controller.q is None:
            self._early_trajectory = msg
            self.get_logger().info("trajectory received before the first joint state: it "
                                   "starts with that state")
            return
        now = self.loop._now()
        stamp = seconds(msg.header.stamp)
        try:
            # built outside the lock: the control loop keeps running meanwhile
            sampler = controller.prepare_trajectory(
                list(msg.joint_names), trajectory_points(msg.points), stamp if stamp > 0
                else now, now)  # a zero stamp means "now" (as in ros2_controllers)
        except (ControllerError, ConversionError) as exc:
            self.loop.problem(f"{exc}; ignored", "trajectory")
            return
        with self.loop.lock:
            if self.loop.controller is controller:
                controller.trajectory = sampler
                self.loop.hold_reported = False

    # ------------------------------------------------------------------ diagnostics

    def _publish_diagnostics(self) -> None:
        stats, ages = self.loop.take_period()
        values = {"model source": self.model_source or "none",
                  "dynamics kernels": self.dynamics.kind if self.dynamics else "none",
                  **self.payload.diagnostic_values()}
        controller = self.loop.controller
        if self.model is None:
            level = DiagnosticStatus.WARN
            message = self.refused or "waiting for a robot description"
        elif controller is None:
            values["model"] = self.model.name
            level = DiagnosticStatus.OK
            message = "dynamics services only, no efforts published (" + (
                "floating base)" if self.get_parameter("floating_base").value
                else "no actuated joints)")
        else:
            age = controller.state_age(self.loop._now())
            values.update({"model": self.model.name, "mode": controller.mode,
                           "lifecycle state": self.lifecycle_state,
                           **period_values(stats, self.loop.totals, ages, age)})
            level, message = controller_level(stats, age, controller.max_state_age)
            if self.lifecycle_state != "active":
                level, message = DiagnosticStatus.OK, (f"{self.lifecycle_state}: publishing no "
                                                       "efforts")
            if level == DiagnosticStatus.ERROR and not self._stale_reported:
                self.get_logger().error(message)
            self._stale_reported = level == DiagnosticStatus.ERROR
        if self.refused and self.model is not None:
            values["last description refused"] = self.refused
        array = DiagnosticArray(status=[status(self.get_name(), level, message, values)])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diagnostics_pub.publish(array)


def main(args: list[str] | None = None) -> int:
    """``rb_dynamics_node``."""
    from rb_dynamics.ros.runtime import run_node

    # The control loop thread waits for the GIL while the main thread runs Python (a roll-out,
    # a model being built): switch every 0.5 ms rather than every 5 ms.
    sys.setswitchinterval(5e-4)
    return run_node(DynamicsNode, args)


if __name__ == "__main__":
    sys.exit(main())
