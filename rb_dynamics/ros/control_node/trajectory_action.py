# SPDX-License-Identifier: Apache-2.0
"""``~/follow_joint_trajectory`` and ``~/controller_state``: the control node driven the way
ros2_controllers' joint_trajectory_controller (JTC) is, so MoveIt and every trajectory-sending
tool can use it.

Behaviour, as JTC does it (ros2_controllers, jazzy branch: ``joint_trajectory_controller.cpp``
``update``, ``goal_received_callback``, ``goal_accepted_callback``, ``goal_cancelled_callback``,
``validate_trajectory_msg``, ``preempt_active_goal``; ``tolerances.hpp``
``get_segment_tolerances``, ``resolve_tolerance_source``, ``check_state_tolerance_per_joint``;
``trajectory.cpp`` ``sample``), and where this node differs:

==============================  ==========================================================
goal validation                 joint names: non-empty, no repeats, each one of the node's
                                ``joints``, any order; a subset is allowed, the joints left
                                out hold their current reference (JTC with
                                ``allow_partial_joints_goal: true``) → INVALID_JOINTS.
                                Points: at least one; positions sized like joint_names,
                                velocities/accelerations empty or the same size; finite;
                                ``time_from_start`` strictly increasing; no ``effort``
                                values; the last point at rest unless
                                ``allow_nonzero_velocity_at_trajectory_end``; no
                                multi_dof_trajectory → INVALID_GOAL. A non-zero header stamp
                                + the last ``time_from_start`` in the past →
                                OLD_HEADER_TIMESTAMP. Inactive node, no model, or
                                ``mode`` gravity_compensation → INVALID_GOAL.
how a refusal is told           JTC rejects (GoalResponse.REJECT) and logs why; a ROS 2 goal
                                response carries no reason, so here the goal is accepted and
                                at once aborted with the error code and the reason as
                                ``error_string`` (as ROS 1 JTC's ``setRejected`` did). It
                                never touches the goal being executed.
time                            header stamp 0: start now; else start at the stamp. A first
                                point at ``time_from_start`` 0 is jumped to at once; before
                                it the spline runs from the current reference (``control``).
tolerances                      defaults from parameters: ``constraints.<joint>.trajectory``
                                (path, position), ``constraints.<joint>.goal`` (goal,
                                position), ``constraints.stopped_velocity_tolerance`` (goal,
                                velocity, every joint), ``constraints.goal_time``. A goal's
                                ``path_tolerance``/``goal_tolerance``/``goal_time_tolerance``
                                entry overrides per joint: > 0 is the tolerance, 0 keeps the
                                default, -1 removes it, other negatives are illegal (JTC
                                falls back to the defaults and logs; here INVALID_GOAL, as is
                                a tolerance naming an unknown joint: INVALID_JOINTS). A
                                tolerance of 0 is not checked. Acceleration tolerances are
                                accepted and not checked (no measured acceleration: JTC's
                                error has none without an acceleration state interface).
path tolerance                  checked on every command before the last point's time (and
                                on the first one): |q_d − q| or |q̇_d − q̇| above it on any
                                joint → ABORTED, PATH_TOLERANCE_VIOLATED, "Aborted due to
                                path tolerance violation" (+ which joint, error, tolerance);
                                the arm then holds its measured position.
goal tolerance                  after the last point's time: every joint inside → SUCCEEDED,
                                SUCCESSFUL, "Goal successfully reached!", the last point held.
                                Still outside ``goal_time`` after the end (``goal_time`` > 0)
                                → ABORTED, GOAL_TOLERANCE_VIOLATED, "Aborted due to
                                goal_time_tolerance exceeding by <t> seconds", hold position.
                                ``goal_time`` 0: waits as long as it takes.
preemption                      a new accepted goal aborts the active one: INVALID_GOAL,
                                "Current goal preempted by new incoming action.". A
                                trajectory on ``~/trajectory`` (JTC keeps the goal and
                                tracks it against the new trajectory), a ``mode`` change or a
                                new robot description abort it too, with INVALID_GOAL and
                                what happened.
cancel                          the active goal: CANCELED, the arm holds its measured
                                position (JTC without ``decelerate_on_cancel``).
deactivate (lifecycle)          the active goal: ABORTED, INVALID_GOAL, "Current goal
                                cancelled during deactivate transition."
feedback                        at ``action_monitor_rate`` (JTC: 20 Hz): header stamp,
                                joint_names (the node's ``joints``), desired (positions,
                                velocities, accelerations), actual (positions, velocities),
                                error = desired − actual (positions wrapped on continuous
                                joints, velocities).
~/controller_state              control_msgs/JointTrajectoryControllerState for each command
                                (``state_publish_rate`` 0) or at most that rate: header stamp
                                = the instant the state describes, joint_names, reference
                                (q_d, q̇_d, q̈_d; empty in gravity compensation, which has no
                                reference), feedback (q, q̇), error (reference − feedback),
                                output.effort (the efforts published), speed_scaling_factor
                                1; multi_dof_* empty.
==============================  ==========================================================

Threads: the tolerances are checked on the control loop's thread, under its lock, right after
each command (a few array comparisons: ~5 µs with the state snapshot); it keeps references to
the arrays the command was computed from and wakes the main executor (a guard condition) when a
goal ends or ten controller states are due (a 10 Hz timer sends what is left). Messages are
built and published, and goals finished, on the main executor (~50 µs per controller state, one
reused message); the action's execute callback is a coroutine awaiting the goal's end, so it
never blocks the executor. Without control_msgs the node runs without the action and the state
topic, and says so once.
"""

