# SPDX-License-Identifier: Apache-2.0
"""Efforts along a joint trajectory, and whether the motors can follow it.

``trajectory_efforts`` fills a trajectory's efforts by batched inverse dynamics;
``feasibility_report`` checks positions, velocities and efforts against the URDF limits at the
points and between them.

The motion between the points is the spline the controller follows (``trajectory.py``,
ros2_controllers' joint trajectory controller): quintic when the points carry positions,
velocities and accelerations, cubic with positions and velocities, linear with positions
only, starting at the first point (the arm is taken to be there at ``times[0]``). Where the
points lack velocities or accelerations, the state at a point is what the controller samples
at that instant: the start of the segment that leaves it, and at the last point the hold
(velocity and acceleration 0 unless given). Between the points each segment is sampled at
``samples_per_segment`` evenly spaced instants after its start, the last one at its end (the
value just before the next point, where cubic accelerations and linear velocities jump).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rb_dynamics.dynamics import Payload, PayloadEffort
from rb_dynamics.dynamics import reference as dynamics
from rb_dynamics.model import Model, finite_array

from .trajectory import (
    MAX_TRAJECTORY_POINTS,
    STEP_TIME,
    TrajectorySampler,
    evaluate_spline,
    spline_coefficients,
)

__all__ = [
    "DEFAULT_SAMPLES_PER_SEGMENT",
    "MAX_CHECKED_STATES",
    "MAX_SAMPLES_PER_SEGMENT",
    "FeasibilityReport",
    "Violation",
    "feasibility_report",
    "feedforward_violation",
    "motion_violation",
    "trajectory_efforts",
]

DEFAULT_SAMPLES_PER_SEGMENT = 10
MAX_SAMPLES_PER_SEGMENT = 1000
MAX_CHECKED_STATES = 2_000_000  # points plus grid samples in one report
_CHUNK_SEGMENTS = 256  # segments per batched dynamics call: bounded memory on long trajectories
KINDS = ("position", "velocity", "effort")


@dataclass(frozen=True)
class Violation:
    """The first instant a joint leaves one of its limits."""

    kind: str  # "position", "velocity" or "effort"
    joint: str
    time: float
    point: int  # index of the point, or of the point the segment leads to when between
    between: bool  # True when strictly between ``point − 1`` and ``point``; False at ``point``
    # (at a point's time: its sampled state, or the segment's end just before, whichever is over)
    value: float  # position (rad or m), velocity or effort there
    limit: float  # the limit it passes (the bound crossed, for positions)
    detail: str = ""  # appended to the text: how the value is obtained

    def __str__(self) -> str:
        where = ("between the start state and point 0" if self.between and self.point == 0
                 else f"between points {self.point - 1} and {self.point}" if self.between
                 else f"at point {self.point}")
        return (f"{self.kind} limit of {self.joint} exceeded {where} (t = {self.time:.6g} s): "
                f"{self.value:.6g} against {self.limit:.6g}{self.detail}")


@dataclass
class FeasibilityReport:
    """Per joint: the largest |τ|/effort limit and |q̇|/velocity limit anywhere along the
    trajectory (0 for joints without a limit), and how far it goes past a position limit."""

    joint_names: list[str]
    effort_ratio: np.ndarray
    velocity_ratio: np.ndarray
    position_excess: np.ndarray  # rad or m beyond [lower, upper]; 0 inside
    violations: list[Violation]  # the first of each (joint, kind), in time order
    efforts: np.ndarray  # (N, nv) at the points, as checked
    samples_per_segment: int
    notes: list[str] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def first_violation(self) -> Violation | None:
        return self.violations[0] if self.violations else None

    def summary(self) -> str:
        lines = [f"{'joint':<24} {'max |τ|/limit':>14} {'max |q̇|/limit':>14} "
                 f"{'beyond position limit':>22}"]
        for k, name in enumerate(self.joint_names):
            lines.append(f"{name:<24} {self.effort_ratio[k]:>14.3f} "
                         f"{self.velocity_ratio[k]:>14.3f} {self.position_excess[k]:>22.4g}")
        lines.append("feasible" if self.feasible else f"NOT feasible: {self.first_violation}")
        return "\n".join(lines + self.notes)


# ----------------------------------------------------------------------------- inputs


def _dynamics(model_or_backend):
    """(model, rnea(q, v, a)): the reference for a Model, else the backend's batched kernel."""
    if isinstance(model_or_backend, Model):
        model = model_or_backend
        return model, lambda q, v, a: dynamics.rnea(model, q, v, a)
    model = getattr(model_or_backend, "model", None)
    if not isinstance(model, Model) or not callable(getattr(model_or_backend, "rnea", None)):
        raise ValueError("model_or_backend must be a Model or a dynamics backend (with .model "
                         f"and .rnea), got {type(model_or_backend).__name__}")
    return model, model_or_backend.rnea


