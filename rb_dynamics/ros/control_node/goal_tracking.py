# SPDX-License-Identifier: Apache-2.0
"""A FollowJointTrajectory goal as joint_trajectory_controller (JTC) checks it: the message,
the tolerances (defaults from parameters, the goal's entries over them) and, after each
command, whether the goal runs on, succeeded or must be aborted (``GoalTracker.check``).

ROS-free: messages are read through their fields. What each check means for a client is in
docs/trajectory_controller.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rclpy.task import Future

from rb_dynamics.control import REFERENCE_MODES, ControlOutput, JointController, TrajectorySampler
from rb_dynamics.model import name_list, repeated_names

__all__ = [
    "GOAL_TOLERANCE_VIOLATED",
    "INVALID_GOAL",
    "INVALID_JOINTS",
    "OLD_HEADER_TIMESTAMP",
    "PATH_TOLERANCE_VIOLATED",
    "SUCCESSFUL",
    "GoalError",
    "GoalTracker",
    "Outcome",
    "Tolerances",
    "check_goal_message",
    "goal_tolerances",
    "resolve_tolerance",
]

# control_msgs/action/FollowJointTrajectory Result codes (the same numbers as the message)
SUCCESSFUL, INVALID_GOAL, INVALID_JOINTS, OLD_HEADER_TIMESTAMP = 0, -1, -2, -3
PATH_TOLERANCE_VIOLATED, GOAL_TOLERANCE_VIOLATED = -4, -5
ERASE = -1.0  # control_msgs/JointTolerance: -1 removes a default tolerance
FLOAT32_EPS = 1.1920929e-07  # JTC compares with -1 to float precision


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
            # set_mode drops the reference (the new mode holds the measured position); a
            # trajectory on the topic replaces it
            if controller.mode not in REFERENCE_MODES or controller.trajectory is None:
                return Outcome("abort", INVALID_GOAL, f"aborted: mode changed to "
                               f"{controller.mode}")
            return Outcome("abort", INVALID_GOAL, "Current goal preempted by a trajectory on "
                           "~/joint_trajectory.")
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
    known = set(joints)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise GoalError(INVALID_JOINTS, f"trajectory.joint_names: {name_list(unknown)} are not "
                        f"joints of this controller {list(joints)}")
    repeated = repeated_names(names)
    if repeated:
        raise GoalError(INVALID_JOINTS, f"trajectory.joint_names: {name_list(repeated)} "
                        "appear twice")
    if not trajectory.points:
        raise GoalError(INVALID_GOAL, "trajectory.points is empty")
    for k, point in enumerate(trajectory.points):
        if len(point.effort) not in (0, len(names)):
            raise GoalError(INVALID_GOAL, f"trajectory.points[{k}].effort: {len(point.effort)} "
                            f"values for {len(names)} joints (a feed-forward effort per joint, "
                            "or none)")
    last = trajectory.points[-1].velocities
    if not allow_moving_end and len(last) == len(names):
        moving = [(n, v) for n, v in zip(names, last) if abs(v) > FLOAT32_EPS]
        if moving:
            raise GoalError(INVALID_GOAL, f"the last point's velocity is not zero: {moving} "
                            "(allow_nonzero_velocity_at_trajectory_end is false)")
    if trajectory.header.stamp.sec < 0:
        raise GoalError(INVALID_GOAL, f"trajectory.header.stamp is negative "
                        f"({trajectory.header.stamp.sec} s)")
