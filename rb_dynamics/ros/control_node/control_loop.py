# SPDX-License-Identifier: Apache-2.0
"""The control loop: joint states in, efforts out, on a companion node spun on its own thread.

An rclpy executor pass walks every entity of the nodes it spins (services, parameter services,
timers, subscriptions): one pass cost 136 µs for the full control node against 82 µs for a node
with just the loop's two topics, and a long service call would hold the loop behind it. So the
loop lives in a small node of its own (``<name>_control_loop``: no parameters, no rosout), spun
by a ``SpinThread``. Its topic names are resolved by the main node, so the main node's
remappings and namespace apply.

Only the newest queued state is answered: a command for an older state is stale before it is
sent, and answering a backlog would keep the loop a backlog behind (the skipped ones are counted
as superseded). ``lock`` keeps the controller consistent with the main thread, which swaps in
models, trajectories and parameters: every such change is prepared outside it and installed
with a reference assignment, so the loop never waits more than microseconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension

from rb_dynamics.control import ControllerError, ControlOutput, JointController
from rb_dynamics.ros.diagnostics import Statistics, Totals
from rb_dynamics.ros.runtime import SpinThread, Warnings, take_queued

__all__ = ["ControlLoop"]

AGE_SLOTS = 4096  # state ages kept per diagnostics period (preallocated: no allocation per state)


class ControlLoop:
    """Answers each joint state with an effort command from ``controller`` (None: nothing)."""

    def __init__(self, node: Node, qos: QoSProfile, warn: Warnings) -> None:
        self.node, self.warn = node, warn
        self.lock = threading.Lock()
        self.controller: JointController | None = None
        self.publishing = True  # False: states are taken and counted, nothing is published
        self.min_period = 0.0  # s between commands (max_publish_rate); 0: one per state
        self.stats, self.totals = Statistics(), Totals()
        self._ages = np.zeros(AGE_SLOTS)
        self._last_publish = -np.inf
        self._command = Float64MultiArray()  # reused: the control path allocates little
        self.hold_reported = False
        # called after each published command, on this thread under ``lock``, with the instant
        # the reference was sampled at: it must take microseconds (the trajectory action)
        self.monitor: Callable[[float, JointController, ControlOutput], None] | None = None
        # called with each joint state after its command is out (payload_services records
        # the resting ones for identification)
        self.recorder: Callable[[JointState], None] | None = None
        # called (on this thread) once a controller has its first state: a trajectory that
        # arrived before it can start then
        self.first_state: Callable[[], None] | None = None
        companion = Node(f"{node.get_name()}_control_loop", namespace=node.get_namespace(),
                         context=node.context, use_global_arguments=False,
                         start_parameter_services=False, enable_rosout=False)
        self.effort_pub = companion.create_publisher(
            Float64MultiArray, node.resolve_topic_name("~/effort_commands"), 100)
        self.state_sub = companion.create_subscription(
            JointState, node.resolve_topic_name("joint_states"), self._on_joint_state, qos)
        self._spin = SpinThread(companion, "control loop")

    def stop(self) -> None:
        self._spin.stop()

    def take_period(self) -> tuple[Statistics, np.ndarray]:
        """The period's statistics and state ages; a new period starts."""
        with self.lock:
            stats, self.stats = self.stats, Statistics()
            return stats, self._ages[:stats.ages].copy()

    def problem(self, text: str, key: str | None = None) -> None:
        """A throttled warning, also the period's last problem on /diagnostics."""
        self.warn(text, key)
        self.stats.last_problem = text

    def _now(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

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
        recorder = self.recorder
        if recorder is not None:
            recorder(msg)

    def _control(self, msg: JointState) -> bool:
        """Answers ``msg`` with a command; False when none was published (the reason, if it is
        a problem, goes to the log and /diagnostics)."""
        controller = self.controller
        if controller is None:
            return False
        now = self._now()
        if msg.header.stamp.sec < 0:
            # a clock before the epoch is a driver fault; its state cannot be trusted either
            self.problem(f"joint_states: negative stamp {msg.header.stamp.sec} s; not "
                         "publishing", "negative stamp")
            return False
        first = controller.q is None
        try:
            controller.update_state(msg.name, msg.position, msg.velocity, now)
        except ControllerError as exc:
            self.problem(f"{exc}; not publishing")
            return False
        if first and self.first_state is not None:
            self.first_state()
        self.stats.states += 1
        if not self.publishing or now - self._last_publish < self.min_period:
            return False
        started = time.perf_counter()
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        # the reference is sampled at the instant the state describes, when it is stamped
        reference_time = stamp if stamp > 0.0 else now
        try:
            out = controller.compute(now, reference_time)
        except ControllerError as exc:
            self.problem(str(exc), "compute")
            return False
        self._publish(out.effort)
        elapsed = time.perf_counter() - started
        self._account(now, elapsed, stamp)
        if self.monitor is not None:
            self.monitor(reference_time, controller, out)
        if out.clamped:
            self.stats.clamped.update(out.clamped)
            self.problem(f"effort clamped to the limit on {out.clamped}", "clamp")
        if controller.mode == "computed_torque" and controller.trajectory is None \
                and not self.hold_reported:
            self.node.get_logger().info("computed torque: no reference yet, holding the "
                                        "measured position (gravity + PD)")
            self.hold_reported = True
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
