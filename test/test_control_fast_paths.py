# SPDX-License-Identifier: Apache-2.0
"""The per-state shortcuts of ``rb_dynamics.control`` against the plain computations they
replace: the sampler's cached segment polynomial against the segment's spline evaluated afresh
(by NumPy's polynomial module), the controller's cached joint-state columns and effort limits
against a state mapped and clamped by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.polynomial.polynomial as P
import pytest
from pin_oracle import REAL_ROBOTS, robots_dir

from rb_dynamics.control import (
    ControllerError,
    JointController,
    MissingVelocity,
    TrajectoryPoint,
    TrajectorySampler,
    evaluate_spline,
    spline_coefficients,
)
from rb_dynamics.model import load_model


@pytest.fixture(scope="module")
def panda():
    return load_model(Path(robots_dir(), REAL_ROBOTS["panda"][0]))


@pytest.mark.parametrize("fields", ["p", "pv", "pva"])
def test_sampler_equals_the_segment_formula_at_any_time(fields):
    rng = np.random.default_rng(4)
    times = np.cumsum(rng.uniform(0.1, 1.0, 6))
    points = [TrajectoryPoint(t, rng.normal(size=5), rng.normal(size=5) if "v" in fields
                              else None, rng.normal(size=5) if "a" in fields else None)
              for t in times]
    sampler = TrajectorySampler(points, 2.0, rng.normal(size=5), rng.normal(size=5))
    # in order (the cache is reused) and shuffled (it is replaced)
    instants = np.r_[np.linspace(0.0, times[-1], 400, endpoint=False),
                     rng.uniform(0, times[-1], 100)]
    for t in instants:
        k = int(np.searchsorted(sampler.times, t, side="right"))
        before = sampler.times[k - 1]
        c = sampler.segment(k)
        expected = [P.polyval(t - before, P.polyder(c, m)) for m in range(3)]
        got = sampler.sample(2.0 + t)
        assert got[3] is False
        for x, y in zip(got[:3], expected):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12 * (1 + np.abs(y).max()))


@pytest.mark.parametrize("fields", ["p", "pv", "pva"])
def test_spline_meets_the_end_points_it_is_given(fields):
    rng = np.random.default_rng(5)
    start, end = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    given = [True, "v" in fields, "a" in fields]
    c = spline_coefficients(0.7, *(x if g else None for x, g in zip(start, given)),
                            *(x if g else None for x, g in zip(end, given)))
    at_start, at_end = evaluate_spline(c, 0.0), evaluate_spline(c, 0.7)
    both = evaluate_spline(c, np.array([0.0, 0.7]))  # an array of times: one row per time
    for m in range(3):
        np.testing.assert_allclose(both[m], [at_start[m], at_end[m]], rtol=1e-15, atol=0)
        if given[m]:
            np.testing.assert_allclose(at_start[m], start[m], atol=1e-12)
            np.testing.assert_allclose(at_end[m], end[m], atol=1e-12)
    with pytest.raises(ValueError, match="positive duration"):
        spline_coefficients(0.0, *start, *end)


def test_joint_state_columns_are_cached_but_every_message_is_checked(panda):
    ctrl = JointController(panda, max_state_age=1.0)
    names = panda.joint_names
    q = np.linspace(-0.5, 0.5, 8)
    order = [3, 0, 7, 1, 6, 2, 5, 4]
    shuffled = [names[i] for i in order] + ["other_robot_joint"]
    for _ in range(2):  # the second time from the cache
        ctrl.update_state(shuffled, [*q[order], 9.0], [*(2 * q)[order], 9.0], 0.0)
        assert np.array_equal(ctrl.q, q) and np.array_equal(ctrl.v, 2 * q)
    for _ in range(2):  # in the model's order: copied as it is
        ctrl.update_state(names, q.tolist(), (3 * q).tolist(), 0.0)
        assert np.array_equal(ctrl.q, q) and np.array_equal(ctrl.v, 3 * q)
    with pytest.raises(ControllerError, match="no velocities"):  # q̇ = 0 would be a guess
        ctrl.update_state(names, q.tolist(), [], 0.0)
    with pytest.raises(ControllerError, match="repeated"):
        ctrl.update_state(names[:-1] + names[:1], q, [], 0.0)
    with pytest.raises(ControllerError, match="missing joints"):
        ctrl.update_state(names[1:], q[1:], [], 0.0)
    bad = q.copy()
    bad[2] = np.nan
    with pytest.raises(ControllerError, match="NaN"):
        ctrl.update_state(names, bad, [], 0.0)  # cached names, a bad value: still refused
    with pytest.raises(ControllerError, match="8 names but 7 positions"):
        ctrl.update_state(names, q[:7], [], 0.0)
    assert np.array_equal(ctrl.q, q)  # nothing refused changed the state


def test_velocity_from_positions_is_a_filtered_difference_quotient(panda):
    """missing_velocity differentiate: no state for the first positions, a ramp exactly,
    a step in velocity approached as the first-order low-pass says, a gap starts again."""
    cutoff, period = 20.0, 0.001
    ctrl = JointController(panda, max_state_age=0.1,
                           missing_velocity=MissingVelocity("differentiate", cutoff))
    names, w = panda.joint_names, np.linspace(-0.4, 0.5, 8)
    assert ctrl.update_state(names, np.zeros(8), [], 0.0) is False and ctrl.q is None
    t, q = 0.0, np.zeros(8)
    for _ in range(50):  # a ramp: the quotient itself
        t, q = t + period, q + w * period
        assert ctrl.update_state(names, q, [], t)
        np.testing.assert_allclose(ctrl.v, w, rtol=1e-9, atol=1e-12)
    for k in range(1, 200):  # the velocity doubles: 1 − exp(−2π f_c t) of the step
        t, q = t + period, q + 2 * w * period
        ctrl.update_state(names, q, [], t)
        expected = w + w * (1.0 - np.exp(-2 * np.pi * cutoff * k * period))
        np.testing.assert_allclose(ctrl.v, expected, rtol=1e-9, atol=1e-12)
    assert ctrl.update_state(names, q, [], t + 0.2) is False  # a gap over max_state_age
    assert ctrl.update_state(names, q + w * period, [], t + 0.2 + period)
    np.testing.assert_allclose(ctrl.v, w, rtol=1e-9)


def test_effort_limits_follow_effort_scale_and_the_commanded_joints(panda):
    q = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8, 0.02])
    for joints in (None, ["panda_joint4", "panda_joint2"]):
        ctrl = JointController(panda, joints, mode="computed_torque", kp=2e4, kd=0.0,
                               max_state_age=1.0)
        ctrl.update_state(panda.joint_names, q, np.zeros(8), 0.0)
        ctrl.set_trajectory(panda.joint_names, [TrajectoryPoint(0.0, q + 0.5)], 0.0)
        index = ctrl.index
        for scale in (1.0, 0.25, 1.0):
            ctrl.configure(effort_scale=scale)
            tau, error = ctrl.effort(ctrl.q, ctrl.v, 0.1)
            limit = panda.effort_limit[index] * scale
            out = ctrl.compute(0.1)
            np.testing.assert_array_equal(out.effort, np.clip(tau[index], -limit, limit))
            assert out.clamped == [n for n, t, lim in zip(ctrl.joints, tau[index], limit)
                                   if abs(t) > lim]
            np.testing.assert_array_equal(out.position_error, error[index])
            full = np.zeros(panda.nv)
            full[index] = np.clip(tau[index], -limit, limit)
            np.testing.assert_array_equal(ctrl.effort_at(0.1, ctrl.q, ctrl.v), full)


def test_gravity_mode_errors_are_zero_and_read_only(panda):
    ctrl = JointController(panda, max_state_age=1.0)
    ctrl.update_state(panda.joint_names, np.zeros(8), np.zeros(8), 0.0)
    out = ctrl.compute(0.0)
    assert not out.position_error.any()
    with pytest.raises(ValueError):
        out.position_error[0] = 1.0  # shared: never written through
