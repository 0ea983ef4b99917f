# SPDX-License-Identifier: Apache-2.0
"""The simulator as a ros2_control backend, across processes.

The test process plays ros2_control's side as joint_state_topic_hardware_interface does it
(``TopicHardware``: the emulator of test/topic_hardware_emulator.py on real topics, at the
controller rate), plus the two controllers and the joint_state_broadcaster a controller
manager would run. The simulator and our control node are real processes on loopback DDS.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from rclpy.qos import QoSProfile, qos_profile_sensor_data
from ros2_control_samples import (
    PANDA_ARM,
    UR_JOINTS,
    panda_block,
    robot_xml,
    ur_block,
    with_blocks,
)
from ros_harness import Peer, Session, close_all, refused_start
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool
from topic_hardware_emulator import HardwareInterfaceError, TopicHardwareEmulator
from trajectory_msgs.msg import JointTrajectory

from rb_dynamics.demo.main_job import reference, reference_amplitude, reference_trajectory
from rb_dynamics.model import load_model, read_ros2_control

PANDA_READY = [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785]
FINGER = "panda_finger_joint1"
COMMANDS, STATES = "/robot_joint_commands", "/robot_joint_states"
REMAPS = ("-r", f"~/joint_commands:={COMMANDS}", "-r", f"joint_states:={STATES}")


def panda_sim_block() -> str:
    """The README's block: the arm on effort from the ready pose, finger 1 on position, finger 2
    its URDF mimic (states only); the plugin's default topics, commands sent every cycle."""
    return panda_block(name="panda_sim", initial=PANDA_READY)


