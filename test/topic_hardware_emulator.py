# SPDX-License-Identifier: Apache-2.0
"""joint_state_topic_hardware_interface's side of the protocol, in Python, for tests.

Mirrors JointStateTopicSystem (ros-controls/topic_based_hardware_interfaces 1.1.0,
joint_state_topic_hardware_interface/src/joint_state_topic_hardware_interface.cpp):

- command interfaces start at NaN (their ``initial_value`` if the block gives one), state
  interfaces at their ``initial_value`` or NaN;
- ``write()``: skip when Σ|state − command| over the position/velocity/effort command
  interfaces is ≤ ``trigger_joint_command_threshold`` (default 1e-5; NaN never skips);
  otherwise one JointState naming every joint of the block, in block order (mimic joints
  too), whose position / velocity / effort lists hold a value only for the joints that declare
  that command interface (compact, not aligned with the names);
- ``read()``: by name, joints of the block only, mimic joints skipped (then set from their
  leader); a non-empty field with a finite value sets that state interface, and a missing
  state interface is an error (the C++ set_state throws and read returns ERROR).
"""

from __future__ import annotations

import math

from rb_dynamics.model import COMMAND_FIELDS, HardwareSystem


class HardwareInterfaceError(RuntimeError):
    """Where the C++ read() or write() would return ERROR."""


class TopicHardwareEmulator:
    def __init__(self, system: HardwareSystem, mimic_joints: dict[str, tuple[str, float, float]]
                 | None = None, threshold: float | None = None):
        self.system = system
        self.threshold = float(system.parameters.get("trigger_joint_command_threshold", 1e-5)) \
            if threshold is None else threshold
        self.mimic = {n: m for n, m in (mimic_joints or {}).items()
                      if n in {j.name for j in system.joints}}
        self.commands = {(j.name, i.name): (i.initial_value if isinstance(i.initial_value, float)
                                            else math.nan)
                         for j in system.joints for i in j.command}
        self.states = {(j.name, i.name): (i.initial_value if isinstance(i.initial_value, float)
                                          else math.nan)
                       for j in system.joints for i in j.state}

    def set_command(self, joint: str, interface: str, value: float) -> None:
        """What a controller does through its loaned command interface."""
        if (joint, interface) not in self.commands:
            raise KeyError(f"no command interface {joint}/{interface}")
        self.commands[(joint, interface)] = value

    def _state(self, joint: str, interface: str) -> float:
        if (joint, interface) not in self.states:
            raise HardwareInterfaceError(f"state interface not found: {joint}/{interface}")
        return self.states[(joint, interface)]

    def write(self) -> dict[str, list] | None:
        """The JointState the hardware publishes this cycle (None: below the threshold)."""
        diff = 0.0
        for (joint, interface), value in self.commands.items():
            if interface in COMMAND_FIELDS:
                diff += abs(self._state(joint, interface) - value)
        if diff <= self.threshold:  # False for NaN: publish
            return None
        msg: dict[str, list] = {"name": [], "position": [], "velocity": [], "effort": []}
        for joint in self.system.joints:
            msg["name"].append(joint.name)
            for interface in joint.command_interfaces:
                if interface in COMMAND_FIELDS:
                    msg[interface].append(self.commands[(joint.name, interface)])
        return msg

    def read(self, name, position=(), velocity=(), effort=()) -> None:
        """Take the simulator's joint states (the last message, by name)."""
        declared = {j.name for j in self.system.joints}
        for i, joint in enumerate(name):
            if joint not in declared or joint in self.mimic:
                continue
            for interface, values in zip(COMMAND_FIELDS, (position, velocity, effort)):
                if len(values) and math.isfinite(values[i]):
                    self._state(joint, interface)  # raises when undeclared
                    self.states[(joint, interface)] = float(values[i])
        for joint, (leader, multiplier, offset) in self.mimic.items():
            for interface, shift in (("position", offset), ("velocity", 0.0)):
                if (joint, interface) in self.states:
                    self.states[(joint, interface)] = \
                        shift + multiplier * self.states[(leader, interface)]
