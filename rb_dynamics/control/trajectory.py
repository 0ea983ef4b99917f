# SPDX-License-Identifier: Apache-2.0
"""Joint trajectories, free of ROS: the points, the spline between two of them, the sampler.

The spline is ros2_controllers' joint trajectory controller's: quintic between points with
positions, velocities and accelerations, cubic with positions and velocities, linear with
positions only. ``spline_coefficients`` and ``evaluate_spline`` are its one definition, used by
``TrajectorySampler`` (the controller's reference) and by ``feasibility`` (the check of a
trajectory against the limits). Times in seconds; positions, velocities, accelerations in the
joints' units (rad or m, per s, per s²).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rb_dynamics.model import MAX_MAGNITUDE, finite_vector

__all__ = [
    "MAX_TRAJECTORY_POINTS",
    "STEP_TIME",
    "TrajectoryError",
    "TrajectoryPoint",
    "TrajectorySampler",
    "check_point_field",
    "evaluate_spline",
    "shortest_way_start",
    "spline_coefficients",
]

# A reference this long is refused: reading, converting and validating it must not hold a
# node for long
MAX_TRAJECTORY_POINTS = 10_000


class TrajectoryError(ValueError):
    """A trajectory that cannot be followed; the message says which field is wrong."""


@dataclass(frozen=True)
class TrajectoryPoint:
    """One point of a joint trajectory (fields left None are not given)."""

    time: float  # seconds from the trajectory start
    positions: np.ndarray
    velocities: np.ndarray | None = None
    accelerations: np.ndarray | None = None
    efforts: np.ndarray | None = None  # feed-forward, N·m or N, added to the law's effort


def check_point_field(values, count: int, field: str, point: int) -> np.ndarray:
    """Field ``field`` (``positions``, ``velocities``, ``accelerations``, ``efforts``) of point
    ``point`` as a flat float array of ``count`` finite values within ±``MAX_MAGNITUDE``;
    else ``TrajectoryError`` naming both. The bound keeps the spline and the law finite:
    a quintic over a 1 ns segment between values of 1e9 stays far below overflow, while 1e308
    passes a finiteness check and overflows in the first difference."""
    array = finite_vector(values, f"point {point}: {field}", count, TrajectoryError)
    large = np.abs(array) > MAX_MAGNITUDE
    if large.any():
        k = int(np.argmax(large))
        raise TrajectoryError(f"point {point}: {field}[{k}] = {array[k]:g} is implausibly "
                              f"large (limit {MAX_MAGNITUDE:g})")
    return array


# ----------------------------------------------------------------------------- the spline


def spline_coefficients(duration: float, p0, v0, a0, p1, v1, a1) -> np.ndarray:
    """Rows c0..c5, shape (6, n), of the segment p(t) = Σ c_k t^k, t ∈ [0, ``duration``].

    It joins (p0, v0, a0) at t = 0 to (p1, v1, a1) at ``duration`` (> 0 s): linear when a
    velocity is None, cubic Hermite when an acceleration is None, quintic otherwise. With
    ``duration`` an array of m durations and the values (m, n), the rows are (6, m, n): m
    segments of the same kind at once.
    """
    if not np.all(np.asarray(duration) > 0):
        raise ValueError(f"a spline segment needs a positive duration, got {duration}")
    # m segments at once: durations (m,), values (m, n); coefficients (6, m, n)
    T = np.asarray(duration, dtype=float)[..., None] if np.ndim(duration) else duration
    c = np.zeros((6, *np.shape(p0)))
    if v0 is None or v1 is None:  # linear
        c[0], c[1] = p0, (p1 - p0) / T
    elif a0 is None or a1 is None:  # cubic Hermite
        c[0], c[1] = p0, v0
        c[2] = (3 * (p1 - p0) - T * (2 * v0 + v1)) / T**2
        c[3] = (2 * (p0 - p1) + T * (v0 + v1)) / T**3
    else:  # quintic, boundary p, v, a at both ends
        T2, T3, T4, T5 = T**2, T**3, T**4, T**5
        c[0], c[1], c[2] = p0, v0, 0.5 * a0
        c[3] = (20 * (p1 - p0) - (8 * v1 + 12 * v0) * T - (3 * a0 - a1) * T2) / (2 * T3)
        c[4] = (30 * (p0 - p1) + (14 * v1 + 16 * v0) * T + (3 * a0 - 2 * a1) * T2) / (2 * T4)
        c[5] = (12 * (p1 - p0) - 6 * (v1 + v0) * T - (a0 - a1) * T2) / (2 * T5)
    return c


# d^i/dt^i t^k = k!/(k−i)! t^(k−i) for the derivative orders i = 0, 1, 2 and powers k = 0..5
_POWERS = np.maximum(np.arange(6) - np.arange(3)[:, None], 0)
_FACTORS = np.array([[1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
                     [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                     [0.0, 0.0, 2.0, 6.0, 12.0, 20.0]])


def evaluate_spline(coefficients: np.ndarray, t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p, ṗ, p̈) at ``t`` seconds into the segment of ``coefficients`` (``spline_coefficients``).

    ``t`` a number: three arrays (n,); ``t`` an array of m times: three arrays (m, n).
    ``coefficients`` of shape (..., 6, n) broadcast against ``t``'s shape: many segments, each
    at its own times.
    """
    basis = _FACTORS * np.power.outer(np.asarray(t, dtype=float), _POWERS)  # (..., 3, 6)
    state = basis @ coefficients  # (..., 3, n)
    return state[..., 0, :], state[..., 1, :], state[..., 2, :]


