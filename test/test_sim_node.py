# SPDX-License-Identifier: Apache-2.0
"""The topic-driven simulator as a real process on loopback DDS."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from pin_oracle import REAL_ROBOTS, robots_dir
from ros_harness import Session, simulator
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool, Trigger

from rb_dynamics.dynamics import make_dynamics
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import load_model
from rb_dynamics.simulation import Simulator
from rb_dynamics_interfaces.srv import SetState

UR5 = str(Path(robots_dir(), REAL_ROBOTS["ur5"][0]))
Q0 = [0.0, -1.2, 1.0, -0.5, 0.4, 0.0]


@pytest.fixture()
def sim(tmp_path):
    session = simulator(tmp_path, {
        "urdf_path": UR5, "initial_positions": Q0, "publish_rate": 200.0,
        "command_timeout": 0.3, "integrator": "semi_implicit_euler", "time_step": 0.001,
        "start_paused": True})
    yield session
    session.close()


def started(sim: Session) -> list:
    """The states it publishes, (time, JointState), once some have come."""
    states = sim.received(JointState, "joint_states")
    assert sim.wait_for(lambda: len(states) > 5, 15), sim.output()
    return states


def pause(sim: Session, paused: bool) -> SetBool.Response:
    return sim.call(SetBool, "~/pause", SetBool.Request(data=paused))


def newer(sim: Session, states: list, count: int) -> JointState:
    """The state ``count`` states after the newest one now (it has left the simulator later)."""
    size = len(states)
    assert sim.wait_for(lambda: len(states) >= size + count, 10), sim.output()
    return states[-1][1]


def test_gravity_compensated_arm_stays_put_and_a_dropped_one_falls(sim):
    states = started(sim)
    first = states[-1][1]
    assert first.name == load_model(UR5).actuated_joint_names
    np.testing.assert_allclose(first.position, Q0, atol=1e-9)
    # hold the arm with exact gravity compensation for 0.5 s: it must not move
    model = load_model(UR5)
    msg = Float64MultiArray(data=D.gravity(model, np.array(Q0)).tolist())
    # this test process sends the commands only while it waits, and a busy machine can hold
    # it up for longer than the fixture's 0.3 s command timeout: the arm would fall meanwhile
    assert sim.set_parameters(command_timeout=5.0).successful
    commands = sim.publisher(Float64MultiArray, "~/commands")
    sim.peer.node.create_timer(0.02, lambda: commands.publish(msg))
    # the states carry the effort applied: the command has arrived
    assert sim.wait_for(lambda: np.allclose(states[-1][1].effort, msg.data, rtol=1e-12), 10)
    assert pause(sim, False).success
    held = np.array(newer(sim, states, 160).position)  # 0.8 s at 200 Hz
    assert np.abs(held - Q0).max() < 2e-3, held
    np.testing.assert_allclose(states[-1][1].effort, msg.data, rtol=1e-12)


def test_commands_time_out_and_the_arm_falls(sim):
    states = started(sim)
    assert pause(sim, False).success
    # no command: it falls
    assert sim.wait_for(lambda: np.abs(np.array(states[-1][1].position) - Q0).max() > 1e-2, 5)
    assert not any(states[-1][1].effort)


def test_reset_and_pause_services(sim):
    states = started(sim)
    assert pause(sim, True).success
    assert sim.call(Trigger, "~/reset", Trigger.Request()).success
    assert sim.wait_for(lambda: np.allclose(states[-1][1].position, Q0, rtol=0, atol=1e-12), 5)
    position = newer(sim, states, 10).position
    np.testing.assert_allclose(position, Q0, atol=1e-12)  # paused at the reset state
    assert pause(sim, False).message == "running"


def test_bad_commands_are_ignored_and_reported(sim):
    states = started(sim)
    # one at a time: of commands queued together, the simulator applies only the newest
    sim.publish_matched(Float64MultiArray, "~/commands", Float64MultiArray(data=[1.0, 2.0]))
    assert sim.wait_for_log("got 2 values, expected 6", 5), sim.output()
    sim.publish_matched(Float64MultiArray, "~/commands",
                        Float64MultiArray(data=[float("nan")] * 6))
    assert sim.wait_for_log("NaN or inf", 5), sim.output()
    newer(sim, states, 10)
    assert all(np.all(np.isfinite(s.position)) for _, s in states)
    assert sim.process.proc.poll() is None


def test_set_state_puts_the_arm_in_a_given_state_and_refuses_bad_ones(sim):
    states = started(sim)
    answer = sim.call(SetState, "~/set_state",
                      SetState.Request(joint_names=["elbow_joint"], positions=[0.5]))
    assert answer.success, answer.message
    state = newer(sim, states, 5)
    position = dict(zip(state.name, state.position))
    assert position["elbow_joint"] == 0.5 and position["shoulder_lift_joint"] == Q0[1]
    for bad in (SetState.Request(joint_names=["nope"], positions=[0.0]),
                SetState.Request(joint_names=["elbow_joint"], positions=[float("nan")]),
                SetState.Request(joint_names=["elbow_joint"], positions=[0.0, 1.0])):
        answer = sim.call(SetState, "~/set_state", bad)
        assert not answer.success and ("joint_names" in answer.message
                                       or "positions" in answer.message)


def test_steps_on_an_external_clock_with_use_sim_time(tmp_path):
    """use_sim_time: each /clock message advances the model to that instant; without ticks
    nothing moves, and the states are stamped with the clock."""
    sim = simulator(tmp_path, {
        "urdf_path": UR5, "initial_positions": Q0, "publish_rate": 1000.0,
        "integrator": "semi_implicit_euler", "time_step": 0.001, "use_sim_time": True,
        "start_paused": True})
    states = sim.received(JointState, "joint_states", 500)
    clock = sim.publisher(Clock, "/clock")

    def tick(seconds: float) -> None:
        nanoseconds = round(seconds * 1e9)
        clock.publish(Clock(clock=Time(sec=nanoseconds // 10**9, nanosec=nanoseconds % 10**9)))

    def stamp() -> float:
        header = states[-1][1].header
        return header.stamp.sec + header.stamp.nanosec * 1e-9

    start = 100.0
    try:
        # A standing clock publishes one state, lost if the simulator's writer has not matched
        # this reader yet: paused, the clock runs up to ``start`` (a state per tick, the model
        # still) until the states come through, then stands there.
        assert sim.wait_for(lambda: clock.get_subscription_count() > 0, 15), sim.output()
        warm_up = iter(np.arange(start - 0.9, start, 0.002))
        assert sim.wait_for(lambda: tick(next(warm_up, start)) or bool(states), 15), \
            sim.output()
        assert sim.wait_for(lambda: tick(start) or stamp() == start, 5)
        # wall time passes, the clock does not: nothing moves, no newer stamp
        assert not sim.wait_for(lambda: stamp() != start, 0.3)
        np.testing.assert_array_equal(states[-1][1].position, Q0)
        assert pause(sim, False).success
        for k in range(1, 201):
            tick(start + k * 1e-3)
            sim.peer.executor.spin_once(timeout_sec=0.0005)
        end = start + 0.2
        # ticks are best effort: the last one again until its state is in
        assert sim.wait_for(lambda: tick(end) or stamp() >= end - 1e-9, 10)
        assert abs(stamp() - end) < 1e-9
        model = load_model(UR5)
        reference = Simulator(make_dynamics(model), 1e-3, "semi_implicit_euler",
                              q0=np.array(Q0))
        reference.advance(0.2, 1000)
        np.testing.assert_allclose(states[-1][1].position, reference.q, rtol=0, atol=1e-9)
        assert np.abs(np.array(states[-1][1].position) - Q0).max() > 1e-3  # it fell
        # backwards: followed, reported, nothing breaks
        sim.wait_for(lambda: tick(start) or stamp() == start, 5)
        assert stamp() == start and sim.process.proc.poll() is None
        assert "/clock jumped by -0.200 s" in sim.output()
    finally:
        sim.close()


def test_lock_step_waits_lockstep_timeout_from_the_resume_not_from_the_start(tmp_path):
    """A simulator started paused in lock-step waits for its controller; a pause longer than
    lockstep_timeout is not a silent controller. The code this was written against counted the
    wait from the start: resumed after a start-up longer than lockstep_timeout (a busy machine
    bringing up the control node), it stepped uncommanded from the first tick, and an arm
    held by the control node fell before the node's first command arrived."""
    timeout, window = 3.0, 1.2  # (states resent every 0.2 s; 1.8 s for the pause's answer)
    sim = simulator(tmp_path, {
        "urdf_path": UR5, "initial_positions": Q0, "publish_rate": 200.0, "lockstep": True,
        "lockstep_timeout": timeout, "time_step": 0.001, "start_paused": True,
        "publish_clock": True})
    try:
        states = started(sim)
        paused_since = time.monotonic()
        sim.wait_for(lambda: False, 1.5 * timeout)  # paused longer than lockstep_timeout
        assert time.monotonic() - paused_since >= 1.5 * timeout
        assert pause(sim, False).success
        resumed = time.monotonic()
        first = states[-1][1].header.stamp
        # well within lockstep_timeout of the resume, no command: the initial state again
        sim.wait_for(lambda: False, window - (time.monotonic() - resumed))
        held = [msg for t, msg in states if resumed < t <= resumed + window]
        assert len(held) >= 3, sim.output()
        assert all(msg.header.stamp == first for msg in held), sim.output()
        np.testing.assert_array_equal(held[-1].position, Q0)
        # past it, time goes on without a controller
        assert sim.wait_for(lambda: states[-1][1].header.stamp != first, 10 * timeout), \
            sim.output()
    finally:
        sim.close()


