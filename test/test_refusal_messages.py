# SPDX-License-Identifier: Apache-2.0
"""What the control node says when it refuses or warns, across processes: long
name lists named briefly on ``~/joint_trajectory`` too, a goal after ``shutdown`` told that the
node is finalized (not to ``activate``, impossible from there), and /diagnostics while joint
states come further apart than ``state_timeout`` (commands still go out)."""

from __future__ import annotations

import time

import numpy as np
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from ros_harness import control_node, fresh_name
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import load_model

JOINTS = load_model(DEFAULT_URDF).actuated_joint_names


def test_a_topic_trajectory_with_100000_unknown_names_is_named_briefly(tmp_path):
    """The code this was written against logged all 100,000 names (a 1.5 MB warning)."""
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque"},
                        name=fresh_name("rb_dynamics_topic_names"))
    try:
        assert node.command_after(JOINTS, np.zeros(len(JOINTS))) is not None, node.output()
        names = [f"joint_{k}" for k in range(100_000)]
        # one position: the names alone are 1.6 MB (a message past what 10,000 points of
        # this arm take is refused unread, before its names are looked at)
        point = JointTrajectoryPoint(positions=[0.0])
        point.time_from_start.sec = 1
        node.publish_matched(JointTrajectory, "~/joint_trajectory",
                             JointTrajectory(joint_names=names, points=[point]))
        text = "trajectory: unknown joints ['joint_0', 'joint_1', 'joint_2', 'joint_3', " \
               "'joint_4', … and 99995 more]; ignored"
        assert node.wait_for_log(text, 20.0), node.output()[-2000:]
        assert max(len(line) for line in node.output().splitlines()) < 2000
    finally:
        node.close()


def test_a_goal_after_shutdown_is_told_the_node_is_finalized(tmp_path):
    """The code this was written against answered "… ros2 lifecycle set … activate", which
    finalized cannot do."""
    from control_msgs.action import FollowJointTrajectory
    from rclpy.action import ActionClient

    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque"},
                        name=fresh_name("rb_dynamics_finalized"))
    try:
        assert node.command_after(JOINTS, np.zeros(len(JOINTS))) is not None, node.output()
        client = ActionClient(node.peer.node, FollowJointTrajectory,
                              f"/{node.name}/follow_joint_trajectory")
        assert node.wait_for(client.server_is_ready, 30.0), node.output()
        request = ChangeState.Request(transition=Transition(
            id=Transition.TRANSITION_ACTIVE_SHUTDOWN))
        assert node.call(ChangeState, "~/change_state", request).success
        goal = FollowJointTrajectory.Goal()
        goal.trajectory.joint_names = list(JOINTS)
        point = JointTrajectoryPoint(positions=[0.0] * len(JOINTS))
        point.time_from_start.sec = 1
        goal.trajectory.points = [point]
        sent = client.send_goal_async(goal)
        assert node.wait_for(sent.done, 10.0), node.output()
        assert not sent.result().accepted
        assert node.wait_for_log("goal rejected (error_code -1): the node is finalized (shut "
                                 "down): it takes no goals", 5.0), node.output()
        assert "activate" not in node.output().split("goal rejected")[-1].splitlines()[0]
    finally:
        node.close()


def test_diagnostics_while_states_come_further_apart_than_state_timeout(tmp_path):
    """States every 5 ms against state_timeout 1 ms: each state is answered with a command
    and the stop command follows it. The code this was written against said ERROR "joint
    state stale (0.00 s): not publishing" while the commands went out."""
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque",
                                   "state_timeout": 0.001},
                        name=fresh_name("rb_dynamics_sparse_states"))
    try:
        commands = node.commands
        statuses = node.statuses()
        stream = node.stream_states(JOINTS, np.zeros(len(JOINTS)), 0.005)
        try:
            began = time.monotonic()
            assert node.wait_for(lambda: any(s.message.startswith("publishing, but")
                                             for _, s in node.statuses()), 10.0), \
                [s.message for _, s in node.statuses()]
            assert len(commands) > 0 and commands[-1][0] > began
        finally:
            stream.stop()
        message = next(s.message for _, s in node.statuses()
                       if s.message.startswith("publishing, but"))
        assert "state_timeout 0.001 s" in message and "0.00 s" not in message, message
        assert not any("not publishing" in s.message for _, s in node.statuses()
                       if s.message.startswith("joint state stale")), statuses
    finally:
        node.close()
