# SPDX-License-Identifier: Apache-2.0
"""Effort limits as ros2_control's ``joint_limits`` enforces them on an effort command
interface (``JointSoftLimiter``), free of ROS.

Per joint, from the URDF (``Model``): the hard limits of ``<limit lower upper velocity
effort>`` and the soft limits of ``<safety_controller soft_lower_limit soft_upper_limit
k_position k_velocity>``. With an effort interface the limiter's previous command has no
position, so the measured position stands in for it and the bounds are a function of the
measured state (q, q̇) alone:

1. velocity bounds: ±velocity limit; with soft limits (``k_position`` ≠ 0 and a soft range of
   a joint with position limits) v_min = clamp(−k_position (q − soft_lower), ±v_max) and
   v_max = clamp(−k_position (q − soft_upper), ±v_max); past a hard limit (by more than
   ``POSITION_BOUNDS_TOLERANCE``) both are 0; past a soft limit both have magnitude 1°/s and
   keep their signs;
2. effort bounds: ±effort limit, the lower one 0 at the lower hard limit moving down and past
   −velocity limit, the upper one 0 at the upper hard limit moving up and past the velocity
   limit; with ``k_velocity`` (a ``<safety_controller>``) they are
   clamp(−k_velocity (q̇ − v_min), ±effort limit) and clamp(−k_velocity (q̇ − v_max),
   ±effort limit), intersected with the former.

So a joint with a ``<safety_controller>`` is pushed back from its soft limits by at most its
effort limit, and, as upstream, ``k_velocity = 0`` allows no effort at all. Units: rad or m,
rad/s or m/s, N·m or N; ``k_position`` in 1/s, ``k_velocity`` in N·m·s/rad or N·s/m.
"""

from __future__ import annotations

import math

import numpy as np

from rb_dynamics.model import Model, clamp_effort

__all__ = ["POSITION_BOUNDS_TOLERANCE", "SOFT_LIMIT_REACH_VELOCITY", "CommandBounds",
           "EffortLimiter", "bound_effort", "soft_limit_effort_bounds"]

# joint_limits' constants: how far past a hard position limit a joint may be (rad or m)
# before the soft limiter allows no velocity, and the speed it allows back from past a soft
# limit (rad/s)
POSITION_BOUNDS_TOLERANCE = 0.002
SOFT_LIMIT_REACH_VELOCITY = math.pi / 180.0
_VALUE_CONSIDERED_ZERO = 1e-10


