# SPDX-License-Identifier: Apache-2.0
"""The generated kernel of ``momentum.momentum_terms``: [M q̇, Cᵀ q̇, g] in one pass.

Written like the algorithms of ``codegen`` (over a ``codegen._Tree``, into its emitter): an
outward pass for the body velocities v_i and the gravity accelerations a_g,i (the base's
−a_g carried out), then an inward pass that sums the subtree momenta h_i = I_i v_i + Σ Xᵀ h_child
and the subtree gravity forces the same way, and reads the three rows off each joint:
p_j = S_jᵀ h_j (+ armature·q̇_j), (Cᵀ q̇)_j = −S_jᵀ (v_j ×* h_j), g_j = S_jᵀ f_g,j. The derivation
is in ``momentum``'s docstring. The transforms come from ``codegen.joint_transforms`` (the
caller's), so this module needs nothing of ``codegen`` itself.
"""

from __future__ import annotations

from .codegen_ir import as_terms, cross_terms

__all__ = ["momentum_kernel"]


def momentum_kernel(tree, q, v, X) -> list:
    """The 3·nv output values [p, Cᵀ q̇, g] of one state, over ``tree`` (a ``codegen._Tree``)
    with its joint transforms ``X``."""
    emit, nb, nv = tree.emit, len(tree.bodies), tree.model.nv
    vel: list = [None] * nb
    a_g: list = [None] * nb
    h: list = [None] * nb  # (angular, linear) values of the momentum, own then subtree
    f_g: list = [None] * nb
    for i, b in enumerate(tree.bodies):
        wJ, uJ = tree.motion_subspace_times(i, tree.joint_v(i, v))
        if b.parent < 0:
            vw, vu = wJ, uJ
            aw, au = X[i].apply_motion(emit, [0.0, 0.0, 0.0], [-x for x in tree.gravity])
        else:
            vw, vu = X[i].apply_motion(emit, vel[b.parent][0], vel[b.parent][1], as_terms(wJ),
                                       as_terms(uJ))
            aw, au = X[i].apply_motion(emit, a_g[b.parent][0], a_g[b.parent][1])
        vel[i], a_g[i] = (vw, vu), (aw, au)
        h[i] = tree.inertia_terms(i, vw, vu)  # term lists until the children are added
        f_g[i] = tree.inertia_terms(i, aw, au)
    rows: list[list[list]] = [[[] for _ in range(nv)] for _ in range(3)]
    for i in reversed(range(nb)):
        b = tree.bodies[i]
        h[i] = tuple([emit.sum_of_products(t) for t in part] for part in h[i])
        f_g[i] = tuple([emit.sum_of_products(t) for t in part] for part in f_g[i])
        (hn, hf), (vw, vu) = h[i], vel[i]
        # v ×* h = (ω × h_n + u × h_f, ω × h_f)
        bias = ([x + y for x, y in zip(cross_terms(vw, hn), cross_terms(vu, hf))],
                cross_terms(vw, hf))
        dofs, scale = tree.dofs(i)
        for j, d in enumerate(dofs):
            for k in range(6):
                s = scale * float(b.S[k, j])
                if s == 0.0:
                    continue
                rows[0][d].append((s, (hn + hf)[k], None))
                rows[1][d] += [(-s * c, x, y) for c, x, y in bias[k // 3][k % 3]]
                rows[2][d].append((s, (f_g[i][0] + f_g[i][1])[k], None))
        if b.parent >= 0:
            for store, (n, f) in ((h, h[i]), (f_g, f_g[i])):
                tn, tf = X[i].transpose_force_terms(emit, n, f)
                own = store[b.parent]
                store[b.parent] = ([own[0][k] + tn[k] for k in range(3)],
                                   [own[1][k] + tf[k] for k in range(3)])
    v_values = list(v)
    for d, armature in enumerate(tree.model.armature):
        if armature != 0.0:
            rows[0][d].append((float(armature), v_values[d], None))
    return [emit.sum_of_products(t) for row in rows for t in row]
