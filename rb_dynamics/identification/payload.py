# SPDX-License-Identifier: Apache-2.0
"""Payload identification: a payload's mass, centre of mass and rotational inertia from joint
efforts measured on the robot.

- ``identify_payload``: m and c from efforts measured at rest, by linear least squares on the
  payload's gravity regressor (``PayloadEstimate``);
- ``identify_payload_inertia``: all ten inertial parameters from efforts measured in motion,
  on the inertial regressor (``InertialEstimate``);
- ``suggest_identification_poses``: resting poses that make the first well conditioned.

Each fit scales the regressor's columns to unit norm, refuses data that cannot separate the
parameters (``IdentificationError`` says why and what would help) and reports standard
deviations from the residual, never below a noise floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rb_dynamics.dynamics import (
    INERTIAL_PARAMETER_NAMES,
    Payload,
    check_vector,
    default_payload_link,
    gravity,
    payload_body,
    payload_gravity_regressor,
    payload_inertial_regressor,
    rnea,
)
from rb_dynamics.model import Model

__all__ = [
    "DEFAULT_NOISE_FLOOR",
    "MAX_CONDITION",
    "MAX_IDENTIFICATION_POSES",
    "MIN_IDENTIFICATION_POSES",
    "MIN_MASS_SIGNIFICANCE",
    "IdentificationError",
    "InertialEstimate",
    "PayloadEstimate",
    "identify_payload",
    "identify_payload_inertia",
    "suggest_identification_poses",
]

MAX_IDENTIFICATION_POSES = 10_000
MIN_IDENTIFICATION_POSES = 2  # one pose never shows the COM component along gravity
# Condition number of the column-scaled regressor above which the poses are refused as unable
# to separate the parameters: past it, an effort error of 1e-3 relative (a good sensor) can move
# the parameters by 10 times their size. Good pose sets give 1–10; the standard deviations of
# an accepted estimate say how well it is determined.
MAX_CONDITION = 1e4
MIN_MASS_SIGNIFICANCE = 3.0  # the mass estimate must exceed 3 standard deviations
DEFAULT_NOISE_FLOOR = 1e-3  # N·m: no joint effort is known better than this

class IdentificationError(ValueError):
    """The data cannot determine the parameters (a payload's, or the arm's in ``base_fit``); the
    message says why (and what would help)."""


@dataclass(frozen=True, eq=False)
class PayloadEstimate:
    """A payload identified from efforts at rest, with its uncertainty.

    Standard deviations come from the residual variance (never below the noise floor) and
    (YᵀY)⁻¹, the COM's propagated from m·c by first order. ``bias`` is the per-joint constant
    the fit absorbed (offsets, friction held at rest), None without one.
    """

    link: str
    mass: float
    com: np.ndarray
    mass_std: float
    com_std: np.ndarray
    bias: np.ndarray | None
    bias_std: np.ndarray | None
    residual_rms: float  # N·m, over every joint of every pose
    noise_std: float  # N·m, residual standard deviation estimate (RSS / degrees of freedom)
    condition: float  # of the column-scaled regressor
    n_poses: int
    dof: int  # equations minus unknowns

    def as_payload(self) -> Payload:
        """The estimate as a point-mass Payload (resting data show no rotational inertia)."""
        return Payload(self.link, self.mass, self.com)


def _poses(x, n: int, name: str) -> np.ndarray:
    arr = check_vector(x, n, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (N, {n}), one row per pose, got {arr.shape}")
    if arr.shape[0] > MAX_IDENTIFICATION_POSES:
        raise ValueError(f"{name}: {arr.shape[0]} poses, more than the limit "
                         f"{MAX_IDENTIFICATION_POSES}")
    return arr


def _weakest_direction(vt_row: np.ndarray, names: list[str]) -> str:
    order = np.argsort(-np.abs(vt_row))[:3]
    return " ".join(f"{vt_row[k]:+.2f}·{names[k]}" for k in order if abs(vt_row[k]) > 0.05)


_POSES_HINT = ("Use poses that turn the link through different orientations "
               "(suggest_identification_poses)")


def _least_squares(A: np.ndarray, b: np.ndarray, names: list[str], noise_floor: float,
                   hint: str = _POSES_HINT):
    """θ, cov(θ), RSS, dof and condition of min ‖Aθ − b‖ with the columns scaled to unit norm
    (so the condition number measures the data, not the parameters' units)."""
    rows, cols = A.shape
    dof = rows - cols
    if dof < 1:
        raise IdentificationError(
            f"too few poses or samples: {rows} equations for {cols} unknowns "
            f"({', '.join(names)}); measure more"
        )
    scale = np.linalg.norm(A, axis=0)
    if np.any(scale == 0):
        dead = [names[k] for k in np.flatnonzero(scale == 0)]
        listed = ", ".join(dead[:6]) + (f" and {len(dead) - 6} more" if len(dead) > 6 else "")
        raise IdentificationError(f"the efforts never depend on {listed}: nothing measures "
                                  f"them. {hint}")
    U, s, Vt = np.linalg.svd(A / scale, full_matrices=False)
    condition = float(s[0] / s[-1]) if s[-1] > 0 else math.inf
    if condition > MAX_CONDITION:
        raise IdentificationError(
            f"the data cannot separate the parameters: condition number {condition:.3g} of "
            f"the column-scaled regressor exceeds {MAX_CONDITION:g}; the least determined "
            f"combination is {_weakest_direction(Vt[-1], names)}. {hint}"
        )
    theta = (Vt.T @ ((U.T @ b) / s)) / scale
    residual = b - A @ theta
    rss = float(residual @ residual)
    variance = max(rss / dof, noise_floor**2)
    cov = (Vt.T / s**2) @ Vt * variance / np.outer(scale, scale)
    return theta, cov, rss, dof, condition


def _fit_options(bias: str, allowed: tuple[str, ...], reference_efforts, noise_floor) -> str:
    """The bias model after "auto" (the first allowed one, "none" given reference efforts)."""
    if bias == "auto":
        bias = allowed[0] if reference_efforts is None else "none"
    if bias not in allowed:
        raise ValueError(f"bias must be one of {('auto',) + allowed}, not {bias!r}")
    if not (isinstance(noise_floor, float | int) and math.isfinite(noise_floor)
            and noise_floor > 0):
        raise ValueError(f"noise_floor must be a positive number of N·m, got {noise_floor!r}")
    return bias


def _bias_columns(model: Model, bias: str, v: np.ndarray) -> tuple[list[np.ndarray], list[str]]:
    """Per-joint nuisance columns (N, nv, ·): an offset, plus viscous q̇ and Coulomb sign(q̇)
    friction for "friction"."""
    n, names = len(v), _v_names(model)
    if bias == "none":
        return [], []
    blocks = [np.broadcast_to(np.eye(model.nv), (n, model.nv, model.nv))]
    labels = [f"offset[{name}]" for name in names]
    if bias == "friction":
        blocks += [v[:, :, None] * np.eye(model.nv), np.sign(v)[:, :, None] * np.eye(model.nv)]
        labels += [f"viscous[{name}]" for name in names]
        labels += [f"coulomb[{name}]" for name in names]
    return blocks, labels


def _residual_efforts(model, efforts, model_efforts, reference_efforts) -> np.ndarray:
    """Measured efforts minus what the model explains (or minus the measurement without the
    payload, when given)."""
    if reference_efforts is None:
        return efforts - model_efforts()
    reference = _poses(reference_efforts, model.nv, "reference_efforts")
    if reference.shape != efforts.shape:
        raise ValueError(f"reference_efforts has shape {reference.shape}, efforts "
                         f"{efforts.shape}: one row per pose, measured without the payload")
    return efforts - reference


def identify_payload(
    model: Model,
    poses,
    efforts,
    link: str | None = None,
    *,
    bias: str = "auto",
    reference_efforts=None,
    noise_floor: float = DEFAULT_NOISE_FLOOR,
) -> PayloadEstimate:
    """Mass and COM of a payload on ``link`` from joint efforts measured at rest.

    At rest, τ_measured − g_model(q) = Y(q) θ (+ b), θ = [m, m·c] (``payload_gravity_regressor``)
    solved by linear least squares over all poses (N, nq) and efforts (N, nv). ``bias``:
    "per_joint" adds a constant per joint (torque offsets, friction that holds the arm), "none"
    trusts the model's gravity, "auto" is "per_joint" unless ``reference_efforts`` (the same
    poses measured without the payload) are given: then their difference is fitted, in which
    the model's own errors and the offsets cancel. Raises ``IdentificationError`` when the
    poses cannot separate the parameters or the mass is not significant.
    """
    link = default_payload_link(model) if link is None else link
    payload_body(model, link)
    bias = _fit_options(bias, ("per_joint", "none"), reference_efforts, noise_floor)
    poses = _poses(poses, model.nq, "poses")
    efforts = _poses(efforts, model.nv, "efforts")
    n = poses.shape[0]
    if efforts.shape[0] != n:
        raise ValueError(f"efforts has {efforts.shape[0]} rows for {n} poses")
    if n < MIN_IDENTIFICATION_POSES:
        raise IdentificationError(
            f"{n} pose(s): at least {MIN_IDENTIFICATION_POSES} are needed (one pose never "
            "shows the COM's component along gravity)"
        )
    y = _residual_efforts(model, efforts, lambda: gravity(model, poses),
                          reference_efforts)
    blocks, labels = _bias_columns(model, "none" if bias == "none" else "offset",
                                   np.zeros_like(efforts))
    names = ["m", "m·cx", "m·cy", "m·cz"] + labels
    Y = payload_gravity_regressor(model, poses, link)  # (N, nv, 4)
    A = np.concatenate([Y] + blocks, axis=-1).reshape(n * model.nv, -1)
    theta, cov, rss, dof, condition = _least_squares(A, y.reshape(-1), names, noise_floor)
    return _estimate(link, theta, cov, rss, dof, condition, n, model.nv, bias)


def _v_names(model: Model) -> list[str]:
    names = [""] * model.nv
    for name, vi, kind in zip(model.joint_names, model.joint_v_index, model.joint_kinds):
        nv = {"free": 6, "planar": 3}.get(kind, 1)
        for k in range(nv):
            names[vi + k] = name if nv == 1 else f"{name}[{k}]"
    return names


def _mass_and_com(theta: np.ndarray, cov: np.ndarray):
    """(m, σ_m, c, σ_c) from θ = [m, m·c, …]; refuses a mass that is not significant."""
    mass = float(theta[0])
    mass_std = float(math.sqrt(cov[0, 0]))
    if not mass > MIN_MASS_SIGNIFICANCE * mass_std:
        raise IdentificationError(
            f"no significant payload: m = {mass:.4g} ± {mass_std:.2g} kg (needs m > "
            f"{MIN_MASS_SIGNIFICANCE:g} standard deviations); a payload lighter than the "
            "effort noise allows, or efforts that do not include it"
        )
    com = theta[1:4] / mass
    # c = (m c)/m: first-order propagation, J = ∂c/∂θ = [−c/m, 1/m]
    J = np.hstack([-com[:, None] / mass, np.eye(3) / mass])
    com_std = np.sqrt(np.diag(J @ cov[:4, :4] @ J.T))
    return mass, mass_std, com, com_std


def _estimate(link, theta, cov, rss, dof, condition, n, nv, bias) -> PayloadEstimate:
    mass, mass_std, com, com_std = _mass_and_com(theta, cov)
    has_bias = bias == "per_joint"
    return PayloadEstimate(
        link=link,
        mass=mass,
        com=com,
        mass_std=mass_std,
        com_std=com_std,
        bias=theta[4:].copy() if has_bias else None,
        bias_std=np.sqrt(np.diag(cov)[4:]) if has_bias else None,
        residual_rms=math.sqrt(rss / (n * nv)),
        noise_std=math.sqrt(rss / dof),
        condition=condition,
        n_poses=n,
        dof=dof,
    )


@dataclass(frozen=True, eq=False)
class InertialEstimate:
    """All ten inertial parameters of a payload, identified from efforts in motion.

    ``parameters`` in ``INERTIAL_PARAMETER_NAMES`` order (link frame, rotational inertia about
    the link origin) with their standard deviations; ``friction`` (nv, k) the per-joint
    nuisance terms fitted with them (offset, then viscous and Coulomb for "friction").
    """

    link: str
    parameters: np.ndarray
    parameters_std: np.ndarray
    mass_std: float
    com_std: np.ndarray
    friction: np.ndarray | None
    residual_rms: float
    noise_std: float
    condition: float
    n_samples: int
    dof: int

    @property
    def mass(self) -> float:
        return float(self.parameters[0])

    @property
    def com(self) -> np.ndarray:
        return self.parameters[1:4] / self.mass

    @property
    def inertia(self) -> np.ndarray:
        """Rotational inertia about the COM (link axes): I_O − m (|c|² 1 − c cᵀ)."""
        xx, xy, yy, xz, yz, zz = self.parameters[4:]
        I_origin = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
        mc = self.parameters[1:4]
        return I_origin - ((mc @ mc) * np.eye(3) - np.outer(mc, mc)) / self.mass

    def as_payload(self) -> Payload:
        """The estimate as a Payload; a ValueError if noise made the inertia unphysical."""
        return Payload(self.link, self.mass, self.com, self.inertia)


def identify_payload_inertia(
    model: Model,
    positions,
    velocities,
    accelerations,
    efforts,
    link: str | None = None,
    *,
    bias: str = "auto",
    reference_efforts=None,
    noise_floor: float = DEFAULT_NOISE_FLOOR,
) -> InertialEstimate:
    """Mass, COM and rotational inertia of a payload from efforts measured along a motion.

    τ_measured − τ_model(q, q̇, q̈) = Y(q, q̇, q̈) π (+ per joint: offset + viscous·q̇ +
    Coulomb·sign(q̇)), π the ten inertial parameters (``payload_inertial_regressor``), by
    linear least squares over the samples (N, n). ``bias``: "friction" (default without
    reference efforts), "offset", "none" (default with ``reference_efforts``, the same motion
    measured without the payload). Refused (``IdentificationError``) when the motion does not
    excite every parameter: then identify mass and COM at rest with ``identify_payload``.
    """
    link = default_payload_link(model) if link is None else link
    payload_body(model, link)
    bias = _fit_options(bias, ("friction", "offset", "none"), reference_efforts, noise_floor)
    q = _poses(positions, model.nq, "positions")
    v, a, tau = (_poses(x, model.nv, name) for x, name in (
        (velocities, "velocities"), (accelerations, "accelerations"), (efforts, "efforts")))
    n = len(q)
    if not len(v) == len(a) == len(tau) == n:
        raise ValueError(f"positions, velocities, accelerations and efforts need the same "
                         f"number of rows, got {n}, {len(v)}, {len(a)}, {len(tau)}")
    y = _residual_efforts(model, tau, lambda: rnea(model, q, v, a), reference_efforts)
    blocks, labels = _bias_columns(model, bias, v)
    A = np.concatenate([payload_inertial_regressor(model, q, v, a, link)] + blocks, axis=-1)
    theta, cov, rss, dof, condition = _least_squares(
        A.reshape(n * model.nv, -1), y.reshape(-1), list(INERTIAL_PARAMETER_NAMES) + labels,
        noise_floor, "The motion does not excite every inertial parameter: identify mass and "
        "COM at rest (identify_payload), or move faster through more varied motions")
    mass, mass_std, _, com_std = _mass_and_com(theta, cov)
    return InertialEstimate(
        link=link,
        parameters=theta[:10].copy(),
        parameters_std=np.sqrt(np.diag(cov)[:10]),
        mass_std=mass_std,
        com_std=com_std,
        friction=theta[10:].reshape(-1, model.nv).T.copy() if blocks else None,
        residual_rms=math.sqrt(rss / (n * model.nv)),
        noise_std=math.sqrt(rss / dof),
        condition=condition,
        n_samples=n,
        dof=dof,
    )


def _candidate_poses(model: Model, count: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform poses inside the position limits (5 % margin; unlimited joints in [−π, π])."""
    lower, upper = model.position_lower.copy(), model.position_upper.copy()
    unlimited = ~(np.isfinite(lower) & np.isfinite(upper))
    lower[unlimited], upper[unlimited] = -math.pi, math.pi
    margin = 0.05 * (upper - lower)
    return rng.uniform(lower + margin, upper - margin, size=(count, model.nq))


def suggest_identification_poses(
    model: Model,
    link: str | None = None,
    count: int = 20,
    rng: np.random.Generator | None = None,
    *,
    bias: str = "per_joint",
    candidates: int | None = None,
    effort_margin: float = 0.8,
) -> np.ndarray:
    """``count`` static poses (count, nq) that make ``identify_payload`` well conditioned.

    Greedy D-optimal design: from ``candidates`` random poses inside the position limits
    whose model gravity stays under ``effort_margin`` × the effort limits, repeatedly add the
    pose that most increases det of the information matrix of [m, m·c] (with the per-joint
    bias eliminated when ``bias`` is "per_joint"). Collisions are not checked: look at the
    poses before sending a real arm to them.
    """
    link = default_payload_link(model) if link is None else link
    if model.floating_base or any(k not in ("revolute", "prismatic") for k in model.joint_kinds):
        raise ValueError("pose suggestions need a fixed-base model with 1-DoF joints")
    if not (isinstance(count, int | np.integer) and 2 <= count <= MAX_IDENTIFICATION_POSES):
        raise ValueError(f"count must be an integer in [2, {MAX_IDENTIFICATION_POSES}], "
                         f"got {count!r}")
    if bias not in ("per_joint", "none"):
        raise ValueError(f"bias must be 'per_joint' or 'none', not {bias!r}")
    rng = np.random.default_rng() if rng is None else rng
    n_candidates = min(max(20 * count, 500), 20 * MAX_IDENTIFICATION_POSES)
    if candidates is not None:
        n_candidates = int(candidates)
        if not count <= n_candidates <= 20 * MAX_IDENTIFICATION_POSES:
            raise ValueError(f"candidates must be in [count, {20 * MAX_IDENTIFICATION_POSES}]")
    poses = _candidate_poses(model, n_candidates, rng)
    holdable = np.all(np.abs(gravity(model, poses))
                      <= effort_margin * model.effort_limit, axis=1)
    poses = poses[holdable]
    if len(poses) < count:
        raise ValueError(f"only {len(poses)} of {n_candidates} random poses keep gravity under "
                         f"{effort_margin:g} × the effort limits; ask for fewer poses")
    chosen = _greedy_d_optimal(payload_gravity_regressor(model, poses, link), count, rng,
                               centred=bias == "per_joint")
    return poses[chosen]


def _greedy_d_optimal(Y: np.ndarray, count: int, rng, centred: bool) -> list[int]:
    """Indices of ``count`` rows of Y (C, nv, p) maximising log det of the information Σ YᵀY,
    minus N ȲᵀȲ when a per-joint constant is eliminated."""
    gram = np.swapaxes(Y, -1, -2) @ Y  # (C, p, p)
    p = Y.shape[-1]
    ridge = 1e-9 * float(np.trace(gram.mean(axis=0))) * np.eye(p)
    chosen = [int(rng.integers(len(Y)))]
    info_sum, y_sum = gram[chosen[0]].copy(), Y[chosen[0]].copy()
    available = np.ones(len(Y), dtype=bool)
    available[chosen[0]] = False
    for n in range(2, count + 1):
        info = info_sum + gram
        if centred:
            ys = y_sum + Y
            info = info - np.swapaxes(ys, -1, -2) @ ys / n
        score = np.linalg.slogdet(info + ridge)[1]
        score[~available] = -np.inf
        best = int(np.argmax(score))
        chosen.append(best)
        available[best] = False
        info_sum += gram[best]
        y_sum += Y[best]
    return chosen
