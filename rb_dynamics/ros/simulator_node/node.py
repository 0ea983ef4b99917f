# SPDX-License-Identifier: Apache-2.0
"""Topic-driven simulator: integrates the URDF's dynamics and talks like a robot driver.

Subscribes ``~/commands`` (std_msgs/Float64MultiArray, efforts ordered by ``joints``) and
``~/joint_commands`` (sensor_msgs/JointState by name: position, velocity and effort, each where
the joint's command interfaces allow it; see commands.py); publishes
``joint_states`` (position, velocity, and the effort the drives apply). Services ``~/reset``
(std_srvs/Trigger: back to the initial state), ``~/set_state`` (rb_dynamics_interfaces/SetState:
a given state) and ``~/pause`` (std_srvs/SetBool).

Commands: the URDF's ``<ros2_control>`` blocks say which joint takes which command
(model/ros2_control.py); without a block every joint takes efforts, as a
torque-controlled arm. Position and velocity commands go through a PD servo per joint, efforts
clamped to the URDF limits, as a real drive would (simulation/joint_drives.py: gains from
``servo_bandwidth`` and ``servo_damping_ratio``, checked for stability at the time step). With
``-r ~/joint_commands:=/robot_joint_commands -r joint_states:=/robot_joint_states`` this is the
simulator behind ros2_control's joint_state_topic_hardware_interface
(docs/ros2_control_simulator.md).

Time: the wall clock (times ``real_time_factor``); one step per command (``lockstep``); or, with
``use_sim_time``, an external ``/clock``: every clock message advances the model to that
instant. Optionally publishes ``/clock`` so other nodes can run on sim time. Constraints
declared as ``loop_constraints.*`` parameters (loop closures, fixed points, welds, joint
couplings: ros/constraint_parameters.py) are honoured at every step. The robot: the
``robot_description`` parameter, else ``urdf_path``, else the bundled arm (see
ros/model_source.py); what is built from the parameters at start is in simulated_robot.py.
Run-time parameters: ``real_time_factor``, ``command_timeout``; the others are read-only;
every one is described in ``parameters.yaml`` beside this module (the node's schema) and
listed in ``config/simulator.yaml`` and docs/parameters.md.
``~/set_payload`` (rb_dynamics_interfaces/SetPayload) puts a payload on the simulated robot
(the state kept, see payload.py). ``~/external_wrench`` (geometry_msgs/WrenchStamped) pushes
on a link, and ``~/true_external_efforts`` (sensor_msgs/JointState) publishes the joint efforts
it makes (external_wrench.py).

The real arm (docs/simulator.md): ``dynamics_overlay`` gives the simulated robot its own
armature, friction (Coulomb, viscous, Stribeck) and effort-sensor offset; joint_states then
report what a driver's sensors would (``rb_dynamics.sensing``: ``effort_noise`` and
``effort_noise_relative``, the offset, ``effort_resolution``, ``encoder_resolution``,
``measurement_delay``, ``effort_delay``, ``publish_jitter``, stamped as ``measurement_stamp``
says). All off by default: the simulated state, exact, stamped when it is published.

The drive (docs/drives.md): ``drive.compensates_gravity`` and ``drive.compensates_friction``
play a drive that adds its own gravity and friction compensation to the effort commands (a
Franka, a UR e-Series in torque control, a KUKA LBR in FRI torque mode);
``drive.effort_includes_gravity`` and ``drive.effort_includes_friction`` false report efforts
without them, as UR's joint torques are.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from rcl_interfaces.msg import SetParametersResult
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool, Trigger

from rb_dynamics.dynamics import LiveDynamics, friction_effort
from rb_dynamics.model import POSITION, VELOCITY, finite_array
from rb_dynamics.ros import parameters as ros_params
from rb_dynamics.ros.constraint_parameters import PREFIX, ConstraintParameters
from rb_dynamics.ros.conversions import ConversionError, JointLayout, from_seconds, to_seconds
from rb_dynamics.ros.model_source import ModelSource
from rb_dynamics.ros.runtime import ThrottledLogger
from rb_dynamics.sensing import StateHistory
from rb_dynamics_interfaces.srv import SetState

from .commands import CommandInputs
from .external_wrench import ExternalWrench
from .payload import SimulatorPayload
from .simulated_robot import (
    command_layout_of,
    joint_order,
    joint_sensors,
    make_simulator,
    simulated_model,
)

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
        self.warn = ThrottledLogger(self.get_logger())
        source = self._description()
        self.model = simulated_model(source, settings)
        self.constraints = ConstraintParameters(self, SCHEMA).build(self.model)
        self.joints = joint_order(self.model, settings["joints"])
        # where the joints' values sit in the model's q and v (joint_states, ~/set_state)
        self.joint_layout = JointLayout(self.model, self.joints, "joints", every_joint=False)
        self.layout = command_layout_of(self.model, source, settings)
        self.dynamics = LiveDynamics(self.model, on_switch=self._on_kernels)
        self.drive_dynamics = self.dynamics  # the drive's model: without a payload put on later
        self.problem = self.model.forward_dynamics_problem()
        self.sim = make_simulator(self.model, self.layout, self.dynamics, self.joint_layout,
                                  self.constraints, settings)
        self.rtf = settings["real_time_factor"]
        self.rng = np.random.default_rng()
        self.sensors = joint_sensors(self.model, self.joint_layout, settings)
        self.stamp_described = settings["measurement_stamp"] == "described"
        # what the reported efforts leave out of the applied ones: g(q), the drive's friction
        self.unreported = (not settings["drive.effort_includes_gravity"],
                           settings["drive.compensates_friction"]
                           and not settings["drive.effort_includes_friction"])
        self.history = StateHistory(len(self.joints), self.sensors.span)
        if self.sensors.span > 0:  # delayed readings need the steps between publications
            self.sim.recorder = self._record
        self.paused = bool(settings["start_paused"]) or self.problem is not None
        if self.problem:
            self.get_logger().error(f"{self.problem}: the simulator stays paused")
        self.state_pub = self.create_publisher(JointState, "joint_states", 100)  # 0.1 s of 1 kHz
        # reused at every step (the names set once): the step path allocates little
        self._state_msg, self._clock_msg = JointState(name=list(self.joints)), Clock()
        self.create_service(Trigger, "~/reset", self._on_reset)
        self.create_service(SetBool, "~/pause", self._on_pause)
        self.create_service(SetState, "~/set_state", self._on_set_state)
        self.payload = SimulatorPayload(self, self.dynamics, self._carry)
        self._make_clock(settings)
        self.inputs = CommandInputs(self, self.layout, self.joints, self.sim, self.warn,
                                    self._step_on_command if self.lockstep else None)
        self.external = ExternalWrench(self, self.sim, self.joint_layout, self.joints,
                                       settings["external_wrench_timeout"], self.warn,
                                       settings["external_wrench_max_rate"])
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._log_start()

    def destroy_node(self):
        if hasattr(self, "inputs"):
            self.inputs.close()
        if hasattr(self, "external"):
            self.external.close()
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
        """The URDF (XML or a path) in the documented order (ros/model_source.py)."""
        found: list[str] = []
        ModelSource(self, lambda source, origin: found.append(source), follow_topic=False,
                    use_bundled=True)
        return found[0]

    def _on_set_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        """The run-time parameters (real_time_factor, command_timeout), validated first;
        every other one is read-only."""
        try:
            changes = {p.name: ros_params.check(p.name, PARAMETERS[p.name], p.value)
                       for p in parameters if p.name in PARAMETERS}
        except ValueError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        self.rtf = changes.get("real_time_factor", self.rtf)
        if "command_timeout" in changes:  # the drives time commands out (ServoSimulator)
            self.sim.drives.command_timeout = changes["command_timeout"]
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
        self.history.clear()  # the simulated time restarts
        self.sensors.restart()
        self.sim_debt = 0.0
        response.success, response.message = True, "state reset to the initial configuration"
        return response

    def _on_set_state(self, request, response):
        """Jump to a given state (joints by name; unnamed ones keep their position)."""
        names = list(request.joint_names)
        q, v = self.sim.q.copy(), np.zeros(self.model.nv)
        try:
            others = [n for n in names if n not in self.joints]
            if others:
                raise ConversionError(f"joint_names: {others} are not joints of the simulator "
                                      f"{self.joints}")
            shape = (len(names),)
            positions = finite_array(request.positions, "positions", shape, ConversionError)
            velocities = finite_array(request.velocities if len(request.velocities) else
                                      np.zeros(shape), "velocities", shape, ConversionError)
            if names:
                layout = JointLayout(self.model, names, every_joint=False)
                q[layout.q_index], v[layout.v_index] = positions, velocities
        except ConversionError as exc:
            response.success, response.message = False, str(exc)
            return response
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
                # a pause is not a silent controller: the wait for a command starts on resume
                self.last_lockstep = now
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
        now = to_seconds(msg.clock)
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
        self.external.take()
        self.external.expire()
        try:
            steps = self.sim.advance(duration)
            finite = np.isfinite(self.sim.q).all() and np.isfinite(self.sim.v).all()
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

    def _sim_time(self, t: float, stamp: Time) -> Time:
        """The simulated instant ``t`` as a ROS time, written into ``stamp``."""
        return from_seconds(t + self.clock_offset, stamp)

    def _record(self, times, q, v, effort) -> None:
        """The simulator's steps (start time, state, applied effort), for delayed readings."""
        qi, vi = self.joint_layout.q_index, self.joint_layout.v_index
        if any(self.unreported):
            effort = np.array([self._reported(qk, vk, ek) for qk, vk, ek in zip(q, v, effort)])
        self.history.record(times, q[:, qi], v[:, vi], effort[:, vi])

    def _reported(self, q: np.ndarray, v: np.ndarray, effort: np.ndarray) -> np.ndarray:
        """The effort over v the driver reports of an applied one at (q, q̇): without g(q)
        and the drive's friction where ``drive.effort_includes_*`` leave them out. The drive's
        own model: a payload put on later is in the reported effort, as on a real arm."""
        gravity, friction = self.unreported
        if gravity:
            effort = effort - self.drive_dynamics.gravity(q)
        if friction:
            effort = effort - friction_effort(self.drive_dynamics.model, v)
        return effort

    def _publish(self) -> None:
        """The state the driver's sensors report now (``rb_dynamics.sensing``), stamped with
        the instant it describes or the one it was sampled at (``measurement_stamp``)."""
        now, sim = self.sim.time, self.sim
        qi, vi = self.joint_layout.q_index, self.joint_layout.v_index
        effort = sim.applied_effort
        if any(self.unreported):
            effort = self._reported(sim.q, sim.v, effort)
        q, v, effort = sim.q[qi], sim.v[vi], effort[vi]
        if self.sensors.span > 0:  # delayed or jittered: from the recent steps
            self.history.record(now, q, v, effort)
            reading = self.sensors.read(self.history, now, self.rng)
        else:
            reading = self.sensors.read_current(now, q, v, effort, self.rng)
        # a delayed or jittered reading of the first steps describes the initial state from
        # before the simulation began: stamped at its start, never before the epoch
        instant = max(reading.describes if self.stamp_described else reading.sampled,
                      -self.clock_offset)
        msg = self._state_msg
        if self.clock_pub is not None or self.external_clock:
            self._sim_time(instant, msg.header.stamp)
            if self.clock_pub is not None:
                # the clock first: a node on sim time then has the instant the state describes
                self._sim_time(now, self._clock_msg.clock)
                self.clock_pub.publish(self._clock_msg)
        else:
            stamp = self.get_clock().now()
            if instant < now:  # wall time: the simulated lag at the real-time factor
                stamp -= Duration(nanoseconds=round((now - instant) / self.rtf * 1e9))
            msg.header.stamp = stamp.to_msg()
        msg.position = reading.position.tolist()
        msg.velocity = reading.velocity.tolist()
        msg.effort = reading.effort.tolist()
        self.state_pub.publish(msg)
        self.external.publish(msg.header.stamp)


def main(args: list[str] | None = None) -> int:
    """``rb_simulator``."""
    from rb_dynamics.ros.runtime import run_node

    return run_node(SimulatorNode, args, NODE_NAME, events=True)


if __name__ == "__main__":
    sys.exit(main())
