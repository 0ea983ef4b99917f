# SPDX-License-Identifier: Apache-2.0
"""Trajectory efforts against Pinocchio along trajectories, the controller's spline where the
points lack derivatives, and the feasibility report's first infeasible point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, Oracle, rel_err, robots_dir
from urdf_samples import kitchen_sink_urdf

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.control import TrajectoryPoint, TrajectorySampler
from rb_dynamics.control import feasibility as F
from rb_dynamics.dynamics import Payload, make_dynamics, with_payload
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import load_model

TOL = 1e-9


def _robot(name: str):
    xml = Path(robots_dir(), REAL_ROBOTS[name][0]).read_text()
    model = load_model(xml)
    return model, Oracle(model, xml)


def smooth_trajectory(model, n_points: int, duration: float, rng, amplitude: float = 0.3):
    """q(t) = centre + A sin(ω t + φ) inside the limits, with exact q̇ and q̈."""
    lower = np.where(np.isfinite(model.position_lower), model.position_lower, -np.pi)
    upper = np.where(np.isfinite(model.position_upper), model.position_upper, np.pi)
    centre = 0.5 * (lower + upper)
    amp = np.minimum(amplitude, 0.4 * (upper - lower))
    omega = rng.uniform(1.0, 3.0, model.nv)
    phase = rng.uniform(0, 2 * np.pi, model.nv)
    t = np.linspace(0.0, duration, n_points)[:, None]
    q = centre + amp * np.sin(omega * t + phase)
    v = amp * omega * np.cos(omega * t + phase)
    a = -amp * omega**2 * np.sin(omega * t + phase)
    return t[:, 0], q, v, a


def _controller_samples(t, q, v):
    """What control.TrajectorySampler gives at the point times, started at the first point."""
    points = [TrajectoryPoint(t[k] - t[0], q[k], None if v is None else v[k])
              for k in range(1, len(t))]
    sampler = TrajectorySampler(points, t[0], q[0], None if v is None else v[0])
    return [sampler.sample(tk)[:3] for tk in t]


@pytest.mark.parametrize("name", ["ur5", "panda"])
def test_efforts_along_a_trajectory_match_pinocchio(name):
    model, oracle = _robot(name)
    rng = np.random.default_rng(0)
    t, q, v, a = smooth_trajectory(model, 60, 3.0, rng)
    pm, pd = oracle.pm, oracle.pd
    # the Panda's right finger is a mimic joint: our coordinates hold the left one only, and
    # the oracle maps states and efforts between the models by joint name
    tau = F.trajectory_efforts(model, t, q, v, a)
    fast = F.trajectory_efforts(make_dynamics(model), t, q, v, a)
    for k in range(len(t)):
        ref = oracle.from_v(pin.rnea(pm, pd, oracle.q(q[k]), oracle.v(v[k]), oracle.v(a[k])))
        assert rel_err(tau[k], ref) <= TOL
        assert rel_err(fast[k], ref) <= TOL
    v[-1] = 0.0  # end at rest, as the controller holds the last point
    for given_v in (v, None):  # cubic from velocities, linear from positions only
        tau = F.trajectory_efforts(model, t, q, given_v)
        for k, (q_c, v_c, a_c) in enumerate(_controller_samples(t, q, given_v)):
            assert np.allclose(q_c, q[k], atol=1e-12)
            ref = pin.rnea(pm, pd, oracle.q(q_c), oracle.v(v_c), oracle.v(a_c))
            assert rel_err(tau[k], oracle.from_v(ref)) <= TOL


def test_efforts_with_a_payload():
    model = load_model(DEFAULT_URDF)
    rng = np.random.default_rng(1)
    t, q, v, a = smooth_trajectory(model, 30, 2.0, rng)
    payload = Payload("tool0", 2.5, [0.01, 0.02, 0.08], np.diag([0.01, 0.01, 0.005]))
    tau = F.trajectory_efforts(make_dynamics(model), t, q, v, a, payload=payload)
    assert rel_err(tau, D.rnea(with_payload(model, payload), q, v, a)) <= 1e-12
    report = F.feasibility_report(model, t, q, v, a, payload)
    assert rel_err(report.efforts, tau) <= 1e-12
    without = F.feasibility_report(model, t, q, v, a)
    assert report.effort_ratio[1] > without.effort_ratio[1]  # the shoulder carries it


def test_a_slow_trajectory_is_feasible():
    model = load_model(DEFAULT_URDF)
    t, q, v, a = smooth_trajectory(model, 40, 4.0, np.random.default_rng(2))
    report = F.feasibility_report(model, t, q, v, a)
    assert report.feasible and report.first_violation is None
    assert np.all(report.effort_ratio < 1) and np.all(report.velocity_ratio < 1)
    assert report.effort_ratio[1] > 0.05  # the shoulder holds the arm up
    assert np.all(report.position_excess == 0)
    assert report.joint_names == model.joint_names
    assert "feasible" in report.summary()


def _default_arm_points(lift):
    model = load_model(DEFAULT_URDF)
    q = np.tile([0.0, -1.0, 1.0, -1.0, 0.5, 0.0], (len(lift), 1))
    q[:, 1] = lift
    return model, q


def test_too_fast_between_points_is_found_on_the_grid():
    """Stops at every point (q̇ = 0) with a cubic in between: the velocity peaks mid-segment,
    6·Δq/T · s(1 − s) = 3.3 rad/s > 3.15 for s ∈ (0.395, 0.605): first sample s = 0.4."""
    model, q = _default_arm_points([-1.0, -0.5, 1.7])
    t = np.array([0.0, 1.0, 2.0])
    report = F.feasibility_report(model, t, q, np.zeros_like(q))
    first = report.first_violation
    assert (first.kind, first.joint, first.point, first.between) == (
        "velocity", "shoulder_lift_joint", 2, True)
    assert first.time == pytest.approx(1.4, abs=1e-12)
    assert first.value == pytest.approx(6 * 2.2 * 0.4 * 0.6) and first.limit == 3.15
    assert report.velocity_ratio[1] == pytest.approx(3.3 / 3.15)
    # the points alone (velocity 0 there) look fine: only the spline shows the problem
    assert F.feasibility_report(model, t, q, np.zeros_like(q), samples_per_segment=1).feasible
    assert "between points 1 and 2" in str(first)


def test_too_fast_names_its_first_infeasible_point():
    """Positions only: the controller interpolates linearly, so segment 3 → 4 (2.5 rad in
    0.4 s = 6.25 rad/s) breaks the 3.15 rad/s limit from point 3 on. Then an acceleration too
    large for the shoulder's motor."""
    model, q = _default_arm_points([-1.0, -1.2, -1.4, -1.5, 1.0, 1.0])
    t = np.array([0.0, 1.0, 2.0, 3.0, 3.4, 4.4])
    report = F.feasibility_report(model, t, q)
    first = report.first_violation
    assert (first.kind, first.joint, first.point, first.between, first.time) == (
        "velocity", "shoulder_lift_joint", 3, False, 3.0)
    assert first.value == pytest.approx(6.25)
    assert not report.feasible and any("linearly" in note for note in report.notes)
    # a huge commanded acceleration at point 2 only: the shoulder's effort is over its limit
    # there, and the quintic that reaches it already swings past the limit on the way
    slow = np.array([0.0, 2.0, 4.0, 6.0, 8.0, 10.0])
    acc = np.zeros_like(q)
    acc[2, 1] = 400.0
    report = F.feasibility_report(model, slow, q, np.zeros_like(q), acc)
    assert abs(report.efforts[2, 1]) > 150.0
    efforts = [x for x in report.violations if x.kind == "effort"]
    assert efforts[0].joint == "shoulder_lift_joint"  # first; the wrist follows (coupling)
    assert efforts[0].point == 2 and efforts[0].between and 2.0 < efforts[0].time < 4.0
    assert report.effort_ratio[1] >= abs(report.efforts[2, 1]) / 150.0


