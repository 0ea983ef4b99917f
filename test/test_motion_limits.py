# SPDX-License-Identifier: Apache-2.0
"""Motion within what the URDF allows, across processes (the simulator and the control node in
lock-step, a real ActionClient; test_trajectory_action.py's rig): goals and ``~/joint_trajectory``
trajectories that leave the position limits or cannot be followed within the velocity limits
(a first point far away due at once) are refused naming the first violation; a goal that
starts where the arm is, at ``time_from_start`` 0, is not.

The code this was written against accepted all of them: a first point 1.5 rad away due at
0.05 s drove the arm past its velocity limit, a target beyond the position limit ran the
joint into its stop (``accepted`` was True in each ``refused`` below).
"""

from __future__ import annotations

import numpy as np
import pytest
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from test_trajectory_action import MISSING, ClosedLoop, min_jerk_points, refused
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
if MISSING is None:
    from control_msgs.action import FollowJointTrajectory

    Result = FollowJointTrajectory.Result


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    rig = ClosedLoop("default_arm", tmp_path_factory.mktemp("motion"))
    yield rig
    rig.close()


def _point(positions, seconds: float) -> JointTrajectoryPoint:
    point = JointTrajectoryPoint(positions=[float(x) for x in positions])
    point.time_from_start.sec = int(seconds)
    point.time_from_start.nanosec = int(round((seconds - int(seconds)) * 1e9))
    return point


def _goal(arm, points):
    goal = FollowJointTrajectory.Goal()
    goal.trajectory.joint_names = list(arm.joints)
    goal.trajectory.points = points
    return goal


def _set_bool(arm, name: str, value: bool) -> None:
    param = ParameterMsg(name=name, value=ParameterValue(type=ParameterType.PARAMETER_BOOL,
                                                         bool_value=value))
    answer = arm.peer.call(arm.params, SetParameters.Request(parameters=[param]))
    assert answer.results[0].successful, answer.results[0].reason


def test_a_far_first_point_due_at_once_is_refused_naming_it(arm):
    q = arm.q()
    far = q.copy()
    far[0] += 1.5
    for due in (0.0, 0.05):
        code, text = refused(arm, _goal(arm, [_point(far, due), _point(far, due + 1.0)]))
        assert code == Result.INVALID_GOAL, text
        assert "not feasible: velocity limit of shoulder_pan_joint exceeded between the " \
               "start state and point 0" in text, text
        assert "against 3.3" in text, text  # the URDF's 3.15 rad/s and the 5 % margin
    # the arm never moved
    assert np.abs(arm.q() - q).max() < 1e-3


def test_a_target_beyond_the_position_limits_is_refused_naming_it(arm):
    q = arm.q()
    target = q.copy()
    elbow = arm.joints.index("elbow_joint")
    target[elbow] = 10.0  # the URDF allows ±π; 20 s keeps the velocity in its limit
    code, text = refused(arm, _goal(arm, [_point(target, 20.0)]))
    assert code == Result.INVALID_GOAL, text
    assert "not feasible: position limit of elbow_joint exceeded between the start state " \
           "and point 0" in text and "against 3.14" in text, text
    # a fast path between two feasible points: found between them, with its index
    goal = arm.goal(q + 0.05, duration=2.0, count=4)
    goal.trajectory.points[2].positions[0] += 2.0  # 2 rad out and back in 0.5 s
    code, text = refused(arm, goal)
    assert "limit of shoulder_pan_joint exceeded between points 1 and 2" in text, text


def test_a_goal_starting_where_the_arm_is_at_time_zero_is_followed(arm):
    """The first point due at once, at the measured position (up to the arm's small motion
    since it was read): accepted and reached."""
    q = arm.q()
    points = [_point(q, 0.0)] + min_jerk_points(q, q + 0.2, 1.5, 6)
    status, code, text = arm.run(_goal(arm, points))
    assert (status, code) == ("SUCCEEDED", Result.SUCCESSFUL), text


def test_the_topic_refuses_an_infeasible_trajectory_with_a_warning(arm):
    q = arm.q()
    far = q.copy()
    far[1] -= 1.5
    publisher = arm.peer.node.create_publisher(JointTrajectory, "/rb_dynamics/joint_trajectory",
                                               10)
    assert arm.peer.wait_for(lambda: publisher.get_subscription_count() > 0, 5.0)
    publisher.publish(JointTrajectory(joint_names=list(arm.joints),
                                      points=[_point(far, 0.05), _point(far, 1.0)]))
    warning = ("not feasible: velocity limit of shoulder_lift_joint exceeded between the start "
               "state and point 0")
    assert arm.peer.wait_for(lambda: warning in arm.node.output(), 10.0), arm.output()
    arm.wait_sim(0.3)
    assert np.abs(arm.q() - q).max() < 1e-3  # the previous reference (holding) stayed
    arm.peer.node.destroy_publisher(publisher)


def test_the_check_can_be_turned_off(arm):
    q = arm.q()
    target = q.copy()
    target[arm.joints.index("elbow_joint")] = 4.0
    _set_bool(arm, "refuse_infeasible_trajectories", False)
    try:
        handle = arm.send(_goal(arm, [_point(target, 20.0)]))
        assert handle.accepted
        cancel = handle.cancel_goal_async()
        assert arm.peer.wait_for(cancel.done, 10.0)
        assert arm.result(handle)[0] == "CANCELED"
    finally:
        _set_bool(arm, "refuse_infeasible_trajectories", True)
    code, text = refused(arm, _goal(arm, [_point(target, 20.0)]))
    assert "position limit of elbow_joint" in text, text
