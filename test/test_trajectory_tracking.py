# SPDX-License-Identifier: Apache-2.0
"""The goal logic of ~/follow_joint_trajectory without processes: JTC's tolerance rules, when a
goal succeeds or aborts, and what a goal message may hold (ros/control_node/goal_tracking.py).

Messages are plain namespaces with the fields of control_msgs' (so this runs without
control_msgs); the controller is the real one on the bundled arm.
"""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.control import JointController, TrajectoryPoint
from rb_dynamics.model import load_model
from rb_dynamics.ros.control_node.goal_tracking import (
    GOAL_TOLERANCE_VIOLATED,
    INVALID_GOAL,
    INVALID_JOINTS,
    PATH_TOLERANCE_VIOLATED,
    SUCCESSFUL,
    GoalError,
    GoalTracker,
    Tolerances,
    check_goal_message,
    goal_tolerances,
    resolve_tolerance,
)

MODEL = load_model(DEFAULT_URDF)
JOINTS = MODEL.actuated_joint_names


def test_control_msgs_result_codes_are_the_messages_own():
    control_msgs = pytest.importorskip("control_msgs.action", reason="control_msgs not installed")
    result = control_msgs.FollowJointTrajectory.Result
    assert (result.SUCCESSFUL, result.INVALID_GOAL, result.INVALID_JOINTS,
            result.PATH_TOLERANCE_VIOLATED, result.GOAL_TOLERANCE_VIOLATED) == (
        SUCCESSFUL, INVALID_GOAL, INVALID_JOINTS, PATH_TOLERANCE_VIOLATED,
        GOAL_TOLERANCE_VIOLATED)


@pytest.mark.parametrize("value, expected", [(0.2, 0.2), (0.0, 0.05), (-1.0, 0.0),
                                             (-1.0 + 1e-9, 0.0)])
def test_resolve_tolerance_as_jtc(value, expected):
    assert resolve_tolerance(0.05, value, "x") == expected


@pytest.mark.parametrize("value", [-0.5, -2.0, math.nan, math.inf])
def test_illegal_tolerances_are_refused_with_the_field(value):
    with pytest.raises(GoalError, match="goal_tolerance elbow_joint position") as caught:
        resolve_tolerance(0.0, value, "goal_tolerance elbow_joint position")
    assert caught.value.code == INVALID_GOAL


def _defaults() -> Tolerances:
    return Tolerances.defaults([0.1] * 6, [0.01] * 6, 0.02, 1.5)


def test_goal_tolerances_override_by_name_over_the_defaults():
    path = [NS(name="elbow_joint", position=0.3, velocity=-1.0, acceleration=0.0)]
    goal = [NS(name="wrist_3_joint", position=-1.0, velocity=0.5, acceleration=2.0)]
    tol = goal_tolerances(_defaults(), JOINTS, path, goal, goal_time=0.0)
    assert tol.goal_time == 1.5  # 0: the default
    assert tol.path_position.tolist() == [0.1, 0.1, 0.3, 0.1, 0.1, 0.1]
    assert tol.path_velocity.tolist() == [0.0] * 6  # -1 on a 0 default: still none
    assert tol.goal_position.tolist() == [0.01] * 5 + [0.0]  # -1: erased
    assert tol.goal_velocity.tolist() == [0.02] * 5 + [0.5]
    assert tol.goal_acceleration.tolist() == [0.0] * 5 + [2.0]
    assert goal_tolerances(_defaults(), JOINTS, [], [], goal_time=-1.0).goal_time == 0.0
    assert goal_tolerances(_defaults(), JOINTS, [], [], goal_time=0.25).goal_time == 0.25


def test_a_tolerance_for_another_joint_is_refused():
    with pytest.raises(GoalError, match="'gripper'") as caught:
        goal_tolerances(_defaults(), JOINTS, [NS(name="gripper", position=0.1, velocity=0.0,
                                                 acceleration=0.0)], [], 0.0)
    assert caught.value.code == INVALID_JOINTS


# ----------------------------------------------------------------------------- tracking