def _check_model(model: Model) -> None:
    if not model.only_one_dof_joints:
        raise ValueError("trajectories are for fixed-base models whose joints are revolute or "
                         f"prismatic; this one has {sorted(set(model.joint_kinds))} joints")


def _trajectory(model: Model, times, positions, velocities, accelerations):
    """Checked (t, q, q̇ or None, q̈ or None); times strictly increasing."""
    _check_model(model)
    try:
        n = len(times)
    except TypeError:
        raise ValueError("times must be a sequence of numbers") from None
    if not 1 <= n <= MAX_TRAJECTORY_POINTS:
        raise ValueError(f"a trajectory needs 1 to {MAX_TRAJECTORY_POINTS} points, got {n}")
    t = finite_array(times, "times", (n,))
    steps = np.diff(t)
    if np.any(steps <= 0):
        k = int(np.argmax(steps <= 0)) + 1
        raise ValueError(f"times: point {k} ({t[k]:g} s) is not after point {k - 1} "
                         f"({t[k - 1]:g} s)")
    shape = (n, model.nv)
    q = finite_array(positions, "positions", shape)
    v = None if velocities is None else finite_array(velocities, "velocities", shape)
    a = None if accelerations is None else finite_array(accelerations, "accelerations", shape)
    return t, q, v, a


# ----------------------------------------------------------------------------- the spline


def _segment(t, q, v, a, k) -> np.ndarray:
    """``spline_coefficients`` of the segment from point k to point k + 1 (v, a: None when the
    points carry no velocities, accelerations)."""
    start, end = ((q[j], None if v is None else v[j], None if a is None else a[j])
                  for j in (k, k + 1))
    return spline_coefficients(t[k + 1] - t[k], *start, *end)


def _point_states(t, q, v, a):
    """(q, q̇, q̈) at each point: given values, else what the controller samples there."""
    n = len(t)
    vel = np.zeros_like(q) if v is None else v.copy()
    acc = np.zeros_like(q) if a is None else a.copy()
    if v is None or a is None:
        for k in range(n - 1):  # the last point is held: zero unless given
            _, v_k, a_k = evaluate_spline(_segment(t, q, v, a, k), 0.0)
            if v is None:
                vel[k] = v_k
            if a is None:
                acc[k] = a_k
    return q, vel, acc


def _grid_states(t, q, v, a, segments: range, samples: int):
    """Times, (q, q̇, q̈) and the segment index of the grid samples of ``segments``."""
    if not segments:
        empty = np.empty((0, q.shape[1]))
        return np.empty(0), empty, empty, empty, np.empty(0, dtype=int)
    fractions = np.arange(1, samples + 1) / samples
    times, qs, vs, accs, owner = [], [], [], [], []
    for k in segments:
        local = fractions * (t[k + 1] - t[k])
        p_k, v_k, a_k = evaluate_spline(_segment(t, q, v, a, k), local)
        times.append(t[k] + local)
        qs.append(p_k)
        vs.append(v_k)
        accs.append(a_k)
        owner.append(np.full(samples, k))
    return (np.concatenate(times), np.concatenate(qs), np.concatenate(vs),
            np.concatenate(accs), np.concatenate(owner))


