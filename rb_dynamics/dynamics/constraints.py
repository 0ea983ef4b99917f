# SPDX-License-Identifier: Apache-2.0
"""Constrained dynamics ([UK92], [Z23]; docs/conventions.md): constraints as A(q, q̇, t) q̈ = b,
solved two ways.

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

import copy
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rb_dynamics.model import Model

from . import reference as dynamics

__all__ = [
    "CONSTRAINT_TYPES",
    "Baumgarte",
    "ConstrainedAcceleration",
    "Constraint",
    "ConstraintRows",
    "ConstraintSet",
    "FixedPoint",
    "FrameWeld",
    "JointCoupling",
    "LoopClosurePoint",
    "UserConstraint",
    "constrained_forward_dynamics",
    "constraint_from_spec",
    "rosenberg",
    "solve_constrained",
    "udwadia_kalaba",
]


@dataclass(frozen=True)
class Baumgarte:
    """Stabilisation gains (1/s): b gets −2α φ̇ − β² φ."""

    alpha: float = 10.0
    beta: float = 10.0


@dataclass
class ConstraintRows:
    """The rows one constraint adds at a state: A q̈ = b, and its violation."""
    A: np.ndarray  # (m, nv)
    b: np.ndarray  # (m,)
    violation: np.ndarray  # φ (position level) or A q̇ − c (velocity level), for reporting


class Constraint:
    """A constraint supplies its rows A q̈ = b at a state.

    ``holonomic``: the rows are the second-order form of φ(q, t) = 0 and ``violation`` is φ,
    so a simulation can also project the state back onto φ = 0 and A q̇ = 0.
    """

    holonomic = False

    def rows(self, model: Model, q: np.ndarray, v: np.ndarray, t: float,
             gains: Baumgarte) -> ConstraintRows:
        raise NotImplementedError


# The rows of one state share one kinematics pass. Per thread: a node evaluates constraints
# on its service thread and its simulation thread at once.
_last_kinematics = threading.local()


def _kinematics(model: Model, q: np.ndarray, v: np.ndarray) -> dynamics.Kinematics:
    key = (id(model), np.asarray(q, float).tobytes(), np.asarray(v, float).tobytes())
    if getattr(_last_kinematics, "key", None) != key:
        _last_kinematics.key, _last_kinematics.value = key, dynamics.Kinematics(model, q, v)
    return _last_kinematics.value


def _holonomic(J: np.ndarray, bias: np.ndarray, phi: np.ndarray, v: np.ndarray,
               gains: Baumgarte) -> ConstraintRows:
    phi_dot = J @ v
    b = -bias - 2.0 * gains.alpha * phi_dot - gains.beta**2 * phi
    return ConstraintRows(J, b, phi)


@dataclass
class FixedPoint(Constraint):
    """A point of a link (link coordinates) held at a world position."""

    holonomic = True

    link: str
    point: Sequence[float] = (0.0, 0.0, 0.0)
    target: Sequence[float] | None = None  # default: where the point is when first evaluated

    def rows(self, model, q, v, t, gains):
        kin = _kinematics(model, q, v)
        position = kin.point(self.link, self.point)
        if self.target is None:
            self.target = position.copy()
        return _holonomic(kin.jacobian(self.link, self.point)[:3],
                          kin.bias(self.link, self.point)[:3],
                          position - np.asarray(self.target), v, gains)


@dataclass
class LoopClosurePoint(Constraint):
    """Two link points kept together: a loop joint that leaves rotation free (spherical)."""

    holonomic = True

    link_a: str
    link_b: str
    point_a: Sequence[float] = (0.0, 0.0, 0.0)
    point_b: Sequence[float] = (0.0, 0.0, 0.0)

    def rows(self, model, q, v, t, gains):
        kin = _kinematics(model, q, v)
        J = kin.jacobian(self.link_a, self.point_a)[:3] - kin.jacobian(self.link_b,
                                                                       self.point_b)[:3]
        bias = kin.bias(self.link_a, self.point_a)[:3] - kin.bias(self.link_b, self.point_b)[:3]
        phi = kin.point(self.link_a, self.point_a) - kin.point(self.link_b, self.point_b)
        return _holonomic(J, bias, phi, v, gains)


@dataclass
class FrameWeld(Constraint):
    """Two link frames held together in position and orientation (a 6-D loop joint).

    Keeps the pose of ``link_b`` in ``link_a``'s frame at ``relative_pose`` (4×4), by default
    the one at the first evaluation: the origin of b stays on the point t_ab of a, and
    R_a R_ab R_bᵀ stays the identity.
    """

    holonomic = True

    link_a: str
    link_b: str
    relative_pose: np.ndarray | None = None

    def rows(self, model, q, v, t, gains):
        kin = _kinematics(model, q, v)
        Ta, Tb = kin.pose(self.link_a), kin.pose(self.link_b)
        if self.relative_pose is None:
            self.relative_pose = np.linalg.inv(Ta) @ Tb
        t_ab, R_ab = self.relative_pose[:3, 3], self.relative_pose[:3, :3]
        R_error = Ta[:3, :3] @ R_ab @ Tb[:3, :3].T
        # small-angle vector of R_error: its rate is ω_a − ω_b
        angle_error = 0.5 * np.array([R_error[2, 1] - R_error[1, 2], R_error[0, 2] - R_error[2, 0],
                                      R_error[1, 0] - R_error[0, 1]])
        phi = np.concatenate([kin.point(self.link_a, t_ab) - Tb[:3, 3], angle_error])
        Ja, Jb = kin.jacobian(self.link_a, t_ab), kin.jacobian(self.link_b)
        bias_a, bias_b = kin.bias(self.link_a, t_ab), kin.bias(self.link_b)
        # the angular rows of a point Jacobian and bias are those of the link
        return _holonomic(Ja - Jb, bias_a - bias_b, phi, v, gains)


@dataclass
class JointCoupling(Constraint):
    """q_follower = ratio · q_leader + offset (a gear or belt between two joints)."""

    holonomic = True

    follower: str
    leader: str
    ratio: float = 1.0
    offset: float = 0.0

    def rows(self, model, q, v, t, gains):
        A = np.zeros((1, model.nv))
        try:
            follower = model.joint_index(self.follower)
            leader = model.joint_index(self.leader)
        except KeyError as exc:
            raise ValueError(str(exc).strip("'\"")) from None
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
    import scipy.linalg  # here, not above: the nodes start without it

    M, F, A, b = (np.asarray(x, dtype=float) for x in (M, F, A, b))
    _check(M, F, A, b)
    L = np.linalg.cholesky(M)
    a = scipy.linalg.cho_solve((L, True), F, check_finite=False)
    # A M^{-1/2} with the Cholesky factor: A L^{-T}
    B = scipy.linalg.solve_triangular(L, A.T, lower=True, check_finite=False).T
    y = np.linalg.pinv(B) @ (b - A @ a)
    qdd = a + scipy.linalg.solve_triangular(L.T, y, lower=False, check_finite=False)
    return qdd, M @ qdd - F


def _independent_split(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Columns for q₁ (A₁ square, best conditioned by pivoted QR) and the rest for q₂."""
    import scipy.linalg

    m = A.shape[0]
    _, R, pivots = scipy.linalg.qr(A, pivoting=True, mode="economic")
    if m > A.shape[1] or abs(R[m - 1, m - 1]) <= 1e-12 * max(abs(R[0, 0]), 1e-300):
        raise ValueError("the constraints are not independent: use udwadia_kalaba")
    return np.sort(pivots[:m]), np.sort(pivots[m:])


