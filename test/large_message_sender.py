# SPDX-License-Identifier: Apache-2.0
"""A peer in a process of its own that sends large trajectories to a control node, so that the
test process, which streams joint states and times the commands, does not build or serialize
them itself (test_loop_pace.py).

    python large_message_sender.py NODE_NAME JOINTS Q0

JOINTS and Q0 are comma-separated. It builds its messages, prints READY, then for each line
"goal N" or "topic N" read from stdin sends an N-point trajectory from Q0 (a 0.05 rad ramp over
20 s) as a FollowJointTrajectory goal or on ~/joint_trajectory, and prints one line: the goal's
"accepted"/"rejected" and the seconds to the answer, or "published".
"""

from __future__ import annotations

import sys
import time

import rclpy
from control_msgs.action import FollowJointTrajectory
from rclpy.action import ActionClient
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

PREBUILT = (10_000, 100_000)  # the sizes test_loop_pace.py asks for


def ramp_trajectory(joints: list[str], q0: list[float], n: int) -> JointTrajectory:
    msg = JointTrajectory(joint_names=joints)
    duration = 20.0
    for k in range(n):
        t = (k + 1) * duration / n
        point = JointTrajectoryPoint(positions=[x + 0.05 * t / duration for x in q0])
        point.time_from_start.sec, point.time_from_start.nanosec = divmod(
            round(t * 1e9), 1_000_000_000)
        msg.points.append(point)
    return msg


def main() -> None:
    name, joints = sys.argv[1], sys.argv[2].split(",")
    q0 = [float(x) for x in sys.argv[3].split(",")]
    rclpy.init()
    node = rclpy.create_node("large_message_sender")
    client = ActionClient(node, FollowJointTrajectory, f"/{name}/follow_joint_trajectory")
    publisher = node.create_publisher(JointTrajectory, f"/{name}/joint_trajectory", 10)
    if not client.wait_for_server(timeout_sec=30.0):
        print("NO SERVER", flush=True)
        return
    end = time.monotonic() + 30.0
    while publisher.get_subscription_count() == 0 and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    # built before READY: building one in the measured windows would be a third busy process
    # on the machine then, and not in the quiet windows
    built = {n: ramp_trajectory(joints, q0, n) for n in PREBUILT}
    print("READY", flush=True)
    for line in sys.stdin:
        kind, n = line.split()
        trajectory = built.get(int(n)) or ramp_trajectory(joints, q0, int(n))
        if kind == "topic":
            publisher.publish(trajectory)
            print("published", flush=True)
            continue
        goal = FollowJointTrajectory.Goal(trajectory=trajectory)
        began = time.monotonic()
        sent = client.send_goal_async(goal)
        rclpy.spin_until_future_complete(node, sent, timeout_sec=120.0)
        answer = "accepted" if sent.done() and sent.result().accepted else "rejected"
        print(f"{answer} {time.monotonic() - began:.3f}", flush=True)
    rclpy.shutdown()


if __name__ == "__main__":
    main()
