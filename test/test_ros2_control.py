# SPDX-License-Identifier: Apache-2.0
"""The <ros2_control> reader and the command layout (no ROS involved)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pin_oracle import REAL_ROBOTS, robots_dir
from ros2_control_samples import (
    PANDA_ARM,
    PANDA_FINGERS,
    TOPIC_PLUGIN,
    UR_JOINTS,
    panda_block,
    robot_xml,
    ur_block,
    with_blocks,
)
from topic_hardware_emulator import HardwareInterfaceError, TopicHardwareEmulator

from rb_dynamics.model import (
    CommandLayout,
    URDFError,
    command_layout,
    joint_command_modes,
    load_model,
    read_ros2_control,
)


@pytest.fixture(scope="module")
def panda_xml() -> str:
    return with_blocks(robot_xml("panda"), panda_block())


@pytest.fixture(scope="module")
def panda_layout(panda_xml) -> CommandLayout:
    return command_layout(load_model(panda_xml), read_ros2_control(panda_xml))


# ----------------------------------------------------------------------------- reading


def test_ur_block_interfaces_initial_values_and_limits():
    xml = with_blocks(robot_xml("ur5"), ur_block())
    (system,) = read_ros2_control(xml)
    assert (system.name, system.type, system.plugin) == \
        ("ur5_system", "system", "mock_components/GenericSystem")
    assert system.parameters == {"calculate_dynamics": "true"}
    assert [j.name for j in system.joints] == UR_JOINTS
    assert system.sensors == ("tcp_fts_sensor",) and system.gpios == ("speed_scaling",)
    lift = system.joints[1]
    assert lift.command_interfaces == ("position", "velocity", "effort")
    assert lift.state_interfaces == ("position", "velocity", "effort")
    assert lift.initial_values == {"position": -1.57}
    assert lift.command_limits == {"position": (-6.28, 6.28), "velocity": (-3.15, 2.0),
                                   "effort": (-100.0, 100.0)}
    assert lift.unsupported_command_interfaces == ()

    model = load_model(xml)
    layout = command_layout(model, [system])
    assert layout.joints == UR_JOINTS and layout.allowed.all()
    np.testing.assert_allclose(layout.initial_state[0], [0.0, -1.57, 1.57, -1.57, -1.57, 0.0])
    # the tighter of block and URDF wins, as in ros2_control's update_interface_limits:
    # pan: block ±3 inside URDF ±2π; elbow: URDF ±π inside block ±6.28
    assert (layout.lower[0, 0], layout.upper[0, 0]) == (-3.0, 3.0)
    assert layout.upper[0, 2] == pytest.approx(math.pi, abs=1e-10)
    # velocity: symmetric min(|min|, max, URDF) = 2.0 on the lift; effort: block 100 < URDF 150
    # on the base joints, URDF 28 < block 100 on the wrists
    assert (layout.lower[1, 1], layout.upper[1, 1]) == (-2.0, 2.0)
    assert layout.upper[2].tolist() == [100.0, 100.0, 100.0, 28.0, 28.0, 28.0]
    text = "\n".join(layout.describe())
    assert "plugin mock_components/GenericSystem" in text and "tcp_fts_sensor" in text
    assert "shoulder_pan_joint: commands ['position', 'velocity', 'effort']" in text


def test_panda_arm_in_effort_fingers_in_position_mimic_follower_read_only(panda_xml,
                                                                          panda_layout):
    (system,) = read_ros2_control(panda_xml)
    assert system.plugin == TOPIC_PLUGIN
    assert system.parameters["joint_commands_topic"] == "/robot_joint_commands"
    modes = panda_layout.modes
    assert set(modes) == set(PANDA_ARM + PANDA_FINGERS[:1])  # the follower is no coordinate
    assert all(modes[j] == {"effort"} for j in PANDA_ARM)
    assert modes["panda_finger_joint1"] == {"position"}
    assert panda_layout.initial_state[0, 7] == 0.02
    model = load_model(panda_xml)
    q, v = panda_layout.initial_state_of(model, np.full(8, 0.1), np.zeros(8))
    assert q.tolist() == [0.1] * 7 + [0.02] and not v.any()
    assert (panda_layout.lower[0, 7], panda_layout.upper[0, 7]) == (0.0, 0.04)
    assert panda_layout.warnings == []
    text = "\n".join(panda_layout.describe())
    assert "panda_finger_joint1: commands ['position']" in text
    assert "panda_finger_joint2: commands none (not an independent joint" in text
    assert joint_command_modes(load_model(panda_xml), [system]) == modes


def test_mimic_joint_rules_follow_ros2_control():
    xml = robot_xml("panda")
    model = load_model(xml)
    commanded_follower = """<joint name="panda_finger_joint1"><command_interface name="position"/>
      </joint><joint name="panda_finger_joint2"><command_interface name="position"/></joint>"""
    with pytest.raises(URDFError, match="panda_finger_joint2.*mimic joint cannot have command"):
        command_layout(model, read_ros2_control(with_blocks(xml, panda_block(
            commanded_follower))))
    # mimic="false": ros2_control drives it independently; the model cannot, so: a warning
    independent = commanded_follower.replace('"panda_finger_joint2"',
                                             '"panda_finger_joint2" mimic="false"')
    layout = command_layout(model, read_ros2_control(with_blocks(xml, panda_block(independent))))
    assert any("panda_finger_joint2" in w and "ignored" in w for w in layout.warnings)
    wrong = '<joint name="panda_finger_joint1" mimic="true"><state_interface name="position"/>' \
            '</joint>'
    with pytest.raises(URDFError, match="panda_finger_joint1.*no <mimic> in the URDF"):
        command_layout(model, read_ros2_control(with_blocks(xml, panda_block(wrong))))


@pytest.mark.parametrize("fragment, message", [
    ('<param name="min">zero</param>', r"panda_finger_joint1.*command_interface name='position'"
                                       r".*<param name=\"min\">: 'zero' is not a number"),
    ('<param name="max">nan</param>', r"<param name=\"max\">: non-finite"),
    ('<param name="min">0.05</param><param name="max">0.01</param>', "min 0.05 is above max"),
])
def test_malformed_values_name_the_element(fragment, message):
    fingers = f"""<joint name="panda_finger_joint1"><command_interface name="position">
      {fragment}</command_interface></joint>"""
    with pytest.raises(URDFError, match=message):
        read_ros2_control(with_blocks(robot_xml("panda"), panda_block(fingers)))


@pytest.mark.parametrize("block, message", [
    ('<ros2_control type="system"><hardware><plugin>p</plugin></hardware></ros2_control>',
     "<ros2_control> without name="),
    ('<ros2_control name="x" type="robot"><hardware><plugin>p</plugin></hardware>'
     '</ros2_control>', "type='robot'"),
    ('<ros2_control name="x" type="system"><hardware/></ros2_control>', "missing <plugin>"),
    ('<ros2_control name="x" type="system"></ros2_control>', "missing <hardware><plugin>"),
    ('<ros2_control name="x" type="system"><hardware><plugin>p</plugin></hardware>'
     '<actuator name="a"/></ros2_control>', "unknown element <actuator>"),
    ('<ros2_control name="x" type="system"><hardware><plugin>p</plugin></hardware>'
     '<joint name="j" mimic="yes"/></ros2_control>', "mimic=: 'yes' is not true or false"),
    ('<ros2_control name="x" type="system"><hardware><plugin>p</plugin></hardware>'
     '<joint name="j"><state_interface name="position" size="0"/></joint></ros2_control>',
     "size='0' is not a positive integer"),
    ('<ros2_control name="x" type="system"><hardware><plugin>p</plugin></hardware>'
     '<joint name="j"><state_interface name="position"><param name="initial_value">1e99'
     '</param></state_interface></joint></ros2_control>', "implausibly large"),
    ('<ros2_control name="x" type="system"><hardware><plugin>p</plugin></hardware>'
     '<joint name="j"><command_interface name="position"/><command_interface name="position"/>'
     '</joint></ros2_control>', r"command_interface \['position'\] declared twice"),
    ('<ros2_control name="x" type="system"><hardware><plugin>p</plugin></hardware>'
     '<joint name="j"><command_interface name="position"><limits enable="maybe"/>'
     '</command_interface></joint></ros2_control>', "limits enable>: 'maybe'"),
])
def test_malformed_blocks_are_refused_with_the_element(block, message):
    with pytest.raises(URDFError, match=message):
        read_ros2_control(with_blocks(robot_xml("panda"), block))


def test_two_blocks_arm_and_gripper_and_a_joint_in_both():
    xml = robot_xml("panda")
    gripper = """<joint name="panda_finger_joint1"><command_interface name="position"/>
      <state_interface name="position"/></joint>"""
    arm_block = panda_block(fingers=" ", name="arm", plugin="mock_components/GenericSystem")
    hand_block = panda_block(gripper, name="hand", joints=[])
    systems = read_ros2_control(with_blocks(xml, arm_block, hand_block))
    assert [(s.name, len(s.joints)) for s in systems] == [("arm", 7), ("hand", 1)]
    layout = command_layout(load_model(xml), systems)
    assert layout.modes["panda_joint3"] == {"effort"}
    assert layout.modes["panda_finger_joint1"] == {"position"}
    # the topic plugin fails to read our states when a state interface is missing
    assert any("panda_finger_joint1" in w and "['velocity', 'effort']" in w
               for w in layout.warnings)
    with pytest.raises(URDFError, match="panda_joint1.*'arm'.*'twice'|panda_joint1.*one block"):
        read_ros2_control(with_blocks(xml, arm_block, panda_block(gripper, name="again",
                                                                  joints=["panda_joint1"])))


def test_no_block_means_every_joint_takes_efforts():
    xml = robot_xml("panda")
    assert read_ros2_control(xml) == []
    layout = command_layout(load_model(xml), [])
    assert layout.joints == PANDA_ARM + PANDA_FINGERS[:1]
    assert layout.allowed[2].all() and not layout.allowed[:2].any()
    assert layout.describe() == ["no <ros2_control> block: every joint takes effort commands"]
    assert read_ros2_control(Path(robots_dir(), REAL_ROBOTS["panda"][0])) == []  # a path too


def test_joints_outside_the_blocks_are_passive_unless_asked_otherwise():
    xml = robot_xml("panda")
    model = load_model(xml)
    systems = read_ros2_control(with_blocks(xml, panda_block(joints=PANDA_ARM[:3])))
    layout = command_layout(model, systems)
    assert layout.modes["panda_joint4"] == frozenset()
    assert any("'panda_joint4'" in w and "passive" in w for w in layout.warnings)
    assert "panda_joint7: commands none (passive)" in "\n".join(layout.describe())
    assert command_layout(model, systems, absent="effort").modes["panda_joint4"] == {"effort"}
    with pytest.raises(ValueError, match="absent"):
        command_layout(model, systems, absent="limp")


def test_block_joints_the_model_lacks_are_errors():
    xml = robot_xml("panda")
    model = load_model(xml)
    for joint in ("panda_joint8", "gripper_joint"):  # fixed in the URDF, absent
        systems = read_ros2_control(with_blocks(xml, panda_block(joints=[joint])))
        with pytest.raises(URDFError, match=f"'{joint}' is not a movable joint of model"):
            command_layout(model, systems)


def test_unsupported_interfaces_are_kept_and_named():
    fingers = """<joint name="panda_finger_joint1">
      <command_interface name="position"/><command_interface name="acceleration"/>
      <command_interface name="grip" data_type="bool"><param name="initial_value">false</param>
      </command_interface>
      <command_interface name="effort" size="2"/>
      <state_interface name="position"/></joint>"""
    xml = with_blocks(robot_xml("panda"), panda_block(fingers))
    (system,) = read_ros2_control(xml)
    finger = system.joints[-1]
    assert finger.command_interfaces == ("position", "acceleration", "grip", "effort")
    assert finger.unsupported_command_interfaces == ("acceleration", "grip", "effort")
    assert finger.command[2].initial_value == "false"  # kept as text: not a double
    layout = command_layout(load_model(xml), [system])
    assert layout.modes["panda_finger_joint1"] == {"position"}
    assert any("['acceleration', 'grip', 'effort'] are not simulated" in w
               for w in layout.warnings)


def test_disabled_limits_drop_the_block_range_not_the_urdf_one():
    fingers = """<joint name="panda_finger_joint1"><limits enable="false"/>
      <command_interface name="position"><param name="min">0.01</param>
        <param name="max">0.02</param></command_interface></joint>"""
    xml = with_blocks(robot_xml("panda"), panda_block(fingers))
    (system,) = read_ros2_control(xml)
    assert system.joints[-1].command_limits == {}
    layout = command_layout(load_model(xml), [system])
    assert (layout.lower[0, 7], layout.upper[0, 7]) == (0.0, 0.04)  # the URDF's stops


def test_hardened_xml():
    xml = '<!DOCTYPE r [<!ENTITY a "aaaa">]><robot name="r"><link name="l"/></robot>'
    with pytest.raises(URDFError, match="DTD"):
        read_ros2_control(xml)


# ----------------------------------------------------------------------------- decoding


def test_decode_aligned_commands(panda_layout):
    names = PANDA_ARM[:2] + ["panda_finger_joint1"]
    cmd = panda_layout.decode(names, effort=[1.0, 2.0, math.nan])
    assert cmd.index.tolist() == [0, 1] and cmd.refused == ()
    np.testing.assert_array_equal(cmd.values[2], [1.0, 2.0])
    assert np.isnan(cmd.values[:2]).all()


def test_decode_refuses_fields_a_joint_does_not_allow(panda_layout):
    names = ["panda_joint1", "panda_finger_joint1", "panda_finger_joint2", "base_joint"]
    cmd = panda_layout.decode(names, position=[0.1, 0.03, 0.03, 1.0],
                              effort=[1.0, 5.0, math.nan, math.inf])
    assert cmd.index.tolist() == [0, 7]
    assert cmd.values[2, 0] == 1.0 and cmd.values[0, 1] == 0.03
    assert set(cmd.refused) == {
        ("panda_joint1", "position", "joint has no position command interface"),
        ("panda_finger_joint1", "effort", "joint has no effort command interface"),
        ("panda_finger_joint2", "position", "not a commandable joint of the model"),
        ("base_joint", "position", "not a commandable joint of the model"),
        ("base_joint", "effort", "not a commandable joint of the model"),
    }
    cmd = panda_layout.decode(["panda_joint1"], effort=[math.inf])
    assert cmd.refused == (("panda_joint1", "effort", "inf is not finite"),)
    assert cmd.index.size == 0
    assert cmd.describe_refused() == "panda_joint1: effort refused (inf is not finite)"


def test_decode_malformed_messages(panda_layout):
    with pytest.raises(ValueError, match=r"name: joints \['panda_joint1'\] appear more"):
        panda_layout.decode(["panda_joint1", "panda_joint1"], effort=[1.0, 1.0])
    with pytest.raises(ValueError, match=r"effort: 2 values for 3 names; expected 3 .* or 1"):
        panda_layout.decode(["panda_joint1", "panda_finger_joint1", "panda_finger_joint2"],
                            effort=[1.0, 2.0])


def test_decode_what_the_topic_hardware_interface_publishes(panda_xml, panda_layout):
    """Compact fields: 7 efforts and 1 position for 9 names; NaN before controllers write."""
    (system,) = read_ros2_control(panda_xml)
    model = load_model(panda_xml)
    hardware = TopicHardwareEmulator(system, model.mimic_joints)
    first = hardware.write()  # NaN commands: unequal to any state, so it publishes
    assert first["name"] == PANDA_ARM + PANDA_FINGERS
    assert len(first["effort"]) == 7 and len(first["position"]) == 1 and not first["velocity"]
    cmd = panda_layout.decode(first["name"], first["position"], first["velocity"],
                              first["effort"])
    assert cmd.index.size == 0 and cmd.refused == ()
    for i, joint in enumerate(PANDA_ARM):
        hardware.set_command(joint, "effort", float(i))
    hardware.set_command("panda_finger_joint1", "position", 0.035)
    msg = hardware.write()
    cmd = panda_layout.decode(msg["name"], msg["position"], msg["velocity"], msg["effort"])
    assert cmd.refused == () and cmd.index.tolist() == list(range(8))
    np.testing.assert_array_equal(cmd.values[2, :7], np.arange(7.0))
    assert cmd.values[0, 7] == 0.035 and np.isnan(cmd.values[0, :7]).all()
    # and it reads our states: all three fields, by name, the mimic follower set from its leader
    hardware.read(PANDA_ARM + PANDA_FINGERS, [0.1] * 8 + [0.9], [0.0] * 9, [1.0] * 9)
    assert hardware.states[("panda_finger_joint2", "position")] == 0.1


def test_the_emulator_refuses_states_the_block_does_not_declare():
    """Why the README block declares position, velocity and effort states on every joint."""
    fingers = """<joint name="panda_finger_joint1"><command_interface name="position"/>
      <state_interface name="position"/></joint>"""
    xml = with_blocks(robot_xml("panda"), panda_block(fingers))
    (system,) = read_ros2_control(xml)
    hardware = TopicHardwareEmulator(system)
    with pytest.raises(HardwareInterfaceError, match="panda_finger_joint1/velocity"):
        hardware.read(["panda_finger_joint1"], [0.01], [0.0], [0.0])
