"""Constrained dynamics (seed 001): constraints as A(q, q̇, t) q̈ = b, solved two ways.

- ``udwadia_kalaba``: Gauss's principle in closed form,
  q̈ = a + M^{-1/2} (A M^{-1/2})⁺ (b − A a) with a = M⁻¹F. We use the Cholesky factor L
  (M = L Lᵀ) in place of M^{1/2}: any factor gives the same minimiser of (q̈−a)ᵀM(q̈−a) subject
  to A q̈ = b, and the pseudo-inverse copes with redundant, linearly dependent rows.
- ``rosenberg``: the (extended) Rosenberg embedding for independent constraints: split
  q̈ = [q̈₁; q̈₂] so that A₁ is square and invertible, embed q̈₁ = A₁⁻¹(b − A₂q̈₂) and the virtual
  displacements δq = T δq₂, T = [−A₁⁻¹A₂; I], in the fundamental equation δqᵀ(M q̈ − F) = 0:
  (TᵀMT) q̈₂ = Tᵀ(F − M [A₁⁻¹b; 0]).

Both return the constraint force F_c = M q̈ − F too.

Holonomic constraints φ(q, t) = 0 enter in second-order form with Baumgarte stabilisation,
A q̈ = −J̇q̇ − 2α φ̇ − β² φ (default α = β = 10 s⁻¹: a critically damped return to the
constraint in ~0.5 s without stiffening the integration at millisecond steps). Velocity
(nonholonomic) constraints A(q) q̇ = c use b = −Ȧq̇ − α (A q̇ − c).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from . import dynamics
from .model import Model

__all__ = [
    "Baumgarte",
    "ConstrainedAcceleration",
    "Constraint",
    "ConstraintRows",
    "FixedPoint",
    "FrameWeld",
    "JointCoupling",
    "LoopClosurePoint",
    "UserConstraint",
    "constrained_forward_dynamics",
    "rosenberg",
    "udwadia_kalaba",
]


@dataclass(frozen=True)
class Baumgarte:
    """Stabilisation gains (1/s): b gets −2α φ̇ − β² φ."""

    alpha: float = 10.0
    beta: float = 10.0


@dataclass
class ConstraintRows:
    A: np.ndarray  # (m, nv)
    b: np.ndarray  # (m,)
    violation: np.ndarray  # φ (position level) or A q̇ − c (velocity level), for reporting


class Constraint:
    """A constraint supplies its rows A q̈ = b at a state."""

    def rows(self, model: Model, q: np.ndarray, v: np.ndarray, t: float,
             gains: Baumgarte) -> ConstraintRows:
        raise NotImplementedError


def _world_point(model: Model, q, link: str, point) -> np.ndarray:
    T = dynamics.link_pose(model, q, link)
    return T[:3, :3] @ np.asarray(point, dtype=float) + T[:3, 3]


def _holonomic(J: np.ndarray, bias: np.ndarray, phi: np.ndarray, v: np.ndarray,
               gains: Baumgarte) -> ConstraintRows:
    phi_dot = J @ v
    b = -bias - 2.0 * gains.alpha * phi_dot - gains.beta**2 * phi
    return ConstraintRows(J, b, phi)


@dataclass
class FixedPoint(Constraint):
    """A point of a link (link coordinates) held at a world position."""

    link: str
    point: Sequence[float] = (0.0, 0.0, 0.0)
    target: Sequence[float] | None = None  # default: where the point is when first evaluated

    def rows(self, model, q, v, t, gains):
        position = _world_point(model, q, self.link, self.point)
        if self.target is None:
            self.target = position.copy()
        J = dynamics.point_jacobian(model, q, self.link, self.point)
        bias = dynamics.link_acceleration(model, q, v, np.zeros(model.nv), self.link,
                                          self.point)[:3]
        return _holonomic(J, bias, position - np.asarray(self.target), v, gains)


@dataclass
class LoopClosurePoint(Constraint):
    """Two link points kept together: a loop joint that leaves rotation free (spherical)."""

    link_a: str
    link_b: str
    point_a: Sequence[float] = (0.0, 0.0, 0.0)
    point_b: Sequence[float] = (0.0, 0.0, 0.0)

    def rows(self, model, q, v, t, gains):
        zero = np.zeros(model.nv)
        J = (dynamics.point_jacobian(model, q, self.link_a, self.point_a)
             - dynamics.point_jacobian(model, q, self.link_b, self.point_b))
        bias = (dynamics.link_acceleration(model, q, v, zero, self.link_a, self.point_a)[:3]
                - dynamics.link_acceleration(model, q, v, zero, self.link_b, self.point_b)[:3])
        phi = (_world_point(model, q, self.link_a, self.point_a)
               - _world_point(model, q, self.link_b, self.point_b))
        return _holonomic(J, bias, phi, v, gains)


@dataclass
class FrameWeld(Constraint):
    """Two link frames held together in position and orientation (a 6-D loop joint).

    The relative pose is the one at the first evaluation unless given.
    """

    link_a: str
    link_b: str
    relative_rotation: np.ndarray | None = None  # R_aᵀ R_b to keep

    def rows(self, model, q, v, t, gains):
        zero = np.zeros(model.nv)
        Ja = dynamics.link_jacobian(model, q, self.link_a, "local_world_aligned")
        Jb = dynamics.link_jacobian(model, q, self.link_b, "local_world_aligned")
        Ta = dynamics.link_pose(model, q, self.link_a)
        Tb = dynamics.link_pose(model, q, self.link_b)
        if self.relative_rotation is None:
            self.relative_rotation = Ta[:3, :3].T @ Tb[:3, :3]
        # position: origin of b stays at origin of a; orientation: small-angle error vector
        R_error = Ta[:3, :3] @ self.relative_rotation @ Tb[:3, :3].T
        angle_error = 0.5 * np.array([R_error[2, 1] - R_error[1, 2], R_error[0, 2] - R_error[2, 0],
                                      R_error[1, 0] - R_error[0, 1]])
        phi = np.concatenate([Ta[:3, 3] - Tb[:3, 3], angle_error])
        J = np.vstack([Ja[:3] - Jb[:3], Ja[3:] - Jb[3:]])
        acc_a = dynamics.link_acceleration(model, q, v, zero, self.link_a)
        acc_b = dynamics.link_acceleration(model, q, v, zero, self.link_b)
        return _holonomic(J, acc_a - acc_b, phi, v, gains)


@dataclass
class JointCoupling(Constraint):
    """q_follower = ratio · q_leader + offset (a gear or belt between two joints)."""

    follower: str
    leader: str
    ratio: float = 1.0
    offset: float = 0.0

    def rows(self, model, q, v, t, gains):
        A = np.zeros((1, model.nv))
        follower = model.joint_index(self.follower)
        leader = model.joint_index(self.leader)
        A[0, model.joint_v_index[follower]] = 1.0
        A[0, model.joint_v_index[leader]] -= self.ratio
        phi = np.array([q[model.joint_q_index[follower]] - self.ratio
                        * q[model.joint_q_index[leader]] - self.offset])
        return _holonomic(A, np.zeros(1), phi, v, gains)


@dataclass
class UserConstraint(Constraint):
    """Any constraint given as a callable (model, q, v, t) → (A, b) or (A, b, violation)."""

    function: Callable

    def rows(self, model, q, v, t, gains):
        result = self.function(model, q, v, t)
        A, b = np.atleast_2d(np.asarray(result[0], float)), np.atleast_1d(np.asarray(result[1],
                                                                                    float))
        violation = np.asarray(result[2], float) if len(result) > 2 else A @ v * 0.0
        return ConstraintRows(A, b, violation)


# ----------------------------------------------------------------------------- solvers


def _check(M: np.ndarray, F: np.ndarray, A: np.ndarray, b: np.ndarray) -> None:
    n = M.shape[0]
    if M.shape != (n, n) or F.shape != (n,) or A.ndim != 2 or A.shape[1] != n \
            or b.shape != (A.shape[0],):
        raise ValueError(f"shapes do not fit: M {M.shape}, F {F.shape}, A {A.shape}, b {b.shape}")
    if not all(np.all(np.isfinite(x)) for x in (M, F, A, b)):
        raise ValueError("M, F, A or b contains NaN or inf")


def udwadia_kalaba(M: np.ndarray, F: np.ndarray, A: np.ndarray,
                   b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q̈, F_c) by the Udwadia–Kalaba equation; redundant constraints are fine."""
    M, F, A, b = (np.asarray(x, dtype=float) for x in (M, F, A, b))
    _check(M, F, A, b)
    L = np.linalg.cholesky(M)
    a = scipy.linalg.cho_solve((L, True), F)
    # A M^{-1/2} with the Cholesky factor: A L^{-T}
    B = scipy.linalg.solve_triangular(L, A.T, lower=True).T
    y = np.linalg.pinv(B) @ (b - A @ a)
    qdd = a + scipy.linalg.solve_triangular(L.T, y, lower=False)
    return qdd, M @ qdd - F


