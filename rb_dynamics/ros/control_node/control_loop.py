# SPDX-License-Identifier: Apache-2.0
"""The control loop: joint states in, efforts out, on a companion node spun on its own thread.

An rclpy executor pass walks every entity of the nodes it spins (services, parameter services,
timers, subscriptions), so it costs more on the full control node than on a node with just the
loop's two topics, and a long service call would hold the loop behind it. So the loop lives in
a small node of its own (``<name>_control_loop``: no parameters, no rosout), spun by a
``SpinThread``. Its topic names are resolved by the main node, so the main node's remappings
and namespace apply.

Only the newest queued state is answered: a command for an older state is stale before it is
sent, and answering a backlog would keep the loop a backlog behind (the skipped ones are counted
as superseded). ``lock`` keeps the controller consistent with the main thread, which swaps in
models, trajectories and parameters: every such change is prepared outside it and installed
with a reference assignment, so the loop never waits more than microseconds.

When the node stops commanding (``stop_publishing``: deactivation, shutdown, ``stop``; or no
usable joint state for ``state_timeout`` while commanding) it publishes one last command,
``stop_command``: the forward effort controller downstream holds its last command for ever, so
that message decides what the arm does (docs/trajectory_controller.md, "What the arm is left
with").

The active gains are checked at the period the states come at (``stability``, a
``StabilityGuard``: after the first states, when the gains, mode or controller change, and when
the period drifts): gains that make the sampled loop unstable are not commanded with; the stop
command goes out once and the reason stays on the log and /diagnostics until they change.
Until the period is measured the law's gains are unchecked, and computed torque and impedance
answer each state with the stop command's effort instead (``stop_command`` gravity: the arm
floats; none: nothing): a driver that waits for each command (lock-step) goes on, so the period
gets measured, and the first command from the law comes only after the check.

The other parts of the node talk to the loop through its methods: ``install`` a controller,
``start_publishing``/``stop_publishing``, ``suspended`` (set to a reason: no commands, whatever
the lifecycle, as a collision's ``stop`` reaction; with ``send_stop_command``),
``set_max_rate``, ``reference_changed``/``holding_on_purpose`` (whether "no reference yet" is to
be logged), ``fault`` (end what follows the reference), and listeners
(``set_command_monitor``, ``set_fault_listener``, ``set_state_recorder`` by key,
``set_first_state_callback``) called on the loop's thread.

Time that goes back (a simulator reset on sim time: /clock and the states' stamps jump back;
a system clock stepped back) is seen by the loop's thread: the clock read lower than before,
or, on sim time, a state stamped more than ``state_timeout`` before the last one (the clock
may follow it a moment later: that is the same jump). The loop goes on from the new time: the
jump is logged and said on /diagnostics, the rate limit, the stale check and the velocity
differencing start again from it, the reference is dropped (a goal being executed aborts
naming the jump, a ``~/joint_trajectory`` reference ends) and the measured position is held,
the integral term restarts (the observer, on the states' stamps, restarts by itself).

States that go stale end a goal being executed (the goal's reference is dropped); when they come
back (perhaps from another pose) the reference left, one from ``~/joint_trajectory``, restarts
from the first fresh measured state with the points still due, as a new trajectory would
(``JointController.restart_trajectory``), rather than jumping back to where it has got to; with none
left, or none feasible from there, the measured position is held.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension

from rb_dynamics.control import (
    REFERENCE_MODES,
    ControllerError,
    ControlOutput,
    JointController,
)
from rb_dynamics.control.stability import StabilityGuard
from rb_dynamics.ros.conversions import to_seconds
from rb_dynamics.ros.diagnostics import Statistics, Totals
from rb_dynamics.ros.runtime import ListenedPublisher, SpinThread, ThrottledLogger, take_queued

from .drive_check import DriveCheck

__all__ = ["CommandMonitor", "ControlLoop", "FaultListener", "LoopTime", "StateRecorder"]

AGE_SLOTS = 4096  # state ages kept per diagnostics period (preallocated: no allocation per state)
# a clock jump larger than this (ns, a day) moves the origin positions are differenced from
DIFFERENCING_SPAN_NS = 86_400 * 1_000_000_000
STALE_CHECK_PERIOD = 0.02  # s between checks that joint states still come while commanding

# After each published command, on the loop thread under ``lock``, with the instant the
# reference was sampled at, the controller and its output: it must take microseconds.
CommandMonitor = Callable[[float, JointController, ControlOutput], None]
# When the loop cannot go on with the reference, on the loop thread under ``lock``, before the
# reference is dropped: ("stale", why) when states stopped coming while commanding, ("effort",
# why) when the law's effort is not finite; and the controller. It must take microseconds.
FaultListener = Callable[[str, str, JointController], None]
# With each joint state after its command is out (outside ``lock``), and the controller that
# took it (None: no controller yet); one per key (the payload's, the contact monitor's).
StateRecorder = Callable[[JointState, "JointController | None"], None]


def stop_effort(stop_command: str, controller: JointController | None) -> np.ndarray | None:
    """The effort ``stop_command`` (gravity, zero or none) leaves ``controller``'s arm with;
    None: nothing is published."""
    if stop_command == "none" or controller is None:
        return None
    if stop_command == "zero":
        return np.zeros(len(controller.joints))
    return controller.holding_effort()


class LoopTime:
    """The control loop's time base, kept on its thread (readings in ns and s; no ROS).

    ``last_state``: the instant (s) of the last state the controller took, on the loop's time
    base: its stamp on sim time (the clock there is /clock as this node has read it, which lags
    the states a busy machine delivers, and a lagging clock that catches up at once would make
    a state taken late look stale), else the clock; ``taken`` sets it, ``age`` runs from it.
    ``differencing_time``: the instant a state describes (ns on the node's clock) in seconds
    after a recent origin, subtracted in integer nanoseconds: positions are differenced over
    these, and a float of epoch seconds resolves only 0.24 µs.

    ``went_back`` with each clock reading (and each state's time): whether time went back
    (the module docstring), counted (``jumps``) and described (``last_jump``); the time base
    then starts from the new time. On sim time a state's stamp may show a jump before the
    clock does (the clock follows a moment later: the same jump); ages run on the clock alone
    until it has.
    """

    def __init__(self) -> None:
        self.last_state = self.last_state_clock = -math.inf  # (and the clock then)
        self.jumps, self.last_jump = 0, ""
        self._clock_ns = -2**63  # the last reading
        self._follows_ns: int | None = None  # the reading when the stamps jumped first
        self._origin_ns = -2 * DIFFERENCING_SPAN_NS  # set by the first state

    def taken(self, instant: float, clock: float) -> None:
        self.last_state, self.last_state_clock = instant, clock

    def age(self, now: float) -> float:
        return now - (self.last_state if self._follows_ns is None else self.last_state_clock)

    def differencing_time(self, state_ns: int) -> float:
        """The origin moves only when a clock jumps by more than DIFFERENCING_SPAN_NS, or when
        time went back."""
        if abs(state_ns - self._origin_ns) > DIFFERENCING_SPAN_NS:
            self._origin_ns = state_ns
        return (state_ns - self._origin_ns) * 1e-9

    def went_back(self, now_ns: int, state_time: float | None, simulated: bool,
                  max_age: float) -> str:
        """The clock read ``now_ns``; ``state_time`` (s): the instant of the state being taken
        (None: no state). "" when time did not go back, else what happened."""
        last, self._clock_ns = self._clock_ns, now_ns
        now = now_ns * 1e-9
        back = 0.0
        if self._follows_ns is None:
            back = max(last - now_ns, 0) * 1e-9
        elif now_ns < self._follows_ns:  # it has followed the stamps back: the same jump
            self._follows_ns = None
        if simulated and state_time is not None and self.last_state - state_time > max_age:
            back = max(back, self.last_state - state_time)
            if now - state_time > max_age:  # the clock still reads the old time
                self._follows_ns = now_ns
        if not back:
            return ""
        # the stale check and the next jump's reference run from here, whether or not the
        # state that showed it is taken
        self.taken(state_time if simulated and state_time is not None else now, now)
        self._origin_ns = -2 * DIFFERENCING_SPAN_NS
        self.jumps += 1
        self.last_jump = (
            f"{'sim ' if simulated else ''}time went back by {back:.3f} s (to "
            f"{self.last_state:.3f} s{', a simulator reset?' if simulated else ''}): the "
            "reference is dropped and the measured position held; going on from the new time")
        return self.last_jump


class ControlLoop:
    """Answers each joint state with an effort command from ``controller`` (None: nothing)."""

    def __init__(self, node: Node, qos: QoSProfile, warn: ThrottledLogger) -> None:
        self.node, self.warn = node, warn
        self.lock = threading.Lock()
        self._controller: JointController | None = None
        self._publishing = False  # False: states are taken and counted, nothing is published
        self._min_period = 0.0  # s between commands (max_publish_rate); 0: one per state
        # the active gains checked at the measured state period (start-up, mode, drift)
        self.stability = StabilityGuard()
        self.drive_check = DriveCheck()  # the drive settings, on the first state (drive.*)
        self.stats, self.totals = Statistics(), Totals()  # written on the loop thread
        self._ages = np.zeros(AGE_SLOTS)
        self._last_publish = -np.inf
        self._command = Float64MultiArray()  # reused: the control path allocates little
        self._hold_reported = False
        self._monitor: CommandMonitor | None = None
        self._fault_listener: FaultListener | None = None
        self._recorders: dict[str, StateRecorder] = {}
        self.suspended = ""  # why no command goes out whatever the lifecycle; "": commands do
        self._first_state: Callable[[], None] | None = None
        self.stop_command = "gravity"  # gravity, zero or none: the node's stop_command
        self._commanding = False  # a command went out since the last stop command
        self.time = LoopTime()  # the last state's instant, time that went back
        self._restart_reference = False  # states went stale: the next one restarts it
        self._companion = companion = Node(
            f"{node.get_name()}_control_loop", namespace=node.get_namespace(),
            context=node.context, use_global_arguments=False, start_parameter_services=False,
            enable_rosout=False)
        self.effort_pub = companion.create_publisher(
            Float64MultiArray, node.resolve_topic_name("~/effort_commands"), 100)
        self.state_sub = companion.create_subscription(
            JointState, node.resolve_topic_name("joint_states"), self._on_joint_state, qos)
        companion.create_timer(STALE_CHECK_PERIOD, self._check_stale)
        self._spin = SpinThread(companion, "control loop", events=True)

    def stop(self) -> None:
        """Stop commanding (the stop command goes out), then the thread. The node holding the
        command publisher is left to the process's end: a writer destroyed right after its last
        sample loses that sample at a reader on the same host (Fast DDS: 2 of 20 stop commands
        lost, none when the process ends with the writer alive), and rclpy's
        ``wait_for_all_acked`` there times out even on samples the reader has, holding the
        interpreter for its whole time-out."""
        self.stop_publishing("shutting down")
        self._spin.stop(destroy=False)

    # ------------------------------------------------------------------ for the other parts

    def publisher(self, msg_type: type, topic: str, depth: int = 10) -> ListenedPublisher:
        """A publisher of the node's ``topic`` (resolved as the node resolves it: its
        namespace, name and remappings) for what goes out per state from the loop's thread,
        which skips the messages nobody subscribes to (``runtime.ListenedPublisher``: ask it
        ``listened()`` before filling one). Held by the loop's companion, as the commands'."""
        return ListenedPublisher(self._companion.create_publisher(
            msg_type, self.node.resolve_topic_name(topic), depth))

    @property
    def controller(self) -> JointController | None:
        """The controller answering the states (None: nothing to command)."""
        return self._controller

    def install(self, controller: JointController | None) -> None:
        """Answer the states with ``controller`` from the next one on. Call under ``lock``."""
        self._controller = controller
        self._hold_reported = False
        self.stability.recheck()

    def start_publishing(self) -> None:
        """Publish efforts from the next state on; the controller first holds where the arm
        is, as ros2_controllers do on activation (takes ``lock``)."""
        with self.lock:
            self._publishing = True
            controller = self._controller
            if controller is not None:
                controller.hold()
                self._hold_reported = False

    def stop_publishing(self, why: str = "stopped") -> None:
        """Take and count states, publish nothing more after the stop command, if efforts were
        being published (``why``: for the log; takes ``lock``)."""
        with self.lock:
            self._publishing = False
            self.send_stop_command(why)

    def send_stop_command(self, why: str) -> None:
        """``stop_command`` once after the last command (under ``lock``)."""
        if not self._commanding:
            return
        self._commanding = False
        effort = stop_effort(self.stop_command, self._controller)
        if effort is not None:
            self._publish(effort)
        self.node.get_logger().info(
            f"{why}: stop command {self.stop_command!r}: "
            + ("nothing published" if effort is None else f"{np.round(effort, 4).tolist()}"))

    def _check_stale(self) -> None:
        """On the loop thread: no usable state for ``state_timeout`` while commanding → the
        stop command (commanding resumes with the next usable state)."""
        controller = self._controller
        if controller is None:
            return
        now_ns = self.node.get_clock().now().nanoseconds
        with self.lock:
            self._see_time(now_ns, None, controller)
        age = self.time.age(now_ns * 1e-9)
        if self._commanding and age > controller.max_state_age:
            waiting = next(take_queued(self.state_sub, 1), None)
            if waiting is not None:
                # states came, and this thread, held up, had not read them: not a stale
                # stream (a state that is itself too old is refused as it is read)
                self._on_joint_state(waiting)
                return
            with self.lock:
                if self._commanding and self._controller is controller:
                    why = self.stats.last_problem  # a refusal's reason stays in sight
                    self.problem(f"no usable joint state for {age:.3f} s (state_timeout "
                                 f"{controller.max_state_age} s): stopped commanding"
                                 + (f" (last problem: {why})" if why else ""), "stale")
                    self.send_stop_command("joint states stopped")
                    self.fault("stale", f"no usable joint state for {age:.3f} s (state_timeout "
                               f"{controller.max_state_age} s)", controller)
                    # the next fresh state restarts the reference from there (the docstring)
                    controller.hold_anew()
                    self._restart_reference, self._hold_reported = True, False

    def _see_time(self, now_ns: int, state: float | None, controller: JointController) -> None:
        """Time gone back, seen at a clock reading (ns) or a state's time (s; None: none): the
        loop goes on from the new time (the module docstring). Under ``lock``."""
        simulated = self.node.get_clock().ros_time_is_active
        if why := self.time.went_back(now_ns, state, simulated, controller.max_state_age):
            self.problem(why, "time went back")
            self._last_publish = -np.inf
            self.fault("time", why, controller)
            controller.restart_after_time_jump()
            self._restart_reference = self._hold_reported = False

    def _refuse_unstable_gains(self, why: str, controller: JointController) -> None:
        """Gains the loop cannot take at the measured period: no command (the stop command
        once, a goal ends), the reason logged and on /diagnostics until they are changed."""
        self.problem(f"{why}; not commanding until the gains are changed", "unstable gains")
        if self._commanding:
            self.send_stop_command("unstable gains")
            self.fault("gains", why, controller)

    def fault(self, kind: str, why: str, controller: JointController) -> None:
        """Tell the fault listener (call under ``lock``)."""
        if self._fault_listener is not None:
            self._fault_listener(kind, why, controller)

    def set_max_rate(self, rate: float) -> None:
        """At most ``rate`` commands per second (0: one per state)."""
        self._min_period = 1.0 / rate if rate > 0 else 0.0
        self.stability.min_period = self._min_period

    def reference_changed(self) -> None:
        """A new reference, mode or controller: "no reference yet" may be logged again. Call
        under ``lock``."""
        self._hold_reported = False

    def holding_on_purpose(self) -> None:
        """The controller holds its position on purpose: no "no reference yet" log. Call
        under ``lock``."""
        self._hold_reported = True

    def set_command_monitor(self, monitor: CommandMonitor | None) -> None:
        self._monitor = monitor

    def set_fault_listener(self, listener: FaultListener | None) -> None:
        self._fault_listener = listener

    def set_state_recorder(self, recorder: StateRecorder, key: str = "recorder") -> None:
        self._recorders = {**self._recorders, key: recorder}  # a new dict: read unlocked

    def set_first_state_callback(self, callback: Callable[[], None] | None) -> None:
        """``callback()`` on the loop thread when a controller takes its first state (a
        trajectory that arrived before it can start then); it must not take ``lock``."""
        self._first_state = callback

    def now(self) -> float:
        """The node clock's time in seconds (the loop's time base)."""
        return self.node.get_clock().now().nanoseconds * 1e-9

    def take_period(self) -> tuple[Statistics, np.ndarray, Totals]:
        """The period's statistics and state ages, and the running totals (a copy); a new
        period starts."""
        with self.lock:
            stats, self.stats = self.stats, Statistics()
            return stats, self._ages[:stats.ages].copy(), dataclasses.replace(self.totals)

    def problem(self, text: str, key: str | None = None) -> None:
        """A throttled warning, also the period's last problem on /diagnostics."""
        self.warn(text, key)
        self.stats.last_problem = text

    def _on_joint_state(self, msg: JointState) -> None:
        count = 1
        for newer in take_queued(self.state_sub):
            msg = newer
            count += 1
        with self.lock:
            self.stats.skipped += count - 1
            self.totals.received += count
            self.totals.superseded += count - 1
            self.totals.newest_stamp_ns = msg.header.stamp.sec * 1_000_000_000 \
                + msg.header.stamp.nanosec
            if not self._control(msg):
                self.totals.unanswered += 1
        for recorder in self._recorders.values():
            recorder(msg, self._controller)

    def _control(self, msg: JointState) -> bool:
        """Answers ``msg`` with a command; False when none was published (the reason, if it is
        a problem, goes to the log and /diagnostics)."""
        controller = self._controller
        if controller is None:
            return False
        clock = self.node.get_clock()
        now_ns = clock.now().nanoseconds
        now = now_ns * 1e-9
        if msg.header.stamp.sec < 0:
            # a clock before the epoch is a driver fault; its state cannot be trusted either
            self.problem(f"joint_states: negative stamp {msg.header.stamp.sec} s; not "
                         "publishing", "negative stamp")
            return False
        first = controller.q is None
        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        stamp = to_seconds(msg.header.stamp)
        # the instant the state describes: its stamp, or its arrival when it has none
        state_time = stamp if stamp_ns > 0 else now
        simulated = clock.ros_time_is_active
        self._see_time(now_ns, state_time, controller)
        if stamp - now > controller.max_state_age and not simulated:
            # the reference is sampled at the stamp: a stamp from the future would jump it
            # ahead (to a goal's last point, ending the goal early). On sim time the clock is
            # /clock as this node has read it, which lags the states a busy machine delivers
            self.problem(f"joint_states: stamp {stamp:.3f} s is {stamp - now:.3g} s ahead of "
                         f"the clock (more than state_timeout {controller.max_state_age:g} s); "
                         "not publishing", "future stamp")
            return False
        try:
            # velocities from positions are differenced over the instants the states describe
            if not controller.update_state(msg.name, msg.position, msg.velocity, now,
                                           self.time.differencing_time(
                                               stamp_ns if stamp_ns > 0 else now_ns)):
                return False  # a velocity estimate needs one more state
        except ControllerError as exc:
            self.problem(f"{exc}; not publishing")
            return False
        if first and self._first_state is not None:
            self._first_state()
        if not self.drive_check.done:  # before the first command
            self.drive_check.observe(msg, controller, self.problem)
        if self._restart_reference:
            self._restart_reference = False
            if controller.restart_trajectory(state_time):
                self.node.get_logger().info("joint states back: the reference restarts from "
                                            "the measured state")
        # the period between the instants the states describe: the driver's, which a busy
        # node's clock (on sim time, /clock as read between states) does not show
        unstable = self.stability.observe(controller, state_time)
        if unstable is not None:
            self._refuse_unstable_gains(unstable, controller)
            return False
        self.stats.states += 1
        self.time.taken(state_time if simulated else now, now)  # (sim time: its stamp)
        if not self._publishing or self.suspended \
                or 0.0 <= now - self._last_publish < self._min_period:
            return False
        if not self.stability.settled and controller.mode in REFERENCE_MODES:
            # the gains are unchecked until the period is measured: the stop command's effort
            effort = stop_effort(self.stop_command, controller)
            if effort is not None:
                self._publish(effort)
                self._commanding = True  # an unstable verdict sends the stop command again
                self._account(now, 0.0, stamp)
            return effort is not None
        started = time.perf_counter()
        try:  # the reference is sampled at the instant the state describes
            out = controller.compute(now, state_time)
        except ControllerError as exc:
            self.problem(str(exc), "compute")
            self.fault("effort", str(exc), controller)
            return False
        self._publish(out.effort)
        self._commanding = True
        elapsed = time.perf_counter() - started
        self._account(now, elapsed, stamp)
        if self._monitor is not None:
            self._monitor(state_time, controller, out)
        if out.clamped:
            self.stats.clamped.update(out.clamped)
            self.problem(f"effort clamped to the limit on {out.clamped}", "clamp")
        if controller.mode in REFERENCE_MODES and controller.trajectory is None \
                and not self._hold_reported:
            self.node.get_logger().info(f"{controller.mode}: no reference yet, holding the "
                                        "measured position")
            self._hold_reported = True
        return True

    def _publish(self, effort: np.ndarray) -> None:
        command = self._command
        if len(command.layout.dim) != 1 or command.layout.dim[0].size != len(effort):
            command.layout.dim = [MultiArrayDimension(label="joints", size=len(effort),
                                                      stride=len(effort))]
        command.data = effort.tolist()
        self.effort_pub.publish(command)

    def _account(self, now: float, elapsed: float, stamp: float) -> None:
        self._last_publish = now
        self.stats.commands += 1
        self.totals.commands += 1
        self.stats.compute_total += elapsed
        self.stats.compute_max = max(self.stats.compute_max, elapsed)
        if stamp > 0.0 and self.stats.ages < len(self._ages):
            self._ages[self.stats.ages] = now + elapsed - stamp
            self.stats.ages += 1

