# SPDX-License-Identifier: Apache-2.0
"""The simulator's command topics, decoded through the command layout into the joint drives.

- ``~/commands`` (std_msgs/Float64MultiArray): one effort per joint of the simulator's
  ``joints``, in that order. A joint without an effort command interface takes NaN there (a
  finite value is refused with a warning naming it); NaN or inf on an effort joint, or a wrong
  length, drops the whole message.
- ``~/joint_commands`` (sensor_msgs/JointState): by name, each field (position, velocity,
  effort) honoured where the joint's command interfaces allow it, in both layouts a publisher
  uses (aligned with ``name``, or compact as joint_state_topic_hardware_interface writes it:
  ``CommandLayout.decode``). NaN is "not set". A value the joint does not accept is refused
  with a throttled warning naming the joint and the field; the rest of the message applies.

When commands are taken. Free-running and on an external clock the physics only advances at
the node's ticks, and a drive holds its newest command over the steps of a tick, so the
commands are taken at the tick (``take``), from subscriptions on a companion node that no
executor waits on: a command costs no executor pass, and a tick takes at most ``POLL_LIMIT``
messages of each topic (the ``~/commands`` reader keeps only the newest), so the work per tick
does not grow with the command rate. In lock-step every command is one step, so the
subscriptions are the node's own, with callbacks that take at most ``POLL_LIMIT`` queued
messages behind the first: a drain "until empty" of a stream arriving as fast as it is taken
could hold one callback indefinitely.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from rb_dynamics.model import (
    COMMAND_FIELDS,
    EFFORT,
    CommandLayout,
    JointCommand,
)
from rb_dynamics.ros.runtime import ThrottledLogger, not_spun, polled_node, take_queued
from rb_dynamics.simulation import ServoSimulator

__all__ = ["JOINT_COMMANDS_DEPTH", "POLL_LIMIT", "CommandInputs"]

POLL_LIMIT = 10  # messages taken per tick or per callback, at most
JOINT_COMMANDS_DEPTH = 10  # by-name commands may name different joints: none is collapsed


class CommandInputs:
    """Both command topics of a simulator node; ``on_command`` set: lock-step callbacks."""

    def __init__(self, node: Node, layout: CommandLayout, joints: list[str],
                 sim: ServoSimulator, warn: ThrottledLogger,
                 on_command: Callable[[], None] | None = None) -> None:
        self.layout, self.joints, self.sim, self.warn = layout, list(joints), sim, warn
        self.on_command = on_command
        # ~/commands' order in the layout; when every joint takes efforts, an array goes
        # straight into the drives (``JointDrives.command_efforts``), else through ``decode``
        self.columns = np.array([layout.joints.index(n) for n in self.joints], dtype=np.intp)
        self.effort_joint = layout.allowed[EFFORT, self.columns]
        self.efforts_only = bool(self.effort_joint.all())
        self.inbox: Node | None = None
        if on_command is None:
            self.inbox = polled_node(node, "commands")
            host, names = self.inbox, [node.resolve_topic_name(t) for t in
                                       ("~/commands", "~/joint_commands")]
            callbacks = (not_spun, not_spun)  # taken at the ticks, never by an executor
        else:
            host, names = node, ["~/commands", "~/joint_commands"]
            callbacks = (self._on_effort_array, self._on_joint_state)
        self.effort_sub = host.create_subscription(Float64MultiArray, names[0], callbacks[0], 1)
        self.joint_sub = host.create_subscription(JointState, names[1], callbacks[1],
                                                  JOINT_COMMANDS_DEPTH)

    @property
    def polled(self) -> bool:
        return self.inbox is not None

    def close(self) -> None:
        if self.inbox is not None:
            self.inbox.destroy_node()
            self.inbox = None

    def take(self) -> None:
        """Apply what arrived since the last tick (free-running and external clock)."""
        if self.inbox is None:
            return
        newest = None
        for msg in take_queued(self.effort_sub, POLL_LIMIT):
            newest = msg
        if newest is not None:
            self.apply_effort_array(newest)
        for msg in take_queued(self.joint_sub, POLL_LIMIT):
            self.apply_joint_state(msg)

    # ------------------------------------------------------------------ lock-step callbacks

    def _on_effort_array(self, msg: Float64MultiArray) -> None:
        # a driver applies the newest command: collapse the few queued behind this one, so that
        # a burst (say, the answers to states published while paused) is one step, not many
        for newer in take_queued(self.effort_sub, POLL_LIMIT):
            msg = newer
        if self.apply_effort_array(msg):
            self.on_command()

    def _on_joint_state(self, msg: JointState) -> None:
        if self.apply_joint_state(msg):
            self.on_command()

    # ------------------------------------------------------------------ decoding

    def apply_effort_array(self, msg: Float64MultiArray) -> bool:
        """``~/commands``; False when the message is dropped whole."""
        data = np.asarray(msg.data, dtype=float)
        if data.shape != (len(self.joints),):
            self.warn(f"~/commands: got {data.size} values, expected {len(self.joints)} "
                      f"ordered as {self.joints}; ignored", "commands length")
            return False
        if not np.isfinite(data if self.efforts_only else data[self.effort_joint]).all():
            self.warn("~/commands: NaN or inf in the command; ignored")
            return False
        if self.efforts_only:
            clamped = self.sim.drives.command_efforts(self.columns, data, self.sim.time)
            if clamped.any():
                self._warn_clamped("~/commands", np.full(clamped.sum(), EFFORT),
                                   self.columns[clamped])
            return True
        self.apply(self.layout.decode(self.joints, effort=data), "~/commands")
        return True

    def apply_joint_state(self, msg: JointState) -> bool:
        """``~/joint_commands``; False when the message is dropped whole."""
        try:
            command = self.layout.decode(msg.name, msg.position, msg.velocity, msg.effort)
        except ValueError as exc:
            # one throttle per field ("name: …", "effort: …"): one refusal never hides another
            field = str(exc).split(":", 1)[0]
            self.warn(f"~/joint_commands: {exc}; ignored", f"joint_commands {field}")
            return False
        self.apply(command, "~/joint_commands")
        return True

    def apply(self, command: JointCommand, topic: str) -> None:
        """Into the drives at the simulated now; refusals and clamping are warned about."""
        if command.refused:
            which = sorted({f"{joint}/{field}" for joint, field, _ in command.refused})
            self.warn(f"{topic}: {command.describe_refused()}", f"{topic} refused {which}")
        if not command.index.size:
            return
        clamped = self.sim.drives.command(command, self.sim.time)
        if clamped.any():
            fields, k = np.nonzero(clamped)
            self._warn_clamped(topic, fields, command.index[k])

    def _warn_clamped(self, topic: str, fields: np.ndarray, columns: np.ndarray) -> None:
        """A throttled warning naming the layout's joints ``columns`` and their ``fields``."""
        names = [f"{self.layout.joints[c]}/{COMMAND_FIELDS[f]}" for f, c in zip(fields, columns)]
        self.warn(f"{topic}: command clamped to the limits on {names}", f"{topic} clamp")