def _independent_split(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Columns for q₁ (A₁ square, best conditioned by pivoted QR) and the rest for q₂."""
    m = A.shape[0]
    _, R, pivots = scipy.linalg.qr(A, pivoting=True, mode="economic")
    if m > A.shape[1] or abs(R[m - 1, m - 1]) <= 1e-12 * max(abs(R[0, 0]), 1e-300):
        raise ValueError("the constraints are not independent: use udwadia_kalaba")
    return np.sort(pivots[:m]), np.sort(pivots[m:])


def rosenberg(M: np.ndarray, F: np.ndarray, A: np.ndarray,
              b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q̈, F_c) by the extended Rosenberg embedding (independent constraints only)."""
    M, F, A, b = (np.asarray(x, dtype=float) for x in (M, F, A, b))
    _check(M, F, A, b)
    dependent, free = _independent_split(A)
    n = M.shape[0]
    lu = scipy.linalg.lu_factor(A[:, dependent])
    T = np.zeros((n, free.size))
    T[dependent] = -scipy.linalg.lu_solve(lu, A[:, free])
    T[free, np.arange(free.size)] = 1.0
    particular = np.zeros(n)
    particular[dependent] = scipy.linalg.lu_solve(lu, b)
    reduced = T.T @ M @ T
    qdd_free = scipy.linalg.solve(reduced, T.T @ (F - M @ particular), assume_a="pos")
    qdd = T @ qdd_free + particular
    return qdd, M @ qdd - F


SOLVERS = {"udwadia_kalaba": udwadia_kalaba, "rosenberg": rosenberg}


@dataclass
class ConstrainedAcceleration:
    qdd: np.ndarray
    constraint_force: np.ndarray  # generalized force F_c = M q̈ − F
    violation: np.ndarray  # stacked φ / (A q̇ − c) of every constraint
    residual: float  # ‖A q̈ − b‖, to see whether the constraints could be met


def constrained_forward_dynamics(
    model: Model,
    q: np.ndarray,
    v: np.ndarray,
    tau: np.ndarray,
    constraints: Sequence[Constraint],
    t: float = 0.0,
    method: str = "udwadia_kalaba",
    gains: Baumgarte | None = None,
) -> ConstrainedAcceleration:
    """q̈ of the robot under τ and the constraints, with the constraint forces."""
    if method not in SOLVERS:
        raise ValueError(f"method must be one of {sorted(SOLVERS)}, not {method!r}")
    gains = gains or Baumgarte()
    q = dynamics.check_vector(q, model.nq, "q")
    v = dynamics.check_vector(v, model.nv, "v")
    tau = dynamics.check_vector(tau, model.nv, "tau")
    M = dynamics.crba(model, q)
    F = tau - dynamics.nonlinear_effects(model, q, v)
    if not constraints:
        return ConstrainedAcceleration(np.linalg.solve(M, F), np.zeros(model.nv), np.zeros(0),
                                       0.0)
    rows = [c.rows(model, q, v, t, gains) for c in constraints]
    A = np.vstack([r.A for r in rows])
    b = np.concatenate([r.b for r in rows])
    qdd, force = SOLVERS[method](M, F, A, b)
    residual = float(np.linalg.norm(A @ qdd - b))
    if not math.isfinite(residual):
        raise ValueError("constrained dynamics produced a non-finite result")
    return ConstrainedAcceleration(qdd, force, np.concatenate([r.violation for r in rows]),
                                   residual)

