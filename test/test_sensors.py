# SPDX-License-Identifier: Apache-2.0
"""The simulator plays a real arm: its own armature and friction in the dynamics, and joint
states as a driver's sensors report them (``rb_dynamics.sensing``), each against the truth the
test simulated itself:

- the true robot's dynamics (an overlay: armature, Coulomb + viscous + Stribeck friction)
  against Pinocchio's ABA with that armature and the friction law;
- effort noise: mean = applied + offset, standard deviation = absolute + relative·|effort|;
- quantisation: published positions and efforts are whole multiples of their steps, within
  half a step of the truth;
- the delay and the effort's extra delay, measured from the readings against the simulated
  motion; the jitter of the sampling instants bounded and spread over its range;
- the simulator node with all of it on, stepped by a /clock the test drives: stamps, offset,
  quantisation, delay and jitter from the published states.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from pin_oracle import Oracle, rel_err
from ros_harness import simulator
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import friction_effort, make_dynamics
from rb_dynamics.model import DynamicsOverlay, apply_overlay, load_model, write_overlay
from rb_dynamics.sensing import JointSensors, StateHistory
from rb_dynamics.simulation import Simulator, step

BARE = load_model(DEFAULT_URDF)
JOINTS = BARE.actuated_joint_names
OFFSET = np.array([0.3, -0.5, 0.2, -0.1, 0.05, 0.4])
# the true robot: rotor inertia, friction with a Stribeck dip, a sensor offset per joint
TRUE_ROBOT = DynamicsOverlay(joints={
    name: {"armature": 0.2 / (k + 1), "viscous": 0.5 + 0.1 * k, "coulomb": 1.0 + 0.2 * k,
           "stribeck": 0.8, "stribeck_velocity": 0.1, "offset": float(OFFSET[k])}
    for k, name in enumerate(JOINTS)})
MODEL = apply_overlay(BARE, TRUE_ROBOT)
DT = 1e-3


def test_the_true_robots_dynamics_are_pinocchios_with_armature_and_the_friction_law():
    """One RK4 step's acceleration at its start is ABA with armature under τ − f(q̇)."""
    oracle = Oracle(MODEL, Path(DEFAULT_URDF).read_text())
    oracle.pm.armature[oracle.v_perm] = MODEL.armature
    oracle.pd = oracle.pm.createData()
    dyn = make_dynamics(MODEL, "python")
    rng = np.random.default_rng(2)
    worst = 0.0
    for _ in range(20):
        q = rng.uniform(-2, 2, MODEL.nq)
        v = rng.normal(0, 0.3, MODEL.nv)  # within a few Stribeck velocities of rest
        tau = rng.uniform(-20, 20, MODEL.nv)
        result = step(dyn, q, v, tau, DT, "rk4", limits=False)
        expected = oracle.aba(q, v, tau - friction_effort(MODEL, v))
        worst = max(worst, rel_err(result.a, expected))
    assert worst <= 1e-9, worst
    # and the armature matters: the bare arm accelerates differently
    assert rel_err(step(make_dynamics(BARE, "python"), q, v, tau, DT, "rk4").a, expected) > 1e-3


def _history(effort: np.ndarray, motion=lambda t: np.zeros(6), span: float = 0.05,
             steps: int = 100) -> StateHistory:
    history = StateHistory(6, span)
    times = np.arange(steps) * DT
    history.record(times, np.array([motion(t) for t in times]),
                   np.zeros((steps, 6)), np.tile(effort, (steps, 1)))
    return history


def test_effort_noise_has_the_stated_deviation_and_the_offset_its_mean():
    applied = np.array([0.0, 10.0, -40.0, 100.0, 2.0, -5.0])
    sensors = JointSensors(OFFSET, effort_noise=0.05, effort_noise_relative=0.01)
    history, rng = _history(applied), np.random.default_rng(7)
    readings = np.array([sensors.read(history, 99 * DT, rng).effort for _ in range(20000)])
    sigma = 0.05 + 0.01 * np.abs(applied)
    mean_error = (readings.mean(axis=0) - (applied + OFFSET)) / (sigma / np.sqrt(20000))
    assert np.abs(mean_error).max() < 5, mean_error  # within 5 standard errors
    np.testing.assert_allclose(readings.std(axis=0) / sigma, 1.0, atol=0.03)
    # the positions are not touched, and with no noise nor offset the effort is exact
    exact = JointSensors(np.zeros(6)).read(history, 99 * DT, rng)
    assert np.array_equal(exact.effort, applied) and exact.describes == 99 * DT


