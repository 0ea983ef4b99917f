# SPDX-License-Identifier: Apache-2.0
"""The generalised momentum p = M(q) q̇ and the term Cᵀ(q, q̇) q̇ of its time derivative, in one
O(n) pass: what a momentum observer needs (De Luca & Mattone 2005; Haddadin, De Luca and
Albu-Schäffer 2017), written like spatial_v2's ``ID.m``.

The observer rests on ṗ = τ + Cᵀ(q, q̇) q̇ − g(q) (+ τ_ext), which holds for every C with
Ṁ = C + Cᵀ (Pinocchio's ``computeCoriolisMatrix`` is one). Cᵀ q̇ = Ṁ q̇ − C q̇ is then the same
vector for all of them, and has a short recursive form. In body coordinates, with v_j the
spatial velocity of body j, S_j its joint's motion subspace and h_j = Σ_{k ∈ subtree(j)} I_k v_k
the spatial momentum of its subtree (each term carried into body j's coordinates):

    p_j = S_jᵀ h_j                                   (the columns of M q̇)
    ṗ_j = Ṡ_jᵀ h_j + S_jᵀ ḣ_j,   Ṡ_j = v_j × S_j     (world frame; S_j is fixed in body j)
    S_jᵀ ḣ_j = S_jᵀ Σ_k (I_k a_k + v_k ×* I_k v_k) = (M q̈ + C q̇)_j   (RNEA's backward pass)

so (Ṁ q̇ − C q̇)_j = ṗ_j − (M q̈ + C q̇)_j = (v_j × S_j)ᵀ h_j, that is

    (Cᵀ q̇)_j = −S_jᵀ (v_j ×* h_j).

The only assumption is that S_j is constant in its successor body's coordinates, which holds for
every joint of ``rb_dynamics.model.joints`` (revolute, prismatic, planar, free-flyer: their
velocity coordinates are the successor's, docs/conventions.md); for a multi-DoF joint v_j is
the successor's velocity, its own motion included. A mimic joint's body adds its terms, scaled
by the multiplier, to its leader's coordinate (q̇ = G v with G constant, so Cᵀ = Gᵀ C_fullᵀ G).
The tests hold all three against Pinocchio.

The armature (rotor inertia, ``Model.armature``) is part of M's diagonal and constant: it adds
armature·q̇ to p and nothing to Cᵀ q̇.
"""

from __future__ import annotations

import numpy as np

from rb_dynamics.model import Model, crf, force_apply_transpose, motion_apply

from .reference import _batch_shape, _dof, _forward_pass, _gravity_acceleration, check_vector

__all__ = ["coriolis_transpose", "generalized_momentum", "momentum_terms"]


def momentum_terms(model: Model, q, v) -> np.ndarray:
    """[M(q) q̇, Cᵀ(q, q̇) q̇, g(q)] as rows of a (3, nv) array ((N, 3, nv) for a batch).

    M includes the armature; g is ``reference.gravity``'s. ValueError for inputs of the wrong
    size or that are not finite (``check_vector``'s wording).
    """
    q = check_vector(q, model.nq, "q")
    v = check_vector(v, model.nv, "v")
    batch = _batch_shape(q, v)
    Xup, vel, _, _ = _forward_pass(model, q, v)  # Xup_i = ⁱX_λ(i), body velocities v_i
    a_base = -_gravity_acceleration(model)  # gravity as the base's fictitious acceleration
    a_g: list = []
    h: list = []  # I_i v_i, then the subtree momenta
    f_g: list = []  # I_i a_g,i, then the subtree forces that hold it against gravity
    for i in range(model.n_bodies):
        p = model.parent[i]
        a_g.append(motion_apply(Xup[i], a_base if p < 0 else a_g[p]))
        h.append(motion_apply(model.inertia[i], vel[i]))
        f_g.append(motion_apply(model.inertia[i], a_g[i]))
    out = np.zeros(batch + (3, model.nv))
    for i in reversed(range(model.n_bodies)):
        dofs, scale = _dof(model, i)
        out[..., 0, dofs] += scale * (h[i] @ model.S[i])  # p_j = S_jᵀ h_j
        out[..., 1, dofs] -= scale * (motion_apply(crf(vel[i]), h[i]) @ model.S[i])
        out[..., 2, dofs] += scale * (f_g[i] @ model.S[i])  # g_j = S_jᵀ f_g,j
        p = model.parent[i]
        if p >= 0:
            h[p] = h[p] + force_apply_transpose(Xup[i], h[i])
            f_g[p] = f_g[p] + force_apply_transpose(Xup[i], f_g[i])
    out[..., 0, :] += model.armature * v
    return out


def coriolis_transpose(model: Model, q, v) -> np.ndarray:
    """Cᵀ(q, q̇) q̇ over v (N·m or N), equal for every C with Ṁ = C + Cᵀ (module docstring)."""
    return momentum_terms(model, q, v)[..., 1, :]


def generalized_momentum(model: Model, q, v) -> np.ndarray:
    """p = M(q) q̇ over v (N·m·s or N·s), the armature included, in O(n)."""
    return momentum_terms(model, q, v)[..., 0, :]
