"""The topic-driven simulator as a real process on loopback DDS."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pin_oracle import REAL_ROBOTS, robots_dir
from ros_harness import NodeProcess, Peer, write_params
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool, Trigger

from rb_dynamics import dynamics as D
from rb_dynamics.model import load_model

UR5 = str(Path(robots_dir(), REAL_ROBOTS["ur5"][0]))
Q0 = [0.0, -1.2, 1.0, -0.5, 0.4, 0.0]


@pytest.fixture()
def simulator(tmp_path):
    params = write_params(tmp_path, "rb_simulator", {
        "urdf_path": UR5, "initial_positions": Q0, "publish_rate": 200.0,
        "command_timeout": 0.3, "integrator": "semi_implicit_euler", "time_step": 0.001,
        "start_paused": True})
    node = NodeProcess("rb_dynamics.sim_node", params)
    peer = Peer()
    states: list[JointState] = []
    peer.node.create_subscription(JointState, "joint_states", states.append, 50)
    commands = peer.node.create_publisher(Float64MultiArray, "rb_simulator/commands", 10)
    yield node, peer, states, commands
    peer.close()
    assert node.stop() < 2.0, "the simulator did not shut down within 2 s"
    assert node.proc.returncode == 0, node.output()


def _resume(peer):
    pause = peer.node.create_client(SetBool, "rb_simulator/pause")
    assert peer.call(pause, SetBool.Request(data=False)).success


def test_gravity_compensated_arm_stays_put_and_a_dropped_one_falls(simulator):
    node, peer, states, commands = simulator
    assert peer.wait_for(lambda: len(states) > 5, 15), node.output()
    first = states[-1]
    assert first.name == load_model(UR5).actuated_joint_names
    np.testing.assert_allclose(first.position, Q0, atol=1e-9)
    # hold the arm with exact gravity compensation for 0.5 s: it must not move
    model = load_model(UR5)
    msg = Float64MultiArray(data=D.gravity(model, np.array(Q0)).tolist())
    peer.node.create_timer(0.02, lambda: commands.publish(msg))
    peer.wait_for(lambda: False, 0.1)
    _resume(peer)
    peer.wait_for(lambda: False, 0.8)
    held = np.array(states[-1].position)
    assert np.abs(held - Q0).max() < 2e-3, held
    np.testing.assert_allclose(states[-1].effort, msg.data, rtol=1e-12)


def test_commands_time_out_and_the_arm_falls(simulator, tmp_path):
    node, peer, states, _ = simulator
    assert peer.wait_for(lambda: len(states) > 5, 15), node.output()
    _resume(peer)
    peer.wait_for(lambda: False, 0.5)
    assert np.abs(np.array(states[-1].position) - Q0).max() > 1e-2  # no command: it falls
    assert not any(states[-1].effort)


def test_reset_and_pause_services(simulator):
    node, peer, states, _ = simulator
    assert peer.wait_for(lambda: len(states) > 5, 15), node.output()
    pause = peer.node.create_client(SetBool, "rb_simulator/pause")
    reset = peer.node.create_client(Trigger, "rb_simulator/reset")
    assert peer.call(pause, SetBool.Request(data=True)).success
    assert peer.call(reset, Trigger.Request()).success
    peer.wait_for(lambda: False, 0.2)
    count = len(states)
    peer.wait_for(lambda: len(states) > count + 10, 5)
    np.testing.assert_allclose(states[-1].position, Q0, atol=1e-12)  # paused at the reset state
    assert peer.call(pause, SetBool.Request(data=False)).message == "running"


def test_bad_commands_are_ignored_and_reported(simulator):
    node, peer, states, commands = simulator
    assert peer.wait_for(lambda: len(states) > 5, 15), node.output()
    # one at a time: of commands queued together, the simulator applies only the newest
    commands.publish(Float64MultiArray(data=[1.0, 2.0]))
    peer.wait_for(lambda: False, 0.3)
    commands.publish(Float64MultiArray(data=[float("nan")] * 6))
    peer.wait_for(lambda: False, 0.5)
    assert all(np.all(np.isfinite(s.position)) for s in states)
    assert node.proc.poll() is None
    log = node.output()
    assert "got 2 values, expected 6" in log and "NaN or inf" in log


def test_set_state_puts_the_arm_in_a_given_state_and_refuses_bad_ones(simulator):
    from rb_dynamics_interfaces.srv import SetState

    node, peer, states, _ = simulator
    assert peer.wait_for(lambda: len(states) > 5, 15), node.output()
    set_state = peer.node.create_client(SetState, "rb_simulator/set_state")
    answer = peer.call(set_state, SetState.Request(joint_names=["elbow_joint"], positions=[0.5]))
    assert answer.success, answer.message
    count = len(states)
    peer.wait_for(lambda: len(states) > count + 5, 5)
    position = dict(zip(states[-1].name, states[-1].position))
    assert position["elbow_joint"] == 0.5 and position["shoulder_lift_joint"] == Q0[1]
    for bad in (SetState.Request(joint_names=["nope"], positions=[0.0]),
                SetState.Request(joint_names=["elbow_joint"], positions=[float("nan")]),
                SetState.Request(joint_names=["elbow_joint"], positions=[0.0, 1.0])):
        answer = peer.call(set_state, bad)
        assert not answer.success and ("joint_names" in answer.message
                                       or "positions" in answer.message)


def test_steps_on_an_external_clock_with_use_sim_time(tmp_path):
    """use_sim_time: each /clock message advances the model to that instant; without ticks
    nothing moves, and the states are stamped with the clock."""
    from builtin_interfaces.msg import Time
    from rosgraph_msgs.msg import Clock

    from rb_dynamics.codegen import compile_dynamics
    from rb_dynamics.simulation import Simulator

    params = write_params(tmp_path, "rb_simulator", {
        "urdf_path": UR5, "initial_positions": Q0, "publish_rate": 1000.0,
        "integrator": "semi_implicit_euler", "time_step": 0.001, "use_sim_time": True})
    node = NodeProcess("rb_dynamics.sim_node", params)
    peer = Peer("clock_peer")
    states: list[JointState] = []
    state_sub = peer.node.create_subscription(JointState, "joint_states", states.append, 500)
    clock = peer.node.create_publisher(Clock, "/clock", 10)

    def tick(seconds: float) -> None:
        nanoseconds = round(seconds * 1e9)
        clock.publish(Clock(clock=Time(sec=nanoseconds // 10**9, nanosec=nanoseconds % 10**9)))

    def stamp(state: JointState) -> float:
        return state.header.stamp.sec + state.header.stamp.nanosec * 1e-9

    start = 100.0
    try:
        # a standing clock publishes one state: both routes must be matched before it
        assert peer.wait_for(lambda: state_sub.get_publisher_count() > 0
                             and clock.get_subscription_count() > 0, 15), node.output()
        peer.wait_for(lambda: False, 0.3)  # the other side of each match, too
        assert peer.wait_for(lambda: tick(start) or bool(states), 15), node.output()
        peer.wait_for(lambda: False, 0.3)  # wall time passes, the clock does not
        np.testing.assert_array_equal(states[-1].position, Q0)
        assert stamp(states[-1]) == start
        for k in range(1, 201):
            tick(start + k * 1e-3)
            peer.executor.spin_once(timeout_sec=0.0005)
        end = start + 0.2
        # ticks are best effort: the last one again until its state is in
        assert peer.wait_for(lambda: tick(end) or stamp(states[-1]) >= end - 1e-9, 10)
        assert abs(stamp(states[-1]) - end) < 1e-9
        model = load_model(UR5)
        reference = Simulator(compile_dynamics(model), 1e-3, "semi_implicit_euler",
                              q0=np.array(Q0))
        reference.advance(0.2, 1000)
        np.testing.assert_allclose(states[-1].position, reference.q, rtol=0, atol=1e-9)
        assert np.abs(np.array(states[-1].position) - Q0).max() > 1e-3  # it fell
        # backwards: followed, reported, nothing breaks
        peer.wait_for(lambda: tick(start) or stamp(states[-1]) == start, 5)
        assert stamp(states[-1]) == start and node.proc.poll() is None
        assert "/clock jumped by -0.200 s" in node.output()
    finally:
        peer.close()
        assert node.stop() < 2.0
    assert node.proc.returncode == 0, node.output()
