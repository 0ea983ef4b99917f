# SPDX-License-Identifier: Apache-2.0
"""A FollowJointTrajectory client and ~/controller_state listener run with Humble's control_msgs
(test_humble.py starts it under ``humble.humble_env``); prints one JSON line of what it saw.

    python humble_peer.py NODE_NAME '{"joints": [...], "start": [...], "goal": [...]}'
"""

from __future__ import annotations

import json
import sys
import time

import rclpy
from action_msgs.msg import GoalStatus
from control_msgs.action import FollowJointTrajectory
from control_msgs.msg import JointTolerance, JointTrajectoryControllerState
from rclpy.action import ActionClient
from trajectory_msgs.msg import JointTrajectoryPoint


def _until(node, done, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while not done() and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    return done()


def main() -> None:
    name, spec = sys.argv[1], json.loads(sys.argv[2])
    seen: dict = {"humble": "speed_scaling_factor" not in
                  JointTrajectoryControllerState.get_fields_and_field_types()}
    rclpy.init()
    node = rclpy.create_node("humble_peer")
    states: list = []
    node.create_subscription(JointTrajectoryControllerState, f"/{name}/controller_state",
                             states.append, 10)
    client = ActionClient(node, FollowJointTrajectory, f"/{name}/follow_joint_trajectory")
    seen["server"] = client.wait_for_server(timeout_sec=30.0)
    goal = FollowJointTrajectory.Goal()
    goal.trajectory.joint_names = spec["joints"]
    end = JointTrajectoryPoint(positions=spec["goal"], velocities=[0.0] * len(spec["goal"]))
    end.time_from_start.sec = 1
    goal.trajectory.points = [end]
    goal.goal_tolerance = [JointTolerance(name=j, position=0.05) for j in spec["joints"]]
    goal.goal_time_tolerance.sec = 2
    sent = client.send_goal_async(goal)
    _until(node, sent.done, 15.0)
    handle = sent.result() if sent.done() else None
    seen["accepted"] = bool(handle and handle.accepted)
    if seen["accepted"]:
        result = handle.get_result_async()
        _until(node, result.done, 30.0)
        if result.done():
            seen["status"] = result.result().status
            seen["succeeded"] = result.result().status == GoalStatus.STATUS_SUCCEEDED
            seen["error_code"] = result.result().result.error_code
            seen["error_string"] = result.result().result.error_string
    _until(node, lambda: states, 10.0)
    if states:
        state = states[-1]
        seen["state"] = {"joint_names": list(state.joint_names),
                         "fields": sorted(state.get_fields_and_field_types()),
                         "output_effort": list(state.output.effort)}
    print(json.dumps(seen), flush=True)
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main()
