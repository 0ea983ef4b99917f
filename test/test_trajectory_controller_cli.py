# SPDX-License-Identifier: Apache-2.0
"""docs/trajectory_controller.md as a user runs it: its ``ros2 lifecycle``, ``ros2 param set``
and ``ros2 action send_goal`` commands, taken from the document and run with the real ros2 CLI
against the real nodes; and what the lifecycle does to efforts and goals.

Skipped, with the reason, only where the ros2 CLI or control_msgs is not installed (see
test/ros_tools.py and rb_dynamics/ros/control_node/trajectory_action.py); CI has both.
"""

from __future__ import annotations

import shlex
import threading
from pathlib import Path

import numpy as np
import pytest
import ros_tools
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.srv import SetParameters
from ros_harness import Session, close_all
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import load_model
from rb_dynamics.ros.control_node.trajectory_action import MISSING

pytestmark = [
    pytest.mark.skipif(ros_tools.MISSING is not None, reason=str(ros_tools.MISSING)),
    pytest.mark.skipif(MISSING is not None, reason=str(MISSING)),
]
if MISSING is None:
    from control_msgs.action import FollowJointTrajectory
    from rclpy.action import ActionClient
    from trajectory_msgs.msg import JointTrajectoryPoint

DOC = Path(__file__).resolve().parents[1] / "docs" / "trajectory_controller.md"
JOINTS = load_model(DEFAULT_URDF).actuated_joint_names
# flags the examples leave out: no ros2 daemon in tests, and time to discover a starting node
LIFECYCLE_FLAGS = " --no-daemon --spin-time 5"
PARAM_FLAGS = " --no-daemon --timeout 30"


def doc_commands(prefix: str) -> list[str]:
    """The commands of the document's bash blocks that start with ``prefix``, whole (a command
    goes on over lines ending in a backslash or inside an open quote)."""
    commands, current, in_block = [], None, False
    for line in DOC.read_text().splitlines():
        if line.startswith("```"):
            in_block = line.strip() == "```bash"
            continue
        if not in_block:
            continue
        if current is None:
            if not line.startswith("ros2 "):
                continue
            current = line
        else:
            current += "\n" + line
        if current.count('"') % 2 == 0 and not current.endswith("\\"):
            commands.append(current)
            current = None
    found = [c for c in commands if c.startswith(prefix)]
    assert found, f"no `{prefix}` example in {DOC}"
    return found


@pytest.fixture(scope="module", autouse=True)
def no_daemon_left():
    yield
    ros_tools.stop_daemon()


def _shell(command: str, timeout: float = 60.0) -> ros_tools.Result:
    return ros_tools.run(["bash", "-c", command], timeout=timeout)


class Driver:
    """The test plays the arm's driver (through the node's session): the same joint state at
    100 Hz; it collects the commands and the diagnostics, and has an ActionClient."""

    def __init__(self, node: Session) -> None:
        self.peer = node.peer
        node = self.peer.node
        self.commands: list[Float64MultiArray] = []
        self.diagnostics: list[str] = []
        node.create_subscription(Float64MultiArray, "rb_dynamics/effort_commands",
                                 self.commands.append, 100)
        node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diagnostics
                                 .extend(s.message for s in m.status), 10)
        states = node.create_publisher(JointState, "joint_states", 10)
        self.q = np.array([0.2, -0.8, 1.0, -0.3, 0.5, 0.1])
        node.create_timer(0.01, lambda: states.publish(JointState(
            name=JOINTS, position=self.q.tolist(), velocity=[0.0] * 6)))
        self.client = ActionClient(node, FollowJointTrajectory,
                                   "/rb_dynamics/follow_joint_trajectory")

    def commanding(self, seconds: float = 0.5) -> bool:
        """Whether a command comes within ``seconds``."""
        before = len(self.commands)
        return self.peer.wait_for(lambda: len(self.commands) > before, seconds)

    def send(self, duration: float):
        goal = FollowJointTrajectory.Goal()
        goal.trajectory.joint_names = JOINTS
        point = JointTrajectoryPoint(positions=(self.q + 0.1).tolist(), velocities=[0.0] * 6)
        point.time_from_start.sec = int(duration)
        goal.trajectory.points = [point]
        future = self.client.send_goal_async(goal)
        assert self.peer.wait_for(future.done, 10.0)
        return future.result()

    def result(self, handle, timeout: float = 20.0):
        future = handle.get_result_async()
        assert self.peer.wait_for(future.done, timeout)
        return future.result().result


def _lifecycle(node: Session, command: str, expected: str) -> None:
    """Run the CLI ``command`` while the test's peer spins: the driver's states go on (states
    that stop for state_timeout would abort a goal before the transition does)."""
    results: list = []
    cli = threading.Thread(target=lambda: results.append(_shell(command + LIFECYCLE_FLAGS)))
    cli.start()
    node.peer.wait_for(lambda: not cli.is_alive(), 90.0)
    cli.join()
    result, = results
    assert result.returncode == 0 and result.stdout.strip() == expected, \
        f"{result}\n{node.output()}"