from __future__ import annotations

import array
import functools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.task import Future

from rb_dynamics.control import ControllerError, ControlOutput, JointController, TrajectorySampler
from rb_dynamics.ros import parameters as ros_params
from rb_dynamics.ros.conversions import ConversionError, seconds, trajectory_points

try:
    from control_msgs.action import FollowJointTrajectory
    from control_msgs.msg import JointTrajectoryControllerState
    MISSING: str | None = None
except ImportError as _exc:  # a machine without the ROS tools: the node runs without them
    FollowJointTrajectory = JointTrajectoryControllerState = None
    MISSING = (f"control_msgs is not installed ({_exc}): no ~/follow_joint_trajectory action "
               "and no ~/controller_state (install ros-<distro>-control-msgs)")

__all__ = ["JOINT_TOLERANCES", "MISSING", "TRAJECTORY_PARAMETERS", "GoalError", "GoalTracker",
           "Outcome", "Tolerances", "TrajectoryAction", "goal_tolerances", "resolve_tolerance"]

# control_msgs/action/FollowJointTrajectory Result codes (the same numbers as the message)
SUCCESSFUL, INVALID_GOAL, INVALID_JOINTS, OLD_HEADER_TIMESTAMP = 0, -1, -2, -3
PATH_TOLERANCE_VIOLATED, GOAL_TOLERANCE_VIOLATED = -4, -5
STATE_BATCH = 10  # controller states per executor wake at the control rate
MAX_PENDING_STATES = 1000  # older ones are dropped if the executor falls behind
ERASE = -1.0  # control_msgs/JointTolerance: -1 removes a default tolerance
FLOAT32_EPS = 1.1920929e-07  # JTC compares with -1 to float precision

# ros2_controllers' joint_trajectory_controller names, described in the node's schema
SCHEMA = ros_params.node_schema("control_node")
TRAJECTORY_PARAMETERS = SCHEMA.select(
    "constraints.goal_time", "constraints.stopped_velocity_tolerance",
    "allow_nonzero_velocity_at_trajectory_end", "action_monitor_rate", "state_publish_rate")
JOINT_TOLERANCES = SCHEMA.maps["constraints"]  # constraints.<joint>.trajectory|goal


