# SPDX-License-Identifier: Apache-2.0
"""The control node's options across processes: where the model comes from, best-effort joint
states (the standard QoS override and the deprecated alias), friction compensation, the
publish-rate limit, and running without control_msgs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from pin_oracle import REAL_ROBOTS, arm_torques, pinocchio_arm, rel_err, robots_dir, v_indices
from rcl_interfaces.srv import GetParameters
from rclpy.qos import qos_profile_sensor_data
from ros_harness import control_node

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import load_model

UR5 = Path(robots_dir(), REAL_ROBOTS["ur5"][0])
PANDA = Path(robots_dir(), REAL_ROBOTS["panda"][0])


def assert_commands_gravity(node, urdf: Path, q) -> None:
    """The node answers joint state ``q`` at rest, ordered as the URDF's actuated joints, with
    Pinocchio's g(q) (the default mode, gravity compensation)."""
    joints = load_model(urdf).actuated_joint_names
    tau = node.command_after(joints, q)
    assert tau is not None, node.output()
    assert rel_err(tau, arm_torques(urdf, joints, q)) <= 1e-9


def test_waits_without_a_description_and_then_takes_the_topic(tmp_path):
    node = control_node(tmp_path, {"state_timeout": 1.0})
    commands = node.commands
    try:
        assert node.wait_for(
            lambda: any("waiting for a robot description" in s.message
                        for _, s in node.statuses()), 30.0)  # a start on a busy machine
        # two more reports (1 Hz): the node has gone on waiting, and said so once
        reports = len(node.statuses())
        assert node.wait_for(lambda: len(node.statuses()) >= reports + 2, 5.0)
        assert not commands
        assert node.output().count("waiting for a robot description") == 1  # said once
        node.describe(UR5.read_text())
        assert_commands_gravity(node, UR5, np.array([0.3, -1.1, 0.9, -0.4, 0.6, 0.2]))
        assert "/robot_description topic" in node.output()
    finally:
        node.close()


def test_the_robot_description_parameter_wins_over_urdf_path(tmp_path):
    node = control_node(tmp_path, {"robot_description": PANDA.read_text(),
                                   "urdf_path": str(UR5), "state_timeout": 1.0})
    try:
        panda = load_model(PANDA)
        q = np.array([0.1, -0.4, 0.2, -2.0, 0.1, 1.5, 0.7, 0.02])
        tau = node.command_after(panda.joint_names, q)
        assert tau is not None, node.output()
        assert len(tau) == len(panda.actuated_joint_names)
        assert "model 'panda'" in node.output()
    finally:
        node.close()


BEST_EFFORT = {  # the standard override (docs/trajectory_controller.md), the deprecated alias
    "qos_overrides": {"qos_overrides": {"/joint_states": {"subscription": {
        "reliability": "best_effort"}}}},
    "joint_states_qos": {"joint_states_qos": "best_effort"},
}


@pytest.mark.parametrize("qos", list(BEST_EFFORT))
def test_best_effort_joint_states_with_friction_compensation(tmp_path, qos):
    """A driver publishing sensor-data QoS (best effort) is heard with
    qos_overrides./joint_states.subscription.reliability best_effort (or the deprecated
    joint_states_qos); τ = g(q) + damping·q̇ + friction·tanh(q̇/0.1) at the measured velocity,
    with the URDF's <dynamics> given as identified friction (a dynamics overlay: gravity
    compensation compensates no friction a URDF alone declares)."""
    pm = pinocchio_arm(str(DEFAULT_URDF))
    model = load_model(DEFAULT_URDF)
    joints = model.actuated_joint_names
    order = v_indices(pm, joints)
    overlay = tmp_path / "identified_friction.yaml"
    overlay.write_text(json.dumps({
        "format": "rb_dynamics/dynamics_overlay", "version": 1, "joints": {
            name: {"viscous": float(b), "coulomb": float(c)}
            for name, b, c in zip(joints, pm.damping[order], pm.friction[order])}}))
    node = control_node(tmp_path, {
        "urdf_path": str(DEFAULT_URDF), **BEST_EFFORT[qos], "dynamics_overlay": str(overlay),
        "friction_compensation": True, "state_timeout": 1.0},
        state_qos=qos_profile_sensor_data)
    try:
        answer = node.call(GetParameters, "~/get_parameters", GetParameters.Request(
            names=["qos_overrides./joint_states.subscription.reliability"]), timeout=20)
        assert answer.values[0].string_value == "best_effort"
        deprecated = "joint_states_qos is deprecated" in node.output()
        assert deprecated == (qos == "joint_states_qos"), node.output()
        q = np.array([0.2, -0.8, 1.0, -0.3, 0.5, 0.1])
        v = np.array([0.5, -0.05, 0.2, -1.0, 0.01, 2.0])
        tau = node.command_after(joints, q, v)
        assert tau is not None, node.output()
        losses = pm.damping[order] * v + pm.friction[order] * np.tanh(v / 0.1)
        expected = np.clip(arm_torques(DEFAULT_URDF, joints, q) + losses,
                           -model.effort_limit, model.effort_limit)
        assert np.abs(losses).max() > 0.5  # the URDF's losses are really in there
        assert rel_err(tau, expected) <= 1e-9, (tau, expected)
    finally:
        node.close()


