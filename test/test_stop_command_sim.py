# SPDX-License-Identifier: Apache-2.0
"""What the simulated arm does once the control node stops commanding, across processes: the
bundled arm in rb_simulator (1 kHz steps in lock-step with the node's commands, the node on its
clock; once the commands stop, the simulator runs on by itself at half real time after
``lockstep_timeout``; an effort command held for ever, as ros2_controllers' forward controller
holds it), the control node following a goal, and then a cancel, a deactivation, a killed state
publisher (the states stop reaching the node) or a shutdown, mid-motion. The figure is each
joint's largest drift over the following second of simulated time. Lock-step: the relay through
this process costs no simulated time, however busy the machine (free-running, a loaded machine
delayed the relayed states past the node's 0.1 s ``state_timeout`` and the arm fell mid-goal).

With the default stop command (gravity at the last measured pose) the arm stays within a few
centiradians; with ``zero`` it falls and with ``none`` the last control command drives it
away. The code this was written against left the last control command in place in every case
but cancel. Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import ast

import numpy as np
import pytest
from ros_harness import Session, abandon, close_all
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.demo.main_job import initial_configuration
from rb_dynamics.model import load_model
from rb_dynamics.ros.control_node.trajectory_action import MISSING

pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
if MISSING is None:
    from control_msgs.action import FollowJointTrajectory
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState
    from rclpy.action import ActionClient
    from trajectory_msgs.msg import JointTrajectoryPoint

MODEL = load_model(DEFAULT_URDF)
JOINTS = MODEL.actuated_joint_names
CONTROL, SIM = "rb_dynamics_stop", "rb_simulator_stop"


class Rig:
    """Simulator → /stop_rig/sim_states → (this process relays while ``relaying``) →
    joint_states → control node → the simulator's commands."""

    def __init__(self, tmp) -> None:
        q0 = initial_configuration(MODEL)
        self.sim = Session("rb_dynamics.ros.simulator_node", tmp, {
            "urdf_path": str(DEFAULT_URDF), "initial_positions": q0.tolist(),
            "publish_rate": 500.0, "time_step": 0.001, "command_timeout": 1.0e6,
            # a step per command while the node commands; 3 s (wall) after its last one, on
            # by itself at half real time; every duration is simulated time
            "lockstep": True, "lockstep_timeout": 3.0, "real_time_factor": 0.5,
            "publish_clock": True},
            "-r", "joint_states:=/stop_rig/sim_states", name=SIM, shared=True)
        self.node = Session("rb_dynamics.ros.control_node", tmp, {
            "urdf_path": str(DEFAULT_URDF), "mode": "computed_torque", "kp": [400.0],
            "kd": [40.0], "state_timeout": 0.1, "use_sim_time": True},
            "-r", f"~/effort_commands:=/{SIM}/commands", name=CONTROL, peer=self.sim.peer,
            shared=True)
        self.peer = self.sim.peer
        node = self.peer.node
        self.relaying = True
        self.samples: list[tuple[float, np.ndarray]] = []
        self.commands: list[np.ndarray] = []  # every command the simulator was sent
        relay = node.create_publisher(JointState, "joint_states", 100)
        node.create_subscription(Float64MultiArray, f"/{SIM}/commands",
                                 lambda msg: self.commands.append(np.array(msg.data)), 100)

        def on_state(msg: JointState) -> None:
            t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            self.samples.append((t, np.array(msg.position)))
            if self.relaying:
                relay.publish(msg)

        node.create_subscription(JointState, "/stop_rig/sim_states", on_state, 100)
        self.client = ActionClient(node, FollowJointTrajectory,
                                   f"/{CONTROL}/follow_joint_trajectory")
        assert self.peer.wait_for(self.client.server_is_ready, 30.0), self.node.output()
        assert self.peer.wait_for(lambda: len(self.samples) > 100, 30.0)

    def q(self) -> np.ndarray:
        return self.samples[-1][1]

    def wait(self, seconds: float) -> None:
        until = self.samples[-1][0] + seconds
        assert self.peer.wait_for(lambda: self.samples[-1][0] >= until, 30.0 + 10 * seconds)

    def start_motion(self):
        """A 2 s goal of 0.3 rad on every joint; 0.8 s into it: the goal handle."""
        goal = FollowJointTrajectory.Goal()
        goal.trajectory.joint_names = list(JOINTS)
        q1 = self.q() + 0.3 * np.where(np.arange(len(JOINTS)) % 2, -1.0, 1.0)
        point = JointTrajectoryPoint(positions=q1.tolist(), velocities=[0.0] * len(JOINTS))
        point.time_from_start.sec = 2
        goal.trajectory.points = [point]
        future = self.client.send_goal_async(goal)
        assert self.peer.wait_for(future.done, 10.0) and future.result().accepted, \
            self.node.output()
        self.wait(0.8)
        return future.result()

    def drift(self, start: float | None = None) -> float:
        """The largest joint displacement (rad) over the second from ``start`` (the simulated
        time; default: now)."""
        start = self.samples[-1][0] if start is None else start
        assert self.peer.wait_for(lambda: self.samples[-1][0] >= start + 1.0, 40.0)
        window = np.array([q for t, q in self.samples if start <= t <= start + 1.0])
        return float(np.abs(window - window[0]).max())

    def stop_command_logged(self, kind: str) -> np.ndarray | None:
        """The effort of the newest stop command ``kind`` the node logged, rounded as in its
        log (None: it logged that it published nothing)."""
        line = self.node.output().rsplit(f"stop command {kind!r}: ", 1)[1].splitlines()[0]
        return None if line == "nothing published" else np.array(ast.literal_eval(line))

    def lifecycle(self, transition: int) -> None:
        answer = self.node.call(ChangeState, "~/change_state",
                                ChangeState.Request(transition=Transition(id=transition)))
        assert answer.success, self.node.output()

    def close(self) -> None:
        close_all(self.node, self.sim)


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    rig = Rig(tmp_path_factory.mktemp("stop"))
    try:
        yield rig
    finally:
        if rig.node.process.proc.poll() is None:
            abandon([rig.node])
        abandon([rig.sim])


