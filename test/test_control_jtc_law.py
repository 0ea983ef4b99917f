# SPDX-License-Identifier: Apache-2.0
"""The control layer's law against Pinocchio, without ROS: impedance (τ = g(q) + K(q_d − q) +
D(q̇_d − q̇), with the payload's gravity and the friction compensation) and the integral action
with its clamp, anti-windup and resets, in the law and through ``JointController``."""

from __future__ import annotations

import math
import sys
import threading
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, pinocchio_arm, rel_err, robots_dir
from urdf_samples import two_link_arm_urdf

from rb_dynamics.control import (
    CONTROL_MODES,
    ControlLaw,
    ControllerError,
    JointController,
    TrajectoryError,
    TrajectoryPoint,
    TrajectorySampler,
    check_gains,
    shortest_way_start,
    wrap_angle,
)
from rb_dynamics.dynamics import Payload, PayloadEffort, make_dynamics
from rb_dynamics.model import COULOMB_SMOOTHING, load_model
from rb_dynamics.simulation import Simulator

ARMS = [name for name, (_, floating) in REAL_ROBOTS.items() if not floating]


def arm(name: str):
    path = Path(robots_dir(), REAL_ROBOTS[name][0])
    return path, load_model(path)


class PinArm:
    """Pinocchio's model of a fixed-base arm, in our joint order (by name)."""

    def __init__(self, path: Path, model, payload: Payload | None = None):
        self.pm = pin.Model(pinocchio_arm(str(path)))  # a copy: a payload is added to it
        ids = [self.pm.getJointId(name) for name in model.joint_names]
        self.qi = [self.pm.joints[j].idx_q for j in ids]
        self.vi = [self.pm.joints[j].idx_v for j in ids]
        self.continuous = [self.pm.joints[j].nq == 2 for j in ids]
        if payload is not None:  # the payload as a body welded to its link's frame
            frame = self.pm.frames[self.pm.getFrameId(payload.link)]
            body = pin.Inertia(payload.mass, payload.com, payload.inertia)
            self.pm.inertias[frame.parentJoint] += frame.placement.act(body)
        self.data = self.pm.createData()

    def _q(self, q):
        q_pin = pin.neutral(self.pm)
        for k, (i, cont) in enumerate(zip(self.qi, self.continuous)):
            if cont:
                q_pin[i:i + 2] = math.cos(q[k]), math.sin(q[k])
            else:
                q_pin[i] = q[k]
        return q_pin

    def _v(self, x):
        out = np.zeros(self.pm.nv)
        out[self.vi] = x
        return out

    def gravity(self, q):
        return pin.computeGeneralizedGravity(self.pm, self.data, self._q(q))[self.vi]

    def rnea(self, q, v, a):
        return pin.rnea(self.pm, self.data, self._q(q), self._v(v), self._v(a))[self.vi]


def states(model, rng, count=5):
    for _ in range(count):
        lo = np.where(np.isfinite(model.position_lower), model.position_lower, -np.pi)
        hi = np.where(np.isfinite(model.position_upper), model.position_upper, np.pi)
        yield (rng.uniform(lo, hi), rng.uniform(-1, 1, model.nv), rng.uniform(lo, hi),
               rng.uniform(-1, 1, model.nv), rng.uniform(-2, 2, model.nv))


def test_impedance_is_a_mode():
    assert "impedance" in CONTROL_MODES


@pytest.mark.parametrize("name", ARMS)
def test_impedance_is_gravity_plus_spring_and_damper(name):
    path, model = arm(name)
    oracle = PinArm(path, model)
    rng = np.random.default_rng(1)
    K, D = rng.uniform(0, 300, model.nv), rng.uniform(0, 30, model.nv)
    law = ControlLaw(make_dynamics(model), "impedance", stiffness=K, damping=D)
    for q, v, q_d, v_d, a_d in states(model, rng):
        tau, error = law.effort(q, v, q_d, v_d, a_d)
        expected = oracle.gravity(q) + K * (q_d - q) + D * (v_d - v)
        assert rel_err(tau, expected) <= 1e-9
        np.testing.assert_array_equal(error, q_d - q)