def test_position_limit_violations_are_reported():
    model = load_model(DEFAULT_URDF)
    q = np.tile([0.0, -1.0, 1.0, -1.0, 0.5, 0.0], (4, 1))
    q[:, 2] = [2.8, 3.0, 3.3, 3.0]  # the elbow's limit is ±3.141593: point 2 is beyond it
    t = np.array([0.0, 1.0, 2.0, 3.0])
    report = F.feasibility_report(model, t, q)
    assert report.position_excess[2] == pytest.approx(3.3 - 3.141593)
    pos = [x for x in report.violations if x.kind == "position"]
    assert len(pos) == 1 and pos[0].joint == "elbow_joint" and pos[0].limit == 3.141593
    # the straight line from 3.0 to 3.3 crosses the limit at s = 0.47, first seen at s = 0.5
    assert (pos[0].point, pos[0].between, pos[0].time) == (2, True, 1.5)
    # cubic overshoot: every point inside the limits, the spline outside between them
    q[:, 2] = [2.9, 3.1, 3.1, 3.1]
    v = np.zeros_like(q)
    v[1, 2] = 1.5
    report = F.feasibility_report(model, t, q, v)
    pos = [x for x in report.violations if x.kind == "position"]
    assert pos and pos[0].between and pos[0].point == 2 and 1.0 < pos[0].time < 2.0


