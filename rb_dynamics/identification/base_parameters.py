# SPDX-License-Identifier: Apache-2.0
"""Base parameters: the combinations of θ that efforts determine [Gautier & Khalil 1990].

Many of θ's columns in the regressor are zero (a body's parameters that no joint feels) or
linear combinations of others (the parameters of bodies on parallel axes). A numerical basis
from the model: stack the regressor at random states, scale its columns to unit norm, and
factorise it by QR with column pivoting, W P = Q R. The first r pivoted columns are
independent; each remaining column is a combination of them, W_d = W_b K (least squares), so

    W θ = W_b β,   β = θ_b + K θ_d   (the base parameters: ``BaseParameters.project``).

Columns below ``ZERO_COLUMN`` of the largest are zeros with rounding and count as zero. The
rank r counts the diagonal entries |R_kk| ≥ ``RANK_TOLERANCE`` · |R_00|. URDFs round their
angles: UR5's writes π/2 as 1.57079632679 (axes tilted ~1e-11 rad), the xArm7's as 1.5708
(3.7e-6 rad), and a tilt of ε rad leaves |R_kk| ≈ ε · |R_00| on combinations that are exactly
dependent in the robot the URDF describes (xArm7: 3.8e-6, a 70th parameter where there are
69). The tolerance covers angles rounded to 1e-4 rad with a margin of ten; the directions that
truly exist in the arms tested sit above 0.4 (a combination 1e-3 as strong as the largest
changes an effort by less than a good sensor's noise, and no excitation could bring it out).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .regressor import ParameterLayout

__all__ = ["RANK_TOLERANCE", "ZERO_COLUMN", "BaseParameters", "base_parameters", "random_states"]

# relative to the largest |R_kk| of the column-scaled regressor: 10 × the 1e-4 rad of a
# coarsely rounded angle
RANK_TOLERANCE = 1e-3
# A column this small relative to the largest is rounding of an exact zero (a body's m·c along
# an axis through its joint, say): scaled to unit norm it would pass for a direction
ZERO_COLUMN = 1e-10


def random_states(layout: ParameterLayout, n: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` random states of the identified joints: positions uniform within their limits
    (±π where unlimited), velocities and accelerations standard normal (rad/s, rad/s²)."""
    lower = layout.model.position_lower[layout.q_index]
    upper = layout.model.position_upper[layout.q_index]
    lower = np.where(np.isfinite(lower), lower, -np.pi)
    upper = np.where(np.isfinite(upper), upper, np.pi)
    q = rng.uniform(lower, upper, (n, layout.n_joints))
    return q, rng.standard_normal(q.shape), rng.standard_normal(q.shape)


@dataclass(frozen=True, eq=False)
class BaseParameters:
    """A basis of base parameters for ``layout``: β = θ[independent] + K θ[dependent].

    ``strength``: |R_kk| / |R_00| of the independent columns in pivot order (how well each
    direction shows in efforts at random states; the smallest ≥ ``RANK_TOLERANCE``).
    """

    layout: ParameterLayout
    independent: np.ndarray  # (r,) indices into θ, ascending
    dependent: np.ndarray  # (P − r,) indices into θ, ascending
    K: np.ndarray  # (r, P − r)
    strength: np.ndarray  # (r,)

    @property
    def count(self) -> int:
        return len(self.independent)

    @property
    def matrix(self) -> np.ndarray:
        """B, (r, P): β = B θ."""
        B = np.zeros((self.count, self.layout.n_parameters))
        B[:, self.independent] = np.eye(self.count)
        B[:, self.dependent] = self.K
        return B

    def project(self, theta: np.ndarray) -> np.ndarray:
        """β of parameters θ ((P,) or (..., P))."""
        theta = np.asarray(theta, dtype=float)
        return theta[..., self.independent] + theta[..., self.dependent] @ self.K.T

    def columns(self, Y: np.ndarray) -> np.ndarray:
        """The base regressor Y_b (Y's independent columns): Y θ = Y_b β."""
        return Y[..., self.independent]

    def names(self) -> list[str]:
        """The name of each base parameter's leading parameter."""
        names = self.layout.names
        return [names[i] for i in self.independent]

    def combination(self, k: int, digits: int = 3, terms: int = 6) -> str:
        """Base parameter k written out: ``a.m + 0.3·b.mcx − …`` (largest terms first)."""
        names = self.layout.names
        row = self.K[k]
        order = np.argsort(-np.abs(row))
        parts = [names[self.independent[k]]]
        for j in order[:terms]:
            if abs(row[j]) < 10.0 ** -digits:
                break
            sign = "−" if row[j] < 0 else "+"
            parts.append(f"{sign} {abs(row[j]):.{digits}g}·{names[self.dependent[j]]}")
        more = int(np.sum(np.abs(row) >= 10.0 ** -digits)) - terms
        return " ".join(parts) + (f" + {more} more" if more > 0 else "")


def base_parameters(layout: ParameterLayout, *, seed: int = 0,
                    tolerance: float = RANK_TOLERANCE) -> BaseParameters:
    """The numerical basis of ``layout``'s base parameters from its regressor at random states
    (a fixed seed: the same basis every time for the same model). ValueError for a model whose
    regressors would not fit in memory (``ParameterLayout.check_regressor_size``)."""
    import scipy.linalg  # here, not above: the nodes start without it

    rng = np.random.default_rng(seed)
    n = max(60, int(np.ceil(4 * layout.n_parameters / layout.n_joints)))
    layout.check_regressor_size(n, copies=4)  # Y, its scaled copy, Q and R of the QR
    W = layout.regressor(*random_states(layout, n, rng)).reshape(-1, layout.n_parameters)
    norms = np.linalg.norm(W, axis=0)
    norms[norms <= ZERO_COLUMN * norms.max()] = 0.0
    W[:, norms == 0] = 0.0
    scaled = W / np.where(norms > 0, norms, 1.0)
    _, R, pivot = scipy.linalg.qr(scaled, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    strength = diag / diag[0] if diag[0] > 0 else diag
    rank = int(np.sum(strength >= tolerance))
    independent, dependent = np.sort(pivot[:rank]), np.sort(pivot[rank:])
    # W_d = W_b K; on the unit-norm columns (the same K, scaled back) for accuracy
    Ks, *_ = np.linalg.lstsq(scaled[:, independent], scaled[:, dependent], rcond=None)
    scale_b = np.where(norms[independent] > 0, norms[independent], 1.0)
    K = Ks * norms[dependent][None, :] / scale_b[:, None]
    K[np.abs(Ks) < 1e-10] = 0.0  # rounding of exact zeros, not geometry
    return BaseParameters(layout, independent, dependent, K, strength[:rank])