class Arm:
    """The real controller in computed torque, fed states by hand."""

    def __init__(self, tolerances: Tolerances, duration: float = 1.0):
        self.c = JointController(MODEL, mode="computed_torque", kp=100.0, kd=20.0)
        self.q0 = np.full(6, 0.1)
        self.c.update_state(JOINTS, self.q0, np.zeros(6), 0.0)
        self.q1 = self.q0 + 0.2
        sampler = self.c.prepare_trajectory(JOINTS, [TrajectoryPoint(
            duration, self.q1, np.zeros(6))], 0.0, 0.0)
        self.c.trajectory = sampler
        self.goal = GoalTracker(self.c, sampler, tolerances)

    def step(self, t: float, q: np.ndarray, v: np.ndarray | None = None):
        """The state at ``t``; the command; what the tracker says."""
        self.c.update_state(JOINTS, q, np.zeros(6) if v is None else v, t)
        out = self.c.compute(t)
        return self.goal.check(t, self.c, out)

    def reference(self, t: float) -> np.ndarray:
        return self.c.trajectory.sample(t)[0]


def test_on_the_reference_the_goal_runs_then_succeeds_right_after_the_end():
    arm = Arm(Tolerances.defaults([0.01] * 6, [0.001] * 6, 0.01, 0.5))
    for t in np.arange(0.0, 1.0, 0.05):
        assert arm.step(t, arm.reference(t), arm.c.trajectory.sample(t)[1]) is None
    outcome = arm.step(1.0, arm.q1)
    assert (outcome.kind, outcome.code, outcome.text, outcome.hold) == (
        "succeed", SUCCESSFUL, "Goal successfully reached!", False)
    assert arm.goal.max_error.max() < 1e-12


def test_leaving_the_path_tolerance_aborts_and_names_the_joint():
    arm = Arm(Tolerances.defaults([0.01] * 6, [0.0] * 6, 0.01, 0.0))
    assert arm.step(0.3, arm.reference(0.3) + [0, 0, 0.009, 0, 0, 0]) is None
    outcome = arm.step(0.35, arm.reference(0.35) + [0, 0, 0.011, 0, 0, 0])
    assert (outcome.kind, outcome.code, outcome.hold) == ("abort", PATH_TOLERANCE_VIOLATED, True)
    assert outcome.text == ("Aborted due to path tolerance violation: elbow_joint position "
                            "error -0.011 (tolerance 0.01)")


def test_path_velocity_tolerance_from_the_goal_is_checked():
    tol = _defaults()
    tol.path_velocity[0] = 0.05
    arm = Arm(tol)
    v = arm.c.trajectory.sample(0.5)[1].copy()
    v[0] += 0.06
    outcome = arm.step(0.5, arm.reference(0.5), v)
    assert outcome.code == PATH_TOLERANCE_VIOLATED and "velocity error -0.06" in outcome.text


def test_outside_the_goal_tolerance_it_waits_goal_time_then_aborts():
    arm = Arm(Tolerances.defaults([0.0] * 6, [0.001] * 6, 0.01, 0.5))
    off = arm.q1 + [0.002, 0, 0, 0, 0, 0]
    assert arm.step(1.0, off) is None
    assert arm.step(1.5, off) is None  # exactly goal_time after the end: still waiting
    outcome = arm.step(1.6, off)
    assert (outcome.kind, outcome.code, outcome.hold) == ("abort", GOAL_TOLERANCE_VIOLATED, True)
    assert outcome.text.startswith("Aborted due to goal_time_tolerance exceeding by 0.600000 "
                                   "seconds: shoulder_pan_joint position error -0.002")
    # and a late arrival inside goal_time succeeds
    arm = Arm(Tolerances.defaults([0.0] * 6, [0.001] * 6, 0.01, 0.5))
    assert arm.step(1.2, off) is None
    assert arm.step(1.4, arm.q1).kind == "succeed"


def test_goal_time_zero_waits_as_long_as_it_takes_and_stopped_velocity_counts():
    arm = Arm(Tolerances.defaults([0.0] * 6, [0.0] * 6, 0.01, 0.0))
    moving = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.02])
    for t in (1.0, 10.0, 1000.0):
        assert arm.step(t, arm.q1, moving) is None  # at the goal but not stopped
    assert arm.step(1000.1, arm.q1 + 0.05, moving / 4).kind == "succeed"  # position unchecked