def test_impedance_wraps_continuous_joints_and_adds_payload_friction_and_feedforward():
    path, model = arm("ur5")
    rng = np.random.default_rng(2)
    payload = Payload("tool0", 2.5, np.array([0.01, -0.02, 0.08]),
                      np.diag([0.01, 0.012, 0.008]))
    oracle = PinArm(path, model, payload)
    K, D = rng.uniform(0, 300, model.nv), rng.uniform(0, 30, model.nv)
    model.damping[:] = rng.uniform(0, 2, model.nv)
    model.friction[:] = rng.uniform(0, 3, model.nv)
    dynamics = make_dynamics(model)
    law = ControlLaw(dynamics, "impedance", stiffness=K, damping=D, friction_compensation=True,
                     payload=PayloadEffort(model, payload))
    law.continuous[0], law._wrap = True, True  # one continuous coordinate: errors wrap
    for q, v, q_d, v_d, a_d in states(model, rng):
        q_d[0] = q[0] + rng.choice([-1, 1]) * rng.uniform(np.pi, 2 * np.pi)  # the long way
        feedforward = rng.uniform(-5, 5, model.nv)
        tau, error = law.effort(q, v, q_d, v_d, a_d, feedforward)
        e = q_d - q
        e[0] = wrap_angle(e[0])
        friction = model.damping * v_d + model.friction * np.tanh(v_d / COULOMB_SMOOTHING)
        expected = oracle.gravity(q) + K * e + D * (v_d - v) + friction + feedforward
        assert rel_err(tau, expected) <= 1e-9
        assert abs(error[0]) <= np.pi


def test_gains_are_checked_naming_the_entry():
    with pytest.raises(ControllerError, match=r"impedance.stiffness must be finite and ≥ 0: "
                                              r"impedance.stiffness\[2\] = -1.0"):
        check_gains([1, 2, -1, 3], "impedance.stiffness", 4)
    with pytest.raises(ControllerError, match=r"damping\[0\] = nan"):
        check_gains([math.nan], "damping")
    with pytest.raises(ControllerError, match=r"ki\[1\] = inf"):
        check_gains([0, math.inf], "ki")
    np.testing.assert_array_equal(check_gains(math.inf, "i_clamp", 3, allow_inf=True),
                                  [math.inf] * 3)
    _, model = arm("ur5")
    ctrl = JointController(model, mode="impedance", stiffness=10.0, damping=1.0)
    for kwargs in ({"stiffness": [1] * 5 + [-1]}, {"damping": math.inf}, {"ki": -1},
                   {"i_clamp": math.nan}):
        with pytest.raises(ControllerError):
            ctrl.set_gains(kp=5.0, **kwargs)
        assert np.all(ctrl.law.stiffness == 10.0) and np.all(ctrl.law.damping == 1.0)
        assert np.all(ctrl.kp == 100.0) and np.all(ctrl.law.ki == 0)
        assert np.all(ctrl.law.i_clamp == np.inf)


def test_impedance_without_a_trajectory_holds_the_measured_position():
    path, model = arm("ur5")
    oracle = PinArm(path, model)
    K, D = np.linspace(100, 200, 6), np.linspace(5, 10, 6)
    ctrl = JointController(model, mode="impedance", stiffness=K, damping=D)
    rng = np.random.default_rng(3)
    q0, v0 = rng.uniform(-2, 2, 6), rng.uniform(-1, 1, 6)
    ctrl.update_state(model.joint_names, q0, v0, 0.0)
    out = ctrl.compute(0.0)
    # held where it was measured: gravity compensation and damping toward rest
    expected = np.clip(oracle.gravity(q0) - D * v0, -model.effort_limit, model.effort_limit)
    assert rel_err(out.effort, expected) <= 1e-9
    q1, v1 = q0 + 0.01, v0 * 0.5
    ctrl.update_state(model.joint_names, q1, v1, 0.01)
    out = ctrl.compute(0.01)
    expected = oracle.gravity(q1) + K * (q0 - q1) - D * v1
    assert rel_err(out.effort, np.clip(expected, -model.effort_limit, model.effort_limit)) <= 1e-9
    # and it follows trajectories
    ctrl.set_trajectory(model.joint_names, [TrajectoryPoint(1.0, q0 + 0.1)], 0.01)
    assert ctrl.trajectory is not None