@pytest.mark.parametrize("limit", [25.0])
def test_max_publish_rate_limits_the_commands(tmp_path, limit):
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "max_publish_rate": limit,
                                   "state_timeout": 1.0})
    commands = node.commands
    try:
        joints = load_model(DEFAULT_URDF).actuated_joint_names
        assert node.command_after(joints, np.zeros(6)) is not None, node.output()
        node.settle(commands)
        start = time.monotonic()
        stream = node.stream_states(joints, np.zeros(6), 0.004)  # ~250 states per second
        node.wait_for(lambda: time.monotonic() - start >= 2.0, 2.5)
        stream.stop()
        node.settle(commands)
        answered = [t for t, _ in commands if t >= start]
        assert stream.sent > 4 * 2.0 * limit
        assert 0.6 * 2.0 * limit <= len(answered) <= 2.0 * limit + 3, (stream.sent,
                                                                       len(answered))
        # no bursts: in any half second at most the limit's share; counted by arrival in this
        # process, which a busy machine delays and delivers two at a time (single gaps of a
        # few ms), but never more than the node sent in that span
        times = np.array(answered)
        window = [np.count_nonzero((times >= t) & (times < t + 0.5)) for t in times]
        assert max(window) <= 0.5 * limit + 3, (max(window), np.diff(times).round(4).tolist())
    finally:
        node.close()


def test_a_floating_base_model_serves_and_publishes_no_efforts(tmp_path):
    """floating_base: the services get the free-flyer model (checked against Pinocchio in
    test_services.py); joint states are no basis for efforts there, so none are published."""
    solo = Path(robots_dir(), REAL_ROBOTS["solo12"][0])
    node = control_node(tmp_path, {"urdf_path": str(solo), "floating_base": True,
                                   "state_timeout": 1.0})
    commands = node.commands
    try:
        model = load_model(solo, floating_base=True)
        actuated = [n for n in model.joint_names if n != "root_joint"]
        assert node.wait_for(
            lambda: any("floating base" in s.message for _, s in node.statuses()), 30.0), \
            node.output()
        for _ in range(20):
            node.send_state(actuated, np.zeros(len(actuated)))
            assert not node.wait_for(lambda: commands, 0.02)
        assert not node.wait_for(lambda: commands, 0.3)
        assert "publishing no efforts" in node.output()
    finally:
        node.close()


def test_namespace_node_name_and_remappings_reach_the_control_loop(tmp_path):
    """The control loop's companion node resolves nothing itself: the main node's namespace,
    name and remappings decide where joint states come from and efforts go."""
    node = control_node(tmp_path, None, "-p", f"urdf_path:={UR5}", "-r", "__ns:=/robot1",
                        "-r", "joint_states:=/driver/joint_states",
                        "-r", "~/effort_commands:=/arm_controller/commands", name="arm",
                        commands_topic="/arm_controller/commands",
                        states_topic="/driver/joint_states")
    try:
        assert_commands_gravity(node, UR5, np.array([0.3, -0.8, 0.9, -0.2, 0.5, 0.1]))
        names = set(node.peer.node.get_node_names_and_namespaces())
        assert {("arm", "/robot1"), ("arm_control_loop", "/robot1")} <= names, names
    finally:
        node.close()


def test_without_control_msgs_the_node_runs_and_says_why(tmp_path):
    """In a process where control_msgs cannot be imported (a machine without the ROS tools)
    the node runs, says once why it has no action, and offers none."""
    from rclpy.action import get_action_names_and_types

    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "state_timeout": 1.0},
                        prelude="import sys; sys.modules['control_msgs'] = None")
    try:
        assert_commands_gravity(node, DEFAULT_URDF, np.array([0.2, -0.8, 1.0, -0.3, 0.5, 0.1]))
        assert node.output().count("control_msgs is not installed") == 1, node.output()
        assert "no ~/follow_joint_trajectory action" in node.output()
        actions = dict(get_action_names_and_types(node.peer.node))
        assert f"/{node.name}/follow_joint_trajectory" not in actions, actions
    finally:
        node.close()
