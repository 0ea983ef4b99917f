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

import re

import numpy as np
import pytest
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from test_trajectory_action import MISSING, ClosedLoop, min_jerk_points, refused
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics.control.stability import max_stable_kp

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


def test_a_feed_forward_beyond_the_effort_limit_is_refused_naming_it(arm):
    """A point's effort of 1e8 N·m on shoulder_pan (inside the 1e9 plausibility bound; the URDF
    allows 150): the code this was written against took it and drove the pan at +150 N·m to
    its stop, saying only "effort clamped". Refused with the goal, and on the topic, naming
    the joint, the point and the value; the arm never moves. Within the limit it is taken."""
    q = arm.q()
    points = min_jerk_points(q, q + 0.1, 1.0, 3)
    for point in points:
        point.effort = [0.0] * len(arm.joints)
    points[1].effort[0] = 1e8
    code, text = refused(arm, _goal(arm, points))
    assert code == Result.INVALID_GOAL, text
    assert "not feasible: effort limit of shoulder_pan_joint exceeded at point 1" in text, text
    assert "1e+08 against 150 (the point's feed-forward effort; effort_scale 1 × the URDF " \
        "effort limit)" in text, text
    publisher = arm.peer.node.create_publisher(JointTrajectory, "/rb_dynamics/joint_trajectory",
                                               10)
    assert arm.peer.wait_for(lambda: publisher.get_subscription_count() > 0, 5.0)
    points[1].effort[0] = -200.0
    warning = "effort limit of shoulder_pan_joint exceeded at point 1"

    def warned() -> bool:
        # sent again until said: a first message can precede the match of the node's reader,
        # and the node says a topic's problems at most every 2 s (an earlier test's may be fresh)
        publisher.publish(JointTrajectory(joint_names=list(arm.joints), points=points))
        return arm.peer.wait_for(lambda: arm.node.output().count(warning) >= 2, 0.5)

    assert arm.peer.wait_for(warned, 15.0), arm.output()
    assert "-200 against 150" in arm.node.output(), arm.output()
    arm.wait_sim(0.3)
    assert np.abs(arm.q() - q).max() < 1e-3  # holding: neither was followed
    arm.peer.node.destroy_publisher(publisher)
    points[1].effort[0] = 5.0  # within the limit: followed
    status, code, text = arm.run(_goal(arm, points))
    assert (status, code) == ("SUCCEEDED", Result.SUCCESSFUL), text


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


# ----------------------------------------------------------------------------- gains


def _set(arm, **values):
    """The set-parameters result of ``values`` (double arrays, doubles or strings)."""
    params = []
    for name, value in values.items():
        name = name.replace("__", ".")
        if isinstance(value, list):
            v = ParameterValue(type=ParameterType.PARAMETER_DOUBLE_ARRAY, double_array_value=value)
        elif isinstance(value, str):
            v = ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=value)
        else:
            v = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
        params.append(ParameterMsg(name=name, value=v))
    answer = arm.peer.call(arm.params, SetParameters.Request(parameters=params))
    return answer.results[0]


def test_gains_past_the_stability_bound_are_refused_mid_motion_naming_it(arm):
    """Gains past the bound while a goal runs (taken, kp 1e9 drove the arm to 170–190× its
    velocity limit) are refused: kp 1e5, stable at 10 kHz, with the bound at the measured state
    period (1 ms in lock-step on simulated time, however slow the machine); kp or kd 1e9,
    unstable at every rate, as such; the goal goes on and succeeds. Gains inside the bound are
    taken."""
    q = arm.q()
    handle = arm.send(arm.goal(q + 0.2, duration=2.0))
    arm.wait_sim(0.3)
    result = _set(arm, kp=[1e9])
    assert not result.successful and result.reason.endswith("unstable at every state rate"), \
        result.reason
    result = _set(arm, kp=[1e5])
    assert not result.successful
    found = re.fullmatch(r"kp 100000 with kd 40 on shoulder_pan_joint makes the sampled loop "
                         r"unstable: kp < ([\d.]+) at the state period ([\d.]+) ms",
                         result.reason)
    assert found, result.reason
    # the period of the commands: 1 ms of simulated time, more when states were superseded
    bound, period = float(found[1]), float(found[2]) * 1e-3
    assert 0.9e-3 < period < 5e-3, result.reason
    assert bound == pytest.approx(max_stable_kp(40.0, period), rel=0.02)
    result = _set(arm, kd=[1e9])
    assert not result.successful and re.search(r"kd < [\d.]+ at the state period",
                                               result.reason), result.reason
    # impedance's gains act on the arm's inertia: a wrist's is below 0.01 kg·m²
    result = _set(arm, impedance__damping=[10.0])
    assert not result.successful and re.fullmatch(
        r"impedance.damping 10 on wrist_\d_joint makes the sampled loop unstable: impedance."
        r"damping < [\d.]+ at the state period [\d.]+ ms on the effective inertia [\d.e-]+",
        result.reason), result.reason
    assert _set(arm, kp=[500.0], kd=[45.0]).successful  # inside the bound
    assert arm.result(handle)[0] == "SUCCEEDED"
    assert _set(arm, kp=[400.0], kd=[40.0]).successful


def test_a_publish_rate_holding_commands_past_state_timeout_is_refused(arm):
    """max_publish_rate 0.5 (the code this was written against took it: 2 s between commands,
    the held torque drove the arm to 69× its velocity limit) against state_timeout 0.1 s."""
    result = _set(arm, max_publish_rate=0.5)
    assert not result.successful
    assert result.reason.startswith("max_publish_rate 0.5 holds each command 2 s, longer than "
                                    "state_timeout 0.1 s"), result.reason
    assert "at least 10 Hz" in result.reason, result.reason
    assert _set(arm, max_publish_rate=20.0).successful
    try:  # the other way round: a state_timeout shorter than the commands' period
        result = _set(arm, state_timeout=0.01)
        assert not result.successful and result.reason.startswith(
            "max_publish_rate 20 holds each command 0.05 s, longer than state_timeout 0.01 s"), \
            result.reason
    finally:
        assert _set(arm, max_publish_rate=0.0).successful