def report(what: str, drift: float) -> None:
    print(f"\n{what}: largest joint drift over 1 s {drift:.4f} rad")


def test_the_arm_after_each_way_of_stopping(rig):
    results = {}
    sent_after_stop = {}  # per stop command: how often it came after the states stopped
    handle = rig.start_motion()
    cancel = handle.cancel_goal_async()
    assert rig.peer.wait_for(cancel.done, 10.0)
    results["cancel (holds, as JTC)"] = rig.drift()

    rig.start_motion()
    rig.lifecycle(Transition.TRANSITION_DEACTIVATE)
    results["deactivate, stop_command gravity"] = rig.drift()
    rig.lifecycle(Transition.TRANSITION_ACTIVATE)

    for kind in ("gravity", "zero", "none"):
        assert rig.node.set_parameters(stop_command=kind).successful
        rig.wait(0.5)
        rig.start_motion()
        rig.relaying = False  # the state publisher is gone
        stopped = len(rig.commands)
        results[f"killed state publisher, stop_command {kind}"] = rig.drift()
        # told apart by content from the answers to states still in flight when the relay
        # stopped (when they arrive depends on how busy the machine is)
        after, effort = rig.commands[stopped:], rig.stop_command_logged(kind)
        sent_after_stop[kind] = 0 if effort is None else sum(
            np.array_equal(np.round(c, 4), effort) for c in after)
        if effort is not None:  # and nothing after it
            assert np.array_equal(np.round(after[-1], 4), effort), (kind, after[-3:], effort)
        rig.relaying = True
        rig.wait(0.3)
        rig.lifecycle(Transition.TRANSITION_DEACTIVATE)  # back to where it started: hold
        rig.lifecycle(Transition.TRANSITION_ACTIVATE)
        if kind != "gravity":  # the arm left its workspace: back to the start pose
            handle = rig.client.send_goal_async(_goal_to(initial_configuration(MODEL)))
            assert rig.peer.wait_for(handle.done, 10.0)
            rig.wait(3.0)

    assert rig.node.set_parameters(stop_command="gravity").successful
    rig.start_motion()
    rig.peer.users += 1  # the simulator and this process outlive the node
    start = rig.samples[-1][0]
    rig.node.close()
    results["shutdown (SIGINT), stop_command gravity"] = rig.drift(start)
    rig.peer.users -= 1
    for what, drift in results.items():
        report(what, drift)
    assert results["cancel (holds, as JTC)"] < 0.05
    assert results["deactivate, stop_command gravity"] < 0.1
    assert results["killed state publisher, stop_command gravity"] < 0.1
    assert results["shutdown (SIGINT), stop_command gravity"] < 0.1
    assert results["killed state publisher, stop_command zero"] > 0.1
    # ``none``: nothing once the states stop, the simulator keeps the last control command
    # (where that drives the arm depends on the pose and speed it was computed for: the figure
    # above); gravity and zero: their stop command, once
    assert sent_after_stop == {"gravity": 1, "zero": 1, "none": 0}, sent_after_stop


def _goal_to(q: np.ndarray):
    goal = FollowJointTrajectory.Goal()
    goal.trajectory.joint_names = list(JOINTS)
    point = JointTrajectoryPoint(positions=q.tolist(), velocities=[0.0] * len(JOINTS))
    point.time_from_start.sec = 2
    goal.trajectory.points = [point]
    return goal