def _interleave(at_points: np.ndarray, on_grid: np.ndarray, samples: int) -> np.ndarray:
    """Time order: point k, then the samples of segment k (the last at t_{k+1}, just before
    point k + 1)."""
    n_points, n_segments = len(at_points), len(on_grid) // samples
    out = np.empty((n_points + len(on_grid),) + at_points.shape[1:], dtype=at_points.dtype)
    stride = samples + 1
    out[np.arange(n_points) * stride] = at_points
    out[(np.arange(n_segments)[:, None] * stride + 1 + np.arange(samples)).ravel()] = on_grid
    return out


def _efforts(rnea, payload_effort, q, v, a) -> np.ndarray:
    tau = np.asarray(rnea(q, v, a), dtype=float)
    if payload_effort is not None:
        tau = tau + payload_effort.effort(q, v, a)
    return tau


def _payload_effort(model: Model, payload: Payload | None):
    return None if payload is None else PayloadEffort(model, payload)


def trajectory_efforts(
    model_or_backend,
    times,
    positions,
    velocities=None,
    accelerations=None,
    payload: Payload | None = None,
) -> np.ndarray:
    """Efforts (N, nv) at the trajectory's points by inverse dynamics (with the payload if
    given). Missing velocities or accelerations come from the controller's spline (module
    docstring). ``model_or_backend``: a Model (reference RNEA) or a dynamics object such as
    ``rb_dynamics.dynamics.make_dynamics(model)`` (its batched kernels). Raises ValueError
    for a model that is not fixed-base with revolute or prismatic joints, and for times that
    are not increasing or arrays that are not (N, nv) finite numbers."""
    model, rnea = _dynamics(model_or_backend)
    t, q, v, a = _trajectory(model, times, positions, velocities, accelerations)
    q, vel, acc = _point_states(t, q, v, a)
    payload_effort = _payload_effort(model, payload)
    chunk = _CHUNK_SEGMENTS * DEFAULT_SAMPLES_PER_SEGMENT
    return np.concatenate([
        _efforts(rnea, payload_effort, q[s:s + chunk], vel[s:s + chunk], acc[s:s + chunk])
        for s in range(0, len(t), chunk)
    ])


# ----------------------------------------------------------------------------- the report


class _Tracker:
    """Running maxima and the first violation of each (joint, kind) over time-ordered states."""

    def __init__(self, model: Model):
        self.model = model
        self.names = list(model.joint_names)  # 1-DoF joints only: joint k is coordinate k
        self.effort_limit = np.where(model.effort_limit > 0, model.effort_limit, np.inf)
        self.velocity_limit = np.where(model.velocity_limit > 0, model.velocity_limit, np.inf)
        self.effort_ratio = np.zeros(model.nv)
        self.velocity_ratio = np.zeros(model.nv)
        self.position_excess = np.zeros(model.nv)
        self.first: dict[tuple[str, int], Violation] = {}

    def add(self, times, points, between, q, v, tau) -> None:
        lower, upper = self.model.position_lower, self.model.position_upper
        excess = np.maximum(lower - q, q - upper)
        effort = np.abs(tau) / self.effort_limit
        velocity = np.abs(v) / self.velocity_limit
        self.position_excess = np.maximum(self.position_excess, np.maximum(excess, 0).max(0))
        self.effort_ratio = np.maximum(self.effort_ratio, effort.max(0))
        self.velocity_ratio = np.maximum(self.velocity_ratio, velocity.max(0))
        checks = {
            "position": (excess > 1e-9, q, np.where(q < lower, lower, upper)),
            "velocity": (velocity > 1.0, v, np.broadcast_to(self.velocity_limit, v.shape)),
            "effort": (effort > 1.0, tau, np.broadcast_to(self.effort_limit, tau.shape)),
        }
        for kind, (over, value, limit) in checks.items():
            for j in np.flatnonzero(over.any(axis=0)):
                if (kind, j) in self.first:
                    continue
                s = int(np.argmax(over[:, j]))  # the first state in time order
                self.first[(kind, j)] = Violation(
                    kind, self.names[j], float(times[s]), int(points[s]), bool(between[s]),
                    float(value[s, j]), float(limit[s, j]),
                )

    def violations(self) -> list[Violation]:
        return sorted(self.first.values(),
                      key=lambda x: (x.time, x.point, not x.between, KINDS.index(x.kind)))