# ----------------------------------------------------------------------------- integral action


def drive(ctrl, q, v, times):
    for t in times:
        ctrl.update_state(ctrl.model.joint_names, q, v, t)
        out = ctrl.compute(t)
    return out


@pytest.mark.parametrize("mode", ["computed_torque", "impedance"])
def test_integral_accumulates_per_state_time_and_is_clamped(mode):
    path, model = arm("ur5")
    oracle = PinArm(path, model)
    ki = np.array([0.0, 5.0, 10.0, 20.0, 40.0, 80.0])
    i_clamp = np.array([1.0, 1.0, 0.05, 0.5, np.inf, 0.2])
    ctrl = JointController(model, mode=mode, kp=50.0, kd=5.0, stiffness=80.0, damping=4.0,
                           ki=ki, i_clamp=i_clamp)
    ctrl.configure(effort_scale=1e6)  # no saturation here
    rng = np.random.default_rng(4)
    q, v = rng.uniform(-1, 1, 6), np.zeros(6)
    ctrl.update_state(model.joint_names, q, v, 10.0)
    ctrl.compute(10.0)  # the hold position is the first state
    q_meas = q - 0.02  # a constant error of 0.02 rad
    dts = [0.001, 0.002, 0.001, 0.004] * 5
    times = 10.0 + np.cumsum(dts)
    out = drive(ctrl, q_meas, v, times)
    # the first state after the hold began integrates its own dt; the first state none
    integral = np.clip(ki * 0.02 * (times[-1] - 10.0), -i_clamp, i_clamp)
    np.testing.assert_allclose(ctrl.law.integral, integral, rtol=1e-12, atol=1e-15)
    if mode == "computed_torque":
        expected = oracle.rnea(q_meas, v, 50.0 * 0.02 + integral)
    else:
        expected = oracle.gravity(q_meas) + 80.0 * 0.02 + integral
    assert rel_err(out.effort, expected) <= 1e-9
    # the same state again (dt = 0) integrates nothing
    ctrl.compute(times[-1])
    np.testing.assert_allclose(ctrl.law.integral, integral, rtol=1e-12, atol=1e-15)


def test_integral_resets_on_trajectory_mode_and_activation_and_holds_while_saturated():
    _, model = arm("ur5")
    ctrl = JointController(model, mode="computed_torque", ki=10.0)
    q = np.full(6, 0.3)
    ctrl.update_state(model.joint_names, q, np.zeros(6), 0.0)
    ctrl.compute(0.0)
    drive(ctrl, q - 0.1, np.zeros(6), [0.01, 0.02])
    assert np.all(ctrl.law.integral > 0)
    ctrl.set_trajectory(model.joint_names, [TrajectoryPoint(1.0, q)], 0.02)
    ctrl.compute(0.02)
    assert np.all(ctrl.law.integral == 0)  # a new trajectory starts from zero
    drive(ctrl, q - 0.1, np.zeros(6), [0.03, 0.04])
    assert np.all(ctrl.law.integral != 0)
    ctrl.reset_integral()  # what a node does on activation
    assert np.all(ctrl.law.integral == 0)
    drive(ctrl, q - 0.1, np.zeros(6), [0.05, 0.06])
    ctrl.set_mode("impedance")
    assert np.all(ctrl.law.integral == 0)
    # saturated: a limited command's integral is held where it was, the others integrate
    ctrl.set_mode("computed_torque")
    ctrl.set_trajectory(model.joint_names, [TrajectoryPoint(0.001, q)], 0.06)
    ctrl.configure(effort_scale=1e-3)
    out = drive(ctrl, q - 0.1, np.zeros(6), [0.07, 0.08])
    limited = np.isin(model.joint_names, out.clamped)
    assert limited.sum() >= 3
    held = ctrl.law.integral.copy()
    drive(ctrl, q - 0.1, np.zeros(6), [0.09, 0.10, 0.11])
    np.testing.assert_array_equal(ctrl.law.integral[limited], held[limited])
    assert np.all(ctrl.law.integral[~limited] > held[~limited])
    # off by default
    assert not JointController(model).law.integrating


# ----------------------------------------------------------------------------- wraparound


