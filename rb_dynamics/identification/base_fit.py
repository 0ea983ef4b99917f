# SPDX-License-Identifier: Apache-2.0
"""Weighted least squares for the base parameters, the effort's delay, and the validation.

The averaged period (``preprocessing.PeriodicData``) gives the base regressor Y_b at each phase
(motion from the Fourier fit) and the averaged efforts. Both go through the same zero-phase
low-pass and are decimated; each joint's rows are weighted by 1/σ_j (its noise). The efforts
are first moved earlier by the delay d (τ_measured(t) = τ(t − d)): d is the shift that leaves
the smallest weighted residual (a coarse grid, then a bounded scalar search). Ignoring a delay
of a few ms leaves its error where the effort changes fastest: at the Coulomb step of each
velocity reversal.

The Coulomb columns' smoothing ε (``ParameterLayout.coulomb_smoothing``) is chosen the same way,
from ``SMOOTHING_CANDIDATES`` (ε = 0: sign(q̇), as a drive's friction steps; 0.1 rad/s: the
controller's ``COULOMB_SMOOTHING``): a law that is wrong near rest would otherwise bend the
inertial parameters and the delay to explain the efforts there. The fitted Coulomb value is
the level above 3ε, which the controller's compensation applies with its own ε.

The estimate: β̂ = argmin ‖A β − y‖², cov(β̂) = s² (AᵀA)⁻¹ with s² the residual variance per
degree of freedom. Data that cannot determine β (the column-scaled A's condition above
``MAX_CONDITION``) are refused with the least-determined combination named.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .base_parameters import BaseParameters
from .payload import IdentificationError
from .preprocessing import PeriodicData, low_pass

__all__ = ["MAX_CONDITION_FIT", "SMOOTHING_CANDIDATES", "BaseFit", "Validation",
           "fit_base_parameters", "scaled_by_validation", "validate", "with_smoothing"]

MAX_CONDITION_FIT = 1e4  # of the column-scaled weighted regressor
MAX_DELAY = 0.02  # s searched either side of zero
CHUNK = 2000  # states per regressor evaluation (bounds the memory of Y)
# ε (rad/s or m/s) of the Coulomb columns a fit chooses from: from a sluggish transition
# through the controller's smoothing to a step
SMOOTHING_CANDIDATES = (0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.0)


@dataclass(frozen=True, eq=False)
class BaseFit:
    """β̂ with its covariance, the delay, the noise and how well-posed the fit was; ``base``'s
    layout carries the Coulomb smoothing ε the fit chose."""

    base: BaseParameters
    beta: np.ndarray
    covariance: np.ndarray
    delay: float  # s: efforts lag the motion by this much
    noise: np.ndarray  # (n,) σ of one effort sample, from the periods' spread
    condition: float  # column-scaled weighted regressor
    residual_rms: np.ndarray  # (n,) of the filtered averaged fit data
    R: np.ndarray  # (r, r): ‖R (β − β̂)‖² is the χ² increase of parameters β
    cutoff: float
    factor: np.ndarray  # (r, r) s·R_A⁻¹ (A = Q R_A, the weighted regressor): cov = F Fᵀ
    shares: np.ndarray  # (n, r, r) joint j's rows' part of QᵀQ = 1 (A = Q R_A)

    @property
    def smoothing(self) -> float:
        """ε of the fitted Coulomb columns, tanh(q̇/ε) (0: sign(q̇))."""
        return self.base.layout.coulomb_smoothing

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


def with_smoothing(base: BaseParameters, smoothing: float) -> BaseParameters:
    """``base`` (the same base parameters) with its layout's Coulomb columns at ε =
    ``smoothing``."""
    layout = dataclasses.replace(base.layout, coulomb_smoothing=smoothing)
    return dataclasses.replace(base, layout=layout)


def _joint_term_columns(base: BaseParameters) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """The base columns that are joint terms, and each one's (term, joint)."""
    layout = base.layout
    ks = [k for k, i in enumerate(base.independent) if i >= layout.n_inertial]
    which = [divmod(int(base.independent[k]) - layout.n_inertial, layout.n_joints) for k in ks]
    return np.array(ks, dtype=int), [(layout.terms[t], j) for t, j in which]