def test_lock_step_sends_an_unanswered_state_again_and_steps_on_the_next_command(tmp_path):
    """Lock-step: the command answering a state can be lost, or arrive while paused (it is then
    dropped); the simulator says the same state again every LOCKSTEP_RESEND_S rather than wait
    for lockstep_timeout, and a command still makes exactly one step."""
    from rb_dynamics.ros.simulator_node.node import LOCKSTEP_RESEND_S

    sim = simulator(tmp_path, {
        "urdf_path": UR5, "initial_positions": Q0, "publish_rate": 200.0, "lockstep": True,
        "lockstep_timeout": 60.0, "time_step": 0.001, "start_paused": True,
        "publish_clock": True})
    try:
        states = started(sim)
        assert pause(sim, False).success
        sim.settle(states)  # the paused states still in flight
        before = len(states)
        # no command: the same state again at the resend pace, time does not go on
        assert sim.wait_for(lambda: len(states) >= before + 3, 10 * LOCKSTEP_RESEND_S), \
            sim.output()
        repeated = [msg for _, msg in states[before:]]
        assert len(repeated) <= 2 + 2.0 * (states[-1][0] - states[before][0]) / LOCKSTEP_RESEND_S
        assert all(msg.header.stamp == repeated[0].header.stamp for msg in repeated)
        np.testing.assert_array_equal(repeated[-1].position, Q0)
        # one command, one step (1 ms): the next state is stamped one time step later
        seen = len(states)
        sim.publish_matched(Float64MultiArray, "~/commands",
                            Float64MultiArray(data=[0.0] * len(Q0)))
        assert sim.wait_for(lambda: any(
            msg.header.stamp != repeated[0].header.stamp for _, msg in states[seen:]), 5)
        stepped = next(msg for _, msg in states[seen:]
                       if msg.header.stamp != repeated[0].header.stamp)
        elapsed = (stepped.header.stamp.sec - repeated[0].header.stamp.sec
                   + 1e-9 * (stepped.header.stamp.nanosec - repeated[0].header.stamp.nanosec))
        assert abs(elapsed - 0.001) < 1e-9, elapsed
    finally:
        sim.close()