class EffortLimiter:
    """The limiter of one model: what depends only on the URDF is found once, so that
    ``bounds`` and ``enforce`` cost little per state (a control loop calls them for every
    state). The model must be fixed-base with 1-DoF joints (one coordinate per joint: q and
    q̇ both of length ``model.nv``). A joint whose ``k_velocity`` is 0 and that has no velocity
    limit gets no ``k_velocity`` bound (upstream computes 0·∞ there, a NaN that bounds
    nothing)."""

    def __init__(self, model: Model):
        self.model = model
        v_limit, e_limit = model.velocity_limit, model.effort_limit
        lower_q, upper_q = model.position_lower, model.position_upper
        k_position, k_velocity = model.k_position, model.k_velocity
        with np.errstate(invalid="ignore"):  # NaN (no <safety_controller>) compares False
            soft = (np.isfinite(lower_q) & np.isfinite(upper_q)
                    & np.isfinite(model.soft_lower) & np.isfinite(model.soft_upper)
                    & (model.soft_upper - model.soft_lower > _VALUE_CONSIDERED_ZERO)
                    & np.isfinite(k_position) & (np.abs(k_position) > _VALUE_CONSIDERED_ZERO))
            damped = (np.isfinite(e_limit) & np.isfinite(k_velocity)
                      & ~((k_velocity == 0) & np.isinf(v_limit) & ~soft))
        self._soft = s = np.flatnonzero(soft)
        self._damped = d = np.flatnonzero(damped)
        self._v_limit, self._e_limit = v_limit, e_limit
        self._neg_v_limit, self._neg_e_limit = -v_limit, -e_limit
        self._lower_q, self._upper_q = lower_q, upper_q
        # the constants of the soft coordinates, gathered once: −k_position, and the range
        # in which a joint is past neither a soft nor a hard limit (the common case)
        self._soft_terms = (v_limit[s], -v_limit[s], model.soft_lower[s], model.soft_upper[s],
                            -k_position[s], lower_q[s] - POSITION_BOUNDS_TOLERANCE,
                            upper_q[s] + POSITION_BOUNDS_TOLERANCE)
        self._inside = (np.maximum(model.soft_lower[s], lower_q[s] - POSITION_BOUNDS_TOLERANCE),
                        np.minimum(model.soft_upper[s], upper_q[s] + POSITION_BOUNDS_TOLERANCE))
        self._damped_terms = (-k_velocity[d], e_limit[d], -e_limit[d])
        # every coordinate soft / damped (an arm with a <safety_controller> on each joint):
        # whole arrays, no gathering and scattering per state
        self._all_soft = s.size == model.nv
        self._all_damped = d.size == model.nv

    def velocity_bounds(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(v_min, v_max) over v at position q: step 1 of the module docstring."""
        s = self._soft
        if not s.size:
            return self._neg_v_limit.copy(), self._v_limit.copy()
        limit, neg_limit, soft_lower, soft_upper, neg_k_position, below_hard, above_hard = \
            self._soft_terms
        qs = q if self._all_soft else q[s]
        low = np.minimum(np.maximum(neg_k_position * (qs - soft_lower), neg_limit), limit)
        high = np.minimum(np.maximum(neg_k_position * (qs - soft_upper), neg_limit), limit)
        inside_low, inside_high = self._inside
        if not ((qs >= inside_low) & (qs <= inside_high)).all():
            past_hard = (qs < below_hard) | (qs > above_hard)
            past_soft = ~past_hard & ((qs < soft_lower) | (qs > soft_upper))
            low[past_soft] = np.copysign(SOFT_LIMIT_REACH_VELOCITY, low[past_soft])
            high[past_soft] = np.copysign(SOFT_LIMIT_REACH_VELOCITY, high[past_soft])
            low[past_hard] = high[past_hard] = 0.0
        if self._all_soft:
            return low, high
        v_min, v_max = self._neg_v_limit.copy(), self._v_limit.copy()
        v_min[s], v_max[s] = low, high
        return v_min, v_max

    def bounds(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) effort bounds over v at the measured state (q, q̇), as the module
        docstring says; ±inf where nothing bounds the effort. ``lower`` ≤ ``upper`` except
        where the intervals the limiter intersects do not meet (``bound_effort`` then keeps
        the lower one, as ``std::clamp`` does)."""
        q = np.asarray(q, dtype=float)
        v = np.asarray(v, dtype=float)
        v_limit = self._v_limit
        # 2. the hard bounds (compute_effort_limits); with effort limits ≥ 0 they never cross.
        # They differ from ±effort limit only at a position limit or past a velocity limit.
        lower, upper = self._neg_e_limit.copy(), self._e_limit.copy()
        if ((q <= self._lower_q) | (q >= self._upper_q) | (np.abs(v) > v_limit)).any():
            at_lower = (q <= self._lower_q) & (v <= 0.0)  # never on unlimited joints (−inf)
            at_upper = ~at_lower & (q >= self._upper_q) & (v >= 0.0)
            too_slow = v < -v_limit
            lower[at_lower | too_slow] = 0.0
            upper[at_upper | (~too_slow & (v > v_limit))] = 0.0
        d = self._damped
        if d.size:  # the k_velocity bounds, intersected with those
            v_min, v_max = self.velocity_bounds(q)
            neg_k_velocity, limit, neg_limit = self._damped_terms
            if self._all_damped:
                vd = v
            else:
                vd, v_min, v_max = v[d], v_min[d], v_max[d]
            soft_min = clamp_effort(neg_k_velocity * (vd - v_min), limit, lower=neg_limit)
            soft_max = clamp_effort(neg_k_velocity * (vd - v_max), limit, lower=neg_limit)
            if self._all_damped:
                np.maximum(soft_min, lower, out=lower)
                np.minimum(soft_max, upper, out=upper)
            else:
                lower[d] = np.maximum(soft_min, lower[d])
                upper[d] = np.minimum(soft_max, upper[d])
        return lower, upper

    def enforce(self, tau: np.ndarray, q: np.ndarray, v: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """(τ bounded at (q, q̇), mask of the entries that were limited): ``bound_effort``
        with ``bounds``."""
        return bound_effort(tau, *self.bounds(q, v))


def soft_limit_effort_bounds(model: Model, q: np.ndarray, v: np.ndarray
                             ) -> tuple[np.ndarray, np.ndarray]:
    """``EffortLimiter(model).bounds(q, v)``: the (lower, upper) effort bounds over v at one
    measured state (a loop keeps an ``EffortLimiter``)."""
    return EffortLimiter(model).bounds(q, v)


def bound_effort(tau: np.ndarray, lower: np.ndarray, upper: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(τ bounded to [lower, upper], mask of the entries that were outside); where lower >
    upper the entry becomes ``lower`` when below it and ``upper`` when above it (libstdc++'s
    ``std::clamp``, which the upstream limiter calls)."""
    tau = np.asarray(tau, dtype=float)
    below, above = tau < lower, tau > upper
    bounded = np.where(below, lower, np.where(above, upper, tau))
    return bounded, below | above


class CommandBounds:
    """The bounds of a controller's commands for the joints at ``index`` (velocity
    coordinates): effort_scale × their URDF effort limits, then, with soft limits on,
    ros2_control's soft joint limiter's bounds at (q, q̇) (``EffortLimiter``), applied after
    the clamp as hardware limits act."""

    def __init__(self, model: Model, index: np.ndarray, soft_limits: bool = False,
                 effort_scale: float = 1.0) -> None:
        self.model, self.index = model, np.asarray(index)
        self._every_joint = np.array_equal(self.index, np.arange(model.nv))
        self.limiter = EffortLimiter(model) if soft_limits else None
        self.set_scale(effort_scale)

    @property
    def soft_limits(self) -> bool:
        return self.limiter is not None

    def set_soft_limits(self, on: bool) -> None:
        if on != self.soft_limits:
            self.limiter = EffortLimiter(self.model) if on else None

    def set_scale(self, effort_scale: float) -> None:
        self.effort_scale = float(effort_scale)
        self.high = self.model.effort_limit[self.index] * self.effort_scale  # N·m or N
        self.low = -self.high

    def bound(self, wanted: np.ndarray, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``wanted`` (the joints' efforts) within the bounds at (q, q̇): a new array."""
        command = clamp_effort(wanted, self.high, lower=self.low)
        if self.limiter is not None:
            lower, upper = self.limiter.bounds(q, v)
            if not self._every_joint:
                lower, upper = lower[self.index], upper[self.index]
            command = bound_effort(command, lower, upper)[0]
        return command