def upstream_wraparound(current, following):
    """ros2_controllers' wraparound_joint for one angle, with angles::normalize_angle."""
    remainder = math.fmod(following - current + math.pi, 2.0 * math.pi)
    dist = remainder + math.pi if remainder <= 0.0 else remainder - math.pi
    if abs(abs(dist) - math.pi) < 1e-9:
        dist = abs(dist) if following > current else -abs(dist)
    return following - dist


def test_shortest_way_start_is_jtcs_wraparound():
    rng = np.random.default_rng(8)
    start = np.r_[rng.uniform(-20, 20, 200), 0.0, 1.0, -1.0, 3.0]
    first = np.r_[rng.uniform(-20, 20, 200), np.pi, 1.0 - np.pi, -1.0 + 3 * np.pi, -3.0]
    shifted = shortest_way_start(start, first, np.ones(start.size, dtype=bool))
    for s0, f, got in zip(start, first, shifted):
        assert got == pytest.approx(upstream_wraparound(s0, f), abs=1e-12)
        assert abs(got - f) <= np.pi + 1e-12
    np.testing.assert_array_equal(
        shortest_way_start(start, first, np.zeros(start.size, dtype=bool)), start)


def two_continuous_joints_and_a_revolute():
    return load_model(two_link_arm_urdf(1.0, 1.0, 0.5, 0.25, 0.25, 0.02, 0.02).replace(
        'type="continuous"><parent link="link1"/>',
        'type="revolute"><parent link="link1"/><limit lower="-3.2" upper="3.2" effort="50" '
        'velocity="4"/>'))


def test_a_continuous_joint_takes_the_short_way_and_a_revolute_the_long_way():
    model = two_continuous_joints_and_a_revolute()
    assert model.continuous_joints == ["joint1"] and model.joint_kinds == ["revolute"] * 2
    for mode in ("computed_torque", "impedance"):
        ctrl = JointController(model, mode=mode, kp=400.0, kd=40.0, stiffness=200.0,
                               damping=20.0, max_state_age=1.0)
        sim = Simulator(ctrl.law.dynamics, dt=1e-3, q0=np.array([3.0, 3.0]))
        ctrl.update_state(model.joint_names, sim.q, sim.v, 0.0)
        ctrl.set_trajectory(model.joint_names, [TrajectoryPoint(1.0, [-3.0, -3.0])], 0.0)
        start = ctrl.trajectory.positions[0]
        np.testing.assert_allclose(start, [-3.0 - (2 * np.pi - 6.0), 3.0], atol=1e-12)
        travelled = np.zeros(2)
        for _ in range(1500):
            ctrl.update_state(model.joint_names, sim.q, sim.v, sim.time)
            sim.set_command(ctrl.compute(sim.time).effort)
            sim.advance(1e-3)
            travelled += np.abs(sim.v) * 1e-3
        print(f"\n{mode}: travelled {travelled} rad (continuous, revolute)")
        assert travelled[0] == pytest.approx(2 * np.pi - 6.0, rel=0.1)
        assert travelled[1] == pytest.approx(6.0, rel=0.05)
        assert wrap_angle(np.array([sim.q[0] + 3.0]))[0] == pytest.approx(0.0, abs=1e-2)
        assert sim.q[1] == pytest.approx(-3.0, abs=1e-2)


# ----------------------------------------------------------------------------- feed-forward