def stamp_of(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


class TopicHardware:
    """Controller_manager's loop over joint_state_topic_hardware_interface, in the test process.

    Every cycle (``rate``, the controller manager's update rate): ``read()`` the newest
    JointState received on the block's ``joint_states_topic`` with sensor-data QoS (strict: a
    field without a state interface fails, as the C++ set_state throws); the controllers write
    their command interfaces; the joint_state_broadcaster publishes ``/joint_states`` from the
    state interfaces (stamped with the simulator's state); ``write()`` publishes the commands by
    name on ``joint_commands_topic`` with QoS(1), unless below the change threshold.

    ``wait_for_answers(efforts)`` makes the loop wait, before each cycle, for the simulator's
    state after the previous command and for the effort answering the previous broadcast, as
    long as it takes: the commands then lag the states by one cycle whatever the machine's
    speed or load, and no cycle runs on a stale state (a lost message does not stall it: the
    lock-step simulator sends its state again after 0.2 s without a command, and our node
    answers it). A real controller manager does not wait; this test's figures are about the
    protocol and the law, not about how fast this machine turns the loop round.
    """

    def __init__(self, peer: Peer, xml: str, rate: float) -> None:
        self.system = read_ros2_control(xml)[0]
        self.emulator = TopicHardwareEmulator(self.system, load_model(xml).mimic_joints)
        self.node = peer.node
        self.latest: JointState | None = None
        self.received: list[JointState] = []
        self.controllers: list[Callable[[TopicHardware], None]] = []
        self.cycles = self.sent = 0
        self.errors: list[str] = []
        self._answers: list | None = None  # efforts waited for (None: the loop does not wait)
        self._seen = (0, 0)  # states received, answers received, at the last cycle
        params = self.system.parameters
        self.node.create_subscription(JointState, params["joint_states_topic"], self._on_state,
                                      qos_profile_sensor_data)
        self.command_pub = self.node.create_publisher(
            JointState, params["joint_commands_topic"], QoSProfile(depth=1))
        self.broadcast_pub = self.node.create_publisher(JointState, "/joint_states", 10)
        self.node.create_timer(1.0 / rate, self._cycle)

    def _on_state(self, msg: JointState) -> None:
        self.latest = msg
        self.received.append(msg)

    @property
    def sim_time(self) -> float:
        return stamp_of(self.latest) if self.latest is not None else math.nan

    def wait_for_answers(self, efforts: list) -> None:
        """From the next cycle on, each cycle waits for a new state and a new entry of
        ``efforts`` (the answers to the broadcast states)."""
        self._answers = efforts
        self._seen = (len(self.received), len(efforts))

    def _answered(self) -> bool:
        """True when the cycle may run: not waiting, or both news in."""
        if self._answers is None:
            return True
        news = (len(self.received), len(self._answers))
        if news[0] > self._seen[0] and news[1] > self._seen[1]:
            self._seen = news
            return True
        return False

    def _cycle(self) -> None:
        if not self._answered():
            return
        self.cycles += 1
        try:
            if self.latest is not None:
                msg = self.latest
                self.emulator.read(msg.name, msg.position, msg.velocity, msg.effort)
            for controller in self.controllers:
                controller(self)
            if self.latest is not None:
                self._broadcast()
            command = self.emulator.write()
        except HardwareInterfaceError as exc:  # the C++ read()/write() return ERROR
            self.errors.append(str(exc))
            return
        if command is not None:
            out = JointState(name=command["name"], position=command["position"],
                             velocity=command["velocity"], effort=command["effort"])
            out.header.stamp = self.node.get_clock().now().to_msg()
            self.command_pub.publish(out)
            self.sent += 1

    def _broadcast(self) -> None:
        names = [j.name for j in self.system.joints]
        states = self.emulator.states
        out = JointState(name=names, position=[states[(n, "position")] for n in names],
                         velocity=[states[(n, "velocity")] for n in names],
                         effort=[states[(n, "effort")] for n in names])
        out.header.stamp = self.latest.header.stamp
        self.broadcast_pub.publish(out)


def _finger_target(t: float) -> float:
    """Position commands to finger 1 over the run (s after the trajectory starts → m)."""
    return 0.02 if t < 0.5 else 0.035 if t < 1.5 else 0.005 if t < 2.5 else 0.03


def _trajectory(q0: np.ndarray, amp: np.ndarray, duration: float, start: float
                ) -> JointTrajectory:
    """Main_job's reference (each joint its own swing, exact derivatives)."""
    return reference_trajectory(PANDA_ARM, q0, amp, duration, start)


@pytest.fixture()
def panda_xml(tmp_path) -> Path:
    path = tmp_path / "panda_sim.urdf"
    path.write_text(with_blocks(robot_xml("panda"), panda_sim_block()))
    return path


def test_panda_arm_tracks_under_computed_torque_while_the_fingers_follow_position_commands(
        tmp_path, panda_xml):
    """(a) The arm on effort from our computed-torque node through an effort controller, finger
    1 on position through the simulator's servo; everything through the hardware interface's
    protocol as documented (NaN start-up, commands every cycle, states with sensor-data QoS)."""
    xml, duration, rate = panda_xml.read_text(), 4.0, 500.0
    sim, control = _panda_nodes(tmp_path, panda_xml, rate)
    peer = sim.peer  # ros2_control's side
    hardware = TopicHardware(peer, xml, rate)
    efforts: list[list[float]] = []
    peer.node.create_subscription(Float64MultiArray, "/effort_controller/commands",
                                  lambda m: efforts.append(list(m.data)), 10)
    trajectory_pub = peer.node.create_publisher(JointTrajectory,
                                                "/rb_dynamics/joint_trajectory", 10)
    pause = peer.node.create_client(SetBool, "/rb_simulator/pause")
    try:
        held_finger = _start_up_then_efforts(peer, hardware, efforts, trajectory_pub, pause,
                                             sim, control)
        start, q0, amp = _start_the_finger_and_arm_motions(hardware, xml, trajectory_pub,
                                                           duration)
        assert peer.wait_for(lambda: hardware.sim_time > start + duration + 0.5, 120), \
            sim.output() + control.output()
    finally:
        close_all(sim, control)
    _check_protocol_and_tracking(hardware, sim, start, duration, q0, amp, held_finger)


def _start_up_then_efforts(peer, hardware, efforts, trajectory_pub, pause, sim, control
                           ) -> float:
    """NaN start-up, then the effort controller active and the simulator running for 1 s
    (simulated). Returns where finger 1 is held under NaN commands."""
    # NaN start-up: no controller claims an interface yet; the hardware sends NaN for every
    # command interface each cycle and reads the (paused) simulator's states
    assert peer.wait_for(lambda: hardware.latest is not None and efforts
                         and trajectory_pub.get_subscription_count() > 0, 30), \
        sim.output() + control.output()
    start_up = dict(zip(hardware.latest.name, hardware.latest.position))
    np.testing.assert_allclose([start_up[n] for n in PANDA_ARM], PANDA_READY, atol=1e-12)
    assert start_up[FINGER] == 0.02  # the block's initial_value
    # the effort controller becomes active: efforts from our control node, finger still NaN
    hardware.controllers.append(_effort_controller(efforts))
    hardware.wait_for_answers(efforts)
    assert peer.call(pause, SetBool.Request(data=False)).success
    assert peer.wait_for(lambda: hardware.sim_time > 1.0, 30), sim.output()
    return hardware.emulator.states[(FINGER, "position")]


def _start_the_finger_and_arm_motions(hardware, xml: str, trajectory_pub, duration: float):
    """The finger controller, and the arm's trajectory starting 0.05 s (sim) from now. Returns
    the trajectory's start (simulated s), start pose and amplitudes."""
    start = hardware.sim_time + 0.05
    hardware.controllers.append(lambda hw: hw.emulator.set_command(
        FINGER, "position", _finger_target(hw.sim_time - start)))
    model = load_model(xml)
    q0 = np.array(PANDA_READY)
    q_index = [model.joint_q_index[model.joint_index(n)] for n in PANDA_ARM]
    v_index = [model.joint_v_index[model.joint_index(n)] for n in PANDA_ARM]
    # a fifth of the main job's swing: this test is about the protocol, at 2 ms steps
    amp = 0.2 * reference_amplitude(q0, model.position_lower[q_index],
                                    model.position_upper[q_index],
                                    model.velocity_limit[v_index])
    trajectory_pub.publish(_trajectory(q0, amp, duration, start))
    return start, q0, amp


def _check_protocol_and_tracking(hardware, sim, start, duration, q0, amp, held_finger) -> None:
    """The protocol kept (no errors, a command every cycle, no warning); the finger held, then
    following its commands; the arm tracking."""
    assert not hardware.errors, hardware.errors[:3]
    assert hardware.sent == hardware.cycles  # threshold −1: a command every cycle
    assert "WARN" not in sim.output(), sim.output()
    report = _tracking(hardware.received, start, duration, q0, amp)
    print(f"\npanda through joint_state_topic_hardware_interface's protocol: {hardware.sent} "
          f"commands in {hardware.cycles} cycles; finger held at "
          f"{held_finger:.6f} m under NaN commands; arm RMS error {report['arm_rms']:.2e} rad, "
          f"final {report['arm_final']:.2e} rad; finger settled error max "
          f"{report['finger_settled']:.2e} m, final {report['finger_final']:.2e} m")
    assert abs(held_finger - 0.02) < 1e-4  # a position joint holds its initial value
    # the loop waits for our node's answer (TopicHardware.wait_for_answers): the commands lag
    # the states by one cycle on any machine, idle or busy (1.0e-3 rad RMS, under a hundredth
    # of the swing); a fiftieth of the swing is three times that
    assert report["arm_rms"] < 0.02 * np.abs(amp).max() and report["arm_final"] < 1e-3, report
    assert report["finger_settled"] < 1e-4 and report["finger_final"] < 1e-5, report


def _panda_nodes(tmp_path: Path, urdf: Path, rate: float) -> tuple[Session, Session]:
    """The simulator in lock-step, a step per controller cycle (the loop is then the same
    whatever the machine's load), and our control node on its /clock; one peer."""
    sim = Session("rb_dynamics.ros.simulator_node", tmp_path, {
        "urdf_path": str(urdf), "lockstep": True, "time_step": 1.0 / rate,
        "publish_clock": True, "start_paused": True, "command_timeout": 0.1}, *REMAPS)
    control = Session("rb_dynamics.ros.control_node", tmp_path, {
        "urdf_path": str(urdf), "mode": "computed_torque", "joints": PANDA_ARM,
        "kp": [400.0], "kd": [40.0], "friction_compensation": True, "use_sim_time": True},
        "-r", "~/effort_commands:=/effort_controller/commands", peer=sim.peer)
    return sim, control


def _effort_controller(efforts: list[list[float]]) -> Callable[[TopicHardware], None]:
    """Forward_command_controller for the arm's effort interfaces: the newest command."""

    def update(hw: TopicHardware) -> None:
        if efforts:
            for name, value in zip(PANDA_ARM, efforts[-1]):
                hw.emulator.set_command(name, "effort", value)

    return update


def _tracking(states: list[JointState], start: float, duration: float, q0: np.ndarray,
              amp: np.ndarray) -> dict[str, float]:
    """Arm error against the reference at each state's stamp; finger error against its target
    0.3 s after each step (the servo settles in ~0.1 s) and at the end."""
    arm, finger, final = [], [], None
    for msg in states:
        t = stamp_of(msg) - start
        if t < 0:
            continue
        position = dict(zip(msg.name, msg.position))
        q = np.array([position[n] for n in PANDA_ARM])
        arm.append(q - reference(min(t, duration), q0, amp)[0])
        steps = (0.5, 1.5, 2.5)
        if not any(s <= t < s + 0.3 for s in steps):
            finger.append(position[FINGER] - _finger_target(t))
        final = (q - reference(duration, q0, amp)[0], position[FINGER] - _finger_target(t))
    arm = np.array(arm)
    return {"arm_rms": float(np.sqrt((arm**2).mean(axis=0)).max()),
            "arm_final": float(np.abs(final[0]).max()),
            "finger_settled": float(np.abs(finger).max()), "finger_final": abs(final[1])}


def test_a_block_is_read_shown_at_start_and_its_interfaces_are_simulated(tmp_path):
    """(b) UR5 with a UR driver's block (position, velocity and effort commands, initial
    values, a sensor and a GPIO): the start-up log lists the interfaces; the initial values
    are the initial state; a velocity command by name drives its joint at that velocity
    while the others hold their initial positions."""
    xml = with_blocks(robot_xml("ur5"), ur_block())
    path = tmp_path / "ur5_block.urdf"
    path.write_text(xml)
    sim = Session("rb_dynamics.ros.simulator_node", tmp_path, {
        "urdf_path": str(path), "publish_rate": 200.0, "start_paused": True,
        "publish_clock": True})  # states stamped in simulated time
    peer = sim.peer
    states: list[JointState] = []
    peer.node.create_subscription(JointState, "joint_states", states.append, 100)
    commands = peer.node.create_publisher(JointState, "/rb_simulator/joint_commands", 10)
    velocity = 0.2
    try:
        assert peer.wait_for(lambda: len(states) > 5, 30), sim.output()
        initial = dict(zip(states[0].name, states[0].position))
        pause = peer.node.create_client(SetBool, "/rb_simulator/pause")
        assert peer.call(pause, SetBool.Request(data=False)).success
        peer.node.create_timer(0.01, lambda: commands.publish(JointState(
            name=["shoulder_pan_joint"], velocity=[velocity])))
        assert peer.wait_for(lambda: len(states) > 5 and stamp_of(states[-1])
                             - stamp_of(states[0]) > 2.0, 30), sim.output()
    finally:
        sim.close()
    log = sim.output()
    assert ("<ros2_control name='ur5_system' type='system'> plugin mock_components/"
            "GenericSystem: 6 joints, sensors ['tcp_fts_sensor'] (not simulated), gpios "
            "['speed_scaling'] (not simulated)") in log, log
    for name in UR_JOINTS:
        assert (f"{name}: commands ['position', 'velocity', 'effort'], states ['position', "
                "'velocity', 'effort']") in log, log
    assert re.search(r"servo τ = .*shoulder_pan_joint kp [0-9.e+]+ kd [0-9.e+]+", log), log
    np.testing.assert_allclose([initial[n] for n in UR_JOINTS],
                               [0.0, -1.57, 1.57, -1.57, -1.57, 0.0], atol=1e-12)
    moving = [s for s in states if stamp_of(s) > stamp_of(states[-1]) - 1.0]
    pan = [dict(zip(s.name, s.position))["shoulder_pan_joint"] for s in moving]
    speed = (pan[-1] - pan[0]) / (stamp_of(moving[-1]) - stamp_of(moving[0]))
    held = dict(zip(states[-1].name, states[-1].position))
    worst_hold = max(abs(held[n] - initial[n]) for n in UR_JOINTS[1:])
    print(f"\nUR5 block: shoulder_pan_joint at {speed:.4f} rad/s for a {velocity} rad/s "
          f"command; the position-held joints within {worst_hold:.1e} rad of their initial "
          "values")
    assert speed == pytest.approx(velocity, rel=0.02)
    assert worst_hold < 0.01  # a 10 Hz servo without gravity feed-forward: g/kp ≈ 4 mrad


def test_a_field_a_joint_does_not_take_is_refused_with_a_throttled_warning(tmp_path,
                                                                           panda_xml):
    """(c) A velocity for the effort-only panda_joint1 and a position for it on ~/commands'
    finger slot: refused, warned about once per 2 s, naming the joint; the rest applies."""
    sim = Session("rb_dynamics.ros.simulator_node", tmp_path, {
        "urdf_path": str(panda_xml), "publish_rate": 200.0, "start_paused": True}, *REMAPS)
    peer = sim.peer
    states: list[JointState] = []
    peer.node.create_subscription(JointState, STATES, states.append, qos_profile_sensor_data)
    by_name = peer.node.create_publisher(JointState, COMMANDS, QoSProfile(depth=1))
    by_array = peer.node.create_publisher(Float64MultiArray, "/rb_simulator/commands", 10)
    try:
        assert peer.wait_for(lambda: len(states) > 5, 30), sim.output()
        begin = time.monotonic()
        while time.monotonic() - begin < 1.0:  # 20 Hz for 1 s: one warning of each
            by_name.publish(JointState(name=["panda_joint1", "panda_joint2"],
                                       velocity=[0.3, math.nan], effort=[5.0, -4.0]))
            count = len(states)  # ~20 Hz: the next 10 states at 200 Hz
            peer.wait_for(lambda count=count: len(states) >= count + 10, 1.0)
        effort = dict(zip(states[-1].name, states[-1].effort))
        finger = "~/commands: panda_finger_joint1: effort refused"
        for _ in range(3):
            by_array.publish(Float64MultiArray(data=[1.0] * 7 + [0.01]))
            assert peer.wait_for(lambda: finger in sim.output(), 5.0), sim.output()
            count = len(states)  # taken at a tick (200 Hz) before the next one is sent
            peer.wait_for(lambda count=count: len(states) >= count + 5, 1.0)
    finally:
        sim.close()
    log = sim.output()
    refused = ("~/joint_commands: panda_joint1: velocity refused (joint has no velocity "
               "command interface)")
    assert log.count(refused) == 1, log  # 20 refusals in 1 s: one warning
    assert "panda_joint2" not in log.split(refused)[1].splitlines()[0]  # NaN: not set
    assert effort["panda_joint1"] == 5.0 and effort["panda_joint2"] == -4.0  # the rest applied
    assert log.count("~/commands: panda_finger_joint1: effort refused (joint has no effort "
                     "command interface)") == 1, log


def test_a_block_naming_a_joint_the_model_lacks_stops_the_simulator_with_its_name(tmp_path):
    """As ros2_control's parser does: an error at start, naming the block and the joint."""
    xml = with_blocks(robot_xml("panda"), panda_block(joints=[*PANDA_ARM, "panda_joint8"]))
    path = tmp_path / "panda_bad_block.urdf"
    path.write_text(xml)
    output = refused_start("rb_dynamics.ros.simulator_node", tmp_path, {"urdf_path": str(path)})
    assert "cannot run: <ros2_control name='panda'> joint 'panda_joint8' is not a movable " \
           "joint of model" in output, output