def test_quantised_values_are_whole_steps_within_half_a_step_of_the_truth():
    rng = np.random.default_rng(3)
    sensors = JointSensors(OFFSET, effort_resolution=0.02, encoder_resolution=2 * np.pi / 2**17)
    for _ in range(200):
        applied = rng.uniform(-50, 50, 6)
        truth = rng.uniform(-3, 3, 6)
        reading = sensors.read(_history(applied, lambda t, q=truth: q, steps=3), 2 * DT, rng)
        for value, exact, res in ((reading.position, truth, sensors.encoder_resolution),
                                  (reading.effort, applied + OFFSET, 0.02)):
            counts = value / res
            assert np.abs(counts - np.round(counts)).max() < 1e-6
            assert np.abs(value - exact).max() <= res / 2 * (1 + 1e-9)


def _falling_arm(sensors: JointSensors, steps: int, seed: int):
    """The true robot falling under a sinusoidal effort that changes every step, read by
    ``sensors`` after each step; and the whole truth (every step: times, q, effort)."""
    sim = Simulator(make_dynamics(MODEL, "python"), DT, "semi_implicit_euler",
                    q0=np.array([0.0, -0.6, 1.2, 0.0, 0.5, 0.0]))
    history, truth = StateHistory(6, sensors.span), SimpleNamespace(rows=[])

    def record(*rows):
        history.record(*rows)
        truth.rows.append(np.column_stack([np.atleast_1d(rows[0]), *rows[1:]]))

    sim.recorder = record
    rng, readings, times = np.random.default_rng(seed), [], []
    for k in range(steps):
        sim.set_command(5.0 * np.sin(2 * np.pi * 7.0 * k * DT + np.arange(6)))
        sim.advance(DT)
        record(sim.time, sim.q[None], sim.v[None], sim.applied_effort[None])
        readings.append(sensors.read(history, sim.time, rng))
        times.append(sim.time)
    sim.reading_times = np.array(times)
    rows = np.vstack(truth.rows)
    keep = np.r_[np.diff(rows[:, 0]) > 0, True]  # an instant recorded twice: the later row
    truth.times, truth.q, truth.effort = rows[keep, 0], rows[keep, 1:7], rows[keep, 13:19]
    return readings, truth, sim


def test_the_delays_measured_from_the_readings_are_the_stated_ones():
    delay, effort_delay, jitter = 0.002, 0.001, 3e-4
    sensors = JointSensors(np.zeros(6), delay=delay, effort_delay=effort_delay, jitter=jitter)
    readings, truth, sim = _falling_arm(sensors, 400, seed=5)
    readings = readings[50:]  # past the start, where the arm was still the first state
    assert np.abs(sim.v).max() > 0.5  # it moves: a delay shows in the positions

    T, Q, E = truth.times, truth.q, truth.effort
    sampled = np.array([r.sampled for r in readings])
    read_q = np.array([r.position for r in readings])
    read_e = np.array([r.effort for r in readings])

    def mismatch(lag: float, what: str) -> float:
        """Σ |reading − truth at (sampled − lag)|, linear between steps / held over a step."""
        t = sampled - lag
        if what == "position":
            truth_q = np.column_stack([np.interp(t, T, Q[:, j]) for j in range(6)])
            return float(np.abs(read_q - truth_q).sum())
        return float(np.abs(read_e - E[np.searchsorted(T, t, side="right") - 1]).sum())

    lags = np.arange(0.0, 0.005, 2e-5)
    position_lag = lags[np.argmin([mismatch(lag, "position") for lag in lags])]
    assert abs(position_lag - delay) < 2e-5, position_lag
    assert mismatch(delay, "position") < 1e-9
    # the effort is held over each 1 ms step: the lags that explain every reading exactly
    exact = [lag for lag in lags if mismatch(lag, "effort") == 0.0]
    assert exact and min(exact) <= delay + effort_delay <= max(exact) + 2e-5, exact
    assert not mismatch(delay, "effort") == 0.0  # the effort's own lag is needed