def test_sampled_efforts_are_jtcs_linear_interpolation():
    rng = np.random.default_rng(9)
    efforts = [rng.normal(size=3) for _ in range(4)]
    points = [TrajectoryPoint(t, rng.normal(size=3), None, None, e)
              for t, e in zip([0.5, 1.0, 2.0, 2.5], [efforts[0], efforts[1], None, efforts[3]])]
    sampler = TrajectorySampler(points, 10.0, np.zeros(3))
    assert sampler.feeds_forward
    # the start row carries none: the first segment feeds nothing forward
    np.testing.assert_array_equal(sampler.sample_effort(10.2), np.zeros(3))
    # both ends carry efforts: e0 + (t − t0)(e1 − e0)/(t1 − t0), as JTC's coefficients
    for t in (0.5, 0.6, 0.99):
        expected = efforts[0] + (t - 0.5) * ((efforts[1] - efforts[0]) / 0.5)
        np.testing.assert_allclose(sampler.sample_effort(10.0 + t), expected, rtol=1e-12,
                                   atol=1e-15)
    # a segment to or from a point without efforts feeds nothing forward
    np.testing.assert_array_equal(sampler.sample_effort(11.5), np.zeros(3))
    np.testing.assert_array_equal(sampler.sample_effort(12.2), np.zeros(3))
    # after the end: the last point's
    np.testing.assert_array_equal(sampler.sample_effort(20.0), efforts[3])
    # from a start effort (the previous reference's)
    start = rng.normal(size=3)
    sampler = TrajectorySampler(points, 10.0, np.zeros(3), start_efforts=start)
    np.testing.assert_allclose(sampler.sample_effort(10.25), (start + efforts[0]) / 2,
                               rtol=1e-12)
    none = TrajectorySampler([TrajectoryPoint(1.0, [0.0])], 0.0, [0.0])
    assert not none.feeds_forward and none.sample_effort(0.5) is None


@pytest.mark.parametrize("efforts, words", [([np.nan, 0, 0], r"point 0: efforts contains NaN"),
                                            ([1.0, 2.0], "point 0: efforts has 2 values")])
def test_bad_efforts_are_refused_naming_the_point(efforts, words):
    with pytest.raises(TrajectoryError, match=words):
        TrajectorySampler([TrajectoryPoint(1.0, [0, 0, 0], efforts=efforts)], 0.0, np.zeros(3))
    _, model = arm("ur5")
    ctrl = JointController(model, mode="computed_torque")
    ctrl.update_state(model.joint_names, np.zeros(6), np.zeros(6), 0.0)
    with pytest.raises(ControllerError, match=words):
        ctrl.set_trajectory(model.joint_names[:3], [TrajectoryPoint(1.0, [0, 0, 0],
                                                                    efforts=efforts)], 0.0)


@pytest.mark.parametrize("mode", ["computed_torque", "impedance"])
def test_the_sampled_effort_is_added_to_the_command(mode):
    path, model = arm("ur5")
    oracle = PinArm(path, model)
    ctrl = JointController(model, mode=mode, kp=50.0, kd=5.0, stiffness=80.0, damping=4.0)
    ctrl.configure(effort_scale=1e6)
    rng = np.random.default_rng(10)
    q, v = rng.uniform(-1, 1, 6), rng.uniform(-0.5, 0.5, 6)
    ctrl.update_state(model.joint_names, q, v, 0.0)
    names = ["wrist_1_joint", "shoulder_pan_joint"]  # a subset, in another order
    cols = model.velocity_indices(names)
    target = q[cols] + 0.1
    ctrl.set_trajectory(names, [TrajectoryPoint(0.001, target, efforts=[3.0, -7.0]),
                                TrajectoryPoint(1.0, target, efforts=[5.0, 1.0])], 0.0)
    out = ctrl.compute(0.0)  # the first segment (from a start without efforts): none
    feedforward = np.zeros(6)
    ctrl.update_state(model.joint_names, q, v, 0.5005)
    out = ctrl.compute(0.5005)
    feedforward[cols] = [4.0, -3.0]  # halfway between the points' efforts
    q_d = q.copy()
    q_d[cols] = target
    if mode == "computed_torque":
        expected = oracle.rnea(q, v, 50.0 * (q_d - q) - 5.0 * v) + feedforward
    else:
        expected = oracle.gravity(q) + 80.0 * (q_d - q) - 4.0 * v + feedforward
    assert rel_err(out.effort, expected) <= 1e-9


# ----------------------------------------------------------------------------- start state