def test_a_replaced_trajectory_or_mode_or_controller_ends_the_goal():
    arm = Arm(_defaults())
    # what a trajectory on ~/joint_trajectory does: another sampler in the controller
    arm.c.trajectory = arm.c.prepare_trajectory(JOINTS, [TrajectoryPoint(
        1.0, arm.q0, np.zeros(6))], 0.1, 0.1)
    outcome = arm.step(0.2, arm.q0)
    assert (outcome.code, outcome.text) == (INVALID_GOAL, "Current goal preempted by a "
                                            "trajectory on ~/joint_trajectory.")
    for mode in ("gravity_compensation", "impedance"):  # out of the reference modes, or within
        arm = Arm(_defaults())
        arm.c.set_mode(mode)
        assert arm.step(0.2, arm.q0).text == f"aborted: mode changed to {mode}"
    arm = Arm(_defaults())
    other = JointController(MODEL, mode="computed_torque")
    other.update_state(JOINTS, arm.q0, np.zeros(6), 0.2)
    assert "new robot description" in arm.goal.check(0.2, other, other.compute(0.2)).text


def test_continuous_joints_compare_wrapped_errors():
    """q_d − q wrapped to (−π, π]: a continuous joint a turn away is on the path."""
    urdf = DEFAULT_URDF.read_text().replace('type="revolute"', 'type="continuous"', 1)
    model = load_model(urdf)
    assert model.continuous_joints
    c = JointController(model, mode="computed_torque")
    q = np.zeros(6)
    c.update_state(JOINTS, q, np.zeros(6), 0.0)
    sampler = c.prepare_trajectory(JOINTS, [TrajectoryPoint(1.0, q, np.zeros(6))], 0.0, 0.0)
    c.trajectory = sampler
    goal = GoalTracker(c, sampler, Tolerances.defaults([0.01] * 6, [0.01] * 6, 0.01, 0.0))
    c.update_state(JOINTS, q + [2 * np.pi, 0, 0, 0, 0, 0], np.zeros(6), 0.5)
    assert goal.check(0.5, c, c.compute(0.5)) is None


# ----------------------------------------------------------------------------- goal messages


def _goal(names=JOINTS, points=None, stamp_sec=0, multi=False):
    if points is None:
        points = [NS(positions=[0.0] * len(names), velocities=[0.0] * len(names),
                     accelerations=[], effort=[])]
    trajectory = NS(joint_names=list(names), points=points,
                    header=NS(stamp=NS(sec=stamp_sec, nanosec=0)))
    multi_dof = NS(joint_names=["base"] if multi else [], points=[])
    return NS(trajectory=trajectory, multi_dof_trajectory=multi_dof)


@pytest.mark.parametrize("goal, code, text", [
    (_goal(names=[]), INVALID_JOINTS, "joint_names is empty"),
    (_goal(names=["elbow_joint", "tool"]), INVALID_JOINTS, "['tool'] are not joints"),
    (_goal(names=["elbow_joint", "elbow_joint"]), INVALID_JOINTS, "appear twice"),
    (_goal(points=[]), INVALID_GOAL, "trajectory.points is empty"),
    (_goal(points=[NS(positions=[0.0] * 6, velocities=[], accelerations=[], effort=[1.0] * 5)]),
     INVALID_GOAL, "points[0].effort: 5 values for 6 joints"),
    (_goal(points=[NS(positions=[0.0] * 6, velocities=[0.0] * 5 + [0.1], accelerations=[],
                      effort=[])]), INVALID_GOAL, "[('wrist_3_joint', 0.1)]"),
    (_goal(stamp_sec=-3), INVALID_GOAL, "negative"),
    (_goal(multi=True), INVALID_GOAL, "multi_dof_trajectory"),
])
def test_goal_messages_are_refused_with_the_field(goal, code, text):
    with pytest.raises(GoalError) as caught:
        check_goal_message(goal, JOINTS, allow_moving_end=False)
    assert caught.value.code == code and text in str(caught.value), str(caught.value)


def test_a_subset_in_any_order_and_a_moving_end_when_allowed_pass():
    check_goal_message(_goal(names=["wrist_1_joint", "shoulder_pan_joint"]), JOINTS, False)
    moving = _goal(points=[NS(positions=[0.0] * 6, velocities=[0.3] * 6, accelerations=[],
                              effort=[])])
    check_goal_message(moving, JOINTS, allow_moving_end=True)
