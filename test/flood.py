# SPDX-License-Identifier: Apache-2.0
"""A peer that publishes as fast as it can (a runaway controller, a stuck force sensor driver).

    python test/flood.py TOPIC SECONDS KIND [unheard]

KIND ``efforts:N``: std_msgs/Float64MultiArray, N zeros; ``wrench:LINK``:
geometry_msgs/WrenchStamped, 1 N along x on LINK. Waits until a subscriber is matched (not
with ``unheard``: a topic nobody reads, the same busy process as a baseline), prints
``flooding``, publishes for SECONDS, then prints ``sent N in T s``. Reliable, keep-last 10, as
a controller's publisher.
"""

from __future__ import annotations

import sys
import time

import rclpy
from geometry_msgs.msg import WrenchStamped
from std_msgs.msg import Float64MultiArray


def message(kind: str):
    what, _, value = kind.partition(":")
    if what == "efforts":
        return Float64MultiArray(data=[0.0] * int(value))
    if what == "wrench":
        msg = WrenchStamped()
        msg.header.frame_id = value
        msg.wrench.force.x = 1.0
        return msg
    raise SystemExit(f"unknown kind {kind!r}")


def main(topic: str, seconds: float, kind: str, heard: bool = True) -> int:
    msg = message(kind)
    rclpy.init()
    node = rclpy.create_node("flood")
    publisher = node.create_publisher(type(msg), topic, 10)
    deadline = time.monotonic() + 20.0
    while heard and publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    time.sleep(0.3)  # the subscriber's side of the match, too
    print("flooding", flush=True)
    sent, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        publisher.publish(msg)
        sent += 1
    print(f"sent {sent} in {time.monotonic() - start:.2f} s", flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:] != ["unheard"]))