def fit_base_parameters(base: BaseParameters, data: PeriodicData, *, cutoff: float = 10.0,
                        delay: float | None = None, smoothing: float | None = None,
                        progress: Callable[[str], None] | None = None) -> BaseFit:
    """β̂ from ``data``; ``delay`` s given, or estimated when None; the Coulomb smoothing ε
    ``smoothing`` given, or chosen from ``SMOOTHING_CANDIDATES`` when None (with the delay:
    the pair that leaves the least weighted residual); efforts and regressor low-passed at
    ``cutoff`` Hz. ``IdentificationError`` when the data cannot determine the base parameters
    (the least-determined combination named)."""
    import scipy.linalg  # here, not above: the nodes start without it
    import scipy.optimize

    say = progress or (lambda _: None)
    rate = data.rate
    # the inertial columns at every other phase (their content above a quarter of the rate
    # is below rounding); the joint terms' columns, which step where Coulomb friction does, at
    # every phase as the efforts (sampled alike, a step aliases alike); all cut at ``cutoff``
    # and sampled at 8× it
    half = 2 if len(data.phase) % 2 == 0 else 1
    step = max(1, int(rate / half / (8.0 * cutoff)))
    say(f"fit: base regressor at {len(data.phase) // half} phases")
    joint_k, joint_terms = _joint_term_columns(base)
    Yb = base_regressor(base, data.q[::half], data.qd[::half], data.qdd[::half])
    Yb[:, :, joint_k] = 0.0
    inertial = low_pass(Yb, cutoff, rate / half, step)
    weight = 1.0 / np.maximum(data.noise, 1e-9)

    def target(d: float) -> np.ndarray:
        y = low_pass(data.effort, cutoff, rate, half * step, delay=d)
        return (y * weight).ravel()

    def solve(candidate: BaseParameters):
        """(cost, delay, A, Q, R) of the fit with ``candidate``'s regressor."""
        columns = candidate.layout.joint_columns(data.qd, data.qdd)
        J = np.zeros((len(data.phase), base.layout.n_joints, len(joint_k)))
        for c, (term, j) in enumerate(joint_terms):
            J[:, j, c] = columns[term][:, j]
        Yf = inertial.copy()
        Yf[:, :, joint_k] = low_pass(J, cutoff, rate, half * step)
        A = (Yf * weight[None, :, None]).reshape(-1, base.count)
        _check_excitation(candidate, A, np.linalg.norm(A, axis=0))
        Q, R = np.linalg.qr(A)

        def cost(d: float) -> float:
            y = target(d)
            return float(np.sum((y - Q @ (Q.T @ y)) ** 2))

        d = delay
        if d is None:
            costs = [float(np.sum((y - Q @ (Q.T @ y)) ** 2)) for y in on_grid]
            best = float(grid[int(np.argmin(costs))])
            res = scipy.optimize.minimize_scalar(cost, bounds=(best - 1e-3, best + 1e-3),
                                                 method="bounded", options={"xatol": 1e-6})
            d = float(res.x)
        return cost(d), d, A, Q, R

    friction = {"coulomb", "stribeck"} & set(base.layout.terms)
    if smoothing is not None:
        candidates = [with_smoothing(base, smoothing)]
    elif friction:
        candidates = [with_smoothing(base, eps) for eps in SMOOTHING_CANDIDATES]
    else:
        candidates = [base]
    if delay is None:
        say("fit: estimating the effort delay")
    grid = np.arange(-MAX_DELAY, MAX_DELAY + 1e-12, 1e-3)
    on_grid = [target(d) for d in grid] if delay is None else []  # the same for every ε
    trials = [(solve(candidate), candidate) for candidate in candidates]
    (_, delay, A, Q, R), base = min(trials, key=lambda trial: trial[0][0])
    if len(candidates) > 1:
        say(f"fit: Coulomb smoothing {base.layout.coulomb_smoothing:g} (of "
            f"{', '.join(f'{eps:g}' for eps in SMOOTHING_CANDIDATES)})")
    y = target(delay)
    beta = scipy.linalg.solve_triangular(R, Q.T @ y)
    residual = y - A @ beta
    # the rows sample a band-limited periodic signal: per joint only its in-band Fourier
    # coefficients are free (the residual has no others, and neighbouring rows are not
    # independent), so they count the degrees of freedom: s² is the variance per coefficient,
    # which is what the covariance needs (counting rows would understate it by their
    # oversampling, about 4 at 8 rows per cycle of the cutoff)
    n = base.layout.n_joints
    rows = len(y) // n
    bins = int(np.count_nonzero(np.fft.rfftfreq(len(data.phase), 1.0 / rate) <= cutoff))
    dof = max(n * min(2 * bins - 1, rows) - base.count, 1)
    # no effort is known better than 1e-6 of its size: exact data keep a finite weight
    s2 = max(float(residual @ residual) / dof, 1e-12 * float(y @ y) / len(y))
    Rinv = scipy.linalg.solve_triangular(R, np.eye(base.count))
    covariance = s2 * Rinv @ Rinv.T
    # each joint's share of the information, in the orthonormal basis Q (they sum to 1)
    Qj = Q.reshape(rows, n, base.count)
    shares = np.einsum("kjr,kjs->jrs", Qj, Qj)
    res_rms = np.sqrt(np.mean((residual.reshape(-1, n) / weight) ** 2, axis=0))
    norms = np.linalg.norm(A, axis=0)
    s_vals = np.linalg.svd(A / norms, compute_uv=False)
    return BaseFit(base, beta, covariance, delay, data.noise, float(s_vals[0] / s_vals[-1]),
                   res_rms, R / math.sqrt(s2), cutoff, math.sqrt(s2) * Rinv, shares)


def scaled_by_validation(fit: BaseFit, ratio: np.ndarray) -> BaseFit:
    """``fit`` with its covariance grown where its validation contradicts the noise model: the
    errors of joint j's rows have max(1, r_j)² times the variance the fit assumed (r_j its
    held-out RMS over its noise σ), so cov(β̂) = (AᵀA)⁻¹ Aᵀ D A (AᵀA)⁻¹ (the sandwich of
    weighted least squares) with D = max(1, r_j)² on joint j's rows: the fit's covariance
    unchanged where every r_j ≤ 1."""
    d = np.maximum(np.asarray(ratio, dtype=float), 1.0) ** 2
    middle = np.einsum("j,jrs->rs", d, fit.shares)
    return dataclasses.replace(fit, covariance=fit.factor @ middle @ fit.factor.T)


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
