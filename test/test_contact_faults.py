# SPDX-License-Identifier: Apache-2.0
"""Contact monitoring under the faults of a real deployment, across processes (real nodes, real
DDS; the shape of test_contact_ros.py):

- a robot with a gripper, `joints` naming only its arm (Panda's seven joints; the finger in the
  joint states, position-controlled by the simulator): a push on the hand is detected.
"""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import WrenchStamped
from ros2_control_samples import PANDA_ARM, panda_block, robot_xml, with_blocks
from ros_harness import close_all, control_node, fresh_name, simulator
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool, Trigger

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import default_payload_link, link_pose
from rb_dynamics.model import load_model
from rb_dynamics_interfaces.msg import Collision

PANDA_XML = robot_xml("panda")
PANDA = load_model(PANDA_XML)
PANDA_READY = [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785]
PANDA_HAND = default_payload_link(PANDA)  # panda_hand_tcp

ARM = load_model(DEFAULT_URDF)
JOINTS = ARM.actuated_joint_names
Q0 = np.array([0.3, -1.2, 1.4, -0.8, 0.9, 0.2])


def _stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def _contact_statuses(diagnostics: list, node_name: str) -> list:
    return [s for _, array in diagnostics for s in array.status
            if s.hardware_id == f"{node_name}: contact"]


def test_a_push_is_detected_with_joints_naming_only_the_arm(tmp_path):
    """Panda, `joints` its seven arm joints (the finger held in position by the simulator, in
    the joint states but not commanded): a 20 N push on the hand → ~/collision naming arm
    joints, the estimates and thresholds per commanded joint; the node logs no failure."""
    sim = simulator(tmp_path, {
        "robot_description": with_blocks(PANDA_XML, panda_block(initial=PANDA_READY)),
        "publish_clock": True, "lockstep": True, "lockstep_timeout": 5.0,
        "start_paused": True, "command_timeout": 0.2, "effort_noise": 0.05})
    control = control_node(tmp_path, {
        "robot_description": PANDA_XML, "joints": PANDA_ARM, "mode": "computed_torque",
        "kp": [400.0], "kd": [40.0], "state_timeout": 0.5, "use_sim_time": True,
        "contact.publish_rate": 0.0, "contact.reaction": "none"},
        name=fresh_name("rb_dynamics_contact_panda"), peer=sim.peer)
    # the arm's effort controller: the node's commands, by name, to the simulator
    to_sim = sim.publisher(JointState, "~/joint_commands")
    control.peer.node.create_subscription(
        Float64MultiArray, control.topic("~/effort_commands"),
        lambda m: to_sim.publish(JointState(name=PANDA_ARM, effort=list(m.data))), 10)
    states = sim.received(JointState, "joint_states")
    forwarded = control.commands
    collisions = control.received(Collision, "~/collision")
    estimates = control.received(JointState, "~/external_efforts")

    def logs() -> str:
        return f"--- simulator:\n{sim.output()[-3000:]}\n--- control:\n{control.output()[-4000:]}"

    def run_for(seconds: float) -> None:
        until = _stamp(states[-1][1]) + seconds
        assert sim.wait_for(lambda: _stamp(states[-1][1]) >= until, 120.0), logs()

    try:
        assert sim.wait_for(lambda: states and forwarded and control.client(
            Trigger, "~/reset_collision").service_is_ready(), 60.0), logs()
        assert sim.call(SetBool, "~/pause", SetBool.Request(data=False)).success
        run_for(0.3)  # the hold settled, the observer running
        assert estimates and list(estimates[-1][1].name) == PANDA_ARM, logs()
        assert not collisions, logs()
        msg = states[-1][1]
        by_name = dict(zip(msg.name, msg.position))
        q = np.array([by_name[n] for n in PANDA.joint_names])
        local = link_pose(PANDA, q, PANDA_HAND)[:3, :3].T @ np.array([20.0, 0.0, 0.0])
        push = WrenchStamped()
        push.header.frame_id = PANDA_HAND
        push.wrench.force.x, push.wrench.force.y, push.wrench.force.z = local.tolist()
        sim.publisher(WrenchStamped, "~/external_wrench").publish(push)
        run_for(0.3)
        assert len(collisions) == 1, logs()
        event = collisions[0][1]
        assert event.joint_names and set(event.joint_names) <= set(PANDA_ARM), event
        assert len(event.external_efforts) == len(event.thresholds) == len(event.joint_names)
        assert all(abs(e) > t for e, t in zip(event.external_efforts, event.thresholds))
        assert "callback failed" not in control.output(), logs()
    finally:
        close_all(control, sim)
