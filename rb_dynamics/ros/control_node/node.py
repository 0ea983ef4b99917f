# SPDX-License-Identifier: Apache-2.0
"""The rb_dynamics control node: gravity compensation, computed torque and impedance for a real
arm.

A thin layer over the engine: ``JointController`` (the control law, name mapping, staleness,
clamping), ``LiveDynamics`` (the one dynamics object the controller, the services and
``~/simulate`` share). ``ControlNode`` composes its parts and owns the lifecycle and the
run-time parameters:

- ``ControlLoop`` (control_loop.py): joint_states in, efforts out, on its own thread;
- ``ModelLoader`` (model_loader.py): the robot, from ``ModelSource`` (the
  ``robot_description`` parameter, the ``/robot_description`` topic, ``urdf_path``), loaded
  off the executor thread and swapped in whole;
- ``TrajectoryTopic`` (trajectory_topic.py): ``~/joint_trajectory``;
- ``TrajectoryAction`` (trajectory_action.py): ``~/follow_joint_trajectory``,
  ``~/controller_state``;
- ``DynamicsServices`` (dynamics_services.py), ``PayloadServices`` (payload_services.py),
  ``OverlayService`` (overlay_service.py: the dynamics overlay, with ``ModelLoader``);
- ``ControlStatus`` (status.py): /diagnostics;
- ``ContactMonitor`` (contact.py): the external efforts from the momentum observer,
  ``~/external_efforts``, ``~/external_wrench``, ``~/collision``, ``~/reset_collision``;
- ``CartesianMode`` (cartesian_mode.py): ``mode: cartesian_impedance``, ``~/target_pose``,
  ``~/cartesian/*``;
- the parameters, declared from ``parameters.yaml`` beside this module (the node's schema).

Topics
    joint_states (sub, sensor_msgs/JointState)      mapped by name, any order, extras ignored
    ~/joint_trajectory (sub, trajectory_msgs/JointTrajectory)  reference for computed torque
    ~/target_pose (sub, geometry_msgs/PoseStamped)  cartesian_impedance's target (cartesian_mode.py)
    ~/effort_commands (pub, std_msgs/Float64MultiArray)  efforts ordered by ``joints``;
                                                    remap to <effort controller>/commands
    ~/controller_state (pub, control_msgs/JointTrajectoryControllerState)
    ~/external_efforts (pub, sensor_msgs/JointState)  estimated external efforts (contact.py)
    ~/external_wrench (pub, geometry_msgs/WrenchStamped)  the wrench on contact.wrench_link
    ~/collision (pub, rb_dynamics_interfaces/Collision)  a collision detected
    /diagnostics (pub, diagnostic_msgs/DiagnosticArray)  about once a second
Services (rb_dynamics_interfaces): ~/inverse_dynamics, ~/forward_dynamics, ~/dynamics_terms,
~/simulate, ~/set_payload, ~/identify_payload, ~/trajectory_efforts, ~/set_dynamics_overlay
(the dynamics services answer for the robot with its overlay and its payload);
~/reset_collision (std_srvs/Trigger). Action:
~/follow_joint_trajectory (control_msgs/FollowJointTrajectory).

A managed (lifecycle) node: with ``autostart`` (the default) it configures and activates itself
at start; only an active node publishes efforts and takes trajectories and goals. The model,
the services and the joint-state bookkeeping work in every state. Every parameter is described in
``parameters.yaml`` beside this module, and listed with its default in ``config/rb_dynamics.yaml``
and docs/parameters.md (both generated from it).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Mapping
from typing import Any

from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

from rb_dynamics.control import (
    DRIVE_SETTINGS,
    ControllerError,
    DriveConventions,
    JointController,
)
from rb_dynamics.control.stability import MIN_STATE_PERIOD, active_gain_problem
from rb_dynamics.dynamics import LiveDynamics
from rb_dynamics.model import Model
from rb_dynamics.ros import parameters as ros_params
from rb_dynamics.ros.constraint_parameters import PREFIX
from rb_dynamics.ros.parameters import qos_with_overrides
from rb_dynamics.ros.runtime import ClockReader, ThrottledLogger, refuse_invalid_transitions

from .cartesian_mode import CARTESIAN_PARAMETERS, CartesianMode
from .contact import CONTACT_PARAMETERS, ContactMonitor
from .control_loop import ControlLoop
from .dynamics_services import DynamicsServices
from .law_parameters import (
    IMPEDANCE,
    LAW_PARAMETERS,
    apply_law_changes,
    check_command_hold,
    check_law_changes,
    check_plausible_gains,
    check_stable_gains,
    controller_options,
    impedance_gains,
)
from .model_loader import ModelLoader
from .overlay_service import OverlayService
from .payload_services import PAYLOAD_PARAMETERS, PayloadServices
from .status import ControlStatus
from .trajectory_action import TRAJECTORY_PARAMETERS, TrajectoryAction
from .trajectory_topic import TrajectoryTopic

SCHEMA = ros_params.node_schema("control_node")  # every parameter: parameters.yaml
NODE_NAME = SCHEMA.node_name
# the parameters this class declares; its parts declare the rest of the schema's
PARAMETERS = SCHEMA.select(exclude=(*TRAJECTORY_PARAMETERS, *PAYLOAD_PARAMETERS,
                                    *CONTACT_PARAMETERS, *CARTESIAN_PARAMETERS,
                                    f"{PREFIX}.*"))


class ControlNode(LifecycleNode):
    """The control node: composes the parts listed in the module docstring."""
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        ros_params.declare(self, PARAMETERS)
        settings = ros_params.read(self, PARAMETERS)  # a bad file: the node does not start
        check_law_changes(settings, None)  # the gains' values; their count with a model
        check_plausible_gains(settings.get)  # unstable at any state rate: not started
        check_command_hold(settings["max_publish_rate"], settings["state_timeout"])
        self.lifecycle_state = "unconfigured"
        self.warn = ThrottledLogger(self.get_logger())
        self.clock_reader = ClockReader(self)
        self.loop = ControlLoop(self, self._joint_states_qos(settings["joint_states_qos"]),
                                self.warn)
        self.loop.set_max_rate(settings["max_publish_rate"])
        self.loop.stop_command = settings["stop_command"]
        self.loop.drive_check.enabled = settings["drive.check_at_start"]
        self.model_loader = ModelLoader(self, self.loop, self._build_controller,
                                        self._installed, self.parameter_value)
        self.trajectory_action = TrajectoryAction(self, self.loop, self._state,
                                                  self._has_model)
        self.trajectory_topic = TrajectoryTopic(self, self.loop, self._state,
                                                lambda: self.model_loader.model)
        self.payload = PayloadServices(self, self.loop, lambda: self.model_loader.dynamics)
        self.overlay = OverlayService(self, self.model_loader)
        # an overlay swapped in is the same robot: the resting states recorded for payload
        # identification stay, and so does the payload's term (a payload moves no rotor)
        self.model_loader.overlay_changed = self.payload.samples.rebind
        self.dynamics_services = DynamicsServices(self, self.payload.dynamics,
                                                  self.model_loader.constraints_for)
        self.status = ControlStatus(self, self.loop, self.model_loader, self._state,
                                    lambda: {**self.overlay.diagnostic_values(),
                                             **self.payload.diagnostic_values()})
        self.contact = ContactMonitor(self, self.loop)
        self.cartesian = CartesianMode(self, self.loop, self._state)
        # name → value of every change accepted (under the loop's lock)
        self._accepted: dict[str, Any] = {}
        self.add_on_set_parameters_callback(self._on_set_parameters)
        refuse_invalid_transitions(self)
        self.model_loader.follow_sources()
        if settings["autostart"]:
            self.trigger_configure()
            self.trigger_activate()

    def destroy_node(self) -> None:
        self.model_loader.stop()
        self.trajectory_action.destroy()
        self.loop.stop()
        self.clock_reader.stop()
        super().destroy_node()

    def _state(self) -> str:
        return self.lifecycle_state

    def _has_model(self) -> bool:
        return self.model_loader.model is not None

    # ------------------------------------------------------------------ model

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
            return changes[name] if name in changes else self.parameter_value(name)

        if self.get_parameter("floating_base").value or not model.actuated_joint_names:
            return None
        joints = list(value("joints")) or None
        controller = JointController(model, joints, dynamics=dynamics,
                                     **controller_options(value))
        controller.set_gains(**impedance_gains(controller, value))
        # impedance's gains act on the inertia: checked once it is known (refused: retried)
        why = active_gain_problem(controller, MIN_STATE_PERIOD, "impedance")
        if why is not None:
            raise ControllerError(f"{why}, the shortest period a driver plausibly has: "
                                  "unstable at every state rate")
        controller.configure(effort_scale=value("effort_scale"), drive=DriveConventions(
            **{name: value(f"drive.{name}") for name in DRIVE_SETTINGS}))
        self.payload.attach(controller)
        self.cartesian.attach(controller)
        return controller

    def _installed(self, model: Model, controller: JointController | None) -> None:
        self.payload.installed(model)
        self.trajectory_action.controller_installed(controller, model.name)

    # ------------------------------------------------------------------ lifecycle

    def _transition(self, label: str, publishing: bool | None, text: str,
                    extra: Any = None) -> TransitionCallbackReturn:
        """One transition: the state reached, whether efforts are published, what is said.
        (rclpy turns an exception here into a silent ERROR: say it instead.)"""
        try:
            if extra is not None:
                extra()
            if publishing is True:
                self.loop.start_publishing()
            elif publishing is False:
                self.loop.stop_publishing(text)
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

    def _on_set_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        """The node's one check of a change (its parts register none): every part validates
        the whole change, with no side effect, before any sets it; then all set it under the
        loop's lock. A refused change changes nothing; the control loop sees all of an
        accepted one or none of it. (rclpy stores the values once this has returned.)"""
        changes = {p.name: p.value for p in parameters}
        # no model or overlay is swapped in while the change is checked against the
        # controller and set on it (a controller built meanwhile would have the values
        # before the change, and the change would go to the one it replaced)
        with self.model_loader.swap_lock:
            try:  # the law's first: its refusal is the one told when several parts refuse
                applies = [validate(changes) for validate in (
                    self._validate_law, self.cartesian.validate_parameters,
                    self.contact.validate_parameters,
                    self.trajectory_action.parameters.validate)]
            except ValueError as exc:
                self.get_logger().warning(f"parameter change refused: {exc}")
                return SetParametersResult(successful=False, reason=str(exc))
            with self.loop.lock:
                # set in reverse, the law's last: a description it retries (on the model
                # loader's thread) is built with every other part's new settings
                for apply in reversed(applies):
                    if apply is not None:
                        apply()
                self._accepted.update(changes)
        return SetParametersResult(successful=True)

    def parameter_value(self, name: str) -> Any:
        """A parameter's value as the node's parts must read it off the executor's thread:
        the last accepted change's (rclpy stores it only after ``_on_set_parameters``
        returns), else rclpy's."""
        if name in self._accepted:
            return self._accepted[name]
        return self.get_parameter(name).value

    def _validate_law(self, changes: Mapping[str, Any]) -> Callable[[], None] | None:
        """This class's parameters among ``changes`` (name → value: the control law's, the
        publish rate, the stop command) checked whole, with no side effect: ValueError naming
        a refused value; else what sets them (under the loop's lock; None: none is set)."""
        if not PARAMETERS.keys() & changes.keys():
            return None
        changes = {name: ros_params.check(name, PARAMETERS[name], value)
                   if name in PARAMETERS else value for name, value in changes.items()}

        def value(name: str) -> Any:
            return changes.get(name, self.get_parameter(name).value)

        c = self.loop.controller
        count = None if c is None else len(c.joints)
        gains = check_law_changes(changes, count)
        if {"kp", "kd", "ki"} & changes.keys():
            check_plausible_gains(value)
        if set(IMPEDANCE) & changes.keys():
            gains.update(impedance_gains(c, value))
        if c is not None:
            check_stable_gains(c, changes, gains, self.loop.stability.loop_period)
        if {"max_publish_rate", "state_timeout"} & changes.keys():
            check_command_hold(value("max_publish_rate"), value("state_timeout"))

        def apply() -> None:
            if c is not None and apply_law_changes(c, changes, gains):
                self.loop.reference_changed()
            if set(LAW_PARAMETERS) & changes.keys():
                self.loop.stability.recheck()
            self.loop.stop_command = changes.get("stop_command", self.loop.stop_command)
            if "max_publish_rate" in changes:
                self.loop.set_max_rate(changes["max_publish_rate"])
            if set(LAW_PARAMETERS) & changes.keys():
                self.model_loader.retry(changes)  # a description refused for its gains

        return apply


def main(args: list[str] | None = None) -> int:
    """``rb_dynamics_node``."""
    from rb_dynamics.ros.runtime import run_node

    # The control loop thread waits for the GIL while the main thread runs Python (a roll-out,
    # a model being built): switch every 0.5 ms rather than every 5 ms.
    sys.setswitchinterval(5e-4)
    return run_node(ControlNode, args, NODE_NAME)


if __name__ == "__main__":
    sys.exit(main())
