# SPDX-License-Identifier: Apache-2.0
"""The contact monitor's messages, filled from its arrays (no rclpy import): ``~/external_efforts``
(sensor_msgs/JointState, the effort field), ``~/external_wrench`` (geometry_msgs/WrenchStamped)
and ``~/collision`` (rb_dynamics_interfaces/Collision).
"""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import WrenchStamped
from sensor_msgs.msg import JointState

from rb_dynamics.control import Collision
from rb_dynamics_interfaces.msg import Collision as CollisionMessage

__all__ = ["collision_message", "fill_efforts", "fill_wrench", "stamp_of"]


def stamp_of(ns: int) -> Time:
    """A ``builtin_interfaces/Time`` of ``ns`` nanoseconds."""
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def fill_efforts(msg: JointState, stamp: Time, joints: list[str], efforts: np.ndarray) -> None:
    """``msg`` (reused) with ``efforts`` (N·m or N) of ``joints`` at ``stamp``; no positions or
    velocities, as franka's tau_ext_hat_filtered."""
    msg.header.stamp = stamp
    if len(msg.name) != len(joints):
        msg.name = list(joints)
    msg.effort = efforts.tolist()


def fill_wrench(msg: WrenchStamped, stamp: Time, link: str, wrench: np.ndarray) -> None:
    """``msg`` (reused): ``wrench`` = [force; torque] (N, N·m) on ``link``, in its frame about
    its origin."""
    msg.header.stamp, msg.header.frame_id = stamp, link
    f, t = msg.wrench.force, msg.wrench.torque
    f.x, f.y, f.z, t.x, t.y, t.z = (float(x) for x in wrench)


def collision_message(collision: Collision, stamp: Time, reaction: str) -> CollisionMessage:
    """The ``~/collision`` event of one detection."""
    msg = CollisionMessage(joint_names=list(collision.joints),
                           external_efforts=collision.efforts.tolist(),
                           thresholds=collision.thresholds.tolist(), reaction=reaction)
    msg.header.stamp = stamp
    return msg
