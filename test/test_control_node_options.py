"""The control node's options across processes: where the model comes from, best-effort joint
states (the standard QoS override and the deprecated alias), friction compensation, the
publish-rate limit, and running without control_msgs."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from pin_oracle import REAL_ROBOTS, rel_err, robots_dir
from rcl_interfaces.srv import GetParameters
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from ros_harness import NodeProcess, Peer, answer_after, write_params
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import load_model

UR5 = Path(robots_dir(), REAL_ROBOTS["ur5"][0])
PANDA = Path(robots_dir(), REAL_ROBOTS["panda"][0])


class Talk:
    """A peer that sends joint states and collects commands and diagnostics."""

    def __init__(self, qos=10, commands_topic: str = "rb_dynamics/effort_commands",
                 states_topic: str = "joint_states"):
        self.peer = Peer()
        self.commands: list[tuple[float, np.ndarray]] = []
        self.statuses: list[tuple[int, str]] = []
        node = self.peer.node
        node.create_subscription(Float64MultiArray, commands_topic,
                                 lambda m: self.commands.append((time.monotonic(),
                                                                 np.array(m.data))), 100)
        node.create_subscription(
            DiagnosticArray, "/diagnostics",
            lambda m: self.statuses.extend((s.level, s.message) for s in m.status), 10)
        self.states = node.create_publisher(JointState, states_topic, qos)

    def send(self, names, q, v=None):
        msg = JointState(name=list(names), position=[float(x) for x in q])
        if v is not None:
            msg.velocity = [float(x) for x in v]
        self.states.publish(msg)

    def answer(self, names, q, v=None, timeout=8.0) -> np.ndarray | None:
        """Send the same state until commands come; the command answering it, or None."""
        answer = answer_after(self.peer, lambda: self.send(names, q, v), self.commands, timeout)
        return None if answer is None else answer[1]


def _stop(node: NodeProcess, talk: Talk) -> None:
    talk.peer.close()
    assert node.stop() < 2.0, "the node did not shut down within 2 s"
    assert node.proc.returncode == 0, node.output()


def _gravity(path: Path, q: np.ndarray, names: list[str]) -> np.ndarray:
    pm = pin.buildModelFromUrdf(str(path), mimic=True)
    g = pin.computeGeneralizedGravity(pm, pm.createData(), q)
    return g[[pm.joints[pm.getJointId(n)].idx_v for n in names]]


def test_waits_without_a_description_and_then_takes_the_topic(tmp_path):
    node = NodeProcess("rb_dynamics.node", write_params(tmp_path, "rb_dynamics",
                                                        {"state_timeout": 1.0}))
    talk = Talk()
    try:
        assert talk.peer.wait_for(
            lambda: any("waiting for a robot description" in m for _, m in talk.statuses), 5.0)
        talk.peer.wait_for(lambda: False, 1.5)
        assert not talk.commands
        assert node.output().count("waiting for a robot description") == 1  # said once
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        description = talk.peer.node.create_publisher(String, "/robot_description", latched)
        description.publish(String(data=UR5.read_text()))
        joints = load_model(UR5).actuated_joint_names
        q = np.array([0.3, -1.1, 0.9, -0.4, 0.6, 0.2])
        tau = talk.answer(joints, q)
        assert tau is not None, node.output()
        assert rel_err(tau, _gravity(UR5, q, joints)) <= 1e-9
        assert "/robot_description topic" in node.output()
    finally:
        _stop(node, talk)


def test_the_robot_description_parameter_wins_over_urdf_path(tmp_path):
    node = NodeProcess("rb_dynamics.node", write_params(tmp_path, "rb_dynamics", {
        "robot_description": PANDA.read_text(), "urdf_path": str(UR5), "state_timeout": 1.0}))
    talk = Talk()
    try:
        panda = load_model(PANDA)
        q = np.array([0.1, -0.4, 0.2, -2.0, 0.1, 1.5, 0.7, 0.02])
        tau = talk.answer(panda.joint_names, q)
        assert tau is not None, node.output()
        assert len(tau) == len(panda.actuated_joint_names)
        assert "model 'panda'" in node.output()
    finally:
        _stop(node, talk)


BEST_EFFORT = {  # the standard override (docs/trajectory_controller.md), the deprecated alias
    "qos_overrides": {"qos_overrides": {"/joint_states": {"subscription": {
        "reliability": "best_effort"}}}},
    "joint_states_qos": {"joint_states_qos": "best_effort"},
}


@pytest.mark.parametrize("qos", list(BEST_EFFORT))
def test_best_effort_joint_states_with_friction_compensation(tmp_path, qos):
    """A driver publishing sensor-data QoS (best effort) is heard with
    qos_overrides./joint_states.subscription.reliability best_effort (or the deprecated
    joint_states_qos); τ = g(q) + damping·q̇ + friction·tanh(q̇/0.1) with the URDF's
    <dynamics>."""
    node = NodeProcess("rb_dynamics.node", write_params(tmp_path, "rb_dynamics", {
        "urdf_path": str(DEFAULT_URDF), **BEST_EFFORT[qos],
        "friction_compensation": True, "state_timeout": 1.0}))
    talk = Talk(qos_profile_sensor_data)
    try:
        client = talk.peer.node.create_client(GetParameters, "rb_dynamics/get_parameters")
        answer = talk.peer.call(client, GetParameters.Request(
            names=["qos_overrides./joint_states.subscription.reliability"]), timeout=20)
        assert answer.values[0].string_value == "best_effort"
        deprecated = "joint_states_qos is deprecated" in node.output()
        assert deprecated == (qos == "joint_states_qos"), node.output()
        model = load_model(DEFAULT_URDF)
        joints = model.actuated_joint_names
        pm = pin.buildModelFromUrdf(str(DEFAULT_URDF))
        order = [pm.joints[pm.getJointId(n)].idx_v for n in joints]
        q = np.array([0.2, -0.8, 1.0, -0.3, 0.5, 0.1])
        v = np.array([0.5, -0.05, 0.2, -1.0, 0.01, 2.0])
        tau = talk.answer(joints, q, v)
        assert tau is not None, node.output()
        losses = pm.damping[order] * v + pm.friction[order] * np.tanh(v / 0.1)
        expected = np.clip(_gravity(DEFAULT_URDF, q, joints) + losses,
                           -model.effort_limit, model.effort_limit)
        assert np.abs(losses).max() > 0.5  # the URDF's losses are really in there
        assert rel_err(tau, expected) <= 1e-9, (tau, expected)
    finally:
        _stop(node, talk)


@pytest.mark.parametrize("limit", [25.0])
def test_max_publish_rate_limits_the_commands(tmp_path, limit):
    node = NodeProcess("rb_dynamics.node", write_params(tmp_path, "rb_dynamics", {
        "urdf_path": str(DEFAULT_URDF), "max_publish_rate": limit, "state_timeout": 1.0}))
    talk = Talk()
    try:
        joints = load_model(DEFAULT_URDF).actuated_joint_names
        assert talk.answer(joints, np.zeros(6)) is not None, node.output()
        talk.peer.wait_for(lambda: False, 0.3)
        start, sent = time.monotonic(), 0
        next_send = start
        while (now := time.monotonic()) - start < 2.0:  # ~250 states per second
            if now >= next_send:
                talk.send(joints, np.zeros(6))
                sent += 1
                next_send += 0.004
            talk.peer.executor.spin_once(timeout_sec=0.001)
        talk.peer.wait_for(lambda: False, 0.2)
        answered = [t for t, _ in talk.commands if t >= start]
        assert sent > 4 * 2.0 * limit
        assert 0.6 * 2.0 * limit <= len(answered) <= 2.0 * limit + 3, (sent, len(answered))
        assert min(np.diff(answered)) > 0.5 / limit  # no bursts
    finally:
        _stop(node, talk)


def test_a_floating_base_model_serves_and_publishes_no_efforts(tmp_path):
    """floating_base: the services get the free-flyer model (checked against Pinocchio in
    test_services.py); joint states are no basis for efforts there, so none are published."""
    solo = Path(robots_dir(), REAL_ROBOTS["solo12"][0])
    node = NodeProcess("rb_dynamics.node", write_params(tmp_path, "rb_dynamics", {
        "urdf_path": str(solo), "floating_base": True, "state_timeout": 1.0}))
    talk = Talk()
    try:
        model = load_model(solo, floating_base=True)
        actuated = [n for n in model.joint_names if n != "root_joint"]
        assert talk.peer.wait_for(
            lambda: any("floating base" in m for _, m in talk.statuses), 5.0), node.output()
        for _ in range(20):
            talk.send(actuated, np.zeros(len(actuated)))
            talk.peer.wait_for(lambda: False, 0.02)
        talk.peer.wait_for(lambda: False, 0.3)
        assert not talk.commands
        assert "publishing no efforts" in node.output()
    finally:
        _stop(node, talk)


def test_namespace_node_name_and_remappings_reach_the_control_loop():
    """The control loop's companion node resolves nothing itself: the main node's namespace,
    name and remappings decide where joint states come from and efforts go."""
    node = NodeProcess("rb_dynamics.node", None, "-p", f"urdf_path:={UR5}",
                       "-r", "__ns:=/robot1", "-r", "__node:=arm",
                       "-r", "joint_states:=/driver/joint_states",
                       "-r", "~/effort_commands:=/arm_controller/commands")
    talk = Talk(commands_topic="/arm_controller/commands", states_topic="/driver/joint_states")
    try:
        joints = load_model(UR5).actuated_joint_names
        q = np.array([0.3, -0.8, 0.9, -0.2, 0.5, 0.1])
        tau = talk.answer(joints, q)
        assert tau is not None, node.output()
        assert rel_err(tau, _gravity(UR5, q, joints)) <= 1e-9
        names = set(talk.peer.node.get_node_names_and_namespaces())
        assert {("arm", "/robot1"), ("arm_control_loop", "/robot1")} <= names, names
    finally:
        _stop(node, talk)


class WithoutControlMsgs(NodeProcess):
    """The control node in a process where control_msgs cannot be imported (a machine without
    the ROS tools)."""

    CODE = ("import sys; sys.modules['control_msgs'] = None; "
            "from rb_dynamics.node import main; sys.exit(main())")

    def __init__(self, *extra: str):
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the child's stdout
            prefix="rb_dynamics_no_control_msgs_", suffix=".log", delete=False)
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, "--ros-args", *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT)


def test_without_control_msgs_the_node_runs_and_says_why():
    from rclpy.action import get_action_names_and_types

    node = WithoutControlMsgs("-p", f"urdf_path:={DEFAULT_URDF}", "-p", "state_timeout:=1.0")
    talk = Talk()
    try:
        joints = load_model(DEFAULT_URDF).actuated_joint_names
        q = np.array([0.2, -0.8, 1.0, -0.3, 0.5, 0.1])
        tau = talk.answer(joints, q)
        assert tau is not None, node.output()
        assert rel_err(tau, _gravity(DEFAULT_URDF, q, joints)) <= 1e-9
        assert node.output().count("control_msgs is not installed") == 1, node.output()
        assert "no ~/follow_joint_trajectory action" in node.output()
        actions = dict(get_action_names_and_types(talk.peer.node))
        assert "/rb_dynamics/follow_joint_trajectory" not in actions, actions
    finally:
        _stop(node, talk)
