# SPDX-License-Identifier: Apache-2.0
"""The simulator's external wrench: a push on a link, known exactly, for the contact figures.

    ~/external_wrench        (sub, geometry_msgs/WrenchStamped)  header.frame_id names the link;
                             the wrench is in that link's frame, about its origin
    ~/true_external_efforts  (pub, sensor_msgs/JointState)  Jᵀ F at each published state, the
                             effort field in the order of joint_states (with each joint state
                             while a wrench acts, and once more, zeros, when it ends)

A wrench acts from the next step on, as the joint efforts Jᵀ(q) F at every step
(``simulation.Simulator.set_external_wrench``). The topic is read at the steps, the newest
message only (its reader keeps one, on a companion node no executor waits on): a flood costs
one take per step, not an executor pass per message, and a message superseded before the next
step never acts. A publisher faster than ``external_wrench_max_rate`` is not listened to for a
while (``ros.flood_guard``: the middleware would still carry its every message), said in a
warning; the wrench acting stays meanwhile. It acts until the next message or, with
``external_wrench_timeout`` > 0, that many simulated seconds after its message (a hand that lets
go when its messages stop); a zero wrench, or an empty frame_id, removes it. A message naming an
unknown link, a link welded to the world or a value that is not finite is refused with a warning
and changes nothing. The efforts the simulator reports on joint_states stay the drives' own: a
torque sensor does not measure the push.
"""

from __future__ import annotations

import math

import numpy as np
from geometry_msgs.msg import WrenchStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState

from rb_dynamics.ros.conversions import JointLayout
from rb_dynamics.ros.flood_guard import FloodGuard
from rb_dynamics.ros.runtime import ThrottledLogger, polled_node
from rb_dynamics.simulation import Simulator

__all__ = ["ExternalWrench"]


class ExternalWrench:
    """The topic, the timeout and the true efforts of ``node``'s simulator ``sim``; at most
    ``max_rate`` messages/s are listened to (0: any rate)."""

    def __init__(self, node: Node, sim: Simulator, layout: JointLayout, joints: list[str],
                 timeout: float, warn: ThrottledLogger, max_rate: float = 0.0) -> None:
        self.node, self.sim, self.layout, self.warn = node, sim, layout, warn
        self.timeout = timeout  # simulated s; 0: until the next message
        self.since = -math.inf  # simulated time of the wrench's message
        self._ending = False  # one more zero message is due
        self.truth = JointState(name=list(joints))  # reused
        self.truth_pub = node.create_publisher(JointState, "~/true_external_efforts", 100)
        self.inbox: Node | None = polled_node(node, "wrench")
        self.input = FloodGuard(self.inbox, WrenchStamped,
                                node.resolve_topic_name("~/external_wrench"), max_rate, warn,
                                "external_wrench_max_rate")

    def close(self) -> None:
        if self.inbox is not None:
            self.input.close()
            self.inbox.destroy_node()
            self.inbox = None

    def take(self) -> None:
        """Before the steps: the newest message since the last steps, if any, applies."""
        newest = self.input.take_newest()
        if newest is not None:
            self._apply(newest)

    def _apply(self, msg: WrenchStamped) -> None:
        f, t = msg.wrench.force, msg.wrench.torque
        wrench = np.array([f.x, f.y, f.z, t.x, t.y, t.z])
        link = msg.header.frame_id
        if not link or not wrench.any():
            self.remove()
            return
        try:
            self.sim.set_external_wrench(link, wrench)
        except ValueError as exc:
            self.warn(f"~/external_wrench refused: {exc}", f"external wrench {link}")
            return
        self.since = self.sim.time

    def remove(self) -> None:
        """No wrench from the next step on (one zero ~/true_external_efforts follows)."""
        if self.sim.wrench is not None:
            self.sim.set_external_wrench(None)
            self._ending = True

    def expire(self) -> None:
        """Before the steps: the wrench ends ``timeout`` simulated seconds after its message."""
        if self.timeout > 0.0 and self.sim.wrench is not None \
                and self.sim.time - self.since >= self.timeout - 1e-12:
            self.remove()

    def publish(self, stamp) -> None:
        """With a published state (``stamp``): Jᵀ F there, while a wrench acts."""
        if self.sim.wrench is None and not self._ending:
            return
        self._ending = False
        self.truth.header.stamp = stamp
        self.truth.effort = self.sim.external_effort()[self.layout.v_index].tolist()
        self.truth_pub.publish(self.truth)