class GoalError(ValueError):
    """A goal this controller cannot follow: ``code`` is the Result error code."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


# ----------------------------------------------------------------------------- tolerances


def resolve_tolerance(default: float, value: float, what: str) -> float:
    """JTC's ``resolve_tolerance_source``: > 0 is the tolerance, 0 keeps ``default``, -1 erases
    (0: not checked); any other value is refused here (JTC would fall back to the defaults)."""
    if not math.isfinite(value):
        raise GoalError(INVALID_GOAL, f"{what} is {value}")
    if value > 0.0:
        return value
    if abs(value - ERASE) < FLOAT32_EPS:
        return 0.0
    if value < 0.0:
        raise GoalError(INVALID_GOAL, f"{what} is {value}: a tolerance is > 0, 0 (the default) "
                        "or -1 (none)")
    return default


@dataclass
class Tolerances:
    """Per joint of the controller (its ``joints`` order); 0 means not checked."""

    path_position: np.ndarray
    path_velocity: np.ndarray
    path_acceleration: np.ndarray
    goal_position: np.ndarray
    goal_velocity: np.ndarray
    goal_acceleration: np.ndarray
    goal_time: float = 0.0

    @classmethod
    def defaults(cls, trajectory: Sequence[float], goal: Sequence[float],
                 stopped_velocity: float, goal_time: float) -> Tolerances:
        n = len(trajectory)
        return cls(np.array(trajectory, float), np.zeros(n), np.zeros(n),
                   np.array(goal, float), np.full(n, float(stopped_velocity)), np.zeros(n),
                   float(goal_time))


def goal_tolerances(defaults: Tolerances, joints: Sequence[str], path: Sequence[Any],
                    goal: Sequence[Any], goal_time: float) -> Tolerances:
    """The tolerances of one goal: its control_msgs/JointTolerance entries over ``defaults``."""
    index = {name: k for k, name in enumerate(joints)}
    out = Tolerances(*(np.array(getattr(defaults, f)) for f in (
        "path_position", "path_velocity", "path_acceleration", "goal_position",
        "goal_velocity", "goal_acceleration")), goal_time=resolve_tolerance(
        defaults.goal_time, goal_time, "goal_time_tolerance"))
    for kind, entries in (("path", path), ("goal", goal)):
        for entry in entries:
            k = index.get(entry.name)
            if k is None:
                raise GoalError(INVALID_JOINTS, f"{kind}_tolerance names joint {entry.name!r}, "
                                f"which is not one of the controller's joints {list(joints)}")
            for quantity in ("position", "velocity", "acceleration"):
                array = getattr(out, f"{kind}_{quantity}")
                array[k] = resolve_tolerance(array[k], getattr(entry, quantity),
                                             f"{kind}_tolerance {entry.name} {quantity}")
    return out


# ----------------------------------------------------------------------------- tracking


@dataclass
class Outcome:
    """How a goal ends: succeed, abort or cancel, with its result code and text."""

    kind: str  # "succeed", "abort" or "cancel"
    code: int
    text: str
    hold: bool = False  # hold the measured position from now on


def _limits(tolerance: np.ndarray) -> np.ndarray:
    return np.where(tolerance > 0.0, tolerance, np.inf)  # 0: not checked


@dataclass
class GoalTracker:
    """One goal being executed: checked against the loop's state after each command."""

    controller: JointController
    sampler: TrajectorySampler
    tolerances: Tolerances
    handle: Any = None  # the action server's goal handle
    future: Future = field(default_factory=Future)
    latest: tuple | None = None  # (t, q_d, q̇_d, q̈_d, q, q̇, e_q, e_q̇) of the last command
    outcome: Outcome | None = None
    first: bool = True

    def __post_init__(self) -> None:
        tol = self.tolerances
        self.path_q, self.path_v = _limits(tol.path_position), _limits(tol.path_velocity)
        self.goal_q, self.goal_v = _limits(tol.goal_position), _limits(tol.goal_velocity)
        self.end_time = self.sampler.end_time
        self.max_error = np.zeros(len(self.controller.joints))  # max |q_d − q| so far

    def check(self, t: float, controller: JointController, out: ControlOutput
              ) -> Outcome | None:
        """On the loop thread, after the command ``out`` for the reference sampled at ``t``:
        None while the goal runs on, else how it ended."""
        if controller is not self.controller:
            return Outcome("abort", INVALID_GOAL, "aborted: a new robot description replaced "
                           "the controller")
        if controller.trajectory is not self.sampler:
            if controller.mode != "computed_torque":
                return Outcome("abort", INVALID_GOAL, f"aborted: mode changed to "
                               f"{controller.mode}")
            return Outcome("abort", INVALID_GOAL, "Current goal preempted by a trajectory on "
                           "~/trajectory.")
        q_d, v_d, a_d = controller.last_reference
        index = controller.index  # fixed-base 1-DoF joints: q and q̇ share the index
        e_q = out.position_error  # q_d − q, wrapped on continuous joints, joints order
        e_v = v_d[index] - controller.v[index]
        self.latest = (t, q_d, v_d, a_d, controller.q, controller.v, e_q, e_v)
        abs_q, abs_v = np.abs(e_q), np.abs(e_v)
        np.maximum(self.max_error, abs_q, out=self.max_error)
        since_end = t - self.end_time
        if since_end < 0.0 or self.first:  # JTC: also on the first sample, if it is the end
            self.first = False
            bad = (abs_q > self.path_q) | (abs_v > self.path_v)
            if bad.any():
                return Outcome("abort", PATH_TOLERANCE_VIOLATED, "Aborted due to path "
                               "tolerance violation: " + self._which(bad, e_q, e_v, "path"),
                               hold=True)
            if since_end < 0.0:
                return None
        outside = (abs_q > self.goal_q) | (abs_v > self.goal_v)
        if not outside.any():
            return Outcome("succeed", SUCCESSFUL, "Goal successfully reached!")
        if 0.0 < self.tolerances.goal_time < since_end:
            return Outcome("abort", GOAL_TOLERANCE_VIOLATED, "Aborted due to goal_time_tolerance "
                           f"exceeding by {since_end:.6f} seconds: "
                           + self._which(outside, e_q, e_v, "goal"), hold=True)
        return None

    def _which(self, bad: np.ndarray, e_q: np.ndarray, e_v: np.ndarray, kind: str) -> str:
        tol = self.tolerances
        parts = []
        for k in np.flatnonzero(bad):
            name = self.controller.joints[k]
            limit_q = getattr(tol, f"{kind}_position")[k]
            limit_v = getattr(tol, f"{kind}_velocity")[k]
            if limit_q > 0 and abs(e_q[k]) > limit_q:
                parts.append(f"{name} position error {e_q[k]:.3g} (tolerance {limit_q:.3g})")
            if limit_v > 0 and abs(e_v[k]) > limit_v:
                parts.append(f"{name} velocity error {e_v[k]:.3g} (tolerance {limit_v:.3g})")
        return "; ".join(parts)


