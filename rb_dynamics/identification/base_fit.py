# SPDX-License-Identifier: Apache-2.0
"""Weighted least squares for the base parameters, the effort's delay, and the validation.

The averaged period (``preprocessing.PeriodicData``) gives the base regressor Y_b at each phase
(motion from the Fourier fit) and the averaged efforts. Both go through the same zero-phase
low-pass and are decimated; each joint's rows are weighted by 1/σ_j (its noise). The efforts
are first moved earlier by the delay d (τ_measured(t) = τ(t − d)): d is the shift that leaves
the smallest weighted residual (a coarse grid, then a bounded scalar search). Ignoring a delay
of a few ms leaves its error where the effort changes fastest: at the Coulomb step of each
velocity reversal.

The estimate: β̂ = argmin ‖A β − y‖², cov(β̂) = s² (AᵀA)⁻¹ with s² the residual variance per
degree of freedom. Data that cannot determine β (the column-scaled A's condition above
``MAX_CONDITION``) are refused with the least-determined combination named.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize

from .base_parameters import BaseParameters
from .payload import IdentificationError
from .preprocessing import PeriodicData, low_pass

__all__ = ["MAX_CONDITION_FIT", "BaseFit", "Validation", "fit_base_parameters", "validate"]

MAX_CONDITION_FIT = 1e4  # of the column-scaled weighted regressor
MAX_DELAY = 0.02  # s searched either side of zero
CHUNK = 2000  # states per regressor evaluation (bounds the memory of Y)


@dataclass(frozen=True, eq=False)
class BaseFit:
    """β̂ with its covariance, the delay, the noise and how well-posed the fit was."""

    base: BaseParameters
    beta: np.ndarray
    covariance: np.ndarray
    delay: float  # s: efforts lag the motion by this much
    noise: np.ndarray  # (n,) σ of one effort sample, from the periods' spread
    condition: float  # column-scaled weighted regressor
    residual_rms: np.ndarray  # (n,) of the filtered averaged fit data
    R: np.ndarray  # (r, r): ‖R (β − β̂)‖² is the χ² increase of parameters β
    cutoff: float

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(np.diag(self.covariance))


@dataclass(frozen=True, eq=False)
class Validation:
    """Per-joint effort RMS on held-out periods (raw samples), and over the noise σ."""

    rms: np.ndarray
    ratio: np.ndarray
    measured: np.ndarray  # (N, n) the first held-out period's recorded efforts
    predicted: np.ndarray  # (N, n)
    phase: np.ndarray  # (N,) s into that period


def base_regressor(base: BaseParameters, q, qd, qdd) -> np.ndarray:
    """Y_b (N, n, r) at the identified joints' states, in chunks."""
    out = np.empty((len(q), base.layout.n_joints, base.count))
    for s in range(0, len(q), CHUNK):
        e = slice(s, s + CHUNK)
        out[e] = base.columns(base.layout.regressor(q[e], qd[e], qdd[e]))
    return out


