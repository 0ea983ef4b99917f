# SPDX-License-Identifier: Apache-2.0
"""``~/follow_joint_trajectory`` and ``~/controller_state``: the control node driven the way
ros2_controllers' joint_trajectory_controller (JTC) is, so MoveIt and every trajectory-sending
tool can use it. The behaviour (goal validation, how a refusal is told, time, tolerances,
preemption, cancel, deactivation, feedback, the state topic) and where it differs from JTC are
in docs/trajectory_controller.md; the checks themselves are in ``goal_tracking``.

Threads: the tolerances are checked on the control loop's thread, under its lock, right after
each command (a few array comparisons), and the controller state due then is built and
published there too (one reused message, after the command went out): a hand-off to the main
executor would cost a pass over all the node's entities, more than the message. The loop wakes
the main executor (a guard condition) only when a goal ends; goals are finished there, and the
action's execute callback is a coroutine awaiting the goal's end, so it never blocks the
executor. Without control_msgs the node runs without the action and the state topic, and says
so once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node

from rb_dynamics.control import (
    REFERENCE_MODES,
    ControllerError,
    ControlOutput,
    JointController,
)
from rb_dynamics.ros.conversions import (
    ConversionError,
    to_seconds,
    trajectory_points,
)
from rb_dynamics.ros.environment import ros_distro
from rb_dynamics.ros.rclpy_private import action_server_on_clock
from rb_dynamics.ros.runtime import release_gradually

from .control_loop import ControlLoop
from .controller_messages import fill_controller_state, fill_feedback, new_controller_state
from .goal_tracking import (
    INVALID_GOAL,
    OLD_HEADER_TIMESTAMP,
    SUCCESSFUL,
    GoalError,
    GoalTracker,
    Outcome,
    check_goal_message,
    goal_tolerances,
)
from .trajectory_parameters import JOINT_TOLERANCES, TRAJECTORY_PARAMETERS, TrajectoryParameters

try:
    from control_msgs.action import FollowJointTrajectory
    from control_msgs.msg import JointTrajectoryControllerState
    MISSING: str | None = None
except ImportError as _exc:  # a machine without the ROS tools: the node runs without them
    FollowJointTrajectory = JointTrajectoryControllerState = None
    MISSING = (f"control_msgs is not installed ({_exc}): no ~/follow_joint_trajectory action "
               "and no ~/controller_state (install ros-<distro>-control-msgs)")

__all__ = ["JOINT_TOLERANCES", "MISSING", "TRAJECTORY_PARAMETERS", "TrajectoryAction"]


def inactive_reason(state: str, node_name: str) -> str:
    """Why a node in lifecycle ``state`` (not active) takes no goal, and what makes it take
    them: ``activate`` from inactive, ``configure`` first from unconfigured; from finalized
    nothing (a new process)."""
    if state == "finalized":
        return ("the node is finalized (shut down): it takes no goals; start a new node to "
                "follow trajectories")
    first = (f" (it is unconfigured: ros2 lifecycle set {node_name} configure first)"
             if state == "unconfigured" else "")
    return (f"the controller is not active (lifecycle): ros2 lifecycle set {node_name} "
            f"activate{first}")


# rcl_action times a finished goal's result from the goal's stamp (the node's clock) before
# Jazzy, from the goal's end on the server's own clock since (ros2/rcl#1121)
RESULT_TIMED_BY_GOAL_STAMP = ("foxy", "galactic", "humble", "iron")


def result_clock(node: Node) -> Clock:
    """The clock the action server times its results' expiry with (``action_result_timeout``):
    a steady clock of its own where rcl_action times it from the goal's end on that clock,
    else ``node``'s. On sim time, the node's clock made the server's expiry timer, cancelled
    between goals and past due, have rcl trigger its guard condition at every /clock message:
    the node's executor woke at every simulated step for nothing to do (a pass over all its
    entities, ~2 ms of Python)."""
    if ros_distro() in RESULT_TIMED_BY_GOAL_STAMP:
        return node.get_clock()
    return Clock(clock_type=ClockType.STEADY_TIME)


class TrajectoryAction:
    """The action server, the state topic and their parameters, on the control node ``node``
    driving ``loop``. ``lifecycle_state`` gives the node's state (goals while "active"),
    ``has_model`` whether it has a robot model."""

    def __init__(self, node: Node, loop: ControlLoop, lifecycle_state: Callable[[], str],
                 has_model: Callable[[], bool]) -> None:
        self.node, self.loop, self.has_model = node, loop, has_model
        self.lifecycle_state = lifecycle_state
        self.log = node.get_logger()
        self.parameters = TrajectoryParameters(node)
        self.settings = self.parameters.settings  # checked values, kept current
        self._goal: GoalTracker | None = None  # the goal being executed (under loop.lock)
        self._finished: list[GoalTracker] = []  # ended on the loop thread, not yet told
        self._next_state = -math.inf  # when the next ~/controller_state is due (loop thread)
        self._new_joints: list[str] = []  # joints whose constraints.* are to be declared
        self._prepared: dict[int, GoalTracker] = {}  # goal callback → accepted callback
        self._group = group = ReentrantCallbackGroup()
        # woken from the loop thread (a goal ended) and the model loader
        self._news = node.create_guard_condition(self._on_news, callback_group=group)
        self.server = None
        if MISSING is not None:
            self.log.warning(MISSING)
            return
        self.state_pub = loop.publisher(JointTrajectoryControllerState, "~/controller_state")
        self._state_msg = new_controller_state(JointTrajectoryControllerState)  # reused
        self.server = action_server_on_clock(
            node, result_clock(node), FollowJointTrajectory, "~/follow_joint_trajectory",
            execute_callback=self._unexpected, goal_callback=self._on_goal,
            handle_accepted_callback=self._on_accepted, cancel_callback=self._on_cancel,
            callback_group=group,
            # a finished goal's request (all its points) is kept with its result until then
            result_timeout=self.settings["action_result_timeout"])
        # exists while a goal runs (made at the accept, destroyed when the last goal is told):
        # a timer kept cancelled between goals would still be in every wait set of the executor
        self._feedback_timer = None
        loop.set_command_monitor(self._on_command)
        loop.set_fault_listener(self._on_fault)

    def destroy(self) -> None:
        self.loop.set_command_monitor(None)
        self.loop.set_fault_listener(None)
        if self.server is not None:
            self.server.destroy()

    # ------------------------------------------------------------------ parameters

    def controller_installed(self, controller: JointController | None, model: str) -> None:
        """A new model (``model``: its name) and its controller are in: the goal being executed
        ends (its trajectory was for the old one), and ``constraints.<joint>.trajectory|goal``
        are declared for the new joints (on the executor: the model loader runs on a thread of
        its own)."""
        with self.loop.lock:
            goal = self._goal
            if goal is not None and goal.controller is not controller:
                self._end(goal, Outcome("abort", INVALID_GOAL, "Aborted: a new robot "
                                        f"description ({model!r}) replaced the controller"),
                          None)
            if controller is not None:
                self._new_joints.extend(controller.joints)
        self._news.trigger()

    # ------------------------------------------------------------------ loop thread

    def _on_command(self, t: float, controller: JointController, out: ControlOutput) -> None:
        """After each command, on the loop thread under its lock: the goal's tolerances and the
        controller state, if one is due (tens of microseconds)."""
        rate = self.settings["state_publish_rate"]
        if self.server is not None and self.state_pub.listened() and (
                rate <= 0.0 or not 0.0 < self._next_state - t <= 1.0 / rate):  # due, or time
            self._next_state = t + 1.0 / rate if rate > 0.0 else -math.inf  # went back
            fill_controller_state(self._state_msg, t, controller, controller.trajectory,
                                  controller.q, controller.v, controller.last_reference, out)
            self.state_pub.publish(self._state_msg)
        goal = self._goal
        if goal is not None:
            outcome = goal.check(t, controller, out)
            if outcome is not None:
                self._end(goal, outcome, controller)
                self._news.trigger()

    def _on_fault(self, kind: str, why: str, controller: JointController) -> None:
        """The loop cannot follow the reference (on its thread, under its lock): the goal ends.
        Stale states: its reference is dropped (the next fresh state is held where measured);
        a non-finite effort or time that went back: the measured position is held."""
        goal = self._goal
        if goal is None:
            return
        if kind == "stale":
            outcome = Outcome("abort", INVALID_GOAL, f"Aborted: joint states stopped: {why}")
            # not restarted when states come back
            controller.drop_trajectory(goal.sampler)
        else:
            outcome = Outcome("abort", INVALID_GOAL, f"Aborted: {why}", hold=True)
        self._end(goal, outcome, controller)
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
            controller.hold_measured()
            self.loop.holding_on_purpose()

    # ------------------------------------------------------------------ executor

    def _on_news(self) -> None:
        with self.loop.lock:
            finished, self._finished = self._finished, []
            joints, self._new_joints = self._new_joints, []
        if joints:
            self.parameters.declare_joint_constraints(joints)
        for goal in finished:
            self._tell(goal)

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
        if self._goal is None and self._feedback_timer is not None:
            self.node.destroy_timer(self._feedback_timer)
            self._feedback_timer = None

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
        """JTC's ``goal_received_callback``: a goal that cannot be followed is rejected (the
        client sees ``accepted`` False; the reason and error code go to the log, as JTC)."""
        from rclpy.action import GoalResponse

        try:
            tracker = self._prepare(goal)
        except GoalError as exc:
            self.log.error(f"goal rejected (error_code {exc.code}): {exc}")
            release_gradually(goal.trajectory.points)  # rclpy drops the request next
            return GoalResponse.REJECT
        self._prepared[id(goal)] = tracker  # the same request object comes to _on_accepted
        return GoalResponse.ACCEPT

    def _prepare(self, goal: Any) -> GoalTracker:
        """A tracker for ``goal`` (GoalError with the Result code and the reason)."""
        if self.lifecycle_state() != "active":
            raise GoalError(INVALID_GOAL, inactive_reason(self.lifecycle_state(),
                                                          self.node.get_fully_qualified_name()))
        controller = self.loop.controller
        if controller is None:
            raise GoalError(INVALID_GOAL, "this model has nothing to command" if
                            self.has_model() else "no robot description loaded yet")
        if controller.refusing:  # a latched collision (contact.py)
            raise GoalError(INVALID_GOAL, controller.refusing)
        if controller.mode not in REFERENCE_MODES:
            raise GoalError(INVALID_GOAL, f"the controller is in {controller.mode!r} mode; set "
                            f"mode to one of {REFERENCE_MODES} to follow trajectories (ros2 "
                            f"param set {self.node.get_fully_qualified_name()} mode "
                            "computed_torque)")
        if self.loop.stability.problem is not None:
            raise GoalError(INVALID_GOAL, f"the controller is not commanding: "
                            f"{self.loop.stability.problem}")
        check_goal_message(goal, controller.joints,
                           self.settings["allow_nonzero_velocity_at_trajectory_end"])
        trajectory = goal.trajectory
        now = self.loop.now()
        stamp = to_seconds(trajectory.header.stamp)
        try:
            points = trajectory_points(trajectory.points, "trajectory.points")
        except ConversionError as exc:
            raise GoalError(INVALID_GOAL, str(exc)) from None
        end = stamp + points[-1].time
        if stamp > 0.0 and end < now:
            raise GoalError(OLD_HEADER_TIMESTAMP, f"Received trajectory with non-zero start "
                            f"time ({stamp:.6f}) that ends in the past ({end:.6f} < now "
                            f"{now:.6f})")
        tolerances = goal_tolerances(self.parameters.default_tolerances(controller.joints),
                                     controller.joints, goal.path_tolerance,
                                     goal.goal_tolerance, to_seconds(goal.goal_time_tolerance))
        try:
            sampler = controller.prepare_trajectory(list(trajectory.joint_names), points,
                                                    stamp if stamp > 0.0 else now, now)
        except ControllerError as exc:
            raise GoalError(INVALID_GOAL, str(exc)) from None
        return GoalTracker(controller, sampler, tolerances)

    def _on_accepted(self, handle: Any) -> None:
        goal = self._prepared.pop(id(handle.request), None)
        if goal is None:  # not through _on_goal: never expected
            handle.execute(self._unexpected)
            return
        # rclpy keeps the request as long as the goal handle (to action_result_timeout after
        # the end); its points live on in the sampler's arrays: free their objects now
        release_gradually(handle.request.trajectory.points)
        goal.handle = handle
        with self.loop.lock:
            if self.loop.controller is not goal.controller or self.lifecycle_state() != "active":
                refused = GoalError(INVALID_GOAL, "the controller changed while the goal was "
                                    "being prepared; send it again")
            else:
                refused = None
                previous = self._goal
                if previous is not None:
                    self._end(previous, Outcome("abort", INVALID_GOAL, "Current goal "
                                                "preempted by new incoming action."), None)
                goal.controller.follow(goal.sampler)
                self.loop.reference_changed()
                self._goal = goal
        if refused is not None:
            handle.execute(functools.partial(self._refuse, refused))
            return
        self.log.info(f"goal accepted: {len(goal.sampler.times) - 1} points over "
                      f"{goal.sampler.times[-1]:.3f} s")
        self._on_news()  # tell a preempted goal now
        if self._feedback_timer is None:
            self._feedback_timer = self.node.create_timer(
                1.0 / self.settings["action_monitor_rate"], self._publish_feedback,
                callback_group=self._group)
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
                # JTC's goal_cancelled_callback accepts whatever it is asked to cancel; a goal
                # the node does not execute ends with the outcome it has
                return CancelResponse.ACCEPT
            self._end(goal, Outcome("cancel", SUCCESSFUL, "Goal cancelled: holding position",
                                    hold=True), self.loop.controller)
            self._finished.remove(goal)
        self._tell(goal)
        return CancelResponse.ACCEPT

    # -- messages

    def _publish_feedback(self) -> None:
        goal = self._goal
        if goal is None or goal.latest is None:
            return
        feedback = FollowJointTrajectory.Feedback()
        fill_feedback(feedback, goal)
        goal.handle.publish_feedback(feedback)