# ----------------------------------------------------------------------------- goals


def check_goal_message(goal: Any, joints: Sequence[str], allow_moving_end: bool) -> None:
    """What JTC's ``validate_trajectory_msg`` checks on the message itself (GoalError)."""
    trajectory = goal.trajectory
    multi = goal.multi_dof_trajectory
    if len(multi.joint_names) or len(multi.points):
        raise GoalError(INVALID_GOAL, "multi_dof_trajectory is not supported: the controller "
                        "drives 1-DoF joints (use trajectory)")
    names = list(trajectory.joint_names)
    if not names:
        raise GoalError(INVALID_JOINTS, "trajectory.joint_names is empty")
    unknown = [n for n in names if n not in joints]
    if unknown:
        raise GoalError(INVALID_JOINTS, f"trajectory.joint_names: {unknown} are not joints of "
                        f"this controller {list(joints)}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise GoalError(INVALID_JOINTS, f"trajectory.joint_names: {repeated} appear twice")
    if not trajectory.points:
        raise GoalError(INVALID_GOAL, "trajectory.points is empty")
    for k, point in enumerate(trajectory.points):
        if len(point.effort):
            raise GoalError(INVALID_GOAL, f"trajectory.points[{k}].effort: efforts are not "
                            "taken (the controller computes them); leave it empty")
    last = trajectory.points[-1].velocities
    if not allow_moving_end and len(last) == len(names):
        moving = [(n, v) for n, v in zip(names, last) if abs(v) > FLOAT32_EPS]
        if moving:
            raise GoalError(INVALID_GOAL, f"the last point's velocity is not zero: {moving} "
                            "(allow_nonzero_velocity_at_trajectory_end is false)")
    if trajectory.header.stamp.sec < 0:
        raise GoalError(INVALID_GOAL, f"trajectory.header.stamp is negative "
                        f"({trajectory.header.stamp.sec} s)")


def _time_msg(t: float, message: Any) -> Any:
    sec = math.floor(t)
    nanosec = int(round((t - sec) * 1e9))
    if nanosec >= 1_000_000_000:
        sec, nanosec = sec + 1, nanosec - 1_000_000_000
    message.sec, message.nanosec = int(sec), nanosec
    return message


def _doubles(values: Any) -> array.array:
    """A float64 array.array, which a message's double sequence takes without a copy per
    element."""
    out = array.array("d")
    out.frombytes(np.ascontiguousarray(values, dtype=float).tobytes())
    return out


def _fill(point: Any, t_from_start: float | None, *arrays: np.ndarray) -> None:
    """positions, velocities, accelerations of a JointTrajectoryPoint (as many as given)."""
    for name, values in zip(("positions", "velocities", "accelerations"), arrays):
        setattr(point, name, _doubles(values))
    if t_from_start is not None:
        _time_msg(max(t_from_start, 0.0), point.time_from_start)


class TrajectoryAction:
    """The action server, the state topic and their parameters, on the control node ``node``
    driving ``loop`` (a ``ControlLoop``). ``is_active`` says whether the node is active."""

    def __init__(self, node: Node, loop: Any, is_active: Callable[[], bool]) -> None:
        self.node, self.loop, self.is_active = node, loop, is_active
        self.log = node.get_logger()
        ros_params.declare(node, TRAJECTORY_PARAMETERS)
        self.settings = ros_params.read(node, TRAJECTORY_PARAMETERS)
        self._goal: GoalTracker | None = None  # the goal being executed (under loop.lock)
        self._finished: list[GoalTracker] = []  # ended on the loop thread, not yet told
        # controller states due for publishing (references to the loop's arrays), told to the
        # executor in batches: one executor pass costs more than building a message
        self._states: deque[tuple] = deque(maxlen=MAX_PENDING_STATES)
        self._next_state = -math.inf
        self._new_joints: list[str] = []  # joints whose constraints.* are to be declared
        node.add_on_set_parameters_callback(self._on_set_parameters)
        group = ReentrantCallbackGroup()
        # woken from the loop thread (a goal ended, a state is due) and the model loader
        self._news = node.create_guard_condition(self._on_news, callback_group=group)
        self.server = None
        if MISSING is not None:
            self.log.warning(MISSING)
            return
        from rclpy.action import ActionServer

        self.state_pub = node.create_publisher(JointTrajectoryControllerState,
                                               "~/controller_state", 10)
        self._state_msg = JointTrajectoryControllerState(speed_scaling_factor=1.0)  # reused
        # the few states of a batch that was not filled (the loop stopped): out within 0.1 s
        node.create_timer(0.1, self._on_news, callback_group=group)
        self.server = ActionServer(
            node, FollowJointTrajectory, "~/follow_joint_trajectory",
            execute_callback=self._unexpected, goal_callback=self._on_goal,
            handle_accepted_callback=self._on_accepted, cancel_callback=self._on_cancel,
            callback_group=group)
        self._feedback_timer = node.create_timer(1.0 / self.settings["action_monitor_rate"],
                                                 self._publish_feedback, callback_group=group)
        self._feedback_timer.cancel()  # runs while a goal does
        loop.monitor = self._on_command

    def destroy(self) -> None:
        self.loop.monitor = None
        if self.server is not None:
            self.server.destroy()

    # ------------------------------------------------------------------ parameters

    def controller_installed(self, controller: JointController | None) -> None:
        """Declare ``constraints.<joint>.trajectory|goal`` for a new controller's joints (on
        the executor: the model loader runs on a thread of its own)."""
        if controller is not None:
            with self.loop.lock:
                self._new_joints.extend(controller.joints)
            self._news.trigger()

    def _declare_joint_constraints(self, joints: list[str]) -> None:
        for joint in joints:
            for name, spec in JOINT_TOLERANCES.specs(joint).items():
                if self.node.has_parameter(name):
                    continue
                try:
                    self.node.declare_parameter(name, spec.default, spec.descriptor())
                except Exception as exc:  # noqa: BLE001 - a bad value from a file
                    self.log.error(f"{name}: {exc}; using {spec.default} (not checked)")
                    self.node.declare_parameter(name, spec.default, spec.descriptor(),
                                                ignore_override=True)

    def _on_set_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        try:
            for p in parameters:
                if p.name in TRAJECTORY_PARAMETERS:
                    self.settings[p.name] = ros_params.check(
                        p.name, TRAJECTORY_PARAMETERS[p.name], p.value)
                elif (spec := JOINT_TOLERANCES.spec_of(p.name)) is not None:
                    ros_params.check(p.name, spec, p.value)
        except ValueError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def _default_tolerances(self, joints: list[str]) -> Tolerances:
        def value(name: str) -> float:
            return float(self.node.get_parameter_or(name, Parameter(name, value=0.0)).value)

        return Tolerances.defaults(
            [value(f"constraints.{j}.trajectory") for j in joints],
            [value(f"constraints.{j}.goal") for j in joints],
            self.settings["constraints.stopped_velocity_tolerance"],
            self.settings["constraints.goal_time"])

    # ------------------------------------------------------------------ loop thread

    def _on_command(self, t: float, controller: JointController, out: ControlOutput) -> None:
        """After each command, on the loop thread under its lock: microseconds."""
        wake = False
        if t >= self._next_state:
            rate = self.settings["state_publish_rate"]
            self._next_state = t + 1.0 / rate if rate > 0.0 else -math.inf
            self._states.append((t, controller, controller.trajectory, controller.q,
                                 controller.v, controller.last_reference, out))
            wake = len(self._states) >= (STATE_BATCH if rate == 0.0 or rate > 100.0 else 1)
        goal = self._goal
        if goal is not None:
            outcome = goal.check(t, controller, out)
            if outcome is not None:
                self._end(goal, outcome, controller)
                wake = True
        if wake:
            self._news.trigger()

    def _end(self, goal: GoalTracker, outcome: Outcome, controller: JointController | None
             ) -> None:
        """The goal ends (under loop.lock); the executor tells its client."""
        goal.outcome = outcome
        if self._goal is goal:
            self._goal = None
        if outcome.hold and controller is not None and controller.q is not None:
            self._hold(goal, controller)
        self._finished.append(goal)

    def _hold(self, goal: GoalTracker, controller: JointController) -> None:
        """JTC's ``set_hold_position``: the measured position, at rest (under loop.lock)."""
        if controller.trajectory is goal.sampler:
            controller.trajectory = None
            controller.hold_position = controller.q.copy()
            self.loop.hold_reported = True  # not "no reference yet": it holds on purpose

    # ------------------------------------------------------------------ executor

    def _on_news(self) -> None:
        with self.loop.lock:
            finished, self._finished = self._finished, []
            states = list(self._states)
            self._states.clear()
            joints, self._new_joints = self._new_joints, []
        if joints:
            self._declare_joint_constraints(joints)
        for goal in finished:
            self._tell(goal)
        if self.server is not None:
            for state in states:
                self._publish_state(*state)

    def _tell(self, goal: GoalTracker) -> None:
        outcome = goal.outcome
        figures = (f" (max |position error| {goal.max_error.max():.2e} rad)"
                   if goal.latest is not None else "")
        if outcome.kind == "succeed":
            self.log.info(f"{outcome.text}{figures}")
        else:
            self.log.warning(f"goal {outcome.kind}: {outcome.text}{figures}")
        if not goal.future.done():
            goal.future.set_result(outcome)
        if self._goal is None:
            self._feedback_timer.cancel()

    def abort_active(self, text: str, code: int = INVALID_GOAL) -> None:
        """End the goal being executed, if any (deactivation); the arm holds its position."""
        with self.loop.lock:
            goal = self._goal
            if goal is None:
                return
            self._end(goal, Outcome("abort", code, text, hold=True), self.loop.controller)
            self._finished.remove(goal)
        self._tell(goal)

    # -- the action server's callbacks

    def _on_goal(self, goal: Any) -> Any:
        from rclpy.action import GoalResponse

        return GoalResponse.ACCEPT  # refusals are told with a reason: see _on_accepted

    def _prepare(self, goal: Any) -> GoalTracker:
        """A tracker for ``goal`` (GoalError with the Result code and the reason)."""
        if not self.is_active():
            raise GoalError(INVALID_GOAL, "the controller is not active (lifecycle): "
                            f"ros2 lifecycle set {self.node.get_fully_qualified_name()} activate")
        controller = self.loop.controller
        if controller is None:
            raise GoalError(INVALID_GOAL, "no robot description loaded yet" if getattr(
                self.node, "model", None) is None else "this model has nothing to command")
        if controller.mode != "computed_torque":
            raise GoalError(INVALID_GOAL, f"the controller is in {controller.mode!r} mode; set "
                            "mode to 'computed_torque' to follow trajectories (ros2 param set "
                            f"{self.node.get_fully_qualified_name()} mode computed_torque)")
        check_goal_message(goal, controller.joints,
                           self.settings["allow_nonzero_velocity_at_trajectory_end"])
        trajectory = goal.trajectory
        now = self.loop._now()
        stamp = seconds(trajectory.header.stamp)
        try:
            points = trajectory_points(trajectory.points, "trajectory.points")
        except ConversionError as exc:
            raise GoalError(INVALID_GOAL, str(exc)) from None
        end = stamp + points[-1].time
        if stamp > 0.0 and end < now:
            raise GoalError(OLD_HEADER_TIMESTAMP, f"Received trajectory with non-zero start "
                            f"time ({stamp:.6f}) that ends in the past ({end:.6f} < now "
                            f"{now:.6f})")
        tolerances = goal_tolerances(self._default_tolerances(controller.joints),
                                     controller.joints, goal.path_tolerance,
                                     goal.goal_tolerance, seconds(goal.goal_time_tolerance))
        try:
            sampler = controller.prepare_trajectory(list(trajectory.joint_names), points,
                                                    stamp if stamp > 0.0 else now, now)
        except ControllerError as exc:
            raise GoalError(INVALID_GOAL, str(exc)) from None
        return GoalTracker(controller, sampler, tolerances)

    def _on_accepted(self, handle: Any) -> None:
        try:
            goal = self._prepare(handle.request)
        except GoalError as exc:
            self.log.error(f"goal refused: {exc}")
            handle.execute(functools.partial(self._refuse, exc))
            return
        goal.handle = handle
        with self.loop.lock:
            if self.loop.controller is not goal.controller or not self.is_active():
                refused = GoalError(INVALID_GOAL, "the controller changed while the goal was "
                                    "being prepared; send it again")
            else:
                refused = None
                previous = self._goal
                if previous is not None:
                    self._end(previous, Outcome("abort", INVALID_GOAL, "Current goal "
                                                "preempted by new incoming action."), None)
                goal.controller.trajectory = goal.sampler
                self.loop.hold_reported = False
                self._goal = goal
        if refused is not None:
            handle.execute(functools.partial(self._refuse, refused))
            return
        self.log.info(f"goal accepted: {len(goal.sampler.times) - 1} points over "
                      f"{goal.sampler.times[-1]:.3f} s")
        self._on_news()  # tell a preempted goal now
        self._feedback_timer.reset()
        handle.execute(functools.partial(self._execute, goal))

    def _result(self, code: int, text: str) -> Any:
        return FollowJointTrajectory.Result(error_code=code, error_string=text)

    def _unexpected(self, handle: Any) -> Any:
        return self._refuse(GoalError(INVALID_GOAL, "internal error: goal not prepared"),
                            handle)

    def _refuse(self, error: GoalError, handle: Any) -> Any:
        handle.abort()
        return self._result(error.code, str(error))

    async def _execute(self, goal: GoalTracker, handle: Any) -> Any:
        outcome = await goal.future
        {"succeed": handle.succeed, "abort": handle.abort, "cancel": handle.canceled}[
            outcome.kind]()
        return self._result(outcome.code, outcome.text)

    def _on_cancel(self, handle: Any) -> Any:
        from rclpy.action import CancelResponse

        with self.loop.lock:
            goal = self._goal
            if goal is None or goal.handle.goal_id != handle.goal_id:
                return CancelResponse.REJECT  # not being executed (any more)
            self._end(goal, Outcome("cancel", SUCCESSFUL, "Goal cancelled: holding position",
                                    hold=True), self.loop.controller)
            self._finished.remove(goal)
        self._tell(goal)
        return CancelResponse.ACCEPT

    # -- messages

    def _publish_feedback(self) -> None:
        goal = self._goal
        latest = goal.latest if goal is not None else None
        if latest is None:
            return
        t, q_d, v_d, a_d, q, v, e_q, e_v = latest
        index = goal.controller.index
        feedback = FollowJointTrajectory.Feedback(joint_names=goal.controller.joints)
        _time_msg(t, feedback.header.stamp)
        since_start = t - goal.sampler.start_time
        _fill(feedback.desired, since_start, q_d[index], v_d[index], a_d[index])
        _fill(feedback.actual, since_start, q[index], v[index])
        _fill(feedback.error, since_start, e_q, e_v)
        goal.handle.publish_feedback(feedback)

    def _publish_state(self, t: float, controller: JointController,
                       sampler: TrajectorySampler | None, q: np.ndarray, v: np.ndarray,
                       reference: tuple | None, out: ControlOutput) -> None:
        """One ~/controller_state, into the one message kept for it (array fields are taken
        as they are: ~10 µs against ~45 µs for a new message from lists)."""
        index = controller.index
        msg = self._state_msg
        if list(msg.joint_names) != controller.joints:  # a new model
            msg.joint_names = controller.joints
        _time_msg(t, msg.header.stamp)
        msg.feedback.positions, msg.feedback.velocities = _doubles(q[index]), _doubles(v[index])
        r, e = msg.reference, msg.error
        if reference is None:  # gravity compensation: no reference
            r.positions = r.velocities = r.accelerations = e.positions = e.velocities = \
                _doubles(())
        else:
            q_d, v_d, a_d = reference
            r.positions, r.velocities = _doubles(q_d[index]), _doubles(v_d[index])
            r.accelerations = _doubles(a_d[index])
            e.positions = _doubles(out.position_error)
            e.velocities = _doubles(v_d[index] - v[index])
        since = t - sampler.start_time if sampler is not None and reference is not None else 0.0
        _time_msg(max(since, 0.0), r.time_from_start)
        _time_msg(max(since, 0.0), e.time_from_start)
        msg.output.effort = _doubles(out.effort)
        self.state_pub.publish(msg)