def fit_base_parameters(base: BaseParameters, data: PeriodicData, *, cutoff: float = 10.0,
                        delay: float | None = None,
                        progress: Callable[[str], None] | None = None) -> BaseFit:
    """β̂ from ``data``; ``delay`` s given, or estimated when None; efforts and regressor
    low-passed at ``cutoff`` Hz. ``IdentificationError`` when the data cannot determine the
    base parameters (the least-determined combination named)."""
    say = progress or (lambda _: None)
    rate = data.rate
    # the regressor at every other phase (its content above a quarter of the rate is below
    # rounding), the efforts at every phase; both cut at ``cutoff`` and sampled at 8× it
    half = 2 if len(data.phase) % 2 == 0 else 1
    step = max(1, int(rate / half / (8.0 * cutoff)))
    say(f"fit: base regressor at {len(data.phase) // half} phases")
    Yb = base_regressor(base, data.q[::half], data.qd[::half], data.qdd[::half])
    Yf = low_pass(Yb, cutoff, rate / half, step)
    weight = 1.0 / np.maximum(data.noise, 1e-9)
    A = (Yf * weight[None, :, None]).reshape(-1, base.count)
    norms = np.linalg.norm(A, axis=0)
    _check_excitation(base, A, norms)
    Q, R = np.linalg.qr(A)

    def target(d: float) -> np.ndarray:
        y = low_pass(data.effort, cutoff, rate, half * step, delay=d)
        return (y * weight).ravel()

    def cost(d: float) -> float:
        y = target(d)
        return float(np.sum((y - Q @ (Q.T @ y)) ** 2))

    if delay is None:
        say("fit: estimating the effort delay")
        grid = np.arange(-MAX_DELAY, MAX_DELAY + 1e-12, 1e-3)
        best = float(grid[int(np.argmin([cost(d) for d in grid]))])
        res = scipy.optimize.minimize_scalar(cost, bounds=(best - 1e-3, best + 1e-3),
                                             method="bounded", options={"xatol": 1e-6})
        delay = float(res.x)
    y = target(delay)
    beta = scipy.linalg.solve_triangular(R, Q.T @ y)
    residual = y - A @ beta
    dof = max(len(y) - base.count, 1)
    # no effort is known better than 1e-6 of its size: exact data keep a finite weight
    s2 = max(float(residual @ residual) / dof, 1e-12 * float(y @ y) / len(y))
    Rinv = scipy.linalg.solve_triangular(R, np.eye(base.count))
    covariance = s2 * Rinv @ Rinv.T
    res_rms = np.sqrt(np.mean((residual.reshape(-1, base.layout.n_joints) / weight) ** 2,
                              axis=0))
    s_vals = np.linalg.svd(A / norms, compute_uv=False)
    return BaseFit(base, beta, covariance, delay, data.noise, float(s_vals[0] / s_vals[-1]),
                   res_rms, R / math.sqrt(s2), cutoff)


def _check_excitation(base: BaseParameters, A: np.ndarray, norms: np.ndarray) -> None:
    names = base.names()
    dead = np.flatnonzero(norms <= 1e-12 * max(norms.max(), 1e-300))
    if len(dead):
        raise IdentificationError(
            "the data cannot determine the parameters: no effort depends on base parameter "
            f"{base.combination(int(dead[0]))} (does its joint move?); record the planned "
            "excitation (rb_dynamics_identify plan)")
    _, s, Vt = np.linalg.svd(A / norms, full_matrices=False)
    condition = s[0] / s[-1]
    if condition > MAX_CONDITION_FIT:
        v = Vt[-1] / np.abs(Vt[-1]).max()
        order = np.argsort(-np.abs(v))[:4]
        combo = " ".join(f"{'−' if v[k] < 0 else '+'} {abs(v[k]):.2f}·[{names[k]}]"
                         for k in order if abs(v[k]) > 0.05)
        raise IdentificationError(
            f"the data cannot determine the parameters (condition {condition:.3g} > "
            f"{MAX_CONDITION_FIT:g}): the least-determined combination of base parameters is "
            f"{combo.lstrip('+ ')} (scaled); record the planned excitation "
            "(rb_dynamics_identify plan) or one that moves these joints more")


def validate(fit: BaseFit, data: PeriodicData, betas: list[np.ndarray] | None = None,
             every: int = 2) -> list[Validation]:
    """Effort RMS per joint of each of ``betas`` (default the fit's) on ``data``'s held-out
    periods: every ``every``-th recorded effort sample against the prediction at the motion
    ``delay`` earlier (derived locally from the held-out period's positions)."""
    betas = [fit.beta] if betas is None else betas
    squares: list[list[np.ndarray]] = [[] for _ in betas]
    first = []
    for phase, measured, motion in data.held_out:
        phase, measured = phase[::every], measured[::every]
        Yb = base_regressor(fit.base, *motion.evaluate(phase - fit.delay))
        for k, beta in enumerate(betas):
            predicted = Yb @ beta
            squares[k].append((measured - predicted) ** 2)
            if len(first) < len(betas):
                first.append((phase, measured, predicted))
    out = []
    for k in range(len(betas)):
        rms = np.sqrt(np.mean(np.concatenate(squares[k]), axis=0))
        phase, measured, predicted = first[k]
        out.append(Validation(rms, rms / np.maximum(fit.noise, 1e-12), measured, predicted,
                              phase))
    return out
