# SPDX-License-Identifier: Apache-2.0
"""What the control node publishes when it stops commanding (``stop_command``), across
processes: after a stale state, a deactivation and a shutdown (SIGINT) the last command is the
gravity effort at the last measured pose (Pinocchio's), zeros, or nothing more.

The node computes torque toward a set-point, so that its control commands differ from the stop
command. The code this was written against published nothing when it stopped: its last command
was the last control command (the effort controller downstream holds it for ever).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from pin_oracle import REAL_ROBOTS, arm_torques, rel_err, robots_dir
from ros_harness import Session, control_node
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics.model import load_model

UR5 = Path(robots_dir(), REAL_ROBOTS["ur5"][0])
MODEL = load_model(UR5)
JOINTS = MODEL.actuated_joint_names
Q_GOAL = np.array([0.2, -1.0, 1.1, -0.3, 0.4, 0.5])
Q = np.array([0.1, -1.2, 1.0, -0.5, 0.3, 0.2])


def gravity(q: np.ndarray) -> np.ndarray:
    return arm_torques(UR5, JOINTS, q, limit=MODEL.effort_limit)


def toward(q: np.ndarray) -> np.ndarray:
    """Computed torque toward Q_GOAL at rest (kp 100)."""
    return arm_torques(UR5, JOINTS, q, a=100.0 * (Q_GOAL - q), limit=MODEL.effort_limit)


def start(tmp_path, **params) -> Session:
    rig = control_node(tmp_path, {"urdf_path": str(UR5), "mode": "computed_torque",
                                  "kp": [100.0], "kd": [20.0], **params})
    assert rig.command_after(JOINTS, Q) is not None, rig.output()
    rig.publish_matched(JointTrajectory, "~/joint_trajectory", JointTrajectory(
        joint_names=list(JOINTS), points=[JointTrajectoryPoint(positions=Q_GOAL.tolist())]))
    assert rig.wait_for(lambda: rel_err(rig.command_after(JOINTS, Q), toward(Q)) <= 1e-9,
                        10.0), rig.output()
    return rig


STOPPED = "joint states stopped: stop command"
# a commanding node gone after SIGINT (its stop command sent): no wait for acknowledgements
COMMANDING_STOP_S = 0.4


def after_silence(rig: Session, q: np.ndarray) -> tuple[list, np.ndarray | None]:
    """Command the pose ``q`` toward the set-point (sent again: stale states drop the
    reference), then send nothing until the node says it stopped: the commands published after
    the first one answering ``q`` but the last (answers to copies of the state still in
    flight), and the last (None: there was none)."""
    commands = rig.commands
    assert rig.command_after(JOINTS, q) is not None, rig.output()
    rig.publish_matched(JointTrajectory, "~/joint_trajectory", JointTrajectory(
        joint_names=list(JOINTS), points=[JointTrajectoryPoint(positions=Q_GOAL.tolist())]))
    assert rig.wait_for(lambda: rel_err(rig.command_after(JOINTS, q), toward(q)) <= 1e-9,
                        10.0), rig.output()
    count = len(commands)
    said = rig.output().count(STOPPED)
    # state_timeout is 0.3 s; the node logs the stop command once it was published (or not)
    assert rig.wait_for(lambda: rig.output().count(STOPPED) > said, 10.0), rig.output()
    rig.settle(commands)
    after = [np.array(c.data) for _, c in commands[count:]]
    for command in after[:-1]:
        assert rel_err(command, toward(q)) <= 1e-9, (after, rig.output())
    return after[:-1], (after[-1] if after else None)


def test_stale_states_end_with_the_chosen_stop_command(tmp_path):
    rig = start(tmp_path, state_timeout=0.3)
    try:
        q = Q + 0.05
        _, last = after_silence(rig, q)  # the default: gravity
        assert last is not None and rel_err(last, gravity(q)) <= 1e-9, rig.output()
        assert rel_err(gravity(q), toward(q)) > 1e-2  # a different command from the last
        assert rig.wait_for_log("joint states stopped: stop command 'gravity'", 5.0)
        assert rig.set_parameters(stop_command="zero").successful
        _, last = after_silence(rig, Q)
        assert last is not None and not last.any(), last
        assert rig.set_parameters(stop_command="none").successful
        _, last = after_silence(rig, Q)
        assert last is None or rel_err(last, toward(Q)) <= 1e-9, last
        assert not rig.set_parameters(stop_command="brake").successful
    finally:
        rig.close()


def test_deactivation_and_shutdown_end_with_the_gravity_effort(tmp_path):
    rig = start(tmp_path, state_timeout=2.0)  # states stop during the shutdown: not stale
    commands = rig.commands
    q = Q - 0.05
    stream = rig.stream_states(JOINTS, q, 0.005)
    try:
        assert rig.wait_for(lambda: rel_err(np.array(commands[-1][1].data), toward(q)) <= 1e-9,
                            5.0), rig.output()
        answer = rig.call(ChangeState, "~/change_state", ChangeState.Request(
            transition=Transition(id=Transition.TRANSITION_DEACTIVATE)))
        assert answer.success, rig.output()
        count = rig.settle(commands)
        rig.wait_for(lambda: False, 0.3)  # states still come; nothing more is published
        assert len(commands) == count
        assert rel_err(np.array(commands[-1][1].data), gravity(q)) <= 1e-9, rig.output()
        assert rel_err(np.array(commands[-2][1].data), toward(q)) <= 1e-9
        answer = rig.call(ChangeState, "~/change_state", ChangeState.Request(
            transition=Transition(id=Transition.TRANSITION_ACTIVATE)))
        assert answer.success, rig.output()
        # active again: it holds where the arm is (gravity at rest), so a new set-point first
        rig.publish_matched(JointTrajectory, "~/joint_trajectory", JointTrajectory(
            joint_names=list(JOINTS), points=[JointTrajectoryPoint(positions=Q_GOAL.tolist())]))
        assert rig.wait_for(lambda: rel_err(np.array(commands[-1][1].data), toward(q))
                            <= 1e-9, 5.0), rig.output()
    finally:
        stream.stop()
    rig.peer.users += 1  # the peer outlives the node: it hears the node's last message
    try:
        took = rig.close()  # SIGINT
        # no wait for the stop command's acknowledgement (rclpy's wait_for_all_acked held the
        # interpreter for its 0.5 s time-out at every shutdown, and the command still arrives)
        assert took < COMMANDING_STOP_S, (took, rig.output())
        count = len(commands)
        rig.peer.settle(commands, quiet=0.3)
        last = np.array(commands[-1][1].data)
        assert rel_err(last, gravity(q)) <= 1e-9, (count, len(commands), rig.output())
        assert "shutting down: stop command 'gravity'" in rig.output()
    finally:
        rig.peer.close()


@pytest.mark.parametrize("kind", ["zero", "none"])
def test_shutdown_with_the_other_stop_commands(tmp_path, kind):
    rig = start(tmp_path, state_timeout=2.0, stop_command=kind)
    commands = rig.commands
    q = Q + 0.02
    assert rel_err(rig.command_after(JOINTS, q), toward(q)) <= 1e-9
    rig.settle(commands)
    rig.peer.users += 1
    try:
        rig.close()
        rig.peer.settle(commands, quiet=0.3)
        last = np.array(commands[-1][1].data)
        if kind == "zero":
            assert not last.any(), last
        else:
            assert rel_err(last, toward(q)) <= 1e-9, last
    finally:
        rig.peer.close()
