# SPDX-License-Identifier: Apache-2.0
"""Integrators, limit stops, trajectory sampling and control laws (no ROS involved)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, Oracle, random_state, rel_err, robots_dir
from urdf_samples import kitchen_sink_urdf

from rb_dynamics.control import (
    ControlLaw,
    TrajectoryError,
    TrajectoryPoint,
    TrajectorySampler,
    position_error,
    wrap_angle,
)
from rb_dynamics.dynamics import ReferenceDynamics
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import clamp_effort, clamp_effort_with_mask, load_model
from rb_dynamics.simulation import integrate, step


@pytest.fixture(scope="module")
def ur5():
    return load_model(Path(robots_dir(), REAL_ROBOTS["ur5"][0]))


def test_integrate_matches_pinocchio_on_every_joint_kind():
    xml = kitchen_sink_urdf()
    model = load_model(xml, floating_base=True)
    oracle = Oracle(model, xml)
    rng = np.random.default_rng(20)
    for _ in range(100):
        q, v, _, _ = random_state(model, rng)
        dt = rng.uniform(0.001, 0.5)
        ours = oracle.q(integrate(model, q, v, dt))
        ref = pin.integrate(oracle.pm, oracle.q(q), oracle.v(v) * dt)
        # the tangent-space difference compares rotations, whatever the quaternion signs
        gap = np.linalg.norm(pin.difference(oracle.pm, ref, ours))
        assert gap <= 1e-9 * max(1.0, np.linalg.norm(v * dt)), gap


def test_free_flyer_motion_conserves_energy_and_momentum():
    rel, _ = REAL_ROBOTS["solo12"]
    model = load_model(Path(robots_dir(), rel), floating_base=True, gravity=(0, 0, 0))
    rng = np.random.default_rng(21)
    q, v, _, _ = random_state(model, rng)
    v *= 0.3
    zero = np.zeros(model.nv)
    e0 = D.kinetic_energy(model, q, v)
    h0 = D.centroidal_momentum(model, q, v)
    for _ in range(250):
        s = step(ReferenceDynamics(model), q, v, zero, 2e-3, "rk4", losses=False, limits=False)
        q, v = s.q, s.v
    assert abs(D.kinetic_energy(model, q, v) - e0) / e0 < 1e-6
    assert rel_err(D.centroidal_momentum(model, q, v), h0) < 1e-6


def test_semi_implicit_euler_keeps_a_pendulum_bounded(ur5):
    q, v, zero = np.zeros(6), np.zeros(6), np.zeros(6)
    q[1] = -1.0
    energy0 = D.potential_energy(ur5, q)
    drift, swing = 0.0, 0.0
    for _ in range(2000):
        s = step(ReferenceDynamics(ur5), q, v, zero, 1e-3, "semi_implicit_euler", losses=False,
                 limits=False)
        q, v = s.q, s.v
        kinetic = D.kinetic_energy(ur5, q, v)
        swing = max(swing, kinetic)
        drift = max(drift, abs(kinetic + D.potential_energy(ur5, q) - energy0))
    assert drift < 0.05 * swing  # symplectic: the error oscillates, it does not grow


def test_position_limits_are_inelastic_stops(ur5):
    q, v = np.zeros(6), np.zeros(6)
    q[0] = ur5.position_upper[0] - 1e-4
    v[0] = 5.0
    s = step(ReferenceDynamics(ur5), q, v, np.zeros(6), 1e-3, "rk4")
    assert s.q[0] == ur5.position_upper[0] and s.v[0] == 0.0 and s.limit_hit[0]


def test_damping_dissipates_energy(ur5):
    ur5_damped = load_model(Path(robots_dir(), REAL_ROBOTS["ur5"][0]), gravity=(0, 0, 0))
    ur5_damped.damping[:] = 2.0
    q, v = np.zeros(6), np.full(6, 1.0)
    e0 = D.kinetic_energy(ur5_damped, q, v)
    for _ in range(100):
        s = step(ReferenceDynamics(ur5_damped), q, v, np.zeros(6), 1e-3, "rk4", limits=False)
        q, v = s.q, s.v
    assert D.kinetic_energy(ur5_damped, q, v) < 0.9 * e0


def test_bad_integrator_and_dt(ur5):
    with pytest.raises(ValueError, match="integrator must be one of"):
        step(ReferenceDynamics(ur5), np.zeros(6), np.zeros(6), np.zeros(6), 1e-3, "leapfrog")
    with pytest.raises(ValueError, match="dt must be positive"):
        step(ReferenceDynamics(ur5), np.zeros(6), np.zeros(6), np.zeros(6), float("nan"))


# ----------------------------------------------------------------------------- control


def test_wrap_angle_range():
    x = np.array([np.pi, -np.pi, 3 * np.pi, 0.5, -7.0])
    w = wrap_angle(x)
    assert np.all(w > -np.pi) and np.all(w <= np.pi)
    np.testing.assert_allclose(np.sin(w), np.sin(x), atol=1e-12)
    assert w[0] == np.pi and w[1] == np.pi


def test_continuous_joint_errors_wrap():
    model = load_model(kitchen_sink_urdf(with_planar=False, with_floating=False))
    q_d, q = np.zeros(model.nv), np.zeros(model.nv)
    j2, j1 = model.velocity_indices(["j2", "j1"])  # continuous, revolute
    q_d[j2] = q_d[j1] = 3.0
    q[j2] = q[j1] = -3.0
    err = position_error(model, q_d, q)
    assert err[j1] == pytest.approx(6.0) and err[j2] == pytest.approx(6.0 - 2 * np.pi)


def test_computed_torque_is_M_times_command_plus_bias(ur5):
    rng = np.random.default_rng(22)
    kp, kd = np.full(6, 100.0), np.full(6, 20.0)
    for _ in range(20):
        q, v, a_d, _ = random_state(ur5, rng)
        q_d, v_d = q + rng.normal(0, 0.1, 6), v + rng.normal(0, 0.1, 6)
        tau, _ = ControlLaw(ReferenceDynamics(ur5), "computed_torque", kp, kd).effort(
            q, v, q_d, v_d, a_d)
        a_cmd = a_d + kd * (v_d - v) + kp * (q_d - q)
        expected = D.crba(ur5, q) @ a_cmd + D.nonlinear_effects(ur5, q, v)
        assert rel_err(tau, expected) < 1e-10


def test_gravity_compensation_and_clamp(ur5):
    q = np.array([0.1, -1.2, 1.0, -0.5, 0.3, 0.0])
    law = ControlLaw(ReferenceDynamics(ur5), "gravity_compensation")
    np.testing.assert_array_equal(law.effort(q, np.zeros(6))[0], D.gravity(ur5, q))
    law.friction_compensation = True
    with_friction, _ = law.effort(q, np.full(6, 0.5))
    assert np.all(with_friction >= D.gravity(ur5, q) - 1e-12)
    tau, clipped = clamp_effort_with_mask(np.array([1e4, -1e4, 0, 0, 0, 0]), ur5.effort_limit)
    assert tau[0] == ur5.effort_limit[0] and tau[1] == -ur5.effort_limit[1]
    assert clipped.tolist() == [True, True, False, False, False, False]


@pytest.mark.parametrize("fields", ["p", "pv", "pva"])
def test_trajectory_sampler_hits_every_point(fields):
    rng = np.random.default_rng(23)
    times = [0.5, 1.2, 2.0]
    points = [TrajectoryPoint(t, rng.normal(size=3),
                              rng.normal(size=3) if "v" in fields else None,
                              rng.normal(size=3) if "a" in fields else None) for t in times]
    start = np.array([0.1, 0.2, 0.3])
    sampler = TrajectorySampler(points, 10.0, start, np.zeros(3))
    pos, _, _, done = sampler.sample(10.0)
    np.testing.assert_allclose(pos, start, atol=1e-12)
    assert not done
    for point in points[:-1]:
        pos, vel, acc, _ = sampler.sample(10.0 + point.time)
        np.testing.assert_allclose(pos, point.positions, atol=1e-9)
        if point.velocities is not None:
            np.testing.assert_allclose(vel, point.velocities, atol=1e-9)
        if point.accelerations is not None:
            np.testing.assert_allclose(acc, point.accelerations, atol=1e-9)
    # derivatives are consistent with positions (numerical check mid-segment)
    t, h = 10.9, 1e-6
    p_plus, p_minus = sampler.sample(t + h)[0], sampler.sample(t - h)[0]
    np.testing.assert_allclose(sampler.sample(t)[1], (p_plus - p_minus) / (2 * h), atol=1e-5)
    pos, vel, acc, done = sampler.sample(100.0)  # held after the end
    assert done and np.array_equal(pos, points[-1].positions) and not vel.any() and not acc.any()


def test_single_point_trajectory_is_a_set_point():
    sampler = TrajectorySampler([TrajectoryPoint(0.0, [1.0, 2.0])], 0.0, np.zeros(2))
    pos, vel, _, done = sampler.sample(0.0)
    assert done and pos.tolist() == [1.0, 2.0] and not vel.any()
    # a state stamped before the set-point arrived samples it too (this used to raise)
    pos, vel, _, done = sampler.sample(-0.002)
    assert done and pos.tolist() == [1.0, 2.0] and not vel.any()


def test_sampling_before_the_start_gives_the_start():
    sampler = TrajectorySampler([TrajectoryPoint(1.0, [1.0, 2.0])], 5.0, np.array([0.5, 0.5]))
    pos, vel, _, done = sampler.sample(4.0)
    assert not done and pos.tolist() == [0.5, 0.5]


@pytest.mark.parametrize(
    "points, words",
    [
        ([], "no points"),
        ([TrajectoryPoint(1.0, [0, 0]), TrajectoryPoint(0.5, [0, 0])], "not after"),
        ([TrajectoryPoint(1.0, [0, np.nan])], "positions contains NaN"),
        ([TrajectoryPoint(1.0, [0, 0, 0])], "positions has 3 values"),
        ([TrajectoryPoint(-1.0, [0, 0])], "must be finite and ≥ 0"),
        ([TrajectoryPoint(1.0, [0, 0], [0])], "velocities has 1 values"),
    ],
)
def test_bad_trajectories_are_rejected(points, words):
    with pytest.raises(TrajectoryError, match=words):
        TrajectorySampler(points, 0.0, np.zeros(2))


def test_computed_torque_tracks_a_trajectory_in_simulation(ur5):
    """Closed loop: the simulator and the control law share the model; errors vanish."""
    q = np.array([0.0, -1.5, 1.5, -1.5, -1.5, 0.0])
    v = np.zeros(6)
    goal = q + np.array([0.4, 0.3, -0.3, 0.2, 0.2, 0.5])
    sampler = TrajectorySampler([TrajectoryPoint(1.0, goal, np.zeros(6), np.zeros(6))], 0.0, q, v)
    law = ControlLaw(ReferenceDynamics(ur5), "computed_torque", np.full(6, 400.0),
                     np.full(6, 40.0))
    dt = 2e-3
    for k in range(750):
        tau = clamp_effort(law.effort(q, v, *sampler.sample(k * dt)[:3])[0], ur5.effort_limit)
        s = step(ReferenceDynamics(ur5), q, v, tau, dt, "rk4", losses=False)
        q, v = s.q, s.v
    assert np.abs(q - goal).max() < 1e-4


# ----------------------------------------------------------------------------- JointController


def _controller(ur5, **kwargs):
    from rb_dynamics.control import JointController

    return JointController(ur5, **kwargs)


def test_controller_maps_state_by_name_and_orders_commands_by_joints(ur5):
    joints = list(reversed(ur5.actuated_joint_names))
    ctrl = _controller(ur5, joints=joints)
    q = np.array([0.1, -1.2, 1.0, -0.5, 0.3, 0.2])
    names = ["extra_joint", *ur5.joint_names[::2], *ur5.joint_names[1::2]]
    positions = [9.0, *q[::2], *q[1::2]]
    ctrl.update_state(names, positions, [0.0] * len(names), now=1.0)
    out = ctrl.compute(1.01)
    np.testing.assert_allclose(out.effort, np.clip(D.gravity(ur5, q), -ur5.effort_limit,
                                                   ur5.effort_limit)[::-1], rtol=1e-9, atol=1e-9)


def test_controller_refuses_bad_state_and_stale_state(ur5):
    from rb_dynamics.control import ControllerError

    ctrl = _controller(ur5, max_state_age=0.05)
    with pytest.raises(ControllerError, match="no joint state"):
        ctrl.compute(0.0)
    with pytest.raises(ControllerError, match="missing joints"):
        ctrl.update_state(ur5.joint_names[:5], [0.0] * 5, [], now=0.0)
    with pytest.raises(ControllerError, match="NaN"):
        ctrl.update_state(ur5.joint_names, [0.0] * 5 + [np.nan], [], now=0.0)
    with pytest.raises(ControllerError, match="6 names but 5 positions"):
        ctrl.update_state(ur5.joint_names, [0.0] * 5, [], now=0.0)
    ctrl.update_state(ur5.joint_names, [0.0] * 6, [0.0] * 6, now=0.0)
    with pytest.raises(ControllerError, match="stale"):
        ctrl.compute(0.2)
    with pytest.raises(ControllerError, match="unknown joint|not independent"):
        _controller(ur5, joints=["nope"])


def test_controller_gains_are_validated_atomically(ur5):
    from rb_dynamics.control import ControllerError

    ctrl = _controller(ur5, kp=50.0, kd=5.0)
    for bad in ([-1.0] * 6, [np.nan] * 6, [1.0] * 3):
        with pytest.raises(ControllerError):
            ctrl.set_gains(kp=[10.0] * 6, kd=bad)
        assert np.all(ctrl.kp[ctrl.index] == 50.0) and np.all(ctrl.kd[ctrl.index] == 5.0)
    with pytest.raises(ControllerError, match="mode must be one of"):
        ctrl.set_mode("admittance")


def test_controller_computed_torque_follows_a_partial_trajectory(ur5):
    ctrl = _controller(ur5, mode="computed_torque", kp=400.0, kd=40.0)
    q, v, dt = np.array([0.0, -1.5, 1.5, -1.5, -1.5, 0.0]), np.zeros(6), 2e-3
    ctrl.update_state(ur5.joint_names, q, v, now=0.0)
    with pytest.raises(Exception, match="trajectory"):
        ctrl.set_trajectory(["shoulder_pan_joint"], [TrajectoryPoint(1.0, [np.inf])], 0.0)
    ctrl.set_trajectory(["elbow_joint", "shoulder_pan_joint"],
                        [TrajectoryPoint(0.5, [1.2, 0.3], [0, 0], [0, 0]),
                         TrajectoryPoint(1.0, [1.0, 0.5], [0, 0], [0, 0])], now=0.0)
    for k in range(700):
        out = ctrl.compute(k * dt)
        tau = np.zeros(6)
        tau[ctrl.index] = out.effort
        s = step(ReferenceDynamics(ur5), q, v, tau, dt, "rk4", losses=False)
        q, v = s.q, s.v
        ctrl.update_state(ur5.joint_names, q, v, now=(k + 1) * dt)
    goal = np.array([0.5, -1.5, 1.0, -1.5, -1.5, 0.0])
    assert np.abs(q - goal).max() < 1e-3