def _notes(model: Model, v, a) -> list[str]:
    notes = []
    if v is None:
        notes.append("positions only: the controller interpolates linearly, so velocities "
                     "jump at the points and the accelerations there (unbounded) are not in "
                     "the efforts")
    elif a is None:
        notes.append("no accelerations: cubic spline, whose accelerations jump at the points "
                     "(both sides are checked)")
    for kind, limits in (("effort", model.effort_limit), ("velocity", model.velocity_limit)):
        free = [n for n, vi in zip(model.joint_names, model.joint_v_index)
                if not (0 < limits[vi] < math.inf)]
        if free:
            notes.append(f"no {kind} limit in the URDF for {free}: not checked")
    return notes


def _check_along(tracker: _Tracker, rnea, payload_effort, trajectory, at_points,
                 samples: int) -> None:
    """Feed the tracker the points and the grid, chunk by chunk of segments, in time order."""
    t, q, v, a = trajectory
    q_pts, v_pts, tau_pts = at_points
    n = len(t)
    for start in range(0, n, _CHUNK_SEGMENTS):
        points = range(start, min(start + _CHUNK_SEGMENTS, n))
        tg, qg, vg, ag, owner = _grid_states(t, q, v, a, range(start, min(points.stop, n - 1)),
                                             samples)
        tau_g = _efforts(rnea, payload_effort, qg, vg, ag) if len(tg) else qg
        pts = slice(points.start, points.stop)
        # a segment's last sample is at the next point's time: it counts as at that point
        inside = np.tile(np.arange(1, samples + 1) < samples, len(tg) // samples)

        def ordered(at_point, on_grid):
            return _interleave(at_point, on_grid, samples)

        tracker.add(
            ordered(t[pts], tg),
            ordered(np.asarray(points), owner + 1),
            ordered(np.zeros(len(points), bool), inside),
            ordered(q_pts[pts], qg),
            ordered(v_pts[pts], vg),
            ordered(tau_pts[pts], tau_g),
        )


def feasibility_report(
    model_or_backend,
    times,
    positions,
    velocities=None,
    accelerations=None,
    payload: Payload | None = None,
    *,
    efforts=None,
    samples_per_segment: int = DEFAULT_SAMPLES_PER_SEGMENT,
) -> FeasibilityReport:
    """Positions, velocities and efforts against the URDF limits, at the points and on
    ``samples_per_segment`` instants of every segment (module docstring). ``efforts`` (N, nv),
    if given, replace the computed efforts at the points (e.g. from a planner)."""
    model, rnea = _dynamics(model_or_backend)
    t, q, v, a = _trajectory(model, times, positions, velocities, accelerations)
    if not (isinstance(samples_per_segment, int | np.integer)
            and 1 <= samples_per_segment <= MAX_SAMPLES_PER_SEGMENT):
        raise ValueError(f"samples_per_segment must be an integer in [1, "
                         f"{MAX_SAMPLES_PER_SEGMENT}], got {samples_per_segment!r}")
    n = len(t)
    if n + (n - 1) * samples_per_segment > MAX_CHECKED_STATES:
        raise ValueError(f"{n} points × {samples_per_segment} samples per segment exceed "
                         f"{MAX_CHECKED_STATES} checked states; lower samples_per_segment")
    q_pts, v_pts, a_pts = _point_states(t, q, v, a)
    payload_effort = _payload_effort(model, payload)
    tau_pts = (finite_array(efforts, "efforts", q.shape) if efforts is not None
               else trajectory_efforts(model_or_backend, t, q_pts, v_pts, a_pts, payload))
    tracker = _Tracker(model)
    _check_along(tracker, rnea, payload_effort, (t, q, v, a), (q_pts, v_pts, tau_pts),
                 samples_per_segment)
    return FeasibilityReport(
        joint_names=tracker.names,
        effort_ratio=tracker.effort_ratio,
        velocity_ratio=tracker.velocity_ratio,
        position_excess=tracker.position_excess,
        violations=tracker.violations(),
        efforts=tau_pts,
        samples_per_segment=int(samples_per_segment),
        notes=_notes(model, v, a),
    )


# ----------------------------------------------------------------------------- a reference


POSITION_MARGIN = 1e-3  # rad or m a reference may pass a position limit by (spline overshoot)
VELOCITY_MARGIN = 0.05  # fraction a reference may pass a velocity limit by


def motion_violation(model: Model, sampler: TrajectorySampler,
                     samples_per_segment: int = DEFAULT_SAMPLES_PER_SEGMENT
                     ) -> Violation | None:
    """The first instant the reference ``sampler`` (over ``model``'s coordinates) leaves the
    URDF position or velocity limits, None if it does not: the points (positions; velocities
    where given) and ``samples_per_segment`` instants of every segment of the spline the
    controller follows, including the first one, from the start state (row 0) to point 0.

    Joints without a limit (continuous joints' positions, a velocity limit of 0 or none) are
    not checked. The limits are widened by ``POSITION_MARGIN`` and ``VELOCITY_MARGIN`` (a
    planner's trajectory at its limits overshoots them a little between the points), and on
    the first segment to include the start state itself (an arm measured a little past a
    limit can still be sent back). A point 0 due at the start is a jump, infeasible when it
    is further from the start state than the velocity limit covers in ``STEP_TIME``.
    Point and segment indices in the Violation are the goal's (point 0 its first point)."""
    _check_model(model)
    t = np.asarray(sampler.times)
    q, v = sampler.positions, sampler.velocities
    lower = model.position_lower - POSITION_MARGIN
    upper = model.position_upper + POSITION_MARGIN
    v_limit = np.where(model.velocity_limit > 0, model.velocity_limit, np.inf) * (
        1.0 + VELOCITY_MARGIN)
    names = list(model.joint_names)
    jump = t[1] <= t[0]
    if jump:
        step = np.abs(q[1] - q[0]) / STEP_TIME
        over = step > v_limit
        if over.any():
            j = int(np.argmax(over))
            return Violation("velocity", names[j], 0.0, 0, True, float(step[j]),
                             float(v_limit[j]), f" (point 0 is due at the start, "
                             f"{abs(q[1, j] - q[0, j]):.6g} from the start state: a jump, "
                             f"as if made in {STEP_TIME} s)")
    # states in time order: segment k's samples (its last at point k's time), then point k
    samples = samples_per_segment
    grid_q = np.repeat(q[1:, None, :], samples, axis=1)  # (points, samples, n)
    grid_v = np.zeros_like(grid_q)
    fractions = np.arange(1, samples + 1) / samples
    for kind in _segment_kinds(sampler):
        k = kind[(kind > 1) | ~jump]  # rows a segment of positive duration leads to
        if not len(k):
            continue
        durations = t[k] - t[k - 1]
        c = spline_coefficients(durations, *_rows(sampler, k - 1), *_rows(sampler, k))
        local = durations[:, None] * fractions  # (m, samples)
        # the segments' coefficients (m, 1, 6, n) broadcast against their times (m, samples)
        grid_q[k - 1], grid_v[k - 1], _ = evaluate_spline(np.moveaxis(c, 0, 1)[:, None], local)
    row_v = np.where(sampler.has_velocity[1:, None], v[1:], 0.0)
    states_q = np.concatenate([grid_q, q[1:, None, :]], axis=1).reshape(-1, q.shape[1])
    states_v = np.concatenate([grid_v, row_v[:, None, :]], axis=1).reshape(-1, q.shape[1])
    # the first segment may run from the start state itself
    first = slice(0, samples)
    lo = np.broadcast_to(lower, states_q.shape).copy()
    hi = np.broadcast_to(upper, states_q.shape).copy()
    vl = np.broadcast_to(v_limit, states_v.shape).copy()
    lo[first], hi[first] = np.minimum(lower, q[0]), np.maximum(upper, q[0])
    vl[first] = np.maximum(v_limit, np.abs(v[0]) * (1.0 + VELOCITY_MARGIN))
    position_over = (states_q < lo) | (states_q > hi)
    velocity_over = np.abs(states_v) > vl
    bad = position_over | velocity_over
    flat = bad.any(axis=1)
    if not flat.any():
        return None
    s = int(np.argmax(flat))
    point, sample = divmod(s, samples + 1)
    at_point = sample >= samples - 1  # the segment's end is at the point's time
    time = t[point] + (t[point + 1] - t[point]) * min(sample + 1, samples) / samples
    j = int(np.argmax(bad[s]))
    if position_over[s, j]:
        value = float(states_q[s, j])
        limit = float(lo[s, j] if value < lo[s, j] else hi[s, j])
        return Violation("position", names[j], float(time), point, not at_point, value, limit)
    return Violation("velocity", names[j], float(time), point, not at_point,
                     float(states_v[s, j]), float(vl[s, j]))


def feedforward_violation(model: Model, sampler: TrajectorySampler, index: np.ndarray,
                          effort_scale: float = 1.0) -> Violation | None:
    """The first point of the reference ``sampler`` (over ``model``'s coordinates) whose
    feed-forward effort on a coordinate of ``index`` (the commanded ones) is beyond
    ``effort_scale`` × the URDF effort limit, None if none is. The feed-forward is linear
    between the points, so the points bound it; the law's effort is clamped to that limit, so
    a larger feed-forward can only drive the joint at its limit (joints without a limit, an
    infinite one, are not checked). Point indices are the goal's (point 0 its first point)."""
    _check_model(model)
    if not sampler.feeds_forward:  # no point carries efforts: nothing to read
        return None
    limit = model.effort_limit[index] * effort_scale
    over = sampler.has_effort[1:, None] & (np.abs(sampler.efforts[1:, index]) > limit)
    if not over.any():
        return None
    point, j = np.unravel_index(int(np.argmax(over)), over.shape)
    return Violation("effort", model.joint_names[int(index[j])], float(sampler.times[point + 1]),
                     int(point), False, float(sampler.efforts[point + 1, index[j]]),
                     float(limit[j]), f" (the point's feed-forward effort; effort_scale "
                     f"{effort_scale:g} × the URDF effort limit)")


def _segment_kinds(sampler: TrajectorySampler) -> list[np.ndarray]:
    """Rows k ≥ 1 grouped by the spline of the segment from row k − 1 to row k."""
    velocity = sampler.has_velocity[:-1] & sampler.has_velocity[1:]
    acceleration = velocity & sampler.has_acceleration[:-1] & sampler.has_acceleration[1:]
    rows = np.arange(1, len(sampler.times))
    return [rows[~velocity], rows[velocity & ~acceleration], rows[acceleration]]


def _rows(sampler: TrajectorySampler, k: np.ndarray):
    """(p, ṗ or None, p̈ or None) of rows ``k`` that share a spline kind."""
    with_v = bool(sampler.has_velocity[k].all())
    with_a = with_v and bool(sampler.has_acceleration[k].all())
    return (sampler.positions[k], sampler.velocities[k] if with_v else None,
            sampler.accelerations[k] if with_a else None)