# ----------------------------------------------------------------------------- the sampler


def shortest_way_start(start: np.ndarray, first: np.ndarray, wraparound: np.ndarray
                       ) -> np.ndarray:
    """``start`` with its ``wraparound`` entries (angles, rad) moved by multiples of 2π to
    within π of ``first``: first − d with d the shortest angular distance from start to first
    (``angles::shortest_angular_distance``, in (−π, π]), and at ±π (within 1e-9) the move
    toward the larger angle (ros2_controllers' ``wraparound_joint``)."""
    remainder = np.fmod(first - start + np.pi, 2.0 * np.pi)
    distance = np.where(remainder <= 0.0, remainder + np.pi, remainder - np.pi)
    half_turn = np.abs(np.abs(distance) - np.pi) < 1e-9
    distance = np.where(half_turn, np.where(first > start, np.abs(distance), -np.abs(distance)),
                        distance)
    return np.where(wraparound, first - distance, start)


# the time (s) a step of the reference away from the measured state is given: a point 0 due at
# the start is feasible when the velocity limit covers it in this time (feasibility), and after
# a gap in the joint states the reference rejoins its motion at the first point due this long
# after (TrajectorySampler.restarted). At the default gains (kp 100, kd 20: critically damped
# at ω = 10 rad/s) a step Δq peaks at ω e⁻¹ Δq ≈ Δq / 0.27 s, so such a step keeps the arm
# inside its velocity limit
STEP_TIME = 0.25


