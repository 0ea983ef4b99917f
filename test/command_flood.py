# SPDX-License-Identifier: Apache-2.0
"""A peer that publishes as fast as it can (a runaway controller, a runaway force sensor).

    python test/command_flood.py TOPIC SECONDS SIZE
    python test/command_flood.py TOPIC SECONDS --wrenches LINK[,LINK...]

Waits until a subscriber is matched, prints ``flooding``, publishes for SECONDS, then prints
``sent N in T s``. With SIZE: std_msgs/Float64MultiArray zeros of length SIZE, all the time.
With ``--wrenches``: geometry_msgs/WrenchStamped, message k on link k mod (number of links)
with force (1 + (k mod 1000)/1000, 0, 0) N and torque (0, 0, 0.01) N·m, in bursts of
``BURST`` s every 2·``BURST`` s (so that a rate with the flood and one without alternate under
the same machine load); then it prints ``bursts T0 T1 …`` (the bursts' start and end,
time.time()) and ``last LINK FX`` (the last wrench sent: the one the subscriber must end up
applying). Reliable, keep-last 10, as a controller's publisher.
"""

from __future__ import annotations

import sys
import time

import rclpy
from geometry_msgs.msg import WrenchStamped
from std_msgs.msg import Float64MultiArray

BURST = 0.25  # s of wrenches, then as long without


def wrench_message(k: int, links: list[str]) -> WrenchStamped:
    """Message k of a wrench flood over ``links``."""
    msg = WrenchStamped()
    msg.header.frame_id = links[k % len(links)]
    msg.wrench.force.x = 1.0 + (k % 1000) / 1000.0
    msg.wrench.torque.z = 0.01
    return msg


def main(topic: str, seconds: float, what: list[str]) -> int:
    rclpy.init()
    node = rclpy.create_node("command_flood")
    links = what[1].split(",") if what[0] == "--wrenches" else None
    kind = Float64MultiArray if links is None else WrenchStamped
    publisher = node.create_publisher(kind, topic, 10)
    deadline = time.monotonic() + 20.0
    while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    time.sleep(0.3)  # the subscriber's side of the match, too
    print("flooding", flush=True)
    messages = [Float64MultiArray(data=[0.0] * int(what[0]))] if links is None else \
        [wrench_message(k, links) for k in range(1000 * len(links))]
    sent, start, bursts = 0, time.monotonic(), []
    while time.monotonic() - start < seconds:
        if links is not None:  # a burst, then a pause as long
            bursts.append(time.time())
            until = time.monotonic() + BURST
            while time.monotonic() < until:
                publisher.publish(messages[sent % len(messages)])
                sent += 1
            bursts.append(time.time())
            time.sleep(BURST)
            continue
        publisher.publish(messages[sent % len(messages)])
        sent += 1
    print(f"sent {sent} in {time.monotonic() - start:.2f} s", flush=True)
    if links is not None:
        print("bursts " + " ".join(f"{t!r}" for t in bursts), flush=True)
        last = messages[(sent - 1) % len(messages)]
        print(f"last {last.header.frame_id} {last.wrench.force.x!r}", flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), sys.argv[3:]))
