# SPDX-License-Identifier: Apache-2.0
"""Contact: the control node's estimate of the external efforts on the arm, collisions and the
reaction to them (docs/contact.md).

    ~/external_efforts  (pub, sensor_msgs/JointState)   estimated external efforts, effort field
    ~/external_wrench   (pub, geometry_msgs/WrenchStamped)  the wrench on ``contact.wrench_link``
                        that explains them: in that link's frame, about its origin
    ~/collision         (pub, rb_dynamics_interfaces/Collision)  one message per detection
    ~/reset_collision   (srv, std_srvs/Trigger)         clears a latched collision
    /diagnostics        one status "<node>: contact", about once a second

``ContactMonitor`` runs on the control loop's thread, with each joint state the controller took,
after its command is out (a ``ControlLoop`` state recorder): the momentum observer
(``control.MomentumObserver``, on the controller's dynamics and payload) and the detector
(``control.CollisionDetector``); when outputs are due (``contact.publish_rate``) it builds the
messages, estimates the wrench and publishes there too (reused messages): a hand-off to the main
executor would cost a pass over all the node's entities, more than the messages. A detection
publishes ``~/collision`` and, unless ``contact.reaction`` is ``none``, latches until
``~/reset_collision``: the reference is dropped and a goal being followed aborts ("Aborted:
collision on ..."), new trajectories and goals are refused, and the controller holds the
measured position (``hold``), gravity-compensates only (``compliant``: the controller's mode is
gravity compensation until the reset, which restores the ``mode`` parameter's) or stops
commanding (``stop``: the stop command goes out once, commands resume at the reset, holding
where the arm is). A joint state without efforts gives no estimate (said on /diagnostics; the
control goes on); one with NaN or inf efforts is skipped, and restarts the observer once (said,
counted on /diagnostics); restarts are logged throttled. Efforts a drive reports without gravity
or friction (``drive.effort_includes_*`` false) get them back from the model before the observer
reads them (``joint_efforts``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import WrenchStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from rb_dynamics.control import (
    Collision,
    CollisionDetector,
    ControllerError,
    JointController,
    MomentumObserver,
)
from rb_dynamics.dynamics import LinkWrench, default_payload_link, friction_effort
from rb_dynamics.ros import parameters as ros_params
from rb_dynamics.ros.diagnostics import status
from rb_dynamics.ros.runtime import ThrottledLogger
from rb_dynamics_interfaces.msg import Collision as CollisionMessage

from .contact_messages import collision_message, fill_efforts, fill_wrench, stamp_of
from .control_loop import ControlLoop

__all__ = ["CONTACT_PARAMETERS", "ContactMonitor"]

CONTACT_PARAMETERS = ros_params.node_schema("control_node").select("contact.*")


def joint_efforts(controller: JointController, names, efforts) -> np.ndarray:
    """A joint state's efforts (``names``, ``efforts``) over the model's coordinates as the
    joints' whole efforts: with the model's g(q) and friction f(q̇) at the controller's state
    added where the drive leaves them out (``DriveConventions.joint_effort``)."""
    reported = controller.state_reader.model_order(names, efforts)
    drive = controller.law.drive
    if drive.effort_includes_gravity and drive.effort_includes_friction:
        return reported
    friction = None if drive.effort_includes_friction \
        else friction_effort(controller.model, controller.v)
    return drive.joint_effort(reported, controller.law.dynamics.gravity(controller.q), friction)


DAY_NS = 86_400 * 1_000_000_000  # a stamp this far from the time origin moves it


@dataclasses.dataclass
class _Parts:
    """What the monitor built for one controller with one set of parameters."""

    controller: JointController
    observer: MomentumObserver
    detector: CollisionDetector
    wrench: LinkWrench | None
    wrench_problem: str
    restarts_seen: int = 0  # the observer's restarts and skipped states already counted
    skipped_seen: int = 0


@dataclasses.dataclass
class _Period:
    """What /diagnostics reports about one period (filled on the loop thread)."""

    estimates: int = 0
    largest: np.ndarray | None = None  # max |estimate| per coordinate of the model
    compute_total: float = 0.0
    compute_max: float = 0.0
    wrenches: int = 0
    condition: float = math.nan


def _per_joint(values: list[float], count: int, name: str) -> np.ndarray:
    """One value for every joint, or one per joint (``count``): an array of ``count``."""
    if len(values) not in (1, count):
        raise ControllerError(f"{name} needs 1 or {count} values (one per joint of `joints`), "
                              f"got {len(values)}")
    return np.resize(np.asarray(values, dtype=float), count)


class ContactMonitor:
    """The contact outputs of ``node`` (see the module docstring), fed by ``loop``."""

    def __init__(self, node: Node, loop: ControlLoop) -> None:
        self.node, self.loop, self.log = node, loop, node.get_logger()
        ros_params.declare(node, CONTACT_PARAMETERS)
        self.settings = ros_params.read(node, CONTACT_PARAMETERS)  # a bad file: no start
        # per state, from the loop's thread (skipped while nobody listens)
        self.efforts_pub = loop.publisher(JointState, "~/external_efforts")
        self.wrench_pub = loop.publisher(WrenchStamped, "~/external_wrench")
        self.collision_pub = node.create_publisher(CollisionMessage, "~/collision", 10)
        self.diagnostics_pub = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        node.create_service(Trigger, "~/reset_collision", self._on_reset)
        node.create_timer(1.0, self.publish_diagnostics)
        self._parts: _Parts | None = None
        self._last_q: np.ndarray | None = None  # the controller's last state seen
        self._origin_ns = -2 * DAY_NS
        self._last_output = -math.inf  # the stamp (s) of the last state whose outputs went out
        self._efforts_msg, self._wrench_msg = JointState(), WrenchStamped()  # reused
        self.problem = ""  # why there is no estimate now ("": there is)
        self.latched: Collision | None = None  # a detection in force (reaction ≠ none)
        self.reaction = ""  # the reaction in force while latched
        self._mode = ""  # the controller's mode before a compliant reaction
        self.detections = 0
        self.restarts_told = 0  # observer restarts, every observer's (total)
        self.skipped_states = 0  # joint states with NaN or inf efforts (total)
        self.warn = ThrottledLogger(self.log)
        self._period = _Period()
        loop.set_state_recorder(self._on_state, "contact")

    # ------------------------------------------------------------------ building

    def _build(self, controller: JointController, settings: dict) -> _Parts:
        """The observer, detector and wrench map for ``controller`` (ControllerError for values
        that do not fit its joints)."""
        model, joints, n = controller.model, controller.joints, len(controller.joints)
        # the coordinates no joint of `joints` names (uncommanded) take the largest gain
        gains = np.full(model.nv, max(settings["contact.gains"] or [1.0]))
        gains[controller.index] = _per_joint(settings["contact.gains"], n, "contact.gains")
        observer = MomentumObserver(controller.law.dynamics, gains,
                                    effort_timing=settings["contact.effort_timing"],
                                    max_gap=controller.max_state_age)
        detector = CollisionDetector(
            joints, controller.index,
            _per_joint(settings["contact.thresholds"], n, "contact.thresholds"),
            _per_joint(settings["contact.effort_uncertainty"] or [0.0], n,
                       "contact.effort_uncertainty"),
            settings["contact.uncertainty_factor"], latch=settings["contact.reaction"] != "none")
        detector.watch(observer)
        link = settings["contact.wrench_link"] or default_payload_link(model)
        try:
            return _Parts(controller, observer, detector, LinkWrench(model, link), "")
        except ValueError as exc:
            return _Parts(controller, observer, detector, None, f"contact.wrench_link: {exc}")

    def _current(self, controller: JointController) -> _Parts | None:
        parts = self._parts
        if parts is not None and parts.controller is controller \
                and parts.observer.dynamics is controller.law.dynamics:
            return parts  # (a new overlay swaps the controller's dynamics: built again)
        try:
            self._parts = parts = self._build(controller, self.settings)
        except ControllerError as exc:
            self.problem = f"no estimate: {exc}"
            return None
        if parts.wrench_problem:
            self.log.error(parts.wrench_problem)
        if self.latched is not None:  # a new model: the reaction in force goes on
            with self.loop.lock:
                self._enforce(controller)
        return parts

    # ------------------------------------------------------------------ the loop's thread

    def _on_state(self, msg: JointState, controller: JointController | None) -> None:
        """With each joint state, after its command is out (the loop's thread)."""
        if controller is None or not self.settings["contact.enabled"]:
            return
        q = controller.q
        if q is None or q is self._last_q:  # not taken (refused, or no model yet)
            return
        self._last_q = q
        started = time.perf_counter()
        parts = self._current(controller)
        if parts is None:
            return
        observer = parts.observer
        names, efforts = msg.name, msg.effort  # (each message field read is a Python call)
        if len(efforts) != len(names):
            if not self.problem.startswith("joint_states carry"):
                self.log.warning(f"joint_states carry {len(efforts)} efforts for "
                                 f"{len(names)} joints: no external effort estimate")
            self.problem = (f"joint_states carry {len(efforts)} efforts for {len(names)} "
                            "joints: no external effort estimate (the observer needs the "
                            "measured efforts); control goes on")
            observer.reset()
            return
        stamp = msg.header.stamp
        stamp_ns = stamp.sec * 1_000_000_000 + stamp.nanosec
        if stamp_ns <= 0:
            stamp_ns = self.node.get_clock().now().nanoseconds
        if abs(stamp_ns - self._origin_ns) > DAY_NS:
            self._origin_ns = stamp_ns
        observer.set_payload(controller.law.payload)
        updated = observer.update((stamp_ns - self._origin_ns) * 1e-9, q, controller.v,
                                  joint_efforts(controller, names, efforts))
        if observer.skipped != parts.skipped_seen:
            self.skipped_states += observer.skipped - parts.skipped_seen
            parts.skipped_seen = observer.skipped
            self.problem = ("joint_states carry NaN or inf efforts: such states are skipped, no "
                            "external effort estimate from them; control goes on")
        if observer.restarts != parts.restarts_seen:
            self.restarts_told += observer.restarts - parts.restarts_seen
            parts.restarts_seen = observer.restarts
            self.warn(observer.problem, "observer restarted")  # throttled: a flood says once
        if not updated:
            return
        self.problem = ""
        estimate = observer.estimate
        if self.latched is None and parts.detector.needed(observer.over):
            collision = parts.detector.check(stamp_ns * 1e-9, estimate)
            if collision is not None:
                self._collide(collision, controller, stamp_ns)
        elif self.reaction == "compliant" and controller.mode != "gravity_compensation":
            with self.loop.lock:  # the mode was set meanwhile: compliant until the reset
                self._enforce(controller)
        rate, t = self.settings["contact.publish_rate"], stamp_ns * 1e-9
        if rate <= 0.0 or not 0.0 <= t - self._last_output < 1.0 / rate:  # (or time went back)
            self._last_output = t
            self._publish(parts, stamp_ns, q, estimate)
        period = self._period
        period.estimates += 1
        elapsed = time.perf_counter() - started
        period.compute_total += elapsed
        period.compute_max = max(period.compute_max, elapsed)

    def _publish(self, parts: _Parts, stamp_ns: int, q: np.ndarray, estimate: np.ndarray
                 ) -> None:
        """~/external_efforts and ~/external_wrench of the state at ``q`` stamped ``stamp_ns``
        with the observer's ``estimate``, and the period's largest estimates (over the
        published states)."""
        controller, stamp = parts.controller, stamp_of(stamp_ns)
        period = self._period
        if period.largest is None or len(period.largest) != len(estimate):
            period.largest = np.zeros(len(estimate))
        np.maximum(period.largest, np.abs(estimate), out=period.largest)
        if self.efforts_pub.listened():
            fill_efforts(self._efforts_msg, stamp, controller.joints,
                         estimate[controller.index])
            self.efforts_pub.publish(self._efforts_msg)
        if parts.wrench is None:
            return
        wrench, condition = parts.wrench.estimate(
            q, estimate, self.settings["contact.min_condition"],
            self.settings["contact.wrench_model"] == "force")
        self._period.condition = condition
        if wrench is not None:
            if self.wrench_pub.listened():
                fill_wrench(self._wrench_msg, stamp, parts.wrench.link, wrench)
                self.wrench_pub.publish(self._wrench_msg)
            self._period.wrenches += 1

    def _collide(self, collision: Collision, controller: JointController, stamp_ns: int) -> None:
        """A detection: the event, the log and, unless ``none``, the reaction (latched)."""
        reaction = self.settings["contact.reaction"]
        self.detections += 1
        self.collision_pub.publish(collision_message(collision, stamp_of(stamp_ns), reaction))
        self.log.warning(f"{collision.describe()}: reaction {reaction}")
        if reaction == "none":
            return
        with self.loop.lock:
            self.latched, self.reaction, self._mode = collision, reaction, controller.mode
            self.loop.fault("collision", f"{collision.describe()} (reaction {reaction})",
                            controller)
            self._enforce(controller)

    def _enforce(self, controller: JointController) -> None:
        """The latched reaction on ``controller`` (under the loop's lock)."""
        controller.refuse_references(f"a collision is latched ({self.latched.describe()}, "
                                     f"reaction {self.reaction}): call ~/reset_collision first")
        controller.drop_trajectory()
        if self.reaction == "hold":
            controller.hold_measured()
            self.loop.holding_on_purpose()
        elif self.reaction == "compliant":
            if controller.mode != "gravity_compensation":
                self._mode = controller.mode
            controller.set_mode("gravity_compensation")
        elif self.reaction == "stop" and not self.loop.suspended:
            self.loop.suspended = f"collision: {self.latched.describe()}"
            self.loop.send_stop_command(self.loop.suspended)

    # ------------------------------------------------------------------ the executor

    def _on_reset(self, _request: Trigger.Request, response: Trigger.Response
                  ) -> Trigger.Response:
        with self.loop.lock:
            latched, reaction, self.latched, self.reaction = self.latched, self.reaction, None, ""
            controller = self.loop.controller
            if controller is not None:
                controller.refuse_references("")
                if reaction == "compliant":
                    controller.set_mode(self.node.get_parameter("mode").value)
                if reaction == "hold":
                    controller.hold_anew()  # where the arm is now
            if reaction == "stop":  # commands again, holding where the arm is
                self.loop.suspended = ""
                if controller is not None:
                    controller.hold()
            parts = self._parts
            if parts is not None:
                parts.detector.reset()
                parts.observer.reset()
        response.success = True
        response.message = ("no collision latched" if latched is None else
                            f"reset: {latched.describe()} (reaction {reaction}) cleared")
        self.log.info(f"~/reset_collision: {response.message}")
        return response

    def validate_parameters(self, changes: Mapping[str, Any]) -> Callable[[], None] | None:
        """contact.* among ``changes`` (name → value) checked and, for the current controller,
        built, with no side effect: ValueError naming a refused value; else what sets them
        (None: none is set). The next state uses them (the observer restarts)."""
        mine = {name: value for name, value in changes.items() if name in CONTACT_PARAMETERS}
        if not mine:
            return None
        settings = dict(self.settings)
        for name, value in mine.items():
            settings[name] = ros_params.check(name, CONTACT_PARAMETERS[name], value)
        controller = self.loop.controller
        if controller is not None:
            self._build(controller, settings)

        def apply() -> None:
            self.settings, self._parts = settings, None

        return apply

    def publish_diagnostics(self) -> None:
        """The status "<node>: contact" on /diagnostics."""
        with self.loop.lock:
            period, self._period = self._period, _Period()
        parts = self._parts
        mean = period.compute_total / max(period.estimates, 1)
        values = {"reaction": self.settings["contact.reaction"],
                  "effort timing": self.settings["contact.effort_timing"],
                  "collisions detected (total)": str(self.detections),
                  "observer restarts (total)": str(self.restarts_told),
                  "states with NaN or inf efforts (total)": str(self.skipped_states),
                  "estimates per s": str(period.estimates),
                  "compute mean (us)": f"{1e6 * mean:.1f}",
                  "compute max (us)": f"{1e6 * period.compute_max:.1f}"}
        if parts is not None:
            joints = parts.controller.joints
            values["thresholds"] = ", ".join(f"{j} {t:.3g}" for j, t in
                                             zip(joints, parts.detector.thresholds))
            if period.largest is not None and len(period.largest) == parts.controller.model.nv:
                values["max |external effort| (published)"] = ", ".join(
                    f"{j} {e:.3g}" for j, e in zip(joints,
                                                   period.largest[parts.controller.index]))
            values["wrench link"] = parts.wrench.link if parts.wrench else parts.wrench_problem
            values["wrenches published per s"] = str(period.wrenches)
            values["wrench condition (last)"] = f"{period.condition:.3g}"
        if parts is not None and parts.observer.problem:
            values["last observer restart"] = parts.observer.problem
        level, message = DiagnosticStatus.OK, "estimating external efforts"
        if not self.settings["contact.enabled"]:
            message = "disabled (contact.enabled false)"
        elif self.latched is not None:
            level = DiagnosticStatus.ERROR
            message = (f"collision latched: {self.latched.describe()}; reaction "
                       f"{self.reaction}; call ~/reset_collision")
        elif self.problem:
            level, message = DiagnosticStatus.WARN, self.problem
        elif parts is None or period.estimates == 0:
            level, message = DiagnosticStatus.WARN, "no estimate: no joint state taken"
        item = status(self.node.get_name(), level, message, values)
        # its own hardware_id: a monitor reading "the node's status" gets the controller's
        item.name = item.hardware_id = f"{self.node.get_name()}: contact"
        array = DiagnosticArray(status=[item])
        array.header.stamp = self.node.get_clock().now().to_msg()
        self.diagnostics_pub.publish(array)