def test_the_jitter_is_bounded_and_spread_and_readings_keep_their_order():
    jitter = 4e-4
    sensors = JointSensors(np.zeros(6), jitter=jitter, delay=0.001)
    readings, _, sim = _falling_arm(sensors, 600, seed=8)
    now = sim.reading_times
    sampled = np.array([r.sampled for r in readings])
    early = now - sampled
    assert early.min() >= 0.0 and early.max() <= jitter + 1e-12
    assert early.max() > 0.9 * jitter and early.min() < 0.1 * jitter  # the whole range is used
    assert abs(early.mean() - jitter / 2) < 0.1 * jitter  # uniform
    assert np.all(np.diff(sampled) > 0)
    np.testing.assert_allclose([r.sampled - r.describes for r in readings], 0.001, atol=1e-12)
    # a jitter longer than the time between readings never sends them back in time
    wild = JointSensors(np.zeros(6), jitter=5 * DT)
    assert np.all(np.diff([r.sampled for r in _falling_arm(wild, 300, seed=9)[0]]) >= 0)


def test_history_keeps_what_a_reading_needs_and_replaces_an_instant_given_again():
    history = StateHistory(1, span=0.01)
    for k in range(5000):
        history.record(k * DT, [[k]], [[0.0]], [[float(k)]])
    assert 10 <= len(history) <= 40  # bounded, yet 10 ms deep
    assert history.state(4989 * DT + DT / 4)[0][0] == pytest.approx(4989.25)
    history.record(4999 * DT, [[0.0]], [[0.0]], [[-1.0]])  # a new command at the same instant
    assert history.effort(4999 * DT)[0] == -1.0 and history.effort(4998.5 * DT)[0] == 4998.0
    history.record(10 * DT, [[0.0]], [[0.0]], [[7.0]])  # an older instant: ignored
    assert history.effort(10.0)[0] == -1.0
    with pytest.raises(ValueError, match="finite and ≥ 0"):
        JointSensors(np.zeros(1), delay=-1.0)


# ----------------------------------------------------------------------------- the node


