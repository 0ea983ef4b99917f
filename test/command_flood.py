# SPDX-License-Identifier: Apache-2.0
"""A peer that publishes std_msgs/Float64MultiArray as fast as it can (a runaway controller).

    python test/command_flood.py TOPIC SECONDS SIZE

Waits until a subscriber is matched, prints ``flooding``, publishes zeros of length SIZE for
SECONDS, then prints ``sent N``. Reliable, keep-last 10, as a controller's publisher.
"""

from __future__ import annotations

import sys
import time

import rclpy
from std_msgs.msg import Float64MultiArray


def main(topic: str, seconds: float, size: int) -> int:
    rclpy.init()
    node = rclpy.create_node("command_flood")
    publisher = node.create_publisher(Float64MultiArray, topic, 10)
    deadline = time.monotonic() + 20.0
    while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    time.sleep(0.3)  # the subscriber's side of the match, too
    print("flooding", flush=True)
    msg = Float64MultiArray(data=[0.0] * size)
    sent, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        publisher.publish(msg)
        sent += 1
    print(f"sent {sent} in {time.monotonic() - start:.2f} s", flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