def test_single_point_and_backend_equivalence():
    model = load_model(DEFAULT_URDF)
    q = np.array([[0.0, -1.0, 1.0, -1.0, 0.5, 0.0]])
    report = F.feasibility_report(model, [0.0], q)
    assert report.feasible and report.efforts.shape == (1, 6)
    assert rel_err(report.efforts[0], D.gravity(model, q[0])) <= 1e-15
    t, q, v, a = smooth_trajectory(model, 700, 7.0, np.random.default_rng(3))
    ref = F.feasibility_report(model, t, q, v)  # 700 points: three chunks of segments
    fast = F.feasibility_report(make_dynamics(model), t, q, v)
    assert rel_err(fast.efforts, ref.efforts) <= 1e-12
    assert rel_err(fast.effort_ratio, ref.effort_ratio) <= 1e-12
    assert np.array_equal(fast.velocity_ratio, ref.velocity_ratio)


def test_bad_trajectories_are_refused():
    model = load_model(DEFAULT_URDF)
    q = np.zeros((3, 6))
    with pytest.raises(ValueError, match="point 2 .* is not after point 1"):
        F.trajectory_efforts(model, [0.0, 1.0, 1.0], q)
    bad = q.copy()
    bad[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"positions contains NaN or inf \(positions\[1, "):
        F.trajectory_efforts(model, [0.0, 1.0, 2.0], bad)
    with pytest.raises(ValueError, match=r"velocities must have shape \(3, 6\)"):
        F.trajectory_efforts(model, [0.0, 1.0, 2.0], q, np.zeros((3, 5)))
    with pytest.raises(ValueError, match=f"1 to {F.MAX_TRAJECTORY_POINTS} points"):
        F.trajectory_efforts(model, np.arange(F.MAX_TRAJECTORY_POINTS + 1.0),
                             np.zeros((F.MAX_TRAJECTORY_POINTS + 1, 6)))
    with pytest.raises(ValueError, match="samples_per_segment"):
        F.feasibility_report(model, [0.0, 1.0, 2.0], q, samples_per_segment=0)
    with pytest.raises(ValueError, match="lower samples_per_segment"):
        F.feasibility_report(model, np.arange(5000.0), np.zeros((5000, 6)),
                             samples_per_segment=F.MAX_SAMPLES_PER_SEGMENT)
    with pytest.raises(ValueError, match="Model or a dynamics backend"):
        F.trajectory_efforts("ur5", [0.0], q[:1])
    floating = load_model(kitchen_sink_urdf(), floating_base=True)
    with pytest.raises(ValueError, match="fixed-base"):
        F.trajectory_efforts(floating, [0.0], np.zeros((1, floating.nv)))


def test_given_efforts_are_checked_at_the_points():
    """Efforts from elsewhere (a planner, a measurement) replace the computed ones at the
    points; the grid between them still uses inverse dynamics."""
    model = load_model(DEFAULT_URDF)
    t, q, v, a = smooth_trajectory(model, 5, 4.0, np.random.default_rng(4))
    efforts = F.trajectory_efforts(model, t, q, v, a)
    efforts[3, 4] = -30.0  # wrist_2 limit: 28 N·m
    report = F.feasibility_report(model, t, q, v, a, efforts=efforts)
    first = report.first_violation
    assert (first.kind, first.joint, first.point, first.between, first.value) == (
        "effort", "wrist_2_joint", 3, False, -30.0)
    assert report.effort_ratio[4] == pytest.approx(30.0 / 28.0)
    with pytest.raises(ValueError, match=r"efforts must have shape \(5, 6\)"):
        F.feasibility_report(model, t, q, v, a, efforts=efforts[:, :5])


