# SPDX-License-Identifier: Apache-2.0
"""<ros2_control> blocks shaped like real ones, added to example-robot-data URDFs."""

from __future__ import annotations

from pathlib import Path

from pin_oracle import REAL_ROBOTS, robots_dir

TOPIC_PLUGIN = "joint_state_topic_hardware_interface/JointStateTopicSystem"
UR_JOINTS = ["shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint",
             "wrist_2_joint", "wrist_3_joint"]
PANDA_ARM = [f"panda_joint{i}" for i in range(1, 8)]
PANDA_FINGERS = ["panda_finger_joint1", "panda_finger_joint2"]
ALL_STATES = ('<state_interface name="position"/><state_interface name="velocity"/>'
              '<state_interface name="effort"/>')


def robot_xml(robot: str) -> str:
    return Path(robots_dir(), REAL_ROBOTS[robot][0]).read_text()


def with_blocks(xml: str, *blocks: str) -> str:
    return xml.replace("</robot>", "".join(blocks) + "</robot>")


def ur_block(plugin: str = "mock_components/GenericSystem") -> str:
    """Shaped like a UR driver's block: position + velocity commands, three states."""
    initial = [0.0, -1.57, 1.57, -1.57, -1.57, 0.0]
    joints = "".join(f"""
    <joint name="{name}">
      <command_interface name="position"><param name="min">{-3.0 if i == 0 else -6.28}</param>
        <param name="max">{3.0 if i == 0 else 6.28}</param></command_interface>
      <command_interface name="velocity"><param name="min">-3.15</param>
        <param name="max">{2.0 if i == 1 else 3.15}</param></command_interface>
      <command_interface name="effort"><param name="min">-100</param>
        <param name="max">100</param></command_interface>
      <state_interface name="position"><param name="initial_value">{initial[i]}</param>
      </state_interface>
      <state_interface name="velocity"/>
      <state_interface name="effort"/>
    </joint>""" for i, name in enumerate(UR_JOINTS))
    return f"""
  <ros2_control name="ur5_system" type="system">
    <hardware>
      <plugin>{plugin}</plugin>
      <param name="calculate_dynamics">true</param>
    </hardware>{joints}
    <sensor name="tcp_fts_sensor">
      <state_interface name="force.x"/><state_interface name="torque.z"/>
    </sensor>
    <gpio name="speed_scaling"><state_interface name="speed_scaling_factor"/></gpio>
  </ros2_control>"""


def state_interfaces(initial: float | None = None) -> str:
    """Position, velocity and effort state interfaces; the position's initial_value if given."""
    if initial is None:
        return ALL_STATES
    return (f'<state_interface name="position"><param name="initial_value">{initial}</param>'
            '</state_interface><state_interface name="velocity"/><state_interface name="effort"/>')


def panda_block(fingers: str = "", arm: str = "effort", name: str = "panda",
                plugin: str = TOPIC_PLUGIN, joints: list[str] | None = None,
                initial: list[float] | None = None) -> str:
    """Arm in ``arm`` command, finger 1 in position (0..0.04), finger 2 its mimic; ``initial``:
    the arm joints' position initial_value, in order."""
    joints = PANDA_ARM if joints is None else joints
    rows = [f'<joint name="{j}"><command_interface name="{arm}"/>{state_interfaces(q)}</joint>'
            for j, q in zip(joints, [None] * len(joints) if initial is None else initial)]
    rows.append(fingers or f"""
    <joint name="panda_finger_joint1">
      <command_interface name="position"><param name="min">0.0</param>
        <param name="max">0.04</param></command_interface>
      <state_interface name="position"><param name="initial_value">0.02</param>
      </state_interface>
      <state_interface name="velocity"/><state_interface name="effort"/>
    </joint>
    <joint name="panda_finger_joint2">{ALL_STATES}</joint>""")
    return f"""
  <ros2_control name="{name}" type="system">
    <hardware>
      <plugin>{plugin}</plugin>
      <param name="joint_commands_topic">/robot_joint_commands</param>
      <param name="joint_states_topic">/robot_joint_states</param>
      <param name="trigger_joint_command_threshold">-1</param>
    </hardware>{"".join(rows)}
  </ros2_control>"""