class TrajectorySampler:
    """A joint trajectory anchored at ``start_time`` and the state it started from.

    Points are held as arrays and the segment at a time is found by bisection, so a sample
    costs the same for 2 points or 20,000 (the control loop samples once per state); the
    coefficients of the segment last sampled are kept for the next sample.

    ``wraparound`` (a mask over the coordinates, None: none) marks angles that wrap (continuous
    joints): the start position of each is shifted by a multiple of 2π so that the move to
    the first point takes the short way (ros2_controllers' ``wraparound_joint``).

    Efforts are the feed-forward ``sample_effort`` gives: linear between two rows that both
    carry efforts, zero within a segment where either does not, the last point's after the
    end (ros2_controllers' ``interpolate_between_points``). The start row carries
    ``start_efforts`` when given (the previous reference's), else none. Raises
    ``TrajectoryError`` for no points, more than ``MAX_TRAJECTORY_POINTS``, times that are
    negative, not finite or not increasing, and values that are not ``n`` finite numbers.
    """

    def __init__(
        self,
        points: Sequence[TrajectoryPoint],
        start_time: float,
        start_positions: np.ndarray,
        start_velocities: np.ndarray | None = None,
        wraparound: np.ndarray | None = None,
        start_efforts: np.ndarray | None = None,
    ):
        if not points:
            raise TrajectoryError("trajectory has no points")
        if len(points) > MAX_TRAJECTORY_POINTS:
            raise TrajectoryError(f"trajectory has {len(points)} points; at most "
                                  f"{MAX_TRAJECTORY_POINTS}")
        n = len(start_positions)
        times = [float(point.time) for point in points]
        for k, t in enumerate(times):
            if not math.isfinite(t) or t < 0:
                raise TrajectoryError(f"point {k}: time_from_start {t} must be finite and ≥ 0")
            if k and t <= times[k - 1]:
                raise TrajectoryError(f"point {k}: time_from_start {t} is not after "
                                      f"point {k - 1}'s {times[k - 1]}")
        self.times = [0.0, *times]  # row 0 is the start state
        self.positions = np.empty((len(points) + 1, n))
        self.velocities = np.zeros((len(points) + 1, n))
        self.accelerations = np.zeros((len(points) + 1, n))
        # which rows carry velocities / accelerations: they choose each segment's spline
        self.has_velocity = np.zeros(len(points) + 1, dtype=bool)
        self.has_acceleration = np.zeros(len(points) + 1, dtype=bool)
        self.efforts = np.zeros((len(points) + 1, n))
        self.has_effort = np.zeros(len(points) + 1, dtype=bool)
        for k, point in enumerate(points, start=1):
            self.positions[k] = check_point_field(point.positions, n, "positions", k - 1)
            if point.velocities is not None:
                self.velocities[k] = check_point_field(point.velocities, n, "velocities", k - 1)
                self.has_velocity[k] = True
            if point.accelerations is not None:
                self.accelerations[k] = check_point_field(point.accelerations, n,
                                                          "accelerations", k - 1)
                self.has_acceleration[k] = True
            if point.efforts is not None:
                self.efforts[k] = check_point_field(point.efforts, n, "efforts", k - 1)
                self.has_effort[k] = True
        if start_efforts is not None:
            self.efforts[0], self.has_effort[0] = start_efforts, True
        # no point carries efforts: sample_effort answers None at once
        self.feeds_forward = bool(self.has_effort[1:].any())
        self.start_time = float(start_time)
        # the spline toward the first point starts from the measured state with the same
        # derivatives the first point carries (ros2_controllers does the same)
        self.positions[0] = start_positions
        if wraparound is not None and len(points):
            self.positions[0] = shortest_way_start(self.positions[0], self.positions[1],
                                                   wraparound)
        if start_velocities is not None:
            self.velocities[0] = start_velocities
        self.has_velocity[0], self.has_acceleration[0] = self.has_velocity[1], \
            self.has_acceleration[1]
        self._segment_coefficients: tuple[int, np.ndarray | None] = (-1, None)

    @property
    def end_time(self) -> float:
        """When the last point is reached (s, the clock of ``start_time``)."""
        return self.start_time + self.times[-1]

    def row(self, k: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(p, ṗ or None, p̈ or None) of row ``k``: 0 the start state, k ≥ 1 point k − 1."""
        return (self.positions[k], self.velocities[k] if self.has_velocity[k] else None,
                self.accelerations[k] if self.has_acceleration[k] else None)

    def segment(self, k: int) -> np.ndarray:
        """``spline_coefficients`` of the segment from row k − 1 to row k (k ≥ 1)."""
        return spline_coefficients(self.times[k] - self.times[k - 1], *self.row(k - 1),
                                   *self.row(k))

    def sample(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """(q_d, q̇_d, q̈_d, finished) at time ``now``; after the end the last point is held."""
        # before the start (a state stamped before the trajectory arrived) is the start
        t = max(now - self.start_time, 0.0)
        if t >= self.times[-1]:
            hold = np.zeros(self.positions.shape[1])
            return self.positions[-1].copy(), hold, hold.copy(), True
        k = bisect.bisect_right(self.times, t)  # times[k-1] ≤ t < times[k]
        cached = self._segment_coefficients  # one (index, c) tuple: safe across threads
        if cached[0] != k:
            cached = (k, self.segment(k))
            self._segment_coefficients = cached
        pos, vel, acc = evaluate_spline(cached[1], t - self.times[k - 1])
        return pos, vel, acc, False

    def restarted(self, now: float, start_positions: np.ndarray,
                  start_velocities: np.ndarray, wraparound: np.ndarray | None = None,
                  rejoin: float = STEP_TIME) -> TrajectorySampler | None:
        """The points due ``rejoin`` s or more after ``now`` (s, the clock of ``start_time``)
        as a sampler starting at ``now`` from the given state, as a new trajectory would: the
        motion re-anchored where the arm is after a gap in its states, rejoined at the first
        point it has time to reach (the last point, due in ``rejoin`` s at the latest); None
        when the trajectory has ended.

        Made from this sampler's arrays (no per-point objects: it runs on the control loop's
        thread): the segments after the first are this one's, shifted in time, so only the
        first, from the given state, is new."""
        t = now - self.start_time
        if t >= self.times[-1]:
            return None
        first = min(bisect.bisect_left(self.times, t + rejoin, lo=1), len(self.times) - 1)
        times = np.asarray(self.times[first:]) - t
        times[0] = max(times[0], rejoin)
        restarted = self._rows(first - 1, times, now)  # row first − 1 becomes the start state
        restarted.positions[0] = start_positions
        if wraparound is not None:
            restarted.positions[0] = shortest_way_start(restarted.positions[0],
                                                        restarted.positions[1], wraparound)
        restarted.velocities[0] = start_velocities
        restarted.accelerations[0] = 0.0
        return restarted

    def first_segment(self) -> TrajectorySampler:
        """A sampler of this one's first segment alone: from the start state to point 0."""
        return self._rows(0, np.asarray(self.times[1:2]), self.start_time, end=2)

    def _rows(self, start: int, times: np.ndarray, start_time: float,
              end: int | None = None) -> TrajectorySampler:
        """A sampler of rows ``start`` to ``end`` (exclusive; None: the last) of this one's
        arrays (copies), ``times`` (s) the times from its start of the rows after the first,
        starting at ``start_time``; row ``start`` is its start state, with no effort."""
        rows = slice(start, end)
        sampler = object.__new__(TrajectorySampler)
        sampler.times = [0.0, *np.asarray(times, dtype=float).tolist()]
        for name in ("positions", "velocities", "accelerations", "efforts", "has_velocity",
                     "has_acceleration", "has_effort"):
            setattr(sampler, name, getattr(self, name)[rows].copy())
        sampler.has_effort[0] = False
        sampler.feeds_forward = bool(sampler.has_effort[1:].any())
        sampler.start_time = float(start_time)
        sampler.has_velocity[0] = sampler.has_velocity[1]
        sampler.has_acceleration[0] = sampler.has_acceleration[1]
        sampler._segment_coefficients = (-1, None)
        return sampler

    def sample_effort(self, now: float) -> np.ndarray | None:
        """The feed-forward effort at time ``now`` (see the class docstring); None when no
        point carries efforts."""
        if not self.feeds_forward:
            return None
        times = self.times
        t = max(now - self.start_time, 0.0)
        if t >= times[-1]:
            return self.efforts[-1].copy()  # zeros when the last point has none
        k = bisect.bisect_right(times, t)
        if not (self.has_effort[k - 1] and self.has_effort[k]):
            return np.zeros(self.efforts.shape[1])
        fraction = (t - times[k - 1]) / (times[k] - times[k - 1])
        return self.efforts[k - 1] + fraction * (self.efforts[k] - self.efforts[k - 1])