# ----------------------------------------------------------------------------- a reference


def _sampler(points, q0, v0=None):
    return TrajectorySampler([TrajectoryPoint(t, np.asarray(p, float),
                                              None if v is None else np.asarray(v, float))
                              for t, p, v in points], 0.0, np.asarray(q0, float), v0)


def test_motion_violation_names_the_first_jump_overshoot_and_position():
    model = load_model(DEFAULT_URDF)
    q0 = np.zeros(model.nv)
    far = q0.copy()
    far[0] = 1.5
    jump = F.motion_violation(model, _sampler([(0.0, far, None), (1.0, far, None)], q0))
    assert (jump.kind, jump.joint, jump.point, jump.between) == (
        "velocity", "shoulder_pan_joint", 0, True)
    assert jump.value == pytest.approx(1.5 / F.STEP_TIME)
    assert "between the start state and point 0" in str(jump) and "a jump" in str(jump)
    fast = F.motion_violation(model, _sampler([(0.05, far, None)], q0))
    assert fast.value == pytest.approx(30.0) and fast.time == pytest.approx(0.005)
    # the same way at the velocity limit is feasible; 10 % over it is not
    limit = model.velocity_limit[0]
    assert F.motion_violation(model, _sampler([(1.5 / limit, far, None)], q0)) is None
    assert F.motion_violation(model, _sampler([(1.5 / limit / 1.1, far, None)], q0)) is not None
    # a start at the measured state up to noise, due at once, is no jump
    near = q0 + 1e-4
    assert F.motion_violation(model, _sampler([(0.0, near, None), (2.0, far, None)], q0)) is None
    # past the position limit of the elbow (±π), slowly: named at the point
    beyond = q0.copy()
    beyond[2] = 4.0
    hit = F.motion_violation(model, _sampler([(5.0, beyond, None), (9.0, q0, None)], q0))
    assert (hit.kind, hit.joint, hit.point) == ("position", "elbow_joint", 0)
    assert hit.limit == pytest.approx(model.position_upper[2] + F.POSITION_MARGIN)
    # an arm measured past a limit may be sent back inside
    outside = q0.copy()
    outside[2] = model.position_upper[2] + 0.01
    assert F.motion_violation(model, _sampler([(2.0, q0, None)], outside)) is None


def test_motion_violation_checks_cubic_and_quintic_segments_between_points():
    model = load_model(DEFAULT_URDF)
    q0, rest = np.zeros(model.nv), np.zeros(model.nv)
    out = q0.copy()
    out[1] = 1.0
    # a cubic out and back in 0.4 s: its velocity peaks at 1.5 rad / 0.2 s, past 3.15 rad/s
    points = [(0.2, out, rest), (0.4, q0, rest)]
    hit = F.motion_violation(model, _sampler(points, q0, rest))
    assert (hit.kind, hit.joint, hit.point, hit.between) == (
        "velocity", "shoulder_lift_joint", 0, True)
    # the first grid sample past the limit (1.05 × 3.15), not the peak; ``time`` is the
    # instant on the trajectory: before the peak in the middle of the first segment
    assert 3.15 * 1.05 < hit.value <= 1.5 / 0.2
    assert hit.time < points[0][0] / 2
    slow = [(2.0, out, rest), (4.0, q0, rest)]
    assert F.motion_violation(model, _sampler(slow, q0, rest)) is None
    # quintic, 10,000 points: vectorized (the goal callback runs it)
    t = np.linspace(0.01, 10.0, 10_000)
    pts = [TrajectoryPoint(float(s), q0 + 0.1 * np.sin(s), rest, rest) for s in t]
    assert F.motion_violation(model, TrajectorySampler(pts, 0.0, q0, rest)) is None