@pytest.mark.parametrize("from_desired", [False, True])
def test_a_new_trajectory_starts_from_the_measured_or_the_desired_state(from_desired):
    _, model = arm("ur5")
    ctrl = JointController(model, mode="computed_torque",
                           interpolate_from_desired_state=from_desired)
    assert ctrl.interpolate_from_desired_state is from_desired
    q0 = np.full(6, 0.2)
    ctrl.update_state(model.joint_names, q0, np.zeros(6), 0.0)
    ctrl.set_trajectory(model.joint_names,
                        [TrajectoryPoint(1.0, q0 + 1.0, np.zeros(6), efforts=np.full(6, 2.0))],
                        0.0)
    desired, desired_v, _ = ctrl.reference(0.5)
    desired_effort = ctrl.trajectory.sample_effort(0.5)
    q, v = q0 + 0.3, np.full(6, 0.1)  # the arm lags behind the reference
    ctrl.update_state(model.joint_names, q, v, 0.5)
    ctrl.set_trajectory(model.joint_names[:2], [TrajectoryPoint(1.0, [0.0, 0.0])], 0.5)
    start = ctrl.trajectory
    expected = (desired, desired_v) if from_desired else (q, v)
    np.testing.assert_allclose(start.positions[0], expected[0], rtol=1e-12)
    np.testing.assert_allclose(start.velocities[0], expected[1], rtol=1e-12)
    # the joints left out hold the current reference either way
    np.testing.assert_allclose(start.positions[1, 2:], desired[2:], rtol=1e-12)
    np.testing.assert_array_equal(start.efforts[0], desired_effort if from_desired
                                  else np.zeros(6))
    assert bool(start.has_effort[0]) is from_desired


def _held_and_prepared_meanwhile(meanwhile) -> tuple[np.ndarray, list[np.ndarray]]:
    """ur5 in impedance holding q_hold (interpolate_from_desired_state) while measured 0.03 rad
    away; ``meanwhile(ctrl, stop)`` runs on a second thread while this one prepares 3000
    trajectories to q_hold, the threads interleaving as often as they can: (q_hold, their
    first positions)."""
    _, model = arm("ur5")
    names, zeros = model.joint_names, np.zeros(6)
    ctrl = JointController(model, mode="impedance", interpolate_from_desired_state=True,
                           max_state_age=math.inf)
    q_hold = np.full(6, 0.2)
    ctrl.update_state(names, q_hold, zeros, 0.0)
    ctrl.compute(0.0)  # holds q_hold
    ctrl.update_state(names, q_hold + 0.03, zeros, 0.0)  # measured away from the hold
    stop = threading.Event()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    other = threading.Thread(target=meanwhile, args=(ctrl, stop))
    other.start()
    try:
        starts = [ctrl.prepare_trajectory(names, [TrajectoryPoint(100.0, q_hold)], 0.0, 0.0)
                  .positions[0] for _ in range(3000)]
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(interval)
    return q_hold, starts


def test_a_trajectory_prepared_while_the_loop_computes_starts_from_the_desired_state():
    """A node prepares a trajectory outside its control lock while its loop computes
    efforts: an effort in flight must not make the healthy reference look broken (which
    would start the trajectory from the measured state)."""
    def control_loop(ctrl, stop):
        while not stop.is_set():
            ctrl.compute(0.0)

    q_hold, starts = _held_and_prepared_meanwhile(control_loop)
    moved = sum(not np.array_equal(start, q_hold) for start in starts)
    assert moved == 0, f"{moved} of {len(starts)} started from the measured state"


def test_a_trajectory_prepared_while_the_node_ends_another_is_still_built():
    """A goal that ends (the node sets the trajectory to None under its lock) while another
    is being prepared outside it: the new one is built, from one of the two references."""
    def goals_starting_and_ending(ctrl, stop):
        running = ctrl.prepare_trajectory(ctrl.joints, [TrajectoryPoint(100.0, ctrl.q + 1.0)],
                                          0.0, 0.0)  # at t = 0 still at the hold
        while not stop.is_set():
            ctrl.trajectory = running
            ctrl.trajectory = None

    q_hold, starts = _held_and_prepared_meanwhile(goals_starting_and_ending)
    for start in starts:
        np.testing.assert_array_equal(start, q_hold)


def test_from_the_desired_state_a_broken_reference_restarts_from_the_measured_state():
    _, model = arm("ur5")
    # kp·(q_d − q) overflows: a gain of 1e300 and a reference 1e9 rad away (the largest a
    # point may hold)
    ctrl = JointController(model, mode="computed_torque", interpolate_from_desired_state=True,
                           max_state_age=1.0, kp=1e300)
    q = np.full(6, 0.2)
    ctrl.update_state(model.joint_names, q, np.zeros(6), 0.0)
    ctrl.set_trajectory(model.joint_names, [TrajectoryPoint(1.0, np.full(6, 1e9))], 0.0)
    with pytest.raises(ControllerError, match="not finite"):
        ctrl.compute(0.5)
    ctrl.set_trajectory(model.joint_names, [TrajectoryPoint(1.0, q)], 0.5)
    np.testing.assert_array_equal(ctrl.trajectory.positions[0], q)


