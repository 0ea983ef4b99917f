"""Topic-driven simulator: integrates the URDF's dynamics and talks like a robot driver.

Subscribes ``~/commands`` (std_msgs/Float64MultiArray, efforts ordered by ``joints``) and
``~/joint_commands`` (sensor_msgs/JointState, efforts by name); publishes ``joint_states``
(position, velocity, applied effort). Services ``~/reset`` (std_srvs/Trigger: back to the
initial state), ``~/set_state`` (rb_dynamics_interfaces/SetState: a given state) and
``~/pause`` (std_srvs/SetBool). Time: the wall clock (times ``real_time_factor``); one step per
command (``lockstep``); or, with ``use_sim_time``, an external ``/clock``: every clock message
advances the model to that instant. Optionally publishes ``/clock`` so other nodes can run on
sim time. Constraints declared as ``loop_constraints.*`` parameters (loop closures, fixed
points, welds, joint couplings: rb_dynamics/constraint_params.py) are honoured at every step.
The robot: the ``robot_description`` parameter, else ``urdf_path``, else the bundled arm (see
rb_dynamics/model_source.py). Run-time parameters: ``real_time_factor``, ``command_timeout``;
the others are read-only.
``~/set_payload`` (rb_dynamics_interfaces/SetPayload) puts a payload on the simulated robot
(the state kept); ``effort_noise`` adds a torque sensor's noise to the published efforts.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool, Trigger

from rb_dynamics_interfaces.srv import SetState

from . import ros_params
from .backend import LiveDynamics
from .constraint_params import ConstraintParameters
from .model import Model, load_model
from .model_source import MODEL_SOURCE_PARAMETERS, ModelSource
from .payload_services import SimulatorPayload
from .ros_params import ParameterSpec
from .ros_runtime import Warnings, take_queued
from .simulation import INTEGRATORS, Simulator

PARAMETERS: dict[str, ParameterSpec] = {
    **MODEL_SOURCE_PARAMETERS,
    "joints": ParameterSpec("string[]", [], "order of ~/commands and joint_states ([] = the "
                            "URDF's actuated joints)", read_only=True),
    "time_step": ParameterSpec("double", 0.001, "s, integration step", read_only=True,
                               low=1e-6, high=0.1),
    "integrator": ParameterSpec("string", "semi_implicit_euler", "integrator", read_only=True,
                                choices=INTEGRATORS),
    "publish_rate": ParameterSpec("double", 500.0, "Hz of joint_states (and of the physics "
                                  "catch-up)", read_only=True, low=0.1, high=10000.0),
    "real_time_factor": ParameterSpec("double", 1.0, "simulated seconds per wall second",
                                      low=1e-3, high=1000.0),
    "gravity": ParameterSpec("double[]", [0.0, 0.0, -9.81], "m/s², in the root frame",
                             read_only=True),
    "initial_positions": ParameterSpec("double[]", [], "one per joint ([] = zeros)",
                                       read_only=True),
    "damping": ParameterSpec("double[]", [], "per joint, N·m·s/rad ([] = URDF <dynamics>)",
                             read_only=True),
    "friction": ParameterSpec("double[]", [], "per joint, N·m ([] = URDF <dynamics>)",
                              read_only=True),
    "effort_noise": ParameterSpec("double", 0.0, "N·m or N: standard deviation of Gaussian "
                                  "noise added to the efforts published on joint_states (a "
                                  "torque sensor's; the applied efforts stay exact)",
                                  read_only=True, low=0.0, high=1e3),
    "command_timeout": ParameterSpec("double", 0.5, "s (simulated): older commands fall back "
                                     "to zero effort", low=0.0, high=1e6),
    "position_limits": ParameterSpec("bool", True, "URDF position limits act as inelastic "
                                     "stops", read_only=True),
    "publish_clock": ParameterSpec("bool", False, "publish /clock so other nodes can "
                                   "use_sim_time", read_only=True),
    "start_paused": ParameterSpec("bool", False, "start paused (~/pause false to run)",
                                  read_only=True),
    "lockstep": ParameterSpec("bool", False, "one step per command (a controller in the loop "
                              "sets the pace)", read_only=True),
    "lockstep_timeout": ParameterSpec("double", 0.5, "wall s without commands after which "
                                      "lock-step time goes on at the real-time pace",
                                      read_only=True, low=0.0, high=1e6),
}


class SimulatorNode(Node):
    """The topic-driven simulator (see the module docstring)."""
    def __init__(self, **kwargs) -> None:
        super().__init__("rb_simulator", **kwargs)
        ros_params.declare(self, PARAMETERS)
        settings = ros_params.read(self, PARAMETERS)
        self.warn = Warnings(self.get_logger())
        self.model = self._load_model(settings)
        self.constraints = ConstraintParameters(self).build(self.model)
        self.joints = self._joint_order(settings["joints"])
        self.v_index = np.array([self.model.joint_v_index[self.model.joint_index(n)]
                                 for n in self.joints], dtype=int)
        self.q_index = np.array([self.model.joint_q_index[self.model.joint_index(n)]
                                 for n in self.joints], dtype=int)
        self.dynamics = LiveDynamics(self.model)
        self.sim = Simulator(self.dynamics, dt=settings["time_step"],
                             integrator=settings["integrator"],
                             q0=self._initial_configuration(settings["initial_positions"]),
                             command_timeout=settings["command_timeout"],
                             constraints=self.constraints or None)
        self.rtf = settings["real_time_factor"]
        self.effort_noise, self.rng = settings["effort_noise"], np.random.default_rng()
        self.problem = self.model.forward_dynamics_problem()
        self.paused = bool(settings["start_paused"]) or self.problem is not None
        if self.problem:
            self.get_logger().error(f"{self.problem}: the simulator stays paused")
        self._make_topics_and_services()
        self._make_clock(settings)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.get_logger().info(
            f"simulating {self.model.name!r} ({len(self.joints)} joints, "
            f"{self.sim.integrator}, dt={self.sim.dt}, RTF {self.rtf}); commands on "
            f"{self.resolve_topic_name('~/commands')}"
            + (f"; constraints {self.constraints.names} ({self.constraints.method})"
               if self.constraints else ""))

    # ------------------------------------------------------------------ set-up

    def _make_topics_and_services(self) -> None:
        self.state_pub = self.create_publisher(JointState, "joint_states", 100)  # 0.1 s of 1 kHz
        self.command_sub = self.create_subscription(Float64MultiArray, "~/commands",
                                                    self._on_commands, 100)
        self.joint_command_sub = self.create_subscription(
            JointState, "~/joint_commands", self._on_joint_commands, 10)
        self.create_service(Trigger, "~/reset", self._on_reset)
        self.create_service(SetBool, "~/pause", self._on_pause)
        self.create_service(SetState, "~/set_state", self._on_set_state)
        self.payload = SimulatorPayload(self, self.dynamics, self._carry)

    def _make_clock(self, settings: dict[str, Any]) -> None:
        """Wall-clock pacing (a timer), lock-step, or stepping on an external /clock."""
        self.clock_pub = (self.create_publisher(Clock, "/clock", 10)
                          if settings["publish_clock"] else None)
        self.clock_offset = 0.0
        self.lockstep = bool(settings["lockstep"])
        self.external_clock = bool(self.get_parameter("use_sim_time").value)
        if self.external_clock and (self.clock_pub is not None or self.lockstep):
            raise ValueError("use_sim_time (step on an external /clock) excludes publish_clock "
                             "and lockstep")
        self.last_clock: float | None = None
        self.publish_period = 0.0
        self.lockstep_timeout = settings["lockstep_timeout"]
        self.last_lockstep = self.wall_last = time.monotonic()
        self.sim_debt = 0.0
        self.steps_done = 0
        rate = settings["publish_rate"]
        if self.external_clock:
            # best effort matches any /clock publisher; a lost tick only merges two steps
            self.create_subscription(Clock, "/clock", self._on_clock, QoSProfile(
                depth=100, reliability=ReliabilityPolicy.BEST_EFFORT))
            self.publish_period, self.last_publish = 1.0 / rate, -math.inf
        else:
            self.timer = self.create_timer(1.0 / rate, self._tick)

    def _load_model(self, settings: dict[str, Any]) -> Model:
        found: list[str] = []
        ModelSource(self, lambda source, origin: found.append(source), follow_topic=False,
                    use_bundled=True)
        model = load_model(found[0], gravity=settings["gravity"])
        for name in ("damping", "friction"):
            values = settings[name]
            if values:
                if len(values) != model.nv or not all(v >= 0 for v in values):
                    raise ValueError(f"{name} must have {model.nv} non-negative values")
                getattr(model, name)[:] = values
        if not settings["position_limits"]:
            model.position_lower[:] = -np.inf
            model.position_upper[:] = np.inf
        return model

    def _joint_order(self, joints: list[str]) -> list[str]:
        joints = joints or self.model.actuated_joint_names
        unknown = [n for n in joints if n not in self.model.actuated_joint_names]
        if unknown or len(set(joints)) != len(joints):
            raise ValueError(f"joints {unknown or joints} are not actuated joints of the model, "
                             f"once each ({self.model.actuated_joint_names})")
        return list(joints)

    def _initial_configuration(self, values: list[float]) -> np.ndarray:
        q0 = self.model.neutral_configuration()
        if values:
            if len(values) != len(self.joints):
                raise ValueError(f"initial_positions must have {len(self.joints)} values "
                                 f"(one per joint in {self.joints})")
            q0[self.q_index] = values
        return q0

    def _on_set_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        """The run-time parameters (real_time_factor, command_timeout), validated first;
        every other one is read-only."""
        try:
            changes = {p.name: ros_params.check(p.name, PARAMETERS[p.name], p.value)
                       for p in parameters if p.name in PARAMETERS}
        except ValueError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        self.rtf = changes.get("real_time_factor", self.rtf)
        self.sim.command_timeout = changes.get("command_timeout", self.sim.command_timeout)
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ callbacks

    def _apply(self, efforts: np.ndarray) -> None:
        tau = self.sim.command.copy() if not self.sim.command_timed_out else \
            np.zeros(self.model.nv)
        tau[self.v_index] = efforts
        clipped = self.sim.set_command(tau)
        if clipped.any():
            names = [n for n, k in zip(self.joints, self.v_index) if clipped[k]]
            self.warn(f"effort command clamped to the URDF limits on {names}", "clamp")
        if self.lockstep and not self.paused:
            self._advance(self.sim.dt)
            self.last_lockstep = time.monotonic()
            self._publish()

    def _on_commands(self, msg: Float64MultiArray) -> None:
        # A driver applies the newest command: collapse whatever queued up behind this one.
        # In lock-step this also keeps one step per answer after a burst (say, the answers to
        # states published while paused), instead of stepping on a backlog of stale commands.
        for newer in take_queued(self.command_sub):
            msg = newer
        data = np.asarray(msg.data, dtype=float)
        if data.shape != (len(self.joints),):
            self.warn(f"~/commands: got {data.size} values, expected {len(self.joints)} "
                       f"ordered as {self.joints}; ignored", "commands length")
            return
        if not np.all(np.isfinite(data)):
            self.warn("~/commands: NaN or inf in the command; ignored")
            return
        self._apply(data)

    def _on_joint_commands(self, msg: JointState) -> None:
        if len(msg.effort) != len(msg.name):
            self.warn("~/joint_commands: effort and name have different lengths; ignored")
            return
        unknown = [n for n in msg.name if n not in self.joints]
        if unknown or len(set(msg.name)) != len(msg.name):
            self.warn(f"~/joint_commands: unknown or repeated joints {unknown or msg.name}; "
                       "ignored", "joint_commands names")
            return
        efforts = np.asarray(msg.effort, dtype=float)
        if not np.all(np.isfinite(efforts)):
            self.warn("~/joint_commands: NaN or inf in the efforts; ignored")
            return
        current = self.sim.applied_effort[self.v_index].copy()
        for name, value in zip(msg.name, efforts):
            current[self.joints.index(name)] = value
        self._apply(current)

    def _on_reset(self, _request, response):
        self.clock_offset += self.sim.time  # /clock never runs backwards
        self.sim.reset()
        self.sim_debt = 0.0
        response.success, response.message = True, "state reset to the initial configuration"
        return response

    def _on_set_state(self, request, response):
        """Jump to a given state (joints by name; unnamed ones keep their position)."""
        names, positions = list(request.joint_names), np.asarray(request.positions, float)
        velocities = np.asarray(request.velocities, float) if len(request.velocities) else \
            np.zeros(len(names))
        problem = None
        if len(set(names)) != len(names) or any(n not in self.joints for n in names):
            problem = f"joint_names: unknown or repeated joints; known: {self.joints}"
        elif positions.shape != (len(names),) or velocities.shape != (len(names),):
            problem = "positions/velocities: one value per joint name"
        elif not (np.all(np.isfinite(positions)) and np.all(np.isfinite(velocities))):
            problem = "positions/velocities: NaN or inf"
        if problem:
            response.success, response.message = False, problem
            return response
        q, v = self.sim.q.copy(), np.zeros(self.model.nv)
        for name, position, velocity in zip(names, positions, velocities):
            index = self.joints.index(name)
            q[self.q_index[index]], v[self.v_index[index]] = position, velocity
        time_now = self.sim.time
        self.sim.reset(q, v)
        self.sim.time = time_now  # time goes on: /clock never runs backwards
        response.success, response.message = True, f"state set for {names}"
        return response

    def _carry(self, dynamics) -> None:
        """Simulate the robot of ``dynamics`` (with a payload, or without) from the current
        state on."""
        self.sim.dynamics, self.sim.model = dynamics, dynamics.model

    def _on_pause(self, request, response):
        if not request.data and self.problem:
            response.success, response.message = False, self.problem
            return response
        self.paused = bool(request.data)
        response.success = True
        response.message = "paused" if self.paused else "running"
        return response

    def _tick(self) -> None:
        now = time.monotonic()
        elapsed, self.wall_last = now - self.wall_last, now
        if self.lockstep:
            if self.paused:
                self._publish()
            elif now - self.last_lockstep > self.lockstep_timeout:
                self._advance(elapsed * self.rtf)  # no controller: time goes on
                self._publish()
            return
        if not self.paused:
            # keep up with the wall clock, but never spiral: at most 0.1 s of catch-up
            self.sim_debt = min(self.sim_debt + elapsed * self.rtf, 0.1)
            self.sim_debt -= self._advance(self.sim_debt) * self.sim.dt
        self._publish()

    def _on_clock(self, msg: Clock) -> None:
        """use_sim_time: simulate up to the clock's instant, then publish (at publish_rate)."""
        now = msg.clock.sec + msg.clock.nanosec * 1e-9
        if self.last_clock is not None and not (0.0 <= now - self.last_clock <= 1.0):
            self.warn(f"/clock jumped by {now - self.last_clock:+.3f} s: following it without "
                       "simulating the gap", "clock jump")
            self.last_clock, self.last_publish = None, -math.inf
        if self.last_clock is None or self.paused:
            self.sim_debt = 0.0
        else:
            self.sim_debt += now - self.last_clock
            whole_steps = math.floor(self.sim_debt / self.sim.dt + 1e-9)  # never past the clock
            self.sim_debt -= self._advance(whole_steps * self.sim.dt) * self.sim.dt
        self.last_clock = now
        # stamps follow the clock; the remaining debt (< dt) is the only difference
        self.clock_offset = now - self.sim_debt - self.sim.time
        if now - self.last_publish >= self.publish_period - 1e-9:
            self.last_publish = now
            self._publish()

    def _advance(self, duration: float) -> int:
        """Steps covering ``duration``; on divergence, the last good state stays and we pause."""
        before = (self.sim.q.copy(), self.sim.v.copy(), self.sim.time)
        try:
            steps = self.sim.advance(duration)
            finite = np.all(np.isfinite(self.sim.q)) and np.all(np.isfinite(self.sim.v))
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
            steps, finite = 0, False
            self.get_logger().error(f"simulation step failed: {exc}")
        if not finite:
            self.sim.q, self.sim.v, self.sim.time = before
            self.paused = True
            self.get_logger().error("the simulation diverged (non-finite state): paused; "
                                    "call ~/reset, then ~/pause false")
            return 0
        self.steps_done += steps
        return steps

    def _sim_time(self) -> Time:
        seconds = self.sim.time + self.clock_offset
        nanoseconds = round(seconds * 1e9)
        return Time(sec=nanoseconds // 1_000_000_000, nanosec=nanoseconds % 1_000_000_000)

    def _publish(self) -> None:
        msg = JointState()
        if self.clock_pub is not None or self.external_clock:
            msg.header.stamp = self._sim_time()
            if self.clock_pub is not None:
                # the clock first: a node on sim time then reads the instant the state describes
                self.clock_pub.publish(Clock(clock=msg.header.stamp))
        else:
            msg.header.stamp = self.get_clock().now().to_msg()
        msg.name = self.joints
        msg.position = self.sim.q[self.q_index].tolist()
        msg.velocity = self.sim.v[self.v_index].tolist()
        effort = self.sim.applied_effort[self.v_index]
        if self.effort_noise > 0.0:
            effort = effort + self.rng.normal(0.0, self.effort_noise, effort.shape)
        msg.effort = effort.tolist()
        self.state_pub.publish(msg)

def main(args: list[str] | None = None) -> int:
    """``rb_simulator``."""
    from .ros_runtime import run_node

    return run_node(SimulatorNode, args)


if __name__ == "__main__":
    sys.exit(main())
