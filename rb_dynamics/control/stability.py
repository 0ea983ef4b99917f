# SPDX-License-Identifier: Apache-2.0
"""Which PD gains the sampled control loop can take: the stability bound at a state period.

The loop per joint. Computed torque cancels the arm's dynamics, so each joint is a double
integrator driven by its command, e'' = u with e the position error, and the law is
u = −kp e − kd e'. The node computes u from a joint state and the command is held until the
next one (zero-order hold over the period T); with a driver that applies a command one period
after the state it answers (the usual case off lock-step), u_k = −kp e_{k−1} − kd e'_{k−1}.
The exact discretization of the double integrator under a held input,

    e_{k+1} = e_k + T e'_k + T²/2 u_k,     e'_{k+1} = e'_k + T u_k,

has the transfer functions E/U = T²(z + 1) / (2 (z − 1)²) and E'/U = T / (z − 1); closing the
loop through the delay z⁻¹ gives, with a = kp T² and b = kd T (dimensionless),

    p(z) = z³ − 2 z² + (1 + a/2 + b) z + (a/2 − b).

Jury's criterion for z³ + c₂z² + c₁z + c₀ (all roots inside the unit circle): p(1) > 0,
p(−1) < 0, |c₀| < 1 and 1 − c₀² > |c₀c₂ − c₁|. Here p(1) = a (kp > 0), p(−1) = −4 − 2b
(always), |a/2 − b| < 1, and, since 1 + 3a/2 − b > 0 for b < 1,

    1 − (a/2 − b)² > 1 + 3a/2 − b   ⟺   a²/4 − a (b − 3/2) − b (1 − b) < 0
                                     ⟺   a < √(9 − 8b) − 3 + 2b   (for 0 < b < 1),

which implies |a/2 − b| < 1. So the loop is stable exactly when

    0 < kd T < 1   and   kp T² < √(9 − 8 kd T) − 3 + 2 kd T.

For small kd T the bound on kp is ≈ 2 kd / (3 T): a stiffer loop needs damping in proportion,
and none (kd = 0, marginal already in continuous time) is unstable sampled; kp T² is at most
1/4 (at kd T = 5/8). kp = 0 (no position feedback) leaves the root z = 1 and z² − z + b:
0 ≤ kd T < 1. The bound with the delay is the tighter one (without it, kd T < 2 and
kp T < 2 kd): it holds for a driver that applies commands at once too.

Impedance (τ = K (q_d − q) + D (q̇_d − q̇) + gravity) acts on the arm's inertia, so per joint
kp = K / m and kd = D / m with m the joint's effective inertia. The smallest one makes the
largest gains: ``effective_inertia`` takes 1 / (M(q)⁻¹)_jj, the inertia a joint feels with the
other joints free, which is at most M(q)_jj (the inertia with them locked).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "DEFAULT_STATE_PERIOD",
    "effective_inertia",
    "gain_bound_violation",
    "max_stable_kd",
    "max_stable_kp",
]

# the period assumed before the node has measured one (s): a 1 kHz driver
DEFAULT_STATE_PERIOD = 1e-3


def max_stable_kd(period: float) -> float:
    """kd (1/s) the loop sampled every ``period`` s must stay below: 1 / T."""
    return 1.0 / period


def max_stable_kp(kd: float, period: float) -> float:
    """kp (1/s²) the loop sampled every ``period`` s with damping ``kd`` (1/s) must stay
    below (module docstring): (√(9 − 8 kd T) − 3 + 2 kd T) / T²; 0 when kd T is 0 or ≥ 1."""
    b = kd * period
    if not 0.0 < b < 1.0:
        return 0.0
    return (math.sqrt(9.0 - 8.0 * b) - 3.0 + 2.0 * b) / period**2


def effective_inertia(mass_matrix: np.ndarray) -> np.ndarray:
    """Per coordinate 1 / (M⁻¹)_jj (kg·m² or kg): the inertia each joint feels with the others
    free, the smallest it can feel at this configuration."""
    return 1.0 / np.diag(np.linalg.inv(mass_matrix))


def gain_bound_violation(kp: Sequence[float], kd: Sequence[float], period: float,
                         joints: Sequence[str], names: tuple[str, str] = ("kp", "kd"),
                         inertia: Sequence[float] | None = None) -> str | None:
    """Why the gains ``kp``, ``kd`` (one per joint of ``joints``) make the loop sampled every
    ``period`` s unstable, naming the first joint and the bound; None when stable. With
    ``inertia`` (per joint, kg·m² or kg) the gains are efforts per unit error (impedance's
    stiffness and damping) and act as kp / inertia, kd / inertia; the text gives the bound in
    the gains' own units. ``names``: the parameters' names for the text."""
    kp, kd = np.asarray(kp, float), np.asarray(kd, float)
    scale = np.ones(len(kp)) if inertia is None else np.asarray(inertia, float)
    for j, joint in enumerate(joints):
        p, d, m = kp[j] / scale[j], kd[j] / scale[j], scale[j]
        where = f"at the state period {period * 1e3:.3g} ms" + (
            "" if inertia is None else f" on the effective inertia {m:.3g}")
        if d * period >= 1.0:
            return (f"{names[1]} {kd[j]:g} on {joint} makes the sampled loop unstable: "
                    f"{names[1]} < {max_stable_kd(period) * m:.6g} {where}")
        if p > 0.0 and not p < max_stable_kp(d, period):
            return (f"{names[0]} {kp[j]:g} with {names[1]} {kd[j]:g} on {joint} makes the "
                    f"sampled loop unstable: {names[0]} < "
                    f"{max_stable_kp(d, period) * m:.6g} {where}"
                    + (" (no position gain is stable without damping)" if d == 0.0 else ""))
    return None