def test_a_restarted_trajectory_rejoins_the_motion_from_the_measured_state():
    """After a gap in the states (TrajectorySampler.restarted): from the measured state at
    ``now``, the points due STEP_TIME or more later, on the same clock, unchanged; a gap past
    the end gives none; near the end the last point is due in STEP_TIME."""
    from rb_dynamics.control.trajectory import STEP_TIME

    points = [TrajectoryPoint(0.02 * k, np.full(2, 0.01 * k), np.full(2, 0.5)) for k in
              range(1, 101)]
    sampler = TrajectorySampler(points, 10.0, np.zeros(2), np.zeros(2))
    q, v = np.array([0.2, -0.1]), np.array([0.05, 0.0])
    again = sampler.restarted(10.5, q, v)
    np.testing.assert_array_equal(again.sample(10.5)[0], q)  # it starts where the arm is
    first = next(k for k in range(1, 101) if 0.02 * k >= 0.5 + STEP_TIME - 1e-12)
    assert again.times[1] == pytest.approx(0.02 * first - 0.5)
    for t in (11.0, 11.5, 12.0):  # from there on, the old motion on the same clock
        np.testing.assert_allclose(again.sample(t)[0], sampler.sample(t)[0], atol=1e-12)
    assert again.end_time == pytest.approx(sampler.end_time)
    late = sampler.restarted(11.9, q, v)
    assert late.end_time == pytest.approx(11.9 + STEP_TIME)
    np.testing.assert_allclose(late.sample(late.end_time)[0], sampler.positions[-1])
    assert sampler.restarted(12.0, q, v) is None


@pytest.mark.parametrize("fields", ["p", "pv", "pva", "pvae"])
def test_a_restart_is_the_sampler_a_new_trajectory_of_the_points_left_would_be(fields):
    """``restarted`` slices the old sampler's arrays instead of building points (it runs on
    the loop thread, for up to 10,000 points): the same sampler as one built from the points
    still due, at every instant, efforts included; its first segment alone is checked."""
    from rb_dynamics.control.trajectory import STEP_TIME

    rng = np.random.default_rng(3)
    n, count = 3, 400
    rows = rng.uniform(-1, 1, (count, 4, n))
    wrap = np.array([True, False, False])

    def point(k, time):
        return TrajectoryPoint(time, rows[k, 0], *(rows[k, i] if f in fields else None
                                                   for i, f in ((1, "v"), (2, "a"), (3, "e"))))

    sampler = TrajectorySampler([point(k, 0.01 * (k + 1)) for k in range(count)], 5.0,
                                np.zeros(n), np.zeros(n), wrap)
    q, v = np.array([3.0, 0.1, -0.2]), np.array([0.3, 0.0, -0.1])
    now = 6.234
    again = sampler.restarted(now, q, v, wrap)
    due = [k for k in range(count) if 0.01 * (k + 1) >= now - 5.0 + STEP_TIME - 1e-12]
    built = TrajectorySampler([point(k, max(0.01 * (k + 1) - (now - 5.0), STEP_TIME))
                               for k in due], now, q, v, wrap)
    for t in np.linspace(now - 0.1, sampler.end_time + 0.1, 997):
        for mine, theirs in zip(again.sample(t), built.sample(t)):
            np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-12)
        if "e" in fields:
            np.testing.assert_allclose(again.sample_effort(t), built.sample_effort(t),
                                       rtol=1e-12, atol=1e-12)
        else:
            assert again.sample_effort(t) is None and built.sample_effort(t) is None
    first = again.first_segment()
    assert len(first.times) == 2 and first.end_time == again.start_time + again.times[1]
    for t in np.linspace(now, first.end_time, 50):
        np.testing.assert_allclose(first.sample(t)[0], again.sample(t)[0], rtol=1e-12, atol=1e-12)
