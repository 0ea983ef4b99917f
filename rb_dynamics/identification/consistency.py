# SPDX-License-Identifier: Apache-2.0
"""A physically consistent full parameter set from the identified base parameters, by
semidefinite programming [Sousa & Cortesão 2014; Wensing, Kim & Slotine 2017].

Each body's ten inertial parameters are the pseudo-inertia

    J = [[Σ, h], [hᵀ, m]],   Σ = ½ tr(Ī)·1 − Ī,   h = m·c,

(Ī the rotational inertia about the body origin), which is positive definite exactly when a
real mass distribution has these parameters. The program, over all parameters θ:

    minimise   ‖R (B θ − β̂)‖² + ‖(θ − θ_URDF) / s‖²
    subject to J_b(θ) − J_welded,b ⪰ ε_b·1 for every body b,
               armature, viscous, Coulomb, Stribeck ≥ 0,

where ‖R (B θ − β̂)‖² is the increase of the weighted residual (χ²) over the least-squares
fit's — the data term, in units of the noise — and the second term a weak prior toward the
URDF's values with scale s (half the body's URDF mass, that mass times the body's size for
m·c, times its size squared for the inertia; a tenth of the effort limit for the joint terms).
Directions the data determine follow the data; those no effort sees (the parameters outside
the base) stay near the URDF. ``J_welded,b`` is what the links welded to the body's link
(fixed joints: a flange, a hand) contribute in the URDF: they keep their URDF values, and the
body's own link carries the correction, itself physical.

Needs ``cvxpy`` and ``clarabel`` (the identification extra; ``optional.require``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rb_dynamics.model import Model

from .base_fit import BaseFit
from .optional import require
from .regressor import ParameterLayout, body_parameters

__all__ = ["ConsistentFit", "consistent_parameters", "pseudo_inertia"]

# the pseudo-inertia as a linear map of the ten parameters: vec(J) = G π (row-major 4×4)
_G = np.zeros((16, 10))
for _k in range(3):  # Σ_kk = ½(tr Ī) − Ī_kk
    for _d in (4, 6, 9):
        _G[5 * _k, _d] += 0.5
_G[0, 4] -= 1.0
_G[5, 6] -= 1.0
_G[10, 9] -= 1.0
for (_r, _c), _d in {(0, 1): 5, (0, 2): 7, (1, 2): 8}.items():  # Σ_rc = −Ī_rc
    _G[4 * _r + _c, _d] = _G[4 * _c + _r, _d] = -1.0
for _k in range(3):
    _G[4 * _k + 3, 1 + _k] = _G[12 + _k, 1 + _k] = 1.0
_G[15, 0] = 1.0
_G_INV = np.linalg.pinv(_G)


def pseudo_inertia(pi: np.ndarray) -> np.ndarray:
    """The 4×4 pseudo-inertia of ten inertial parameters."""
    return (_G @ np.asarray(pi, dtype=float)).reshape(4, 4)


@dataclass(frozen=True, eq=False)
class ConsistentFit:
    """The consistent parameters θ and how far they are from the data's optimum."""

    theta: np.ndarray
    beta: np.ndarray  # B θ
    chi2_increase: float  # ‖R (B θ − β̂)‖²: 0 when the fit was already consistent
    min_eigenvalue: np.ndarray  # (bodies,) of each body's own link pseudo-inertia
    status: str


def _prior_scale(layout: ParameterLayout, theta0: np.ndarray) -> np.ndarray:
    model = layout.model
    total = max(model.total_mass, 1e-3)
    scale = np.empty(layout.n_parameters)
    for b in range(model.n_bodies):
        pi = theta0[10 * b:10 * b + 10]
        m = max(pi[0], 1e-3 * total)
        c = pi[1:4] / max(pi[0], 1e-12)
        size = max(np.linalg.norm(c), np.sqrt(max(np.trace(pseudo_inertia(pi)[:3, :3]), 0.0)
                                              / m), 0.05)
        s_m = 0.5 * m
        scale[10 * b:10 * b + 10] = [s_m] + [s_m * size] * 3 + [s_m * size ** 2] * 6
    limit = model.effort_limit[layout.v_index]
    limit = np.where(np.isfinite(limit), limit, 100.0)
    for term in layout.terms:
        scale[layout.term_slice(term)] = 0.1 * limit
    return scale


def welded_pseudo_inertias(model: Model, own_links: list[np.ndarray]) -> list[np.ndarray]:
    """Per body, the pseudo-inertia of the links welded to it: the body's URDF total less its
    own link's spatial inertia (``own_links``, in body coordinates)."""
    return [pseudo_inertia(body_parameters(I) - body_parameters(own))
            for I, own in zip(model.inertia, own_links)]


def consistent_parameters(fit: BaseFit, welded: list[np.ndarray] | None = None,
                          epsilon: float = 1e-6) -> ConsistentFit:
    """θ physically consistent and nearest the data (see the module docstring); ``welded``:
    per body, the pseudo-inertia kept by its welded links (default none); ``epsilon``: the
    margin of positive definiteness, relative to each body's URDF mass × size² scale."""
    cp = require("cvxpy", "the consistent parameter set (semidefinite programming)")
    require("clarabel", "the consistent parameter set (its solver)")
    base = fit.base
    layout = base.layout
    model = layout.model
    theta0 = layout.parameters()
    scale = _prior_scale(layout, theta0)
    nb = model.n_bodies
    welded = welded or [np.zeros((4, 4))] * nb
    # unknowns in units of the prior scale keep the program well scaled
    x = cp.Variable(layout.n_parameters)
    theta = cp.multiply(scale, x)
    constraints = []
    own = []
    for b in range(nb):
        s = scale[10 * b + 4]  # mass × size²
        J = cp.reshape(_G @ theta[10 * b:10 * b + 10], (4, 4), order="C")
        J_own = (J - welded[b]) / s
        own.append(J_own)
        constraints.append(0.5 * (J_own + J_own.T) >> epsilon * np.eye(4))
    for term in layout.terms:
        if term != "offset":
            constraints.append(x[layout.term_slice(term)] >= 0)
    B = base.matrix
    data = cp.sum_squares(fit.R @ (B @ theta - fit.beta))
    prior = cp.sum_squares(x - theta0 / scale)
    problem = cp.Problem(cp.Minimize(data + prior), constraints)
    problem.solve(solver="CLARABEL")
    if x.value is None:
        raise RuntimeError(f"the consistent parameter program failed: {problem.status}")
    theta_v = scale * x.value
    for term in layout.terms:  # the solver's tolerance can leave −1e-12
        if term != "offset":
            sl = layout.term_slice(term)
            theta_v[sl] = np.maximum(theta_v[sl], 0.0)
    beta = base.project(theta_v)
    eig = np.array([np.linalg.eigvalsh(pseudo_inertia(theta_v[10 * b:10 * b + 10]) - welded[b])[0]
                    for b in range(nb)])
    chi2 = float(np.sum((fit.R @ (beta - fit.beta)) ** 2))
    return ConsistentFit(theta_v, beta, chi2, eig, str(problem.status))
