# SPDX-License-Identifier: Apache-2.0
"""Topic-driven simulator: integrates the URDF's dynamics and talks like a robot driver.

Subscribes ``~/commands`` (std_msgs/Float64MultiArray, efforts ordered by ``joints``) and
``~/joint_commands`` (sensor_msgs/JointState by name: position, velocity and effort, each where
the joint's command interfaces allow it; see rb_dynamics/sim_commands.py); publishes
``joint_states`` (position, velocity, and the effort the drives apply). Services ``~/reset``
(std_srvs/Trigger: back to the initial state), ``~/set_state`` (rb_dynamics_interfaces/SetState:
a given state) and ``~/pause`` (std_srvs/SetBool).

Commands: the URDF's ``<ros2_control>`` blocks say which joint takes which command
(rb_dynamics/ros2_control.py); without a block every joint takes efforts, as a torque-controlled
arm. Position and velocity commands go through a PD servo per joint, efforts clamped to the
URDF limits, as a real drive would (rb_dynamics/servo.py: gains from ``servo_bandwidth`` and
``servo_damping_ratio``, checked for stability at the time step). With
``-r ~/joint_commands:=/robot_joint_commands -r joint_states:=/robot_joint_states`` this is the
simulator behind ros2_control's joint_state_topic_hardware_interface
(docs/ros2_control_simulator.md).

Time: the wall clock (times ``real_time_factor``); one step per command (``lockstep``); or, with
``use_sim_time``, an external ``/clock``: every clock message advances the model to that
instant. Optionally publishes ``/clock`` so other nodes can run on sim time. Constraints
declared as ``loop_constraints.*`` parameters (loop closures, fixed points, welds, joint
couplings: rb_dynamics/constraint_params.py) are honoured at every step. The robot: the
``robot_description`` parameter, else ``urdf_path``, else the bundled arm (see
rb_dynamics/model_source.py). Run-time parameters: ``real_time_factor``, ``command_timeout``;
the others are read-only; every one is described in ``parameters.yaml`` beside this module
(the node's schema) and listed in ``config/simulator.yaml`` and docs/parameters.md.
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
from std_srvs.srv import SetBool, Trigger

from rb_dynamics.dynamics import LiveDynamics
from rb_dynamics.model import Model, load_model
from rb_dynamics.model.hardware_interfaces import (
    POSITION,
    VELOCITY,
    CommandLayout,
    command_layout,
    read_ros2_control,
)
from rb_dynamics.ros import parameters as ros_params
from rb_dynamics.ros.constraint_parameters import PREFIX, ConstraintParameters
from rb_dynamics.ros.control_node.payload_services import SimulatorPayload
from rb_dynamics.ros.model_source import ModelSource
from rb_dynamics.ros.runtime import Warnings
from rb_dynamics.simulation import (
    JointDrives,
    ServoSimulator,
    make_drives,
    servo_gains,
)
from rb_dynamics_interfaces.srv import SetState

from .commands import CommandInputs

# Lock-step: a state whose command never comes (lost, or answered while paused) is published
# again after this long, rather than stalling the loop until lockstep_timeout
LOCKSTEP_RESEND_S = 0.2

SCHEMA = ros_params.node_schema("simulator_node")  # every parameter: parameters.yaml
NODE_NAME = SCHEMA.node_name
# the parameters this class declares; ConstraintParameters declares loop_constraints.*
PARAMETERS = SCHEMA.select(exclude=(f"{PREFIX}.*",))


class SimulatorNode(Node):
    """The topic-driven simulator (see the module docstring)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        ros_params.declare(self, PARAMETERS)
        settings = ros_params.read(self, PARAMETERS)
        self.warn = Warnings(self.get_logger())
        source = self._description()
        self.model = self._load_model(source, settings)
        self.constraints = ConstraintParameters(self, SCHEMA).build(self.model)
        self.joints = self._joint_order(settings["joints"])
        self.v_index = np.array([self.model.joint_v_index[self.model.joint_index(n)]
                                 for n in self.joints], dtype=int)
        self.q_index = np.array([self.model.joint_q_index[self.model.joint_index(n)]
                                 for n in self.joints], dtype=int)
        self.layout = self._command_layout(source, settings)
        self.dynamics = LiveDynamics(self.model, on_switch=self._on_kernels)
        self.problem = self.model.forward_dynamics_problem()
        self.sim = self._make_simulator(settings)
        self.rtf = settings["real_time_factor"]
        self.effort_noise, self.rng = settings["effort_noise"], np.random.default_rng()
        self.paused = bool(settings["start_paused"]) or self.problem is not None
        if self.problem:
            self.get_logger().error(f"{self.problem}: the simulator stays paused")
        self.state_pub = self.create_publisher(JointState, "joint_states", 100)  # 0.1 s of 1 kHz
        self.create_service(Trigger, "~/reset", self._on_reset)
        self.create_service(SetBool, "~/pause", self._on_pause)
        self.create_service(SetState, "~/set_state", self._on_set_state)
        self.payload = SimulatorPayload(self, self.dynamics, self._carry)
        self._make_clock(settings)
        self.inputs = CommandInputs(self, self.layout, self.joints, self.sim, self.warn,
                                    self._step_on_command if self.lockstep else None)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._log_start()

    def destroy_node(self):
        if hasattr(self, "inputs"):
            self.inputs.close()
        return super().destroy_node()

    # ------------------------------------------------------------------ set-up

    def _log_start(self) -> None:
        log = self.get_logger()
        log.info(f"simulating {self.model.name!r} ({len(self.joints)} joints, "
                 f"{self.sim.integrator}, dt={self.sim.dt}, RTF {self.rtf}"
                 + (", lock-step" if self.lockstep else "") + "); commands on "
                 f"{self.resolve_topic_name('~/commands')} (efforts in joint order) and "
                 f"{self.resolve_topic_name('~/joint_commands')} (JointState by name); states on "
                 f"{self.resolve_topic_name('joint_states')}"
                 + (f"; constraints {self.constraints.names} ({self.constraints.method})"
                    if self.constraints else ""))
        for line in self.layout.describe():
            if line.lstrip().startswith("warning:"):
                log.warning(line.strip())
            else:
                log.info(line)
        gains = self.sim.drives.gains
        servoed = self.layout.allowed[POSITION] | self.layout.allowed[VELOCITY]
        if servoed.any():
            log.info("servo τ = τ_cmd + kp (q_cmd − q) + kd (q̇_cmd − q̇), within the URDF "
                     "effort limit: " + ", ".join(
                         f"{n} kp {kp:.4g} kd {kd:.4g}" for n, kp, kd, on in zip(
                             self.layout.joints, gains.kp, gains.kd, servoed) if on))

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
        self.last_lockstep = self.last_lockstep_publish = self.wall_last = time.monotonic()
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

    def _on_kernels(self, kind: str) -> None:
        """From the kernel thread: which dynamics the steps use from now on."""
        self.get_logger().info(f"dynamics for the steps: {kind}"
                               + (" kernels" if kind in ("c", "python") else ""))

    def _description(self) -> str:
        """The URDF (XML or a path) in the documented order (rb_dynamics/model_source.py)."""
        found: list[str] = []
        ModelSource(self, lambda source, origin: found.append(source), follow_topic=False,
                    use_bundled=True)
        return found[0]

    def _load_model(self, source: str, settings: dict[str, Any]) -> Model:
        model = load_model(source, gravity=settings["gravity"])
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

    def _command_layout(self, source: str, settings: dict[str, Any]) -> CommandLayout:
        """Which joint takes which command: the URDF's <ros2_control> blocks, if read."""
        systems = read_ros2_control(source) if settings["read_ros2_control"] else []
        return command_layout(self.model, systems, settings["uncovered_joints"])

    def _initial_state(self, values: list[float]) -> tuple[np.ndarray, np.ndarray]:
        """The blocks' state ``initial_value``s, then ``initial_positions`` (which wins)."""
        q0, v0 = self.layout.initial_state_of(self.model, self.model.neutral_configuration(),
                                              np.zeros(self.model.nv))
        if values:
            if len(values) != len(self.joints):
                raise ValueError(f"initial_positions must have {len(self.joints)} values "
                                 f"(one per joint in {self.joints})")
            q0[self.q_index] = values
        return q0, v0

    def _make_simulator(self, settings: dict[str, Any]) -> ServoSimulator:
        q0, v0 = self._initial_state(settings["initial_positions"])
        options = dict(bandwidth=settings["servo_bandwidth"],
                       damping_ratio=settings["servo_damping_ratio"],
                       overrides=self._gain_overrides(settings))
        if self.problem is None:
            drives = make_drives(
                self.model, self.layout, q0, dt=settings["time_step"],
                integrator=settings["integrator"], command_timeout=settings["command_timeout"],
                gravity_feedforward=settings["servo_gravity_feedforward"],
                dynamics=self.dynamics, **options)
        else:  # it never steps: no stability to check (M may be singular)
            gains = servo_gains(self.model, q0, self.layout.joints, **options,
                                mass_matrix=self.dynamics.crba(q0))
            drives = JointDrives(self.model, self.layout, gains,
                                 command_timeout=settings["command_timeout"])
        return ServoSimulator(self.dynamics, drives, dt=settings["time_step"],
                              integrator=settings["integrator"], q0=q0, v0=v0,
                              constraints=self.constraints or None)

    def _gain_overrides(self, settings: dict[str, Any]) -> dict[str, tuple[float, float]]:
        """{joint: (kp, kd)} from servo_gain_joints, servo_kp, servo_kd."""
        names, kp, kd = (settings[k] for k in ("servo_gain_joints", "servo_kp", "servo_kd"))
        if not len(names) == len(kp) == len(kd):
            raise ValueError(f"servo_kp and servo_kd must have one value per servo_gain_joints "
                             f"({len(names)}), got {len(kp)} and {len(kd)}")
        bad = [n for n, p, d in zip(names, kp, kd)
               if n not in self.layout.joints or not (0 <= p < math.inf and 0 <= d < math.inf)]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"servo_gain_joints {bad or names}: each a movable joint once "
                             f"({self.layout.joints}), with finite gains ≥ 0")
        return {n: (p, d) for n, p, d in zip(names, kp, kd)}

    def _on_set_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        """The run-time parameters (real_time_factor, command_timeout), validated first;
        every other one is read-only."""
        try:
            changes = {p.name: ros_params.check(p.name, PARAMETERS[p.name], p.value)
                       for p in parameters if p.name in PARAMETERS}
        except ValueError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        self.rtf = changes.get("real_time_factor", self.rtf)
        if "command_timeout" in changes:
            self.sim.drives.command_timeout = changes["command_timeout"]
            self.sim.command_timeout = changes["command_timeout"]
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ callbacks

    def _step_on_command(self) -> None:
        """Lock-step: a command is one step, answered with the state it leads to."""
        if not self.paused:
            self._advance(self.sim.dt)
            self.last_lockstep = self.last_lockstep_publish = time.monotonic()
            self._publish()

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
        self.sim.reset(q, v)  # the drives drop their commands: position joints hold q
        self.sim.time = time_now  # time goes on: /clock never runs backwards
        self.sim.drives.hold(self.sim.q, time_now)
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
        self.inputs.take()  # free-running: what arrived since the last tick
        now = time.monotonic()
        elapsed, self.wall_last = now - self.wall_last, now
        if self.lockstep:
            if self.paused:
                self._publish()
            elif now - self.last_lockstep > self.lockstep_timeout:
                self._advance(elapsed * self.rtf)  # no controller: time goes on
                self._publish()
            elif now - self.last_lockstep_publish > LOCKSTEP_RESEND_S:
                self.last_lockstep_publish = now
                self._publish()  # the same state again: its command is awaited
            return
        if not self.paused:
            # keep up with the wall clock, but never spiral: at most 0.1 s of catch-up
            self.sim_debt = min(self.sim_debt + elapsed * self.rtf, 0.1)
            self.sim_debt -= self._advance(self.sim_debt) * self.sim.dt
        self._publish()

    def _on_clock(self, msg: Clock) -> None:
        """use_sim_time: simulate up to the clock's instant, then publish (at publish_rate)."""
        now = msg.clock.sec + msg.clock.nanosec * 1e-9
        self.inputs.take()
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
    from rb_dynamics.ros.runtime import run_node

    return run_node(SimulatorNode, args)


if __name__ == "__main__":
    sys.exit(main())
