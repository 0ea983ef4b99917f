# SPDX-License-Identifier: Apache-2.0
"""Excitation trajectories: the motion that makes every base parameter show in the efforts.

``plan_excitation`` optimises a ``FourierTrajectory`` per joint [Swevers et al. 1997] to
minimise the condition number of the column-scaled base regressor — inertial, friction and
armature columns alike — sampled over one period, within the joints' position, velocity,
acceleration and effort limits less a margin. Each trajectory starts and ends a period at rest
(Σ_l a_l = 0, Σ_l l·b_l = 0), so it can be repeated and entered from a standstill.

Limits are kept by construction: each candidate's excursion per joint is scaled to the largest
that keeps its positions, velocities and accelerations inside the bounds; the effort bound
(efforts predicted by the URDF's model, its friction included) is a penalty during the
search, and the final trajectory is scaled down until it holds on a fine grid.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .base_parameters import BaseParameters
from .fourier import FourierTrajectory

__all__ = ["DEFAULT_EVALUATIONS", "MAX_HARMONICS", "ExcitationPlan", "excitation_limits",
           "plan_excitation"]

CONDITION_SAMPLES = 60  # states per period in the search's regressor (×joints rows)
MAX_HARMONICS = CONDITION_SAMPLES // 2 - 1  # the highest harmonic those samples see
# the search's length in evaluations of the objective (~5 ms each for a 7-joint arm)
DEFAULT_EVALUATIONS = 6000
CHECK_SAMPLES = 2000  # states per period where the final limits are checked


@dataclass(frozen=True, eq=False)
class ExcitationLimits:
    """The bounds a plan keeps, per identified joint (margin applied): positions (rad or m),
    speed, acceleration, effort."""

    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    effort: np.ndarray


def excitation_limits(base: BaseParameters, margin: float,
                      acceleration: float | np.ndarray | None = None) -> ExcitationLimits:
    """The URDF's limits of the identified joints less ``margin`` (a fraction): positions
    shrunk by margin × range at each end (±π for unlimited joints), velocity and effort by
    (1 − margin). ``acceleration`` (rad/s², per joint or one value) defaults to twice the
    velocity limit per second. ValueError naming a joint without a velocity limit."""
    layout = base.layout
    model = layout.model
    if not 0 <= margin < 0.5:
        raise ValueError(f"margin must be in [0, 0.5), got {margin}")
    lo = model.position_lower[layout.q_index].copy()
    hi = model.position_upper[layout.q_index].copy()
    lo[~np.isfinite(lo)], hi[~np.isfinite(hi)] = -np.pi, np.pi
    span = hi - lo
    velocity = model.velocity_limit[layout.v_index]
    effort = model.effort_limit[layout.v_index]
    for name, v, e in zip(layout.joints, velocity, effort):
        if not (np.isfinite(v) and v > 0 and np.isfinite(e) and e > 0):
            raise ValueError(f"joint {name!r} has no velocity or effort limit in the URDF: an "
                             "excitation needs both (<limit velocity= effort=>)")
    acc = 2.0 * velocity if acceleration is None else np.broadcast_to(
        np.asarray(acceleration, dtype=float), velocity.shape)
    return ExcitationLimits(lo + margin * span, hi - margin * span, (1 - margin) * velocity,
                            (1 - margin) * acc, (1 - margin) * effort)


@dataclass(frozen=True, eq=False)
class ExcitationPlan:
    """An optimised excitation: the trajectory, how it does and what it asks of the arm."""

    trajectory: FourierTrajectory
    condition: float  # of the column-scaled base regressor over one period
    peak_position: np.ndarray  # (n, 2) min and max, rad or m
    peak_velocity: np.ndarray
    peak_acceleration: np.ndarray
    peak_effort: np.ndarray  # predicted with the URDF's model
    limits: ExcitationLimits
    evaluations: int
    seconds: float
    cut_by_time: bool = False  # the time budget ended the search before its evaluations


class _Search:
    """The objective of the search over free coefficients x (per joint: a_1..a_{H−1},
    b_1..b_{H−1}, q0; a_H and b_H close the rest conditions)."""

    def __init__(self, base: BaseParameters, limits: ExcitationLimits, period: float,
                 harmonics: int):
        self.base, self.limits = base, limits
        self.period, self.H = period, harmonics
        self.layout = base.layout
        self.theta = self.layout.parameters()
        self.t = np.linspace(0.0, period, CONDITION_SAMPLES, endpoint=False)
        self.t_check = np.linspace(0.0, period, CHECK_SAMPLES, endpoint=False)
        self.evaluations = 0

    def trajectory(self, x: np.ndarray) -> FourierTrajectory:
        n, H = self.layout.n_joints, self.H
        x = x.reshape(n, 2 * H - 1)
        a = np.empty((n, H))
        b = np.empty((n, H))
        a[:, :-1], b[:, :-1] = x[:, :H - 1], x[:, H - 1:2 * H - 2]
        a[:, -1] = -a[:, :-1].sum(axis=1)
        b[:, -1] = -(b[:, :-1] * np.arange(1, H)).sum(axis=1) / H
        lim = self.limits
        q0 = np.clip(x[:, -1], lim.lower, lim.upper)
        traj = FourierTrajectory(self.layout.joints, self.period, q0, a, b)
        return traj.scaled(self._kinematic_scale(traj))

    def _kinematic_scale(self, traj: FourierTrajectory) -> np.ndarray:
        """Per joint, the largest excursion scale that keeps q, q̇, q̈ within the limits."""
        q, qd, qdd = traj.evaluate(self.t_check[::4])
        d = q - traj.q0
        lim = self.limits
        tiny = 1e-12
        up = (lim.upper - traj.q0) / np.maximum(d.max(axis=0), tiny)
        down = (traj.q0 - lim.lower) / np.maximum(-d.min(axis=0), tiny)
        vel = lim.velocity / np.maximum(np.abs(qd).max(axis=0), tiny)
        acc = lim.acceleration / np.maximum(np.abs(qdd).max(axis=0), tiny)
        return 0.98 * np.minimum.reduce([up, down, vel, acc])

    def regressor(self, traj: FourierTrajectory, t: np.ndarray) -> np.ndarray:
        return self.layout.regressor(*traj.evaluate(t))

    def cost(self, x: np.ndarray) -> float:
        self.evaluations += 1
        traj = self.trajectory(x)
        Y = self.regressor(traj, self.t)
        tau = Y @ self.theta
        excess = np.abs(tau).max(axis=0) / self.limits.effort - 1.0
        penalty = 10.0 * float(np.sum(np.maximum(excess, 0.0) ** 2))
        condition = column_scaled_condition(self.base, Y)  # inf: a column never excited
        return (math.log(condition) if math.isfinite(condition) else 700.0) + penalty


def column_scaled_condition(base: BaseParameters, Y: np.ndarray) -> float:
    """Condition number of the base regressor built from Y (N, n, P), columns at unit norm."""
    W = base.columns(Y).reshape(-1, base.count)
    norms = np.linalg.norm(W, axis=0)
    if np.any(norms == 0):
        return math.inf
    s = np.linalg.svd(W / norms, compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else math.inf


def plan_excitation(base: BaseParameters, *, period: float = 10.0, harmonics: int = 5,
                    margin: float = 0.1, acceleration: float | np.ndarray | None = None,
                    seed: int = 0, starts: int = 4, evaluations: int = DEFAULT_EVALUATIONS,
                    time_budget: float | None = None,
                    progress: Callable[[str], None] | None = None) -> ExcitationPlan:
    """The excitation of ``base``'s identified joints: one period of ``period`` s with
    ``harmonics`` harmonics (2 to ``MAX_HARMONICS``), optimised from ``starts`` random starts
    within ``evaluations`` evaluations of the objective: the same plan for the same seed on
    any machine. ``time_budget`` (s, None: none) bounds the search's wall time as well; a plan
    it cut short says so (``ExcitationPlan.cut_by_time``) and depends on the machine's speed.
    ``progress`` receives one line per improvement. ValueError for arguments out of range or
    limits it cannot plan within (``excitation_limits``)."""
    if not (period > 0 and 2 <= harmonics <= MAX_HARMONICS):
        raise ValueError(f"period must be > 0 and harmonics in [2, {MAX_HARMONICS}] (the search "
                         f"samples {CONDITION_SAMPLES} states per period), got {period}, "
                         f"{harmonics}")
    if not (starts >= 1 and evaluations >= 8 * starts):
        raise ValueError(f"starts must be ≥ 1 and evaluations ≥ 8 × starts, got {starts}, "
                         f"{evaluations}")
    import scipy.optimize  # here, not above: the nodes start without it

    limits = excitation_limits(base, margin, acceleration)
    search = _Search(base, limits, period, harmonics)
    rng = np.random.default_rng(seed)
    n = base.layout.n_joints
    start_time = time.monotonic()
    deadline = math.inf if time_budget is None else start_time + time_budget
    best_x, best_cost = None, math.inf

    def note(x, cost):
        nonlocal best_x, best_cost
        if cost < best_cost:
            best_x, best_cost = np.array(x), cost
            if progress:
                progress(f"plan: condition {math.exp(min(cost, 700)):.1f} after "
                         f"{search.evaluations} evaluations")

    # random starts: amplitudes decreasing with the harmonic, centred in the range
    candidates = []
    for _ in range(starts * 8):
        x = rng.standard_normal((n, 2 * harmonics - 1)) / np.r_[
            np.arange(1, harmonics), np.arange(1, harmonics), 1.0]
        x[:, -1] = 0.5 * (limits.lower + limits.upper) + rng.uniform(-0.2, 0.2, n) * (
            limits.upper - limits.lower)
        candidates.append((search.cost(x.ravel()), x.ravel()))
        if time.monotonic() > deadline:
            break
    candidates.sort(key=lambda c: c[0])
    for cost, x in candidates[:starts]:
        note(x, cost)
    # each start's share of the evaluations left; an iteration that passes it ends that start
    share = (evaluations - search.evaluations) // starts
    for _, x0 in candidates[:starts]:
        stop = _stopper(note, search, search.evaluations + share, deadline)
        result = scipy.optimize.minimize(search.cost, x0, method="L-BFGS-B", callback=stop,
                                         options={"maxiter": 200, "eps": 1e-4})
        note(result.x, result.fun)
        if time.monotonic() > deadline:
            break
    cut = time.monotonic() > deadline
    if cut and progress:
        progress(f"plan: the time budget ({time_budget:g} s) cut the search after "
                 f"{search.evaluations} of {evaluations} evaluations: this plan depends on the "
                 "machine's speed")
    return _finish(search, best_x, time.monotonic() - start_time, cut)


def _stopper(note, search: _Search, evaluations: int, deadline: float):
    """An optimiser callback that records each iterate and stops the search once ``search``
    has made ``evaluations`` evaluations, or at ``deadline`` (monotonic)."""

    def stop(intermediate_result):  # scipy recognises the new-style callback by this name
        note(intermediate_result.x, intermediate_result.fun)
        if search.evaluations >= evaluations or time.monotonic() > deadline:
            raise StopIteration

    return stop


def _finish(search: _Search, x: np.ndarray, seconds: float, cut: bool) -> ExcitationPlan:
    """The best trajectory, scaled down until its URDF efforts keep the limits on a fine grid."""
    traj = search.trajectory(x)
    theta, lim = search.theta, search.limits
    for _ in range(60):
        Y = search.regressor(traj, search.t_check[::2])
        tau = Y @ theta
        ratio = np.abs(tau).max(axis=0) / lim.effort
        if np.all(ratio <= 1.0):
            break
        traj = traj.scaled(np.where(ratio > 1.0, 0.97, 1.0))
    q, qd, qdd = traj.evaluate(search.t_check)
    Y = search.regressor(traj, search.t_check[::2])
    return ExcitationPlan(
        trajectory=traj, condition=column_scaled_condition(search.base, Y),
        peak_position=np.stack([q.min(axis=0), q.max(axis=0)], axis=1),
        peak_velocity=np.abs(qd).max(axis=0), peak_acceleration=np.abs(qdd).max(axis=0),
        peak_effort=np.abs(Y @ theta).max(axis=0), limits=lim,
        evaluations=search.evaluations, seconds=seconds, cut_by_time=cut)
