# SPDX-License-Identifier: Apache-2.0
"""The control node on Humble's interfaces: Humble's control_msgs first on the
node's paths and the peer's, constructor arguments checked as Humble's classes always check
them. The node must start, take a FollowJointTrajectory goal and publish
``~/controller_state`` with Humble's fields, across processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from humble import MISSING, humble_env
from ros_harness import close_all
from ros_harness import control_node as start_control_node
from ros_harness import simulator as start_simulator
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.demo.main_job import initial_configuration
from rb_dynamics.model import load_model

pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
PEER = Path(__file__).with_name("humble_peer.py")


def test_the_control_node_runs_a_goal_on_humbles_control_msgs(tmp_path):
    model = load_model(DEFAULT_URDF)
    joints = model.actuated_joint_names
    q0 = initial_configuration(model)[[model.joint_q_index[model.joint_index(j)] for j in joints]]
    # lock-step on sim time: the arm waits for each command, however loaded the machine
    sim = start_simulator(tmp_path, {
        "urdf_path": str(DEFAULT_URDF), "initial_positions": q0.tolist(),
        "publish_rate": 1000.0, "time_step": 0.001, "publish_clock": True,
        "command_timeout": 0.2, "start_paused": True, "lockstep": True,
        "lockstep_timeout": 60.0})
    node = start_control_node(tmp_path, {
        "urdf_path": str(DEFAULT_URDF), "mode": "computed_torque", "kp": [400.0],
        "kd": [40.0], "friction_compensation": True, "state_timeout": 0.1,
        "use_sim_time": True},
        "-r", f"~/effort_commands:=/{sim.name}/commands", peer=sim.peer, env=humble_env())
    try:
        states = sim.received(JointState, "joint_states")
        assert sim.call(SetBool, "~/pause", SetBool.Request(data=False)).success
        # the loop is closed (lock-step: the simulator steps only on the node's commands)
        # before the peer sends its goal, which the node would refuse without a joint state
        assert sim.wait_for(lambda: states and states[-1][1].header.stamp.nanosec > 100_000_000
                            or states and states[-1][1].header.stamp.sec > 0, 60.0), \
            sim.output() + node.output()
        spec = {"joints": joints, "start": q0.tolist(), "goal": (q0 + 0.1).tolist()}
        out = subprocess.run([sys.executable, str(PEER), node.name, json.dumps(spec)],
                             env=humble_env(), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr + node.output()
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        assert seen["humble"], "the peer did not get Humble's control_msgs"
        assert seen["server"] and seen["accepted"], (seen, node.output())
        assert seen.get("succeeded"), (json.dumps(seen), node.output())
        assert seen["error_code"] == 0, seen
        state = seen["state"]
        assert state["joint_names"] == joints
        assert "speed_scaling_factor" not in state["fields"] and "output" in state["fields"]
        assert len(state["output_effort"]) == len(joints)
        assert np.all(np.isfinite(state["output_effort"]))
        assert node.process.proc.poll() is None, node.output()
    finally:
        close_all(node, sim)