def test_lifecycle_as_in_the_docs_stops_efforts_and_aborts_the_goal(tmp_path):
    get, = doc_commands("ros2 lifecycle get")
    deactivate, activate = doc_commands("ros2 lifecycle set")
    assert deactivate.endswith(" deactivate") and activate.endswith(" activate")
    # the driver is this test process, whose states a busy machine can hold up for a second
    # while it waits on the CLI: the goal must end by the deactivation, not by stale states
    node = Session("rb_dynamics.ros.control_node", tmp_path, {
        "urdf_path": str(DEFAULT_URDF), "mode": "computed_torque", "state_timeout": 5.0})
    driver = Driver(node)
    try:
        assert driver.peer.wait_for(lambda: len(driver.commands) > 10, 20.0), node.output()
        _lifecycle(node, get, "active [3]")
        assert driver.peer.wait_for(driver.client.server_is_ready, 10.0)
        action = "/rb_dynamics/follow_joint_trajectory/_action/"
        assert driver.peer.wait_for(lambda: all(driver.peer.node.count_publishers(
            action + topic) for topic in ("feedback", "status")), 10.0)
        handle = driver.send(duration=60)  # still running when a slow CLI deactivates
        assert handle.accepted
        _lifecycle(node, deactivate, "Transitioning successful")
        result = driver.result(handle)
        assert (result.error_code, result.error_string) == (
            FollowJointTrajectory.Result.INVALID_GOAL,
            "Current goal cancelled during deactivate transition.")
        driver.peer.settle(driver.commands)  # commands already in flight
        assert not driver.commanding(0.5)
        _lifecycle(node, get, "inactive [2]")
        assert driver.peer.wait_for(lambda: any(
            m == "inactive: publishing no efforts" for m in driver.diagnostics[-3:]), 5.0)
        assert not driver.send(duration=1).accepted  # rejected, as JTC; the reason logged
        assert node.wait_for_log("goal rejected (error_code -1): the controller is not active "
                                 "(lifecycle): ros2 lifecycle set", 5.0), node.output()
        _lifecycle(node, activate, "Transitioning successful")
        assert driver.commanding(5.0)
        ok = driver.result(driver.send(duration=1))  # the driver's arm never moves: the
        assert ok.error_code == 0, ok.error_string  # default tolerances check velocity only
        assert "deactivated (inactive): publishing no efforts" in node.output()
    finally:
        node.close()


def test_without_autostart_the_node_waits_unconfigured(tmp_path):
    get, = doc_commands("ros2 lifecycle get")
    node = Session("rb_dynamics.ros.control_node", tmp_path, {
        "urdf_path": str(DEFAULT_URDF), "autostart": False, "state_timeout": 1.0})
    driver = Driver(node)
    try:
        # the node is up (its lifecycle services heard) before the CLI, which looks for it
        # for --spin-time only, is asked: a busy machine starts a node in more than that
        from lifecycle_msgs.srv import GetState

        state = node.peer.node.create_client(GetState, f"/{node.name}/get_state")
        assert node.peer.wait_for(state.service_is_ready, 60.0), node.output()
        _lifecycle(node, get, "unconfigured [1]")
        assert not driver.commanding(1.0)
        _lifecycle(node, get.replace(" get ", " set ") + " configure",
                   "Transitioning successful")
        _lifecycle(node, get, "inactive [2]")
        assert not driver.commanding(0.5)
        _lifecycle(node, get.replace(" get ", " set ") + " activate", "Transitioning successful")
        assert driver.peer.wait_for(lambda: len(driver.commands) > 10, 5.0), node.output()
    finally:
        node.close()


def test_param_set_and_send_goal_as_in_the_docs(tmp_path):
    """The documented set-up (the simulator with its defaults, the node with the documented
    arguments) and the documented ``ros2 param set`` and ``ros2 action send_goal``, verbatim."""
    assert doc_commands("ros2 run rb_dynamics rb_simulator")[0] == "ros2 run rb_dynamics " \
        "rb_simulator"
    run, = (c for c in doc_commands("ros2 run rb_dynamics rb_dynamics_node")
            if "computed_torque" in c)
    arguments = shlex.split(run.replace("\\\n", " ").replace(
        "$(ros2 pkg prefix rb_dynamics)/share/rb_dynamics/urdf/default_arm.urdf",
        str(DEFAULT_URDF)))
    sim = Session("rb_dynamics.ros.simulator_node", tmp_path)
    node = Session("rb_dynamics.ros.control_node", tmp_path, None,
                   *arguments[arguments.index("--ros-args") + 1:], peer=sim.peer)
    peer = sim.peer
    states: list[JointState] = []
    peer.node.create_subscription(JointState, "joint_states", states.append, 10)
    try:
        # the node is up (its parameter services answer) before the documented commands: a
        # start on a busy machine can outlast their own wait
        services = peer.node.create_client(SetParameters, "/rb_dynamics/set_parameters")
        assert services.wait_for_service(timeout_sec=90.0), node.output()
        for command in doc_commands("ros2 param set"):
            result = _shell(command + PARAM_FLAGS)
            assert "Set parameter successful" in result.stdout, f"{result}\n{node.output()}"
        goal, = doc_commands("ros2 action send_goal")
        result = _shell(goal, timeout=60.0)
        if "joint states stopped" in result.stdout:
            # the simulator stalled past state_timeout (0.1 s, the default) on a loaded
            # machine: the goal was rightly aborted; the documented goal once more
            print(f"\nsent again: {result.stdout.splitlines()[-3:]}")
            result = _shell(goal, timeout=60.0)
        assert result.returncode == 0, f"{result}\n{node.output()}\n{sim.output()}"
        assert "Goal accepted" in result.stdout, str(result)
        assert "error_code: 0" in result.stdout, str(result)
        assert "Goal successfully reached!" in result.stdout, str(result)
        assert "Goal finished with status: SUCCEEDED" in result.stdout, str(result)
        assert peer.wait_for(lambda: len(states) > 0, 5.0)
        q = dict(zip(states[-1].name, states[-1].position))
        assert abs(q["elbow_joint"] - 0.8) < 0.01, q
        print(f"\nros2 action send_goal: the elbow ended {abs(q['elbow_joint'] - 0.8):.1e} rad "
              "from its goal")
    finally:
        close_all(node, sim)
