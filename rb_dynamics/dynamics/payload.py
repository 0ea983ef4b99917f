# SPDX-License-Identifier: Apache-2.0
"""A payload rigidly attached to a link: its share of the robot's dynamics, as a runtime input.

- ``Payload``: mass, centre of mass and rotational inertia about the COM, in a link's frame.
- ``with_payload``: a copy of the model whose body carries the payload (the reference).
- ``PayloadEffort`` (and ``payload_wrench_effort``, ``payload_gravity``): what the payload adds
  to inverse dynamics, τ_total = τ_model + Jᵀ f_payload, without touching the model or its
  generated kernels, so a payload can change between two control cycles.
- ``PayloadDynamics``: a whole ``Dynamics`` object of the loaded robot from the bare robot's
  (its kernels) and the payload's terms, ready at once (nothing generated or compiled).
- ``payload_gravity_regressor`` / ``payload_inertial_regressor``: τ_payload = Y θ, linear in the
  payload's parameters (θ = [m, m·c] at rest, the 10 inertial parameters in motion); the
  identification of a payload from measured efforts (``rb_dynamics.identification``) fits them.

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
    check_rotational_inertia,
    crf,
    crm,
    finite_array,
    mcI,
    skew,
    transform_parts,
)

from . import reference as dynamics
from .momentum import momentum_terms

__all__ = [
    "INERTIAL_PARAMETER_NAMES",
    "Payload",
    "PayloadDynamics",
    "PayloadEffort",
    "default_payload_link",
    "payload_body",
    "payload_effort_reference",
    "payload_gravity",
    "payload_gravity_regressor",
    "payload_inertial_regressor",
    "payload_wrench_effort",
    "with_payload",
]

# Pinocchio's order of the dynamic parameters; the rotational inertia is about the link origin.
INERTIAL_PARAMETER_NAMES = (
    "m", "mcx", "mcy", "mcz", "Ixx", "Ixy", "Iyy", "Ixz", "Iyz", "Izz"
)


# ----------------------------------------------------------------------------- the payload


def _finite_array(values, shape: tuple[int, ...], name: str) -> np.ndarray:
    arr = finite_array(values, f"payload {name}", shape)
    if np.any(np.abs(arr) > MAX_MAGNITUDE):
        raise ValueError(f"payload {name} is implausibly large (limit {MAX_MAGNITUDE:g})")
    arr.flags.writeable = False
    return arr


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
        check_rotational_inertia(inertia, "payload")
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
    return payload_body(model, payload.link)


def payload_body(model: Model, link: str) -> int:
    """The index of the body that carries a payload on ``link``; a ValueError naming the links
    that can carry one when ``link`` is unknown or welded to the world."""
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
    only the payload has mass and no joint has armature (RNEA is linear in the inertias). Slow;
    the oracle for the rest."""
    zero = [np.zeros((6, 6)) for _ in model.inertia]
    bare = dataclasses.replace(model, armature=np.zeros(model.nv))
    return dynamics.rnea(_add_payload(bare, zero, payload), q, v, a)


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
        body = payload_body(model, link)
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

    def poses(self, q: np.ndarray) -> np.ndarray:
        """P (..., k + 1, 4, 4): P[j] the pose of link L in joint j − 1's frame (P[0]: world)."""
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
        return P

    def link_subspaces(self, q: np.ndarray, P=None) -> tuple[np.ndarray, np.ndarray]:
        """(S_L (..., k, 6), γ (..., 3)): joint motion subspaces in link-L coordinates, and the
        fictitious gravity acceleration −g in L coordinates (``P``: ``poses(q)`` if known)."""
        P = self.poses(q) if P is None else P
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


# ``dot`` has much less call overhead than ``@`` on tiny arrays: one state takes it, batches
# (leading axes, broadcast) take ``@``.
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
    """A (n,) or (N, n) float array; its finiteness is checked on the result (NaN and inf
    spread into it), which costs less on the control path than a check of every input."""
    return dynamics.check_vector(x, n, name, finite=False)


def _check_finite(inputs: list[tuple[np.ndarray, str]]) -> None:
    """``check_vector``'s ValueError for the first input with NaN or inf in it."""
    for arr, name in inputs:
        dynamics.check_vector(arr, arr.shape[-1], name)


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
    joint use the reference RNEA (O(n) per state, with Python overhead per body); chains of
    revolute and prismatic joints the one-pass formula above (a few small products per joint
    of the support).
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

    def momentum_terms(self, q, v) -> np.ndarray:
        """The payload's share of [M v, Cᵀ v, g] (``momentum``), (3, nv) or (N, 3, nv): with
        h = I_p v_L its momentum, p_j = S_jᵀ h and (Cᵀ v)_j = −S_jᵀ (V_j ×* h), all in L's
        coordinates (V_j: the velocity of joint j's successor)."""
        m, chain = self.model, self._chain
        q, v = _shaped(q, m.nq, "q"), _shaped(v, m.nv, "v")
        if self.payload.is_empty or not chain.fast:
            inertia = [np.zeros((6, 6)) for _ in m.inertia]
            only = dataclasses.replace(_add_payload(m, inertia, self.payload), armature=None)
            return momentum_terms(only, q, v)  # zeros for no payload, checked inputs
        S_L, gamma = chain.link_subspaces(q)
        V = _mm(chain.lower, S_L * v.dot(chain.Gv)[..., None])  # (…, k, 6)
        h = V[..., -1, :].dot(self._I)
        Vh = (V[..., :, :, None] * h[..., None, None, :]).reshape(V.shape[:-1] + (36,))
        out = np.stack([chain.joint_forces(S_L, h),
                        -np.sum(S_L * Vh.dot(_CRF_TENSOR), axis=-1).dot(chain.GvT),
                        chain.joint_forces(S_L, gamma.dot(self._I_gravity))], axis=-2)
        return _finite(out, [(q, "q"), (v, "v")])


class PayloadDynamics:
    """The ``Dynamics`` of the robot carrying ``payload``: a decorator around ``base`` (any
    ``Dynamics`` of the bare robot, its generated kernels say) that adds the payload's terms.
    It lives here, beside those terms, rather than with the implementations
    (``implementations``): it computes nothing of the robot itself. A payload change builds
    a new one, which needs no code generation and no compiler run; each method costs
    ``base``'s plus one pass over the payload link's support.

    ``model`` is ``with_payload(base.model, payload)``, for what reads the model itself (the
    reference algorithms, energies, the constraint solver): both give the same results.
    M = M_base + Jᵀ I_p J (the payload's inertia, from its effort at unit accelerations with
    gravity off); forward dynamics solves M q̈ = τ − h with a Cholesky factorisation
    (``reference.forward_dynamics_crba`` on these terms).
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
        return dynamics.forward_dynamics_crba(self.model, q, v, tau, f_ext, dynamics=self)

    def momentum_terms(self, q, v) -> np.ndarray:
        """[M v, Cᵀ v, g] of the robot and the payload."""
        return self.base.momentum_terms(q, v) + self._term.momentum_terms(q, v)

    def coriolis_transpose(self, q, v) -> np.ndarray:
        return self.momentum_terms(q, v)[..., 1, :]


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
    q = dynamics.check_vector(q, model.nq, "q")
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
    q = dynamics.check_vector(q, model.nq, "q")
    v, a = dynamics.check_vector(v, model.nv, "v"), dynamics.check_vector(a, model.nv, "a")
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
