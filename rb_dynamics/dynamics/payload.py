# SPDX-License-Identifier: Apache-2.0
"""A payload rigidly attached to a link: its dynamics as a runtime input, and its identification.

- ``Payload``: mass, centre of mass and rotational inertia about the COM, in a link's frame.
- ``with_payload``: a copy of the model whose body carries the payload (the reference).
- ``PayloadEffort`` (and ``payload_wrench_effort``, ``payload_gravity``): what the payload adds
  to inverse dynamics, τ_total = τ_model + Jᵀ f_payload, without touching the model or its
  generated kernels, so a payload can change between two control cycles.
- ``PayloadDynamics``: a whole ``Dynamics`` object of the loaded robot from the bare robot's
  (its kernels) and the payload's terms, ready at once (nothing generated or compiled).
- ``payload_gravity_regressor`` / ``payload_inertial_regressor``: τ_payload = Y θ, linear in the
  payload's parameters (θ = [m, m·c] at rest, the 10 inertial parameters in motion).
- ``identify_payload``: m and c from efforts measured at rest, by linear least squares;
  ``identify_payload_inertia``: all ten inertial parameters from efforts measured in motion.

Payload effort in one pass over the support (Featherstone ch. 5, ID restricted to one body):
in the coordinates of the payload's link L at the current instant, with S_i the joints' motion
subspaces and V_i = Σ_{j≤i} S_j q̇_j the velocity of body i,

    v_L = V_k,   a_L = Σ S_i q̈_i + Σ V_{i−1} × V_i + a_gravity      (v_i×S_i q̇_i = V_{i−1}×V_i)
    f_L = I_p a_L + v_L ×* I_p v_L,   τ_i = S_iᵀ f_L.

Every link pose relative to L comes from one suffix product of the joints' homogeneous
transforms (k small products for one state, log₂ k batched ones for a batch).
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from rb_dynamics.model import (
    MAX_MAGNITUDE,
    Model,
    crf,
    crm,
    finite_array,
    mcI,
    skew,
    transform_parts,
)

from . import reference as dynamics

__all__ = [
    "DEFAULT_NOISE_FLOOR",
    "INERTIAL_PARAMETER_NAMES",
    "MAX_CONDITION",
    "MAX_IDENTIFICATION_POSES",
    "MIN_IDENTIFICATION_POSES",
    "MIN_MASS_SIGNIFICANCE",
    "IdentificationError",
    "InertialEstimate",
    "Payload",
    "PayloadDynamics",
    "PayloadEffort",
    "PayloadEstimate",
    "default_payload_link",
    "identify_payload",
    "identify_payload_inertia",
    "payload_effort_reference",
    "payload_gravity",
    "payload_gravity_regressor",
    "payload_inertial_regressor",
    "payload_wrench_effort",
    "suggest_identification_poses",
    "with_payload",
]

# Pinocchio's order of the dynamic parameters; the rotational inertia is about the link origin.
INERTIAL_PARAMETER_NAMES = (
    "m", "mcx", "mcy", "mcz", "Ixx", "Ixy", "Iyy", "Ixz", "Iyz", "Izz"
)
MAX_IDENTIFICATION_POSES = 10_000
MIN_IDENTIFICATION_POSES = 2  # one pose never shows the COM component along gravity
# Condition number of the column-scaled regressor above which the poses are refused as unable
# to separate the parameters: past it, an effort error of 1e-3 relative (a good sensor) can move
# the parameters by 10 times their size. Good pose sets give 1–10; the standard deviations of
# an accepted estimate say how well it is determined.
MAX_CONDITION = 1e4
MIN_MASS_SIGNIFICANCE = 3.0  # the mass estimate must exceed 3 standard deviations
DEFAULT_NOISE_FLOOR = 1e-3  # N·m: no joint effort is known better than this


# ----------------------------------------------------------------------------- the payload


def _finite_array(values, shape: tuple[int, ...], name: str) -> np.ndarray:
    arr = finite_array(values, f"payload {name}", shape)
    if np.any(np.abs(arr) > MAX_MAGNITUDE):
        raise ValueError(f"payload {name} is implausibly large (limit {MAX_MAGNITUDE:g})")
    arr.flags.writeable = False
    return arr


def _check_rotational_inertia(inertia: np.ndarray) -> None:
    scale = max(float(np.abs(inertia).max()), 1e-300)
    if np.abs(inertia - inertia.T).max() > 1e-9 * scale:
        raise ValueError(f"payload inertia is not symmetric: {inertia.tolist()}")
    eig = np.linalg.eigvalsh(inertia)
    if eig[0] < -1e-9 * scale:
        raise ValueError(f"payload inertia is not positive semi-definite (eigenvalues {eig})")
    if eig[0] + eig[1] < eig[2] - 1e-6 * scale:
        raise ValueError(
            f"payload inertia's principal moments {eig} violate the triangle inequality "
            "(no physical body has them)"
        )


@dataclass(frozen=True, eq=False)
class Payload:
    """A rigid payload on ``link``: ``mass`` (kg), ``com`` (m, link frame) and ``inertia``
    (kg·m², about the COM, link axes). Mass 0 means no payload (then com and inertia are 0)."""

    link: str
    mass: float
    com: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    inertia: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((3, 3)))

    def __post_init__(self) -> None:
        if not isinstance(self.link, str) or not self.link:
            raise ValueError(f"payload link must be a link name, got {self.link!r}")
        mass = _finite_array(self.mass, (), "mass")
        if mass < 0:
            raise ValueError(f"payload mass must be ≥ 0, got {float(mass)}")
        com = _finite_array(self.com, (3,), "com")
        inertia = _finite_array(self.inertia, (3, 3), "inertia")
        _check_rotational_inertia(inertia)
        if mass == 0 and (np.any(com != 0) or np.any(inertia != 0)):
            raise ValueError("a payload of mass 0 (no payload) cannot have a COM or an inertia")
        object.__setattr__(self, "mass", float(mass))
        object.__setattr__(self, "com", com)
        object.__setattr__(self, "inertia", inertia)
        spatial = mcI(self.mass, com, inertia)
        spatial.flags.writeable = False
        object.__setattr__(self, "_spatial", spatial)

    @classmethod
    def none(cls, link: str) -> Payload:
        """No payload on ``link``."""
        return cls(link, 0.0)

    @property
    def is_empty(self) -> bool:
        return self.mass == 0.0

    @property
    def spatial_inertia(self) -> np.ndarray:
        """6×6 spatial inertia in the link frame (Featherstone's mcI, [angular; linear])."""
        return self._spatial

    def inertial_parameters(self) -> np.ndarray:
        """[m, m·c, I about the link origin] in ``INERTIAL_PARAMETER_NAMES`` order."""
        I_origin = self._spatial[:3, :3]
        return np.array([
            self.mass, *(self.mass * self.com),
            I_origin[0, 0], I_origin[0, 1], I_origin[1, 1],
            I_origin[0, 2], I_origin[1, 2], I_origin[2, 2],
        ])

    def __repr__(self) -> str:
        return (f"Payload(link={self.link!r}, mass={self.mass:g}, com={self.com.tolist()}, "
                f"inertia={self.inertia.tolist()})")


def _end_body(model: Model) -> int:
    """Follow first children from the root until a leaf, or a body whose children are two or
    more leaves (a gripper's fingers: the payload is held by the hand, not by one finger)."""
    children: list[list[int]] = [[] for _ in range(model.n_bodies)]
    for i, p in enumerate(model.parent):
        if p >= 0:
            children[p].append(i)
    body = next(i for i, p in enumerate(model.parent) if p < 0)
    while children[body]:
        kids = children[body]
        if len(kids) >= 2 and all(not children[c] for c in kids):
            break
        body = kids[0]
    return body


def default_payload_link(model: Model) -> str:
    """The link a payload sits on when none is named: the end of the model's first chain.

    Rule: from the root, follow each body's first child (URDF order) down to a leaf, stopping
    early at a body whose children are two or more leaves (gripper fingers). Of the links
    welded to that body (the body's own link, then fixed-joint children such as a flange,
    ``tool0`` or a TCP frame), take the last one in the URDF's depth-first order. A serial arm
    gives its tool frame (``tool0`` on the UR5 and the default arm, ``panda_hand_tcp`` on the
    Panda); on a branching robot name the link explicitly.
    """
    if model.n_bodies == 0:
        raise ValueError("the model has no moving body to carry a payload")
    body = _end_body(model)
    return [name for name, frame in model.frames.items() if frame.body == body][-1]


def _payload_body(model: Model, payload: Payload) -> int:
    if not isinstance(payload, Payload):
        raise ValueError(f"payload must be a Payload, got {type(payload).__name__}")
    return _link_body(model, payload.link)


def _link_body(model: Model, link: str) -> int:
    frame = model.frames.get(link)
    moving = [name for name, f in model.frames.items() if f.body >= 0]
    if frame is None:
        raise ValueError(f"unknown payload link {link!r}; links that can carry one: {moving}")
    if frame.body < 0:
        raise ValueError(
            f"link {link!r} is welded to the world: a payload there changes no joint effort; "
            f"links that can carry one: {moving}"
        )
    return frame.body


def _add_payload(model: Model, inertia: list[np.ndarray], payload: Payload) -> Model:
    body = _payload_body(model, payload)
    X = model.frames[payload.link].X_from_body  # body → link coordinates
    inertia[body] = inertia[body] + X.T @ payload.spatial_inertia @ X
    return dataclasses.replace(model, inertia=inertia)


def with_payload(model: Model, payload: Payload) -> Model:
    """A copy of ``model`` whose body carrying ``payload.link`` includes the payload.

    Only the inertia list is copied; the other fields are shared with ``model``.
    """
    return _add_payload(model, [I.copy() for I in model.inertia], payload)


def payload_effort_reference(model: Model, q, v, a, payload: Payload) -> np.ndarray:
    """The payload's share of inverse dynamics by the reference RNEA on a model in which
    only the payload has mass (RNEA is linear in the inertias). Slow; the oracle for the rest."""
    zero = [np.zeros((6, 6)) for _ in model.inertia]
    return dynamics.rnea(_add_payload(model, zero, payload), q, v, a)


# ----------------------------------------------------------------------------- the support chain

_CRM_TENSOR = np.stack([crm(e) for e in np.eye(6)], axis=1).reshape(6, 36).T  # x×y = (x⊗y)·C
_CRF_TENSOR = np.stack([crf(e) for e in np.eye(6)], axis=1).reshape(6, 36).T


def _homogeneous(X: np.ndarray) -> np.ndarray:
    """4×4 pose of a Plücker transform's target frame in its source frame."""
    E, r = transform_parts(X)
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = E.T, r
    return T


def _joint_pose_terms(model: Model, i: int) -> np.ndarray:
    """(4, 4, 4): body i's pose in its parent = Σ_c coeff_c · terms[c], coeff = [1, s, c, θ].

    Rodrigues: Rot(a, θ) = (1 + K²) + sin θ K − cos θ K² with K = a×; a slide is 1 + θ a.
    """
    X_T = _homogeneous(model.X_tree[i])
    joint = model.joint[i]
    terms = np.zeros((4, 4, 4))
    K = np.zeros((4, 4))
    if joint.kind == "revolute":
        K[:3, :3] = skew(joint.axis)
        terms[0] = X_T @ (np.eye(4) + K @ K)
        terms[1] = X_T @ K
        terms[2] = -X_T @ K @ K
    else:  # prismatic
        K[:3, 3] = joint.axis
        terms[0] = X_T
        terms[3] = X_T @ K
    return terms


class _Chain:
    """The joints from the root to a link's body, with everything constant precomputed."""

    def __init__(self, model: Model, link: str):
        body = _link_body(model, link)
        path = []
        while body >= 0:
            path.append(body)
            body = model.parent[body]
        path.reverse()
        self.model = model
        self.fast = all(model.joint[i].kind in ("revolute", "prismatic") for i in path)
        if not self.fast:
            return  # free or planar joints on the support: the reference handles them
        k = len(path)
        terms = np.zeros((k + 1, 4, 4, 4))
        for j, i in enumerate(path):
            terms[j] = _joint_pose_terms(model, i)
        terms[k, 0] = _homogeneous(model.frames[link].X_from_body)
        self.terms = terms.reshape(k + 1, 4, 16)
        # θ = q·Gq + offset, θ̇ = v·Gv (mimic joints follow their leader, the link entry has
        # θ = 0), and the joint forces τ_path land in the public τ = Gv·τ_path
        self.Gq = np.zeros((model.nq, k + 1))
        self.Gv = np.zeros((model.nv, k))
        self.offset = np.zeros(k + 1)
        for j, i in enumerate(path):
            mimic = model.body_mimic[i]
            qi, vi, mult, off = (
                (model.body_q_index[i], model.body_v_index[i], 1.0, 0.0) if mimic is None
                else mimic
            )
            self.Gq[qi, j] += mult
            self.Gv[vi, j] += mult
            self.offset[j] = off
        S = np.array([model.S[i][:, 0] for i in path])
        self.s_angular, self.s_linear = S[:, :3], S[:, 3:]
        self.s_angular_skew = skew(self.s_angular)
        self.has_prismatic = bool(np.any(self.s_linear))
        self.GvT = np.ascontiguousarray(self.Gv.T)
        self.lower = np.tril(np.ones((k, k)))
        self.k = k

    def link_subspaces(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(S_L (..., k, 6), γ (..., 3)): joint motion subspaces in link-L coordinates, and the
        fictitious gravity acceleration −g in L coordinates."""
        theta = q.dot(self.Gq) + self.offset
        coeff = np.empty(theta.shape + (4,))
        coeff[..., 0] = 1.0
        np.sin(theta, out=coeff[..., 1])
        np.cos(theta, out=coeff[..., 2])
        coeff[..., 3] = theta
        P = (coeff[..., None, :] @ self.terms).reshape(theta.shape + (4, 4))
        # P[j] ← M_j M_{j+1} ⋯ M_k, the pose of L in frame j − 1: k products for one state,
        # log₂(k + 1) batched ones (Hillis–Steele) for a batch
        if P.ndim == 3:
            for j in range(self.k - 1, -1, -1):
                P[j] = P[j].dot(P[j + 1])
        else:
            shift = 1
            while shift <= self.k:
                P[..., :-shift, :, :] = P[..., :-shift, :, :] @ P[..., shift:, :, :]
                shift *= 2
        R, p = P[..., 1:, :3, :3], P[..., 1:, :3, 3]
        # S_L = [Rᵀ s_ω; Rᵀ (s_v + s_ω × p)]: the joint's twist moved to L's origin and axes
        rows = np.empty(p.shape[:-1] + (2, 3))
        rows[..., 0, :] = self.s_angular
        rows[..., 1, :] = (self.s_angular_skew @ p[..., None])[..., 0]
        if self.has_prismatic:
            rows[..., 1, :] += self.s_linear
        S_L = (rows @ R).reshape(p.shape[:-1] + (6,))
        gamma = -_vm(self.model.gravity, P[..., 0, :3, :3])  # read now: tests tilt gravity
        return S_L, gamma

    def link_motion(self, S_L, v, a, gamma) -> tuple[np.ndarray, np.ndarray]:
        """Spatial velocity and acceleration (gravity included) of link L in L coordinates."""
        V = _mm(self.lower, S_L * v.dot(self.Gv)[..., None])  # V_i = Σ_{j≤i} S_j q̇_j
        outer = _mm(np.swapaxes(V[..., :-1, :], -1, -2), V[..., 1:, :])  # Σ V_{i−1} ⊗ V_i
        A = _vm(a.dot(self.Gv), S_L) + outer.reshape(outer.shape[:-2] + (36,)).dot(_CRM_TENSOR)
        A[..., 3:] += gamma
        return V[..., -1, :], A

    def joint_forces(self, S_L: np.ndarray, f: np.ndarray) -> np.ndarray:
        """τ = Gᵀ S_Lᵀ f (mimic joints add to their leader, scaled)."""
        return _mv(S_L, f).dot(self.GvT)


# ``dot`` is several times faster than ``@`` on tiny arrays: one state takes it, batches (leading
# axes, broadcast) take ``@``.
def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Matrix times matrix."""
    return a.dot(b) if a.ndim == 2 and b.ndim == 2 else a @ b


def _mv(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Matrix times vector."""
    return a.dot(x) if a.ndim == 2 and x.ndim == 1 else (a @ x[..., None])[..., 0]


def _vm(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Row vector times matrix."""
    return x.dot(a) if x.ndim == 1 and a.ndim == 2 else (x[..., None, :] @ a)[..., 0, :]


_CHAINS: OrderedDict[tuple[int, str], tuple[weakref.ref, _Chain]] = OrderedDict()
_MAX_CHAINS = 64


def _chain(model: Model, link: str) -> _Chain:
    """The precomputed chain of (model, link), cached while the model lives."""
    key = (id(model), link)
    hit = _CHAINS.get(key)
    if hit is not None and hit[0]() is model:
        return hit[1]
    chain = _Chain(model, link)
    _CHAINS[key] = (weakref.ref(model), chain)
    while len(_CHAINS) > _MAX_CHAINS:
        _CHAINS.popitem(last=False)
    return chain


def _shaped(x, n: int, name: str) -> np.ndarray:
    """A (n,) or (N, n) float array (finiteness is checked on the result: NaN and inf spread)."""
    arr = np.asarray(x, dtype=float)
    if arr.ndim not in (1, 2) or arr.shape[-1] != n:
        raise ValueError(f"{name} must have length {n} (or shape (N, {n})), got {arr.shape}")
    return arr


def _state(x, n: int, name: str) -> np.ndarray:
    """A (n,) or (N, n) finite float array."""
    arr = _shaped(x, n, name)
    _check_finite([(arr, name)])
    return arr


def _check_finite(inputs: list[tuple[np.ndarray, str]]) -> None:
    for arr, name in inputs:
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN or inf")


def _finite(result: np.ndarray, inputs: list[tuple[np.ndarray, str]]) -> np.ndarray:
    """``result`` if finite, else the ValueError naming the input with NaN or inf in it."""
    if math.isfinite(result.sum()):
        return result
    _check_finite(inputs)
    raise ValueError("the result overflows: inputs implausibly large")


# ----------------------------------------------------------------------------- payload effort


class PayloadEffort:
    """What ``payload`` adds to the inverse dynamics of ``model``: build once when the payload
    is set, then ``effort(q, v, a)`` / ``gravity(q)`` each cycle (one state or an (N, n) batch).

    ``τ_model + effort(q, v, a)`` equals rnea of ``with_payload(model, payload)``; the model and
    any kernels generated for it stay untouched, so a new payload takes effect by replacing
    this object (one reference assignment) between two cycles. Supports with a free or planar
    joint use the reference RNEA (slow); chains of revolute and prismatic joints the one-pass
    formula above (about 25 µs for one state of a 6–7 joint arm, ~16 µs for gravity only).
    """

    def __init__(self, model: Model, payload: Payload):
        _payload_body(model, payload)
        self.model, self.payload = model, payload
        self._chain = _Chain(model, payload.link)
        self._I = payload.spatial_inertia
        self._I_gravity = np.ascontiguousarray(payload.spatial_inertia[3:, :])  # f = γ·I[3:]

    def effort(self, q, v, a) -> np.ndarray:
        """τ_payload = Jᵀ (I_p a_L + v_L ×* I_p v_L), gravity in a_L."""
        m = self.model
        q, v, a = _shaped(q, m.nq, "q"), _shaped(v, m.nv, "v"), _shaped(a, m.nv, "a")
        chain = self._chain
        if self.payload.is_empty:
            _check_finite([(q, "q"), (v, "v"), (a, "a")])
            tau = np.zeros(np.broadcast_shapes(q.shape[:-1], v.shape[:-1], a.shape[:-1])
                           + (m.nv,))
        elif not chain.fast:
            return payload_effort_reference(m, q, v, a, self.payload)
        else:
            S_L, gamma = chain.link_subspaces(q)
            V, A = chain.link_motion(S_L, v, a, gamma)
            IV = V.dot(self._I)
            f = A.dot(self._I) + (V[..., :, None] * IV[..., None, :]).reshape(
                IV.shape[:-1] + (36,)).dot(_CRF_TENSOR)
            tau = chain.joint_forces(S_L, f)
        return _finite(tau, [(q, "q"), (v, "v"), (a, "a")])

    def gravity(self, q) -> np.ndarray:
        """The payload's share of g(q): what gravity compensation adds for it."""
        m = self.model
        q = _shaped(q, m.nq, "q")
        if self.payload.is_empty:
            _check_finite([(q, "q")])
            tau = np.zeros(q.shape[:-1] + (m.nv,))
        elif not self._chain.fast:
            zero = np.zeros(q.shape[:-1] + (m.nv,))
            return payload_effort_reference(m, q, zero, zero, self.payload)
        else:
            S_L, gamma = self._chain.link_subspaces(q)
            tau = self._chain.joint_forces(S_L, gamma.dot(self._I_gravity))
        return _finite(tau, [(q, "q")])


class PayloadDynamics:
    """The ``Dynamics`` of the robot carrying ``payload``: ``base`` (the bare robot's dynamics,
    its generated kernels say) plus the payload's terms, so a payload change costs no code
    generation and no compiler run (which would stall the interpreter for a fraction of a
    second) and the answers come at the kernels' speed plus ~25 µs.

    ``model`` is ``with_payload(base.model, payload)``, for what reads the model itself (the
    reference algorithms, energies, the constraint solver): both give the same results.
    M = M_base + Jᵀ I_p J (the payload's inertia, from its effort at unit accelerations with
    gravity off); forward dynamics solves M q̈ = τ − h with a Cholesky factorisation, as the
    reference does for models with mimic joints.
    """

    def __init__(self, base, payload: Payload) -> None:
        self.base, self.payload = base, payload
        self.model = with_payload(base.model, payload)
        self._term = PayloadEffort(base.model, payload)
        weightless = dataclasses.replace(base.model, gravity=np.zeros(3))
        self._inertia = PayloadEffort(weightless, payload)

    @property
    def kind(self) -> str:
        return f"{self.base.kind} + payload"

    def rnea(self, q, v, a, f_ext=None) -> np.ndarray:
        """τ = M(q) a + C(q, v) v + g(q) − Σ Jᵀ f_ext, the payload included."""
        return self.base.rnea(q, v, a, f_ext) + self._term.effort(q, v, a)

    def gravity(self, q) -> np.ndarray:
        return self.base.gravity(q) + self._term.gravity(q)

    def nonlinear_effects(self, q, v) -> np.ndarray:
        tau = self.base.nonlinear_effects(q, v)
        return tau + self._term.effort(q, v, np.zeros(np.shape(v)))

    def crba(self, q) -> np.ndarray:
        M = self.base.crba(q)
        n = self.model.nv
        q = np.asarray(q, dtype=float)
        states = np.repeat(q.reshape(-1, 1, self.model.nq), n, axis=1).reshape(-1, q.shape[-1])
        unit = np.tile(np.eye(n), (len(states) // n, 1))
        columns = self._inertia.effort(states, np.zeros_like(unit), unit)  # row i: M_p e_i
        return M + columns.reshape(q.shape[:-1] + (n, n))

    def aba(self, q, v, tau, f_ext=None) -> np.ndarray:
        """q̈ = M⁻¹ (τ − C v − g + Σ Jᵀ f_ext); a ValueError when it is undefined."""
        problem = self.model.forward_dynamics_problem()
        if problem:
            raise ValueError(problem)
        tau = dynamics.check_vector(tau, self.model.nv, "tau")
        v = dynamics.check_vector(v, self.model.nv, "v")
        rhs = tau - self.rnea(q, v, np.zeros(v.shape), f_ext)
        try:
            L = np.linalg.cholesky(self.crba(q))
        except np.linalg.LinAlgError:
            raise ValueError("forward dynamics is undefined: the mass matrix is singular "
                             "(a joint moves no inertia)") from None
        y = np.linalg.solve(L, rhs[..., None])
        return np.linalg.solve(np.swapaxes(L, -1, -2), y)[..., 0]


def payload_wrench_effort(model: Model, q, v, a, payload: Payload) -> np.ndarray:
    """τ_payload(q, v, a): rnea(with_payload(model, payload)) − rnea(model), in one pass.

    Convenience form of ``PayloadEffort(model, payload).effort``; a control loop should keep
    the ``PayloadEffort`` object (built when the payload is set) instead.
    """
    return PayloadEffort(model, payload).effort(q, v, a)


def payload_gravity(model: Model, q, payload: Payload) -> np.ndarray:
    """The payload's share of the generalized gravity g(q)."""
    return PayloadEffort(model, payload).gravity(q)


# ----------------------------------------------------------------------------- regressors


def _fast_chain(model: Model, link: str) -> _Chain:
    chain = _chain(model, link)
    if not chain.fast:
        raise ValueError(
            f"the joints between the root and {link!r} include a free or planar joint; "
            "payload regressors need revolute and prismatic joints only"
        )
    return chain


def payload_gravity_regressor(model: Model, q, link: str) -> np.ndarray:
    """Y(q), (..., nv, 4): the payload's gravity torque is Y θ with θ = [m, m·cx, m·cy, m·cz]
    (COM in ``link``'s frame). At rest the wrench on L is f = [m c × γ; m γ], γ = −g in L axes."""
    chain = _fast_chain(model, link)
    q = _state(q, model.nq, "q")
    S_L, gamma = chain.link_subspaces(q)
    K = np.zeros(gamma.shape[:-1] + (6, 4))
    K[..., 3:, 0] = gamma
    K[..., :3, 1:] = -skew(gamma)  # m c × γ = −γ × (m c)
    return chain.Gv @ (S_L @ K)


def _inertia_map(w: np.ndarray) -> np.ndarray:
    """(..., 3, 6) L(w) with Ī w = L(w) [Ixx, Ixy, Iyy, Ixz, Iyz, Izz]."""
    L = np.zeros(w.shape[:-1] + (3, 6))
    x, y, z = w[..., 0], w[..., 1], w[..., 2]
    L[..., 0, 0], L[..., 0, 1], L[..., 0, 3] = x, y, z
    L[..., 1, 1], L[..., 1, 2], L[..., 1, 4] = x, y, z
    L[..., 2, 3], L[..., 2, 4], L[..., 2, 5] = x, y, z
    return L


def payload_inertial_regressor(model: Model, q, v, a, link: str) -> np.ndarray:
    """Y(q, v, a), (..., nv, 10): τ_payload = Y π with π the inertial parameters of the payload
    in ``link``'s frame, in ``INERTIAL_PARAMETER_NAMES`` order (Pinocchio's: m, m·c, then the
    rotational inertia about the link origin, xx xy yy xz yz zz). Gravity is included."""
    chain = _fast_chain(model, link)
    q = _state(q, model.nq, "q")
    v, a = _state(v, model.nv, "v"), _state(a, model.nv, "a")
    S_L, gamma = chain.link_subspaces(q)
    V, A = chain.link_motion(S_L, v, a, gamma)
    w, u = V[..., :3], V[..., 3:]
    alpha, acc = A[..., :3], A[..., 3:]
    W = skew(w)
    K = np.zeros(V.shape[:-1] + (6, 10))
    # f_ang = Ī α + ω × Ī ω − (a + ω × v) × m c;  f_lin = m (a + ω × v) + (α× + ω×ω×) m c
    classical = acc + (W @ u[..., None])[..., 0]
    K[..., 3:, 0] = classical
    K[..., :3, 1:4] = -skew(classical)
    K[..., 3:, 1:4] = skew(alpha) + W @ W
    K[..., :3, 4:] = _inertia_map(alpha) + W @ _inertia_map(w)
    return chain.Gv @ (S_L @ K)


# ----------------------------------------------------------------------------- identification


class IdentificationError(ValueError):
    """The data cannot determine the payload; the message says why (and what would help)."""


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
    arr = dynamics.check_vector(x, n, name)
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
    _link_body(model, link)
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
    y = _residual_efforts(model, efforts, lambda: dynamics.gravity(model, poses),
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
    _link_body(model, link)
    bias = _fit_options(bias, ("friction", "offset", "none"), reference_efforts, noise_floor)
    q = _poses(positions, model.nq, "positions")
    v, a, tau = (_poses(x, model.nv, name) for x, name in (
        (velocities, "velocities"), (accelerations, "accelerations"), (efforts, "efforts")))
    n = len(q)
    if not len(v) == len(a) == len(tau) == n:
        raise ValueError(f"positions, velocities, accelerations and efforts need the same "
                         f"number of rows, got {n}, {len(v)}, {len(a)}, {len(tau)}")
    y = _residual_efforts(model, tau, lambda: dynamics.rnea(model, q, v, a), reference_efforts)
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
    holdable = np.all(np.abs(dynamics.gravity(model, poses))
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
