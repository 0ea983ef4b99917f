"""Control laws and reference sampling, free of ROS.

- ``gravity_compensation``: τ = g(q) (+ optional viscous and Coulomb friction compensation).
- ``computed_torque``: τ = M(q)(q̈_d + K_d(q̇_d − q̇) + K_p(q_d − q)) + C(q, q̇)q̇ + g(q),
  evaluated as one RNEA call with the commanded acceleration.
- ``TrajectorySampler``: samples a joint trajectory the way ros2_controllers' joint trajectory
  controller does — quintic between points with positions, velocities and accelerations,
  cubic with positions and velocities, linear with positions only — starting from the state at
  the time the trajectory arrived, and holding the last point when it ends.

All vectors are in the model's independent coordinates (fixed-base, 1-DoF joints).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import dynamics
from .model import Model

__all__ = [
    "TrajectoryError",
    "TrajectoryPoint",
    "TrajectorySampler",
    "clamp_effort",
    "computed_torque",
    "gravity_compensation",
    "position_error",
    "wrap_angle",
]


def wrap_angle(x: np.ndarray) -> np.ndarray:
    """Wrap angles to (−π, π]."""
    wrapped = np.mod(x + np.pi, 2.0 * np.pi) - np.pi
    return np.where(wrapped == -np.pi, np.pi, wrapped)


def continuous_mask(model: Model) -> np.ndarray:
    mask = np.zeros(model.nv, dtype=bool)
    for name in model.continuous_joints:
        mask[model.joint_v_index[model.joint_index(name)]] = True
    return mask


def position_error(model: Model, q_desired: np.ndarray, q: np.ndarray,
                   continuous: np.ndarray | None = None) -> np.ndarray:
    """q_d − q, wrapped to (−π, π] on continuous joints."""
    error = np.asarray(q_desired, dtype=float) - q
    if continuous is None:
        continuous = continuous_mask(model)
    if continuous.any():
        error = np.where(continuous, wrap_angle(error), error)
    return error


def clamp_effort(model: Model, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """τ clipped to the URDF effort limits, and a mask of the joints that were clipped."""
    clipped = np.clip(tau, -model.effort_limit, model.effort_limit)
    return clipped, clipped != tau


def friction_compensation(model: Model, v: np.ndarray, viscous: bool = True,
                          coulomb: bool = True, smoothing_velocity: float = 0.01) -> np.ndarray:
    """Damping·q̇ + friction·tanh(q̇/ε): the URDF <dynamics> losses, smoothed through zero."""
    tau = np.zeros(model.nv)
    if viscous:
        tau += model.damping * v
    if coulomb:
        tau += model.friction * np.tanh(np.asarray(v) / smoothing_velocity)
    return tau


def gravity_compensation(model: Model, q: np.ndarray, v: np.ndarray | None = None,
                         friction: bool = False) -> np.ndarray:
    """τ = g(q), plus friction compensation at velocity v when asked."""
    tau = dynamics.gravity(model, q)
    if friction:
        if v is None:
            raise ValueError("v is needed for friction compensation")
        tau = tau + friction_compensation(model, dynamics.check_vector(v, model.nv, "v"))
    return tau


def computed_torque(model: Model, q: np.ndarray, v: np.ndarray, q_desired: np.ndarray,
                    v_desired: np.ndarray, a_desired: np.ndarray, kp: np.ndarray,
                    kd: np.ndarray, rnea=None) -> np.ndarray:
    """Computed-torque law as one inverse-dynamics call with the commanded acceleration."""
    a_command = (np.asarray(a_desired, dtype=float) + kd * (np.asarray(v_desired) - v)
                 + kp * position_error(model, q_desired, q))
    return (rnea or dynamics.rnea)(model, q, v, a_command)


# ----------------------------------------------------------------------------- trajectories


class TrajectoryError(ValueError):
    """A trajectory that cannot be followed; the message says which field is wrong."""


@dataclass(frozen=True)
class TrajectoryPoint:
    time: float  # seconds from the trajectory start
    positions: np.ndarray
    velocities: np.ndarray | None = None
    accelerations: np.ndarray | None = None


def _check_point(point: TrajectoryPoint, n: int, k: int) -> None:
    for field_name in ("positions", "velocities", "accelerations"):
        values = getattr(point, field_name)
        if values is None:
            continue
        if len(values) != n:
            raise TrajectoryError(f"point {k}: {field_name} has {len(values)} values, expected {n}")
        if not np.all(np.isfinite(values)):
            raise TrajectoryError(f"point {k}: {field_name} contains NaN or inf")
    if not math.isfinite(point.time) or point.time < 0:
        raise TrajectoryError(f"point {k}: time_from_start {point.time} must be finite and ≥ 0")


def _as_arrays(point: TrajectoryPoint) -> TrajectoryPoint:
    def arr(x):
        return None if x is None else np.asarray(x, dtype=float)

    return TrajectoryPoint(float(point.time), arr(point.positions), arr(point.velocities),
                           arr(point.accelerations))


def _segment(t: float, T: float, p0, v0, a0, p1, v1, a1):
    """Position, velocity, acceleration at t ∈ [0, T] of the ros2_controllers spline."""
    if T <= 0.0:
        return p1.copy(), np.zeros_like(p1) if v1 is None else v1.copy(), np.zeros_like(p1)
    if v0 is None or v1 is None:  # linear
        slope = (p1 - p0) / T
        return p0 + slope * t, slope, np.zeros_like(p0)
    if a0 is None or a1 is None:  # cubic Hermite
        c0, c1 = p0, v0
        c2 = (3 * (p1 - p0) - T * (2 * v0 + v1)) / T**2
        c3 = (2 * (p0 - p1) + T * (v0 + v1)) / T**3
        return (c0 + t * (c1 + t * (c2 + t * c3)), c1 + t * (2 * c2 + 3 * c3 * t),
                2 * c2 + 6 * c3 * t)
    T2, T3, T4, T5 = T**2, T**3, T**4, T**5  # quintic, boundary p, v, a at both ends
    c0, c1, c2 = p0, v0, 0.5 * a0
    c3 = (20 * (p1 - p0) - (8 * v1 + 12 * v0) * T - (3 * a0 - a1) * T2) / (2 * T3)
    c4 = (30 * (p0 - p1) + (14 * v1 + 16 * v0) * T + (3 * a0 - 2 * a1) * T2) / (2 * T4)
    c5 = (12 * (p1 - p0) - 6 * (v1 + v0) * T - (a0 - a1) * T2) / (2 * T5)
    pos = c0 + t * (c1 + t * (c2 + t * (c3 + t * (c4 + t * c5))))
    vel = c1 + t * (2 * c2 + t * (3 * c3 + t * (4 * c4 + t * 5 * c5)))
    acc = 2 * c2 + t * (6 * c3 + t * (12 * c4 + t * 20 * c5))
    return pos, vel, acc


class TrajectorySampler:
    """A joint trajectory anchored at ``start_time`` and the state it started from."""

    def __init__(self, points: Sequence[TrajectoryPoint], start_time: float,
                 start_positions: np.ndarray, start_velocities: np.ndarray | None = None):
        if not points:
            raise TrajectoryError("trajectory has no points")
        n = len(start_positions)
        for k, point in enumerate(points):
            _check_point(point, n, k)
            if k and point.time <= points[k - 1].time:
                raise TrajectoryError(f"point {k}: time_from_start {point.time} is not after "
                                      f"point {k - 1}'s {points[k - 1].time}")
        self.points = [_as_arrays(point) for point in points]
        self.start_time = float(start_time)
        zero = np.zeros(n)
        v_start = zero if start_velocities is None else np.asarray(start_velocities, float)
        first = self.points[0]
        # the spline toward the first point starts from the measured state with the same
        # derivatives the first point carries (ros2_controllers does the same)
        self.start = TrajectoryPoint(
            0.0, np.asarray(start_positions, float),
            v_start if first.velocities is not None else None,
            zero if first.accelerations is not None else None)

    @property
    def end_time(self) -> float:
        return self.start_time + self.points[-1].time

    def sample(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """(q_d, q̇_d, q̈_d, finished) at time ``now``; after the end the last point is held."""
        t = now - self.start_time
        last = self.points[-1]
        if t >= last.time:
            hold = np.zeros_like(last.positions)
            return np.asarray(last.positions, float).copy(), hold, hold.copy(), True
        t = max(t, 0.0)
        before = self.start
        for point in self.points:
            if t < point.time:
                pos, vel, acc = _segment(
                    t - before.time, point.time - before.time,
                    np.asarray(before.positions, float), before.velocities,
                    before.accelerations, np.asarray(point.positions, float), point.velocities,
                    point.accelerations)
                return pos, vel, acc, False
            before = point
        raise AssertionError("unreachable")