def rosenberg(M: np.ndarray, F: np.ndarray, A: np.ndarray,
              b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q̈, F_c) by the extended Rosenberg embedding (independent constraints only)."""
    import scipy.linalg

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
    """What a constrained forward-dynamics solve gives."""
    qdd: np.ndarray
    constraint_force: np.ndarray  # generalized force F_c = M q̈ − F
    violation: np.ndarray  # stacked φ / (A q̇ − c) of every constraint
    residual: float  # ‖A q̈ − b‖: ~0 when the constraints can be met


# ‖A q̈ − b‖ above this fraction of ‖b‖ + ‖A‖‖q̈‖ means no q̈ meets the constraints
CONSISTENCY_TOLERANCE = 1e-6


def solve_constrained(model: Model, q: np.ndarray, v: np.ndarray, M: np.ndarray, F: np.ndarray,
                      constraints: Sequence[Constraint], t: float = 0.0,
                      method: str = "udwadia_kalaba",
                      gains: Baumgarte | None = None) -> ConstrainedAcceleration:
    """q̈ minimising (q̈ − M⁻¹F)ᵀ M (q̈ − M⁻¹F) subject to the constraints' A q̈ = b.

    Raises ValueError when the constraints cannot all be met (inconsistent rows), when a row is
    not finite, or (Rosenberg) when the rows are dependent.
    """
    if method not in SOLVERS:
        raise ValueError(f"method must be one of {sorted(SOLVERS)}, not {method!r}")
    if not constraints:
        return ConstrainedAcceleration(np.linalg.solve(M, F), np.zeros(model.nv), np.zeros(0),
                                       0.0)
    rows = [c.rows(model, q, v, t, gains or Baumgarte()) for c in constraints]
    A = np.vstack([r.A for r in rows])
    b = np.concatenate([r.b for r in rows])
    qdd, force = SOLVERS[method](M, F, A, b)
    residual = float(np.linalg.norm(A @ qdd - b))
    scale = float(np.linalg.norm(b) + np.linalg.norm(A) * np.linalg.norm(qdd))
    if not math.isfinite(residual):
        raise ValueError("constrained dynamics produced a non-finite result")
    if residual > CONSISTENCY_TOLERANCE * max(scale, 1e-12):
        raise ValueError(f"the constraints are inconsistent: no acceleration meets them all "
                         f"(‖A q̈ − b‖ = {residual:.3g} of {scale:.3g})")
    return ConstrainedAcceleration(qdd, force, np.concatenate([r.violation for r in rows]),
                                   residual)


def constrained_forward_dynamics(
    model: Model,
    q: np.ndarray,
    v: np.ndarray,
    tau: np.ndarray,
    constraints: Sequence[Constraint],
    t: float = 0.0,
    method: str = "udwadia_kalaba",
    gains: Baumgarte | None = None,
    f_ext: dynamics.Wrenches | None = None,
) -> ConstrainedAcceleration:
    """q̈ of the robot under τ (and external wrenches) and the constraints, with their forces."""
    q = dynamics.check_vector(q, model.nq, "q")
    v = dynamics.check_vector(v, model.nv, "v")
    tau = dynamics.check_vector(tau, model.nv, "tau")
    M = dynamics.crba(model, q)
    F = tau - dynamics.rnea(model, q, v, np.zeros(model.nv), f_ext)
    return solve_constrained(model, q, v, M, F, constraints, t, method, gains)


# ----------------------------------------------------------------------------- configuration

CONSTRAINT_TYPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # type: (required keys, optional keys)
    "fixed_point": (("link",), ("point", "target")),
    "loop_point": (("link_a", "link_b"), ("point_a", "point_b")),
    "weld": (("link_a", "link_b"), ()),
    "joint_coupling": (("follower", "leader"), ("ratio", "offset")),
}


def _check_keys(where: str, kind: Any, spec: Mapping[str, Any]) -> None:
    """A known type, no key it does not take, and every key it needs."""
    if kind not in CONSTRAINT_TYPES:
        raise ValueError(f"{where}.type: {kind!r} is not one of {sorted(CONSTRAINT_TYPES)}")
    required, optional = CONSTRAINT_TYPES[kind]
    unknown = sorted(set(spec) - {"type", *required, *optional})
    if unknown:
        raise ValueError(f"{where}: {unknown} do not apply to a {kind} constraint "
                         f"(keys: {[*required, *optional]})")
    missing = [key for key in required if not spec.get(key)]
    if missing:
        raise ValueError(f"{where}.{missing[0]}: required for a {kind} constraint")


class _SpecFields:
    """The values of one constraint description, each checked; errors name ``where.key``."""

    def __init__(self, model: Model, where: str, spec: Mapping[str, Any]):
        self.model, self.where, self.spec = model, where, spec

    def link(self, key: str) -> str:
        if self.spec[key] not in self.model.frames:
            raise ValueError(f"{self.where}.{key}: unknown link {self.spec[key]!r}; links are "
                             f"{sorted(self.model.frames)}")
        return self.spec[key]

    def joint(self, key: str) -> str:
        if self.spec[key] not in self.model.joint_names:
            raise ValueError(f"{self.where}.{key}: unknown joint {self.spec[key]!r}; joints "
                             f"are {self.model.joint_names}")
        return self.spec[key]

    def vector(self, key: str) -> tuple[float, ...]:
        try:
            value = np.asarray(self.spec.get(key, (0.0, 0.0, 0.0)), dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{self.where}.{key}: not 3 numbers") from None
        if value.shape != (3,) or not np.all(np.isfinite(value)):
            raise ValueError(f"{self.where}.{key}: needs 3 finite numbers, "
                             f"got {self.spec[key]!r}")
        return tuple(value.tolist())

    def number(self, key: str, default: float) -> float:
        try:
            value = float(self.spec.get(key, default))
        except (TypeError, ValueError):
            raise ValueError(f"{self.where}.{key}: not a number") from None
        if not math.isfinite(value):
            raise ValueError(f"{self.where}.{key}: must be finite")
        return value


def constraint_from_spec(model: Model, name: str, spec: Mapping[str, Any],
                         prefix: str = "constraints") -> Constraint:
    """One built-in constraint from a plain description (what a YAML file declares).

    ``spec`` has ``type`` (fixed_point, loop_point, weld, joint_coupling) and that type's keys:
    links by name, points as 3 numbers in link coordinates, ``target`` (fixed_point, world;
    default: where the point is at the first evaluation), ``ratio`` and ``offset``
    (joint_coupling: q_follower = ratio·q_leader + offset). Errors name ``name`` and the key
    (as ``<prefix>.<name>.<key>``, the parameter a YAML file sets).
    """
    where = f"{prefix}.{name}"
    kind = spec.get("type")
    _check_keys(where, kind, spec)
    fields = _SpecFields(model, where, spec)
    if kind == "fixed_point":
        target = fields.vector("target") if spec.get("target") is not None else None
        return FixedPoint(fields.link("link"), fields.vector("point"), target)
    if kind == "loop_point":
        return LoopClosurePoint(fields.link("link_a"), fields.link("link_b"),
                                fields.vector("point_a"), fields.vector("point_b"))
    if kind == "weld":
        return FrameWeld(fields.link("link_a"), fields.link("link_b"))
    return JointCoupling(fields.joint("follower"), fields.joint("leader"),
                         fields.number("ratio", 1.0), fields.number("offset", 0.0))


@dataclass
class ConstraintSet:
    """The constraints a simulation or a service honours, with the solver and its gains.

    ``fresh()`` gives copies as they were built, whose default targets (fixed points, welds)
    are taken again at their first evaluation: a new roll-out's start.
    """

    constraints: list[Constraint]
    method: str = "udwadia_kalaba"
    gains: Baumgarte = field(default_factory=Baumgarte)
    names: list[str] = field(default_factory=list)
    projection: bool = True  # simulations put the state back on the holonomic constraints

    def __post_init__(self) -> None:
        self._pristine = copy.deepcopy(self.constraints)  # before any target is taken

    @classmethod
    def from_specs(cls, model: Model, specs: Mapping[str, Mapping[str, Any]],
                   method: str = "udwadia_kalaba", gains: Baumgarte | None = None,
                   projection: bool = True, prefix: str = "constraints") -> ConstraintSet:
        if method not in SOLVERS:
            raise ValueError(f"{prefix}.solver: {method!r} is not one of {sorted(SOLVERS)}")
        gains = gains or Baumgarte()
        if not all(math.isfinite(g) and g >= 0 for g in (gains.alpha, gains.beta)):
            raise ValueError(f"{prefix}.baumgarte_alpha/beta: must be finite and ≥ 0")
        built = [constraint_from_spec(model, name, spec, prefix)
                 for name, spec in specs.items()]
        return cls(built, method, gains, list(specs), projection)

    def __bool__(self) -> bool:
        return bool(self.constraints)

    def fresh(self) -> ConstraintSet:
        return ConstraintSet(copy.deepcopy(self._pristine), self.method, self.gains,
                             list(self.names), self.projection)

    def violation(self, model: Model, q: np.ndarray, v: np.ndarray, t: float = 0.0) -> float:
        """Largest |φ| (m, rad) or |A q̇ − c| of the constraints at a state (0 without any)."""
        rows = [c.rows(model, q, v, t, self.gains) for c in self.constraints]
        return float(max((np.abs(r.violation).max(initial=0.0) for r in rows), default=0.0))

    def solve(self, model: Model, q: np.ndarray, v: np.ndarray, M: np.ndarray, F: np.ndarray,
              t: float = 0.0) -> ConstrainedAcceleration:
        return solve_constrained(model, q, v, M, F, self.constraints, t, self.method,
                                 self.gains)
