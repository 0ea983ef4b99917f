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

from rb_dynamics.model import Model

__all__ = ["POSITION_BOUNDS_TOLERANCE", "SOFT_LIMIT_REACH_VELOCITY", "bound_effort",
           "soft_limit_effort_bounds"]

# joint_limits' constants: how far past a hard position limit a joint may be (rad or m)
# before the soft limiter allows no velocity, and the speed it allows back from past a soft
# limit (rad/s)
POSITION_BOUNDS_TOLERANCE = 0.002
SOFT_LIMIT_REACH_VELOCITY = math.pi / 180.0
_VALUE_CONSIDERED_ZERO = 1e-10


def soft_limit_effort_bounds(model: Model, q: np.ndarray, v: np.ndarray
                             ) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) effort bounds over v at the measured state (q, q̇) of a fixed-base model
    of 1-DoF joints (one coordinate per joint: q and v both of length ``model.nv``), as the
    module docstring says; ±inf where nothing bounds the effort. ``lower`` ≤ ``upper`` except
    where the intervals the limiter intersects do not meet (``bound_effort`` then keeps the
    lower one, as ``std::clamp`` does)."""
    q = np.asarray(q, dtype=float)
    v = np.asarray(v, dtype=float)
    v_limit, e_limit = model.velocity_limit, model.effort_limit
    lower_q, upper_q = model.position_lower, model.position_upper
    soft_lower, soft_upper = model.soft_lower, model.soft_upper
    k_position, k_velocity = model.k_position, model.k_velocity
    with np.errstate(invalid="ignore"):  # NaN soft limits compare False: no soft limits
        has_position = np.isfinite(lower_q) & np.isfinite(upper_q)
        soft = (has_position & np.isfinite(soft_lower) & np.isfinite(soft_upper)
                & (soft_upper - soft_lower > _VALUE_CONSIDERED_ZERO)
                & np.isfinite(k_position) & (np.abs(k_position) > _VALUE_CONSIDERED_ZERO))
        # 1. velocity bounds
        v_min, v_max = -v_limit, v_limit.copy()
        if soft.any():
            v_min = np.where(soft, np.clip(-k_position * (q - soft_lower), -v_limit, v_limit),
                             v_min)
            v_max = np.where(soft, np.clip(-k_position * (q - soft_upper), -v_limit, v_limit),
                             v_max)
            past_hard = soft & ((q < lower_q - POSITION_BOUNDS_TOLERANCE)
                                | (q > upper_q + POSITION_BOUNDS_TOLERANCE))
            past_soft = soft & ~past_hard & ((q < soft_lower) | (q > soft_upper))
            v_min = np.where(past_hard, 0.0, np.where(
                past_soft, np.copysign(SOFT_LIMIT_REACH_VELOCITY, v_min), v_min))
            v_max = np.where(past_hard, 0.0, np.where(
                past_soft, np.copysign(SOFT_LIMIT_REACH_VELOCITY, v_max), v_max))
        # 2. effort bounds
        at_lower = has_position & (q <= lower_q) & (v <= 0.0)
        at_upper = has_position & ~at_lower & (q >= upper_q) & (v >= 0.0)
        too_slow, too_fast = v < -v_limit, v > v_limit
        lower = np.where(at_lower | too_slow, 0.0, -e_limit)
        upper = np.where(at_upper | (too_fast & ~too_slow), 0.0, e_limit)
        lower, upper = np.minimum(lower, upper), np.maximum(lower, upper)
        damped = np.isfinite(e_limit) & np.isfinite(k_velocity)
        if damped.any():
            soft_min = np.clip(-k_velocity * (v - v_min), -e_limit, e_limit)
            soft_max = np.clip(-k_velocity * (v - v_max), -e_limit, e_limit)
            lower = np.where(damped, np.maximum(soft_min, lower), lower)
            upper = np.where(damped, np.minimum(soft_max, upper), upper)
    return lower, upper


def bound_effort(tau: np.ndarray, lower: np.ndarray, upper: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(τ bounded to [lower, upper], mask of the entries that were outside); where lower >
    upper the entry becomes ``lower`` when below it and ``upper`` when above it (libstdc++'s
    ``std::clamp``, which the upstream limiter calls)."""
    tau = np.asarray(tau, dtype=float)
    below, above = tau < lower, tau > upper
    bounded = np.where(below, lower, np.where(above, upper, tau))
    return bounded, below | above