def test_the_simulator_node_reports_as_a_real_arms_driver(tmp_path):
    """External /clock ticks of 1 ms, one state each: the stamp (the instant described) is the
    tick minus the delay minus at most the jitter; positions are the true robot's motion at
    that instant to half an encoder count; efforts carry the offset and are whole steps; an
    effort step shows after the effort's delay."""
    overlay = tmp_path / "true_robot.yaml"
    write_overlay(TRUE_ROBOT, overlay)
    delay, effort_delay, jitter, encoder, quantum = 0.002, 0.001, 2e-4, 1e-4, 0.01
    q0 = [0.0, -0.6, 1.2, 0.0, 0.5, 0.0]
    sim = simulator(tmp_path, {
        "dynamics_overlay": str(overlay), "use_sim_time": True, "publish_rate": 1000.0,
        "start_paused": True, "initial_positions": q0,
        "time_step": DT, "integrator": "semi_implicit_euler", "effort_noise": 0.05,
        "effort_noise_relative": 0.01, "effort_resolution": quantum,
        "encoder_resolution": encoder, "measurement_delay": delay,
        "effort_delay": effort_delay, "publish_jitter": jitter, "command_timeout": 10.0})
    try:
        states = sim.received(JointState, "joint_states", 1000)
        clock = sim.publisher(Clock, "/clock")
        start = 50.0

        def send(t: float) -> None:
            ns = round(t * 1e9)
            clock.publish(Clock(clock=Time(sec=ns // 10**9, nanosec=ns % 10**9)))

        def tick(t: float) -> JointState:
            """Clock time ``t`` until its one state is in (a lost tick is sent again)."""
            count = len(states)
            assert sim.wait_for(lambda: send(t) or len(states) > count, 10), sim.output()
            return states[-1][1]

        assert sim.wait_for(lambda: clock.get_subscription_count() > 0, 15), sim.output()
        # paused, the clock runs up to ``start`` until the states come through (a standing
        # clock publishes one state, lost if the simulator's writer has not matched yet)
        warm_up = iter(np.arange(start - 0.9, start, 0.002))
        assert sim.wait_for(lambda: send(next(warm_up, start)) or bool(states), 15), \
            sim.output()
        tick(start + 0.5 * DT)
        assert sim.call(SetBool, "~/pause", SetBool.Request(data=False)).success
        start += 0.5 * DT  # the last paused tick: simulated time 0 from here
        ticks, answers = [], []
        for k in range(1, 401):
            ticks.append(start + k * DT)
            answers.append(tick(ticks[-1]))
        stamps = np.array([s.header.stamp.sec + s.header.stamp.nanosec * 1e-9 for s in answers])
        lag = np.array(ticks) - stamps
        assert lag.min() >= delay - 1e-6 and lag.max() <= delay + jitter + 1e-6, lag
        assert lag.max() - lag.min() > 0.5 * jitter  # jittered
        assert np.all(np.diff(stamps) > 0)
        # positions: the true robot (overlay) falling from rest, at the instant described
        truth = Simulator(make_dynamics(MODEL, "python"), DT, "semi_implicit_euler",
                          q0=np.array(q0))
        truth_history = StateHistory(6, 10.0)
        truth.recorder = truth_history.record
        truth.advance(0.4 + DT, 1000)
        position = np.array([s.position for s in answers])
        described = np.array([truth_history.state(t - start)[0] for t in stamps])
        assert np.abs(position - described).max() <= encoder / 2 + 1e-6
        assert np.abs(position[-1] - position[0]).max() > 0.05  # it fell
        counts = position / encoder
        assert np.abs(counts - np.round(counts)).max() < 1e-6
        # efforts: no command, so the offset plus noise (σ 0.05 N·m), in whole steps
        effort = np.array([s.effort for s in answers])
        assert np.abs(effort.mean(axis=0) - OFFSET).max() < 4 * 0.05 / np.sqrt(len(effort))
        assert np.abs(effort / quantum - np.round(effort / quantum)).max() < 1e-6
        # an effort step on the first joint, taken at the next tick: it shows once the
        # described instant is past that step's start by the effort's delay
        commands = sim.publisher(Float64MultiArray, "~/commands")
        assert sim.wait_for(lambda: commands.get_subscription_count() > 0, 10), sim.output()
        commands.publish(Float64MultiArray(data=[8.0, 0, 0, 0, 0, 0]))
        sim.peer.spin_for(2.0)  # delivered while the clock stands (a busy machine is slow)
        t0 = ticks[-1] + DT  # the tick that takes it: its step starts one step before
        after = [(t, tick(t)) for t in t0 + np.arange(10) * DT]
        shown = [s for _, s in after if s.effort[0] - OFFSET[0] > 4.0]
        assert shown, [s.effort[0] for _, s in after]
        seen = shown[0].header.stamp.sec + shown[0].header.stamp.nanosec * 1e-9
        assert t0 - DT + effort_delay - 1e-6 <= seen <= t0 + effort_delay + jitter + 1e-6, \
            (seen - t0)
    finally:
        sim.close()


def test_the_first_delayed_readings_are_stamped_at_the_start_never_before_the_epoch(tmp_path):
    """The simulator's own /clock starts at 0; a reading delayed by 2 ms (and jittered) taken in
    its first steps describes the initial state from before the start. The code this was written
    against stamped it −1 s + 0.998 s, which a control node refuses as a negative stamp; it is
    stamped at the start, and from there on the stamps are the instants described."""
    sim = simulator(tmp_path, {
        "publish_clock": True, "publish_rate": 1000.0, "time_step": DT,
        "measurement_delay": 0.002, "publish_jitter": 2e-4, "start_paused": True})
    try:
        states = sim.received(JointState, "joint_states", 1000)
        assert sim.wait_for(lambda: sim.call(SetBool, "~/pause",
                                             SetBool.Request(data=False)).success, 30)
        assert sim.wait_for(lambda: len(states) > 50, 30), sim.output()
        stamps = np.array([s.header.stamp.sec + s.header.stamp.nanosec * 1e-9
                           for _, s in states])
        assert stamps.min() >= 0.0, stamps[:10]
        assert np.all(np.diff(stamps) >= 0), stamps[:10]
    finally:
        sim.close()
