"""The rb_dynamics ROS 2 node: gravity compensation and computed torque for a real arm.

A thin layer over ``rb_dynamics.control.JointController`` (the control law, name mapping,
staleness and clamping) and ``rb_dynamics.services.DynamicsServices`` (dynamics services).

Model source, first found wins: the ``robot_description`` parameter; the ``/robot_description``
topic (std_msgs/String, transient local, as robot_state_publisher publishes it; a new one
re-loads the model at run time, or is refused with the old model kept); the ``urdf_path``
parameter. With none the node waits and says so once.

Topics
    joint_states (sub, sensor_msgs/JointState)      mapped by name, any order, extras ignored
    ~/trajectory (sub, trajectory_msgs/JointTrajectory)  reference for computed torque
    ~/effort_commands (pub, std_msgs/Float64MultiArray)  efforts ordered by ``joints``;
                                                    remap to <effort controller>/commands
    /diagnostics (pub, diagnostic_msgs/DiagnosticArray)  about once a second
The first and third belong to the control loop: a companion node ``<name>_control_loop`` spun
on its own thread (see ``DynamicsNode.__init__``), with the names resolved by this node.
Services (rb_dynamics_interfaces): ~/inverse_dynamics, ~/forward_dynamics, ~/dynamics_terms,
~/simulate — see rb_dynamics/services.py; the latter two honour the constraints declared as
``constraints.*`` parameters (rb_dynamics/constraint_params.py).
Every parameter is listed, with its default, in ``config/rb_dynamics.yaml``.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import (
    FloatingPointRange,
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension, String
from trajectory_msgs.msg import JointTrajectory

from .constraint_params import ConstraintParameters
from .constraints import ConstraintSet
from .control import CONTROL_MODES, ControllerError, JointController, TrajectoryPoint
from .model import Model, URDFError, load_model
from .ros_runtime import SpinThread, take_queued
from .services import DynamicsServices

NODE_NAME = "rb_dynamics"
WARN_PERIOD_S = 2.0
# /diagnostics keys of the running totals, so that a monitor can account for every state
TOTALS_KEYS = {"received": "states received (total)", "superseded": "states superseded (total)",
               "commands": "commands (total)", "stamp": "newest state stamp (ns)"}
STATE_AGE_P99_KEY = "state age at command p99 (ms)"


def read_totals(status: DiagnosticStatus) -> dict[str, float] | None:
    """This node's running totals (and the period's state-age p99, NaN when none) from one of
    its diagnostic statuses; None for any other status."""
    values = {kv.key: kv.value for kv in status.values}
    if TOTALS_KEYS["received"] not in values:
        return None
    totals: dict[str, float] = {name: int(values[key]) for name, key in TOTALS_KEYS.items()}
    totals["age_p99_ms"] = float(values.get(STATE_AGE_P99_KEY, "nan"))
    return totals
MODE_NAMES = {"gravity_compensation": "gravity", "computed_torque": "computed_torque"}
assert set(MODE_NAMES.values()) == set(CONTROL_MODES)


def _descriptor(text: str, type_: int, read_only: bool = False, low: float | None = None,
                high: float | None = None) -> ParameterDescriptor:
    descriptor = ParameterDescriptor(description=text, type=type_, read_only=read_only)
    if low is not None:
        descriptor.floating_point_range = [FloatingPointRange(from_value=low, to_value=high)]
    return descriptor


PARAMETERS: dict[str, tuple[Any, ParameterDescriptor]] = {
    "robot_description": ("", _descriptor(
        "URDF XML; wins over the /robot_description topic and urdf_path",
        ParameterType.PARAMETER_STRING, read_only=True)),
    "urdf_path": ("", _descriptor(
        "URDF file used when no description is given as parameter or topic",
        ParameterType.PARAMETER_STRING, read_only=True)),
    "floating_base": (False, _descriptor(
        "the URDF root is a free-flyer (legged robots, humanoids): the services take base "
        "coordinates by the root joint's name; no effort commands (joint_states carry no base "
        "pose)", ParameterType.PARAMETER_BOOL, read_only=True)),
    "joints": (Parameter.Type.STRING_ARRAY, _descriptor(
        "joints of ~/effort_commands, in order (default: the URDF's actuated joints)",
        ParameterType.PARAMETER_STRING_ARRAY, read_only=True)),
    "mode": ("gravity_compensation", _descriptor(
        "gravity_compensation or computed_torque", ParameterType.PARAMETER_STRING)),
    "kp": ([100.0], _descriptor(
        "position gains (1/s²), one per joint or one for all",
        ParameterType.PARAMETER_DOUBLE_ARRAY)),
    "kd": ([20.0], _descriptor(
        "velocity gains (1/s), one per joint or one for all",
        ParameterType.PARAMETER_DOUBLE_ARRAY)),
    "friction_compensation": (False, _descriptor(
        "add the URDF <dynamics> damping·q̇ + friction·tanh(q̇/ε)", ParameterType.PARAMETER_BOOL)),
    "effort_scale": (1.0, _descriptor(
        "commands are clamped to effort_scale × the URDF effort limit",
        ParameterType.PARAMETER_DOUBLE, low=0.0, high=1.0)),
    "state_timeout": (0.1, _descriptor(
        "seconds after which a joint state is stale: publishing stops",
        ParameterType.PARAMETER_DOUBLE, low=0.001, high=10.0)),
    "max_publish_rate": (0.0, _descriptor(
        "0: publish on every joint state; > 0: at most this many commands per second",
        ParameterType.PARAMETER_DOUBLE, low=0.0, high=100000.0)),
    "joint_states_qos": ("reliable", _descriptor(
        "reliable, or best_effort for drivers that publish with sensor-data QoS",
        ParameterType.PARAMETER_STRING, read_only=True)),
}


@dataclass
class Statistics:
    """What the diagnostics report, reset every period."""

    states: int = 0
    skipped: int = 0  # older states superseded by a newer one before they were handled
    commands: int = 0
    compute_total: float = 0.0
    compute_max: float = 0.0
    clamped: set[str] = field(default_factory=set)
    last_problem: str = ""
    ages: int = 0  # how many of the node's state-age slots this period filled


class DynamicsNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        for name, (default, descriptor) in PARAMETERS.items():
            self.declare_parameter(name, default, descriptor)
        self.model: Model | None = None
        self.controller: JointController | None = None
        self.model_source = ""
        self.stats = Statistics()
        self._last_warning: dict[str, float] = {}
        self._last_publish = -math.inf
        self._command = Float64MultiArray()  # reused: the control path allocates little
        rate = self.get_parameter("max_publish_rate").value
        self._min_period = 1.0 / rate if rate > 0 else 0.0
        self._stale_reported = False
        self._hold_reported = False
        # since start, so that a monitor can account for every state: received = answered +
        # superseded + refused; the stamp tells which of its states these totals cover
        self.received_total = 0
        self.superseded_total = 0
        self.commands_total = 0
        self.newest_stamp_ns = 0
        # age of the state each command answers (stamp → publish), preallocated so that the
        # control path does not allocate; a period holds at most this many commands
        self._state_ages = np.zeros(4096)

        # The control loop (joint_states in, efforts out) lives in a small node of its own,
        # spun on its own thread: it neither pays for this node's services, parameter
        # services and timer on every executor pass, nor waits behind a long service call.
        # Its topic names are resolved here, so this node's remappings and namespace apply.
        # The lock keeps the controller consistent between the two threads.
        self._lock = threading.Lock()
        loop = Node(f"{self.get_name()}_control_loop", namespace=self.get_namespace(),
                    context=self.context, use_global_arguments=False,
                    start_parameter_services=False, enable_rosout=False)
        self.effort_pub = loop.create_publisher(
            Float64MultiArray, self.resolve_topic_name("~/effort_commands"), 100)
        self.state_sub = loop.create_subscription(
            JointState, self.resolve_topic_name("joint_states"), self._on_joint_state,
            self._joint_states_qos())
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(JointTrajectory, "~/trajectory", self._on_trajectory, 10)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE,
                             history=HistoryPolicy.KEEP_LAST)
        self.create_subscription(String, "/robot_description", self._on_description, latched)
        self.constraint_parameters = ConstraintParameters(self)
        self._constraints: tuple[Model, ConstraintSet | ValueError] | None = None
        self.dynamics_services = DynamicsServices(self, lambda: self.model, self._backend,
                                                  self._constraints_for)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.create_timer(1.0, self._publish_diagnostics)

        description = self.get_parameter("robot_description").value
        if description:
            self._install(description, "the robot_description parameter")
        else:
            # the topic, when someone publishes it, wins over the file
            path = self.get_parameter("urdf_path").value
            if path:
                self._install(path, f"urdf_path {path!r}")
            else:
                self.get_logger().info("waiting for a robot description (robot_description "
                                       "parameter, /robot_description topic or urdf_path)")
        self._control_loop = SpinThread(loop, "control loop")

    def destroy_node(self) -> None:
        self._control_loop.stop()
        super().destroy_node()

    # ------------------------------------------------------------------ model

    def _backend(self):
        return None if self.controller is None else self.controller.backend

    def _constraints_for(self, model: Model) -> ConstraintSet:
        """The declared constraints on ``model``, built once per model (ValueError: misfit)."""
        if self._constraints is None or self._constraints[0] is not model:
            try:
                built: ConstraintSet | ValueError = self.constraint_parameters.build(model)
            except ValueError as exc:
                built = exc
            self._constraints = (model, built)
        built = self._constraints[1]
        if isinstance(built, ValueError):
            raise ValueError(f"the declared constraints do not fit {model.name!r}: {built}")
        return built

    def _joint_states_qos(self) -> QoSProfile:
        choice = self.get_parameter("joint_states_qos").value
        if choice == "best_effort":
            return qos_profile_sensor_data
        if choice != "reliable":
            raise ValueError(f"joint_states_qos must be reliable or best_effort, not {choice!r}")
        # a deep queue rides out a scheduling hiccup at 1 kHz without dropping states
        return QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)

    def _build_controller(self, model: Model) -> JointController:
        joints = self._optional("joints") or None
        controller = JointController(
            model, joints, mode=MODE_NAMES[self._mode_parameter()],
            kp=self._gains(self.get_parameter("kp").value),
            kd=self._gains(self.get_parameter("kd").value),
            friction_compensation=self.get_parameter("friction_compensation").value,
            max_state_age=self.get_parameter("state_timeout").value)
        controller.effort_scale = self.get_parameter("effort_scale").value
        return controller

    def _install(self, source: str, origin: str) -> bool:
        """Load and swap in a new model; on any error keep the old one and say why."""
        floating = self.get_parameter("floating_base").value
        try:
            model = load_model(source, floating_base=floating)
            # a free base is not actuated and joint_states do not say where it is: no control
            controller = None if floating else self._build_controller(model)
        except (URDFError, ControllerError, ValueError) as exc:
            kept = f"; keeping {self.model.name!r}" if self.model is not None else ""
            self.get_logger().error(f"cannot use the description from {origin}: {exc}{kept}")
            self.stats.last_problem = f"description refused: {exc}"
            return False
        with self._lock:
            self.model, self.controller, self.model_source = model, controller, origin
        for warning in model.warnings:
            self.get_logger().warning(warning)
        try:
            self._constraints_for(model)
        except ValueError as exc:  # the control law does not use them; the services say so
            self.get_logger().error(f"{exc}; ~/forward_dynamics and ~/simulate will refuse")
        if controller is None:
            self.get_logger().info(f"{model.summary().splitlines()[0]} from {origin}; floating "
                                   "base: serving the dynamics services, publishing no efforts")
            return True
        self.get_logger().info(
            f"{model.summary().splitlines()[0]} from {origin}; mode "
            f"{self.get_parameter('mode').value}; efforts for {controller.joints} on "
            f"{self.resolve_topic_name('~/effort_commands')}")
        return True

    def _on_description(self, msg: String) -> None:
        if self.get_parameter("robot_description").value:
            return  # the parameter wins
        self._install(msg.data, "the /robot_description topic")

    # ------------------------------------------------------------------ parameters

    def _optional(self, name: str):
        """A parameter declared without a default: its value, or None when unset."""
        try:
            value = self.get_parameter(name).value
        except ParameterUninitializedException:
            return None
        return list(value) if value is not None else None

    def _mode_parameter(self, value: str | None = None) -> str:
        mode = self.get_parameter("mode").value if value is None else value
        if mode not in MODE_NAMES:
            raise ControllerError(f"mode must be one of {sorted(MODE_NAMES)}, not {mode!r}")
        return mode

    @staticmethod
    def _gains(values) -> float | list[float]:
        """A one-element gain list applies to every joint."""
        values = list(values)
        return values[0] if len(values) == 1 else values

    def _on_set_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        """Validate every change against a copy first: all apply, or none and the reason."""
        changes = {p.name: p.value for p in parameters}
        try:
            for name, value in changes.items():
                if name in ("effort_scale", "state_timeout", "max_publish_rate") and not (
                        isinstance(value, float) and math.isfinite(value)):
                    raise ValueError(f"{name} must be a finite number, got {value!r}")
            if "mode" in changes:
                self._mode_parameter(changes["mode"])
            c = self.controller
            kp = kd = None
            if c is not None and "kp" in changes:
                kp = c.gain_vector(self._gains(changes["kp"]), "kp")
            if c is not None and "kd" in changes:
                kd = c.gain_vector(self._gains(changes["kd"]), "kd")
            with self._lock:  # every change is valid: the control loop sees all or none
                if c is not None:
                    c.kp = c.kp if kp is None else kp
                    c.kd = c.kd if kd is None else kd
                    if "mode" in changes:
                        c.set_mode(MODE_NAMES[changes["mode"]])
                        self._hold_reported = False
                    if "friction_compensation" in changes:
                        c.friction_compensation = bool(changes["friction_compensation"])
                    if "state_timeout" in changes:
                        c.max_state_age = changes["state_timeout"]
                    if "effort_scale" in changes:
                        c.effort_scale = changes["effort_scale"]
                if "max_publish_rate" in changes:
                    rate = changes["max_publish_rate"]
                    self._min_period = 1.0 / rate if rate > 0 else 0.0
        except (ControllerError, ValueError, URDFError) as exc:
            self.get_logger().warning(f"parameter change refused: {exc}")
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ control

    def _warn(self, text: str, key: str | None = None) -> None:
        """A warning at most every WARN_PERIOD_S per kind (``key``, default: the text)."""
        key = key or text
        now = time.monotonic()
        if now - self._last_warning.get(key, -math.inf) >= WARN_PERIOD_S:
            self._last_warning[key] = now
            self.get_logger().warning(text)
        self.stats.last_problem = text

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_joint_state(self, msg: JointState) -> None:
        # Answer the newest state only: take what queued up behind this one directly (one
        # executor pass costs ~0.1 ms, a take ~2 µs); a command for an older state is stale
        # before it is sent, and answering a backlog would keep the loop a backlog behind.
        count = 1
        for newer in take_queued(self.state_sub):
            msg = newer
            count += 1
        with self._lock:
            self.stats.skipped += count - 1
            self.received_total += count
            self.superseded_total += count - 1
            self.newest_stamp_ns = (msg.header.stamp.sec * 1_000_000_000
                                    + msg.header.stamp.nanosec)
            self._control(msg)

    def _control(self, msg: JointState) -> None:
        controller = self.controller
        if controller is None:
            return
        now = self._now()
        if msg.header.stamp.sec < 0:
            # a clock before the epoch is a driver fault; its state cannot be trusted either
            self._warn(f"joint_states: negative stamp {msg.header.stamp.sec} s; not publishing",
                       "negative stamp")
            return
        try:
            controller.update_state(msg.name, msg.position, msg.velocity, now)
        except ControllerError as exc:
            self._warn(f"{exc}; not publishing")
            return
        self.stats.states += 1
        if now - self._last_publish < self._min_period:
            return
        started = time.perf_counter()
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        try:
            # the reference is sampled at the instant the state describes, when it is stamped
            out = controller.compute(now, stamp if stamp > 0.0 else now)
        except ControllerError as exc:
            self._warn(f"{exc}; not publishing", "compute")
            return
        if controller.mode == "computed_torque" and controller.trajectory is None \
                and not self._hold_reported:
            self.get_logger().info("computed torque: no reference yet, holding the measured "
                                   "position (gravity + PD)")
            self._hold_reported = True
        command = self._command
        if len(command.layout.dim) != 1 or command.layout.dim[0].size != len(out.effort):
            command.layout.dim = [MultiArrayDimension(label="joints", size=len(out.effort),
                                                      stride=len(out.effort))]
        command.data = out.effort.tolist()
        self.effort_pub.publish(command)
        elapsed = time.perf_counter() - started
        self._last_publish = now
        self._stale_reported = False
        self.stats.commands += 1
        self.commands_total += 1
        self.stats.compute_total += elapsed
        self.stats.compute_max = max(self.stats.compute_max, elapsed)
        if stamp > 0.0 and self.stats.ages < len(self._state_ages):
            self._state_ages[self.stats.ages] = now + elapsed - stamp
            self.stats.ages += 1
        if out.clamped:
            self.stats.clamped.update(out.clamped)
            self._warn(f"effort clamped to the limit on {out.clamped}", "clamp")

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        controller = self.controller
        if controller is None:
            why = "no model loaded yet" if self.model is None else "a floating-base model"
            self._warn(f"trajectory ignored: {why}", "trajectory")
            return
        if msg.header.stamp.sec < 0:
            self._warn(f"trajectory: negative header stamp {msg.header.stamp.sec} s; ignored",
                       "trajectory")
            return
        points = []
        for point in msg.points:
            t = point.time_from_start.sec + point.time_from_start.nanosec * 1e-9
            points.append(TrajectoryPoint(
                t, list(point.positions),
                list(point.velocities) if len(point.velocities) else None,
                list(point.accelerations) if len(point.accelerations) else None))
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        start = stamp if stamp > 0 else self._now()  # a zero stamp means "now" (as in ROS 2 JTC)
        try:
            with self._lock:
                controller.set_trajectory(list(msg.joint_names), points, start)
        except ControllerError as exc:
            self._warn(f"{exc}; ignored", "trajectory")
            return
        self._hold_reported = False

    # ------------------------------------------------------------------ diagnostics

    @staticmethod
    def _age_report(ages_s: np.ndarray) -> dict[str, str]:
        """State stamp → command publish, on this node's clock: transport in plus compute.
        Meaningful when the state's stamp and this node share a clock (one machine, or both
        on /clock)."""
        count = len(ages_s)
        if count == 0:
            return {}
        ages = 1e3 * ages_s
        return {"state age at command mean (ms)": f"{ages.mean():.4f}",
                STATE_AGE_P99_KEY: f"{np.percentile(ages, 99):.4f}",
                "state age at command max (ms)": f"{ages.max():.4f}",
                "state ages (count)": str(count)}

    def _publish_diagnostics(self) -> None:
        with self._lock:  # the control loop refills the slots once the period is swapped
            stats, self.stats = self.stats, Statistics()
            period_ages = self._state_ages[:stats.ages].copy()
        status = DiagnosticStatus(name=f"{NODE_NAME}: controller", hardware_id=NODE_NAME)
        values = {"model source": self.model_source or "none"}
        if self.model is None:
            status.level, status.message = DiagnosticStatus.WARN, "waiting for a robot description"
        elif self.controller is None:
            values["model"] = self.model.name
            status.level = DiagnosticStatus.OK
            status.message = "floating base: dynamics services only, no efforts published"
        else:
            c = self.controller
            age = c.state_age(self._now())
            values.update({
                "model": c.model.name, "mode": self.get_parameter("mode").value,
                "joint states per s": str(stats.states), "commands per s": str(stats.commands),
                "stale states skipped per s": str(stats.skipped),
                "state age (s)": f"{age:.4f}" if math.isfinite(age) else "never",
                "compute mean (ms)": f"{1e3 * stats.compute_total / max(stats.commands, 1):.4f}",
                "compute max (ms)": f"{1e3 * stats.compute_max:.4f}",
                "clamped joints": ", ".join(sorted(stats.clamped)) or "none",
                TOTALS_KEYS["received"]: str(self.received_total),
                TOTALS_KEYS["superseded"]: str(self.superseded_total),
                TOTALS_KEYS["commands"]: str(self.commands_total),
                TOTALS_KEYS["stamp"]: str(self.newest_stamp_ns),
                **self._age_report(period_ages),
            })
            if not math.isfinite(age):
                status.level, status.message = DiagnosticStatus.WARN, "no joint state received"
            elif age > c.max_state_age:
                status.level = DiagnosticStatus.ERROR
                status.message = f"joint state stale ({age:.2f} s): not publishing"
                if not self._stale_reported:
                    self.get_logger().error(status.message)
                    self._stale_reported = True
            elif stats.commands == 0:
                status.level = DiagnosticStatus.WARN
                status.message = stats.last_problem or "no command published"
            elif stats.clamped:
                status.level = DiagnosticStatus.WARN
                status.message = f"publishing; clamping {sorted(stats.clamped)}"
            else:
                status.level, status.message = DiagnosticStatus.OK, "publishing"
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diagnostics_pub.publish(array)


def main(args: list[str] | None = None) -> int:
    from .ros_runtime import run_node

    # The control loop thread waits for the GIL while a long service call (~/simulate) runs
    # Python on the main thread: switch every 0.5 ms rather than every 5 ms.
    sys.setswitchinterval(5e-4)
    return run_node(DynamicsNode, args)


if __name__ == "__main__":
    sys.exit(main())
