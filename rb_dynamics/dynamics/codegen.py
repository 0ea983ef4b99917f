# SPDX-License-Identifier: Apache-2.0
"""Model-specialised dynamics kernels (Featherstone §10.4, "model-based code generator").

The algorithms of ``reference`` (RNEA, CRBA, ABA, and CRBA with an LDLᵀ solve for models with
mimic joints) written once more, one function each, over the bodies of one model: instead of
computing numbers they write straight-line code (``codegen_ir``) for that kinematic tree,
which ``implementations`` runs as Python (``FastDynamics``) or compiles as C (``codegen_c``,
``kernel_cache``, ``CDynamics``). Every spatial quantity is unrolled into scalars; joint axes,
tree transforms and inertias become literal constants, and terms that are exactly 0 or 1 are
folded away, so a revolute joint about z costs one ``cos``/``sin`` pair and a handful of
products. Transforms are kept as (E rotation, r translation) and expanded symbolically.
Spatial vectors are (angular, linear) pairs of 3-vectors, written ``w``/``u`` for motions and
``n``/``f`` for forces.

A joint's armature (``Model.armature``) is a constant: armature·q̈ in RNEA's τ, on M's diagonal,
in ABA's D = Sᵀ I^A S; where it is 0 no term is written, so a model without armature generates
the code it would without the field.

Snapping: constant rotation entries within 1e-14 of 0 or ±1 (cos(π/2) = 6e-17 from URDF rpy
angles) and inertia entries below 1e-14 of the body's largest are treated as exact, which
changes results by ~1e-14 relative at most.

A joint that moves only links without mass or inertia has a zero pivot for every state:
generation still succeeds, and the forward-dynamics kernel raises ValueError naming the joint
and the links.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rb_dynamics.model import Model, transform_parts

from .codegen_ir import (
    Emitter,
    KernelIR,
    Transform,
    Undefined,
    ZeroPivot,
    allocate_registers,
    as_terms,
    axis_rotation_transposed,
    congruence_terms,
    cross_terms,
    is_zero,
    ldl_factor,
    ldl_solve,
    matvec_terms,
    quaternion_rotation_transposed,
    snap,
    symbols,
)
from .codegen_momentum import momentum_kernel

__all__ = ["generate_kernels"]

_ROT_SNAP = 1e-14
_INERTIA_SNAP = 1e-14


# ----------------------------------------------------------------------------- the bodies


@dataclass
class _Body:
    parent: int
    kind: str
    axis: np.ndarray
    E_T: list  # constant rotation (floats)
    r_T: list  # constant translation (floats)
    S: np.ndarray  # 6 × nv, Featherstone order [angular; linear]
    mass: float
    h: list  # m·c
    Ibar: list  # 3×3 rotational inertia about the body origin
    q_index: int
    v_index: int
    mimic: tuple[int, int, float, float] | None
    nv: int = field(default=1)


def _bodies(model: Model) -> list[_Body]:
    out = []
    for i in range(model.n_bodies):
        E, r = transform_parts(model.X_tree[i])
        I6 = model.inertia[i]
        scale = max(float(np.abs(I6).max()), 1e-300)
        Ic = [[snap(x, _INERTIA_SNAP * scale) for x in row] for row in I6.tolist()]
        h = [Ic[2][4], Ic[0][5], Ic[1][3]]
        Ibar = [[Ic[min(a, b)][max(a, b)] for b in range(3)] for a in range(3)]
        jm = model.joint[i]
        out.append(_Body(
            parent=model.parent[i], kind=jm.kind,
            axis=np.array([snap(x, _ROT_SNAP) for x in jm.axis]),
            E_T=[[snap(x, _ROT_SNAP) for x in row] for row in E.tolist()],
            r_T=[float(x) for x in r], S=model.S[i], mass=Ic[5][5], h=h, Ibar=Ibar,
            q_index=model.body_q_index[i], v_index=model.body_v_index[i],
            mimic=model.body_mimic[i], nv=jm.nv))
    return out


def _rigid_inertia_matrix(b: _Body) -> list:
    """Body b's 6×6 spatial inertia about its origin, as constants."""
    h, m, Ib = b.h, b.mass, b.Ibar
    hx = [[0.0, -h[2], h[1]], [h[2], 0.0, -h[0]], [-h[1], h[0], 0.0]]
    out = [[0.0] * 6 for _ in range(6)]
    for r in range(3):
        for c in range(3):
            out[r][c] = Ib[r][c]
            out[r][c + 3] = hx[r][c]
            out[r + 3][c] = hx[c][r]
        out[r + 3][r + 3] = m
    return out


class _Tree:
    """A model's bodies with their constants, the emitter every algorithm writes into, and
    the per-joint operations they share (jcalc's share of spatial_v2)."""

    def __init__(self, model: Model, emit: Emitter):
        self.model = model
        self.bodies = _bodies(model)
        self.emit = emit
        self.gravity = [float(x) for x in model.gravity]
        self.armature = [float(x) for x in model.armature]  # per public coordinate

    def joint_q(self, i: int, q: list) -> list:
        """Body i's joint coordinates (a mimic joint's from its leader's)."""
        b = self.bodies[i]
        if b.mimic is None:
            return q[b.q_index:b.q_index + self.model.joint[i].nq]
        ql, _, mult, off = b.mimic
        return [self.emit.linear([(mult, q[ql])], off)]

    def joint_v(self, i: int, v: list | None) -> list:
        """Body i's joint velocities (or accelerations, efforts) from ``v``; None is zero."""
        b = self.bodies[i]
        if v is None:
            return [0.0] * b.nv
        if b.mimic is None:
            return v[b.v_index:b.v_index + b.nv]
        _, vl, mult, _ = b.mimic
        return [self.emit.linear([(mult, v[vl])])]

    def dofs(self, i: int) -> tuple[list[int], float]:
        """The public velocity indices body i's joint moves, and the factor (a mimic's)."""
        b = self.bodies[i]
        if b.mimic is None:
            return list(range(b.v_index, b.v_index + b.nv)), 1.0
        return [b.mimic[1]], b.mimic[2]

    def motion_subspace_times(self, i: int, x: list):
        """S x as (angular, linear) 3-vectors of values (lazy: folded linear forms)."""
        S = self.bodies[i].S
        w = [self.emit.linear([(S[k, j], x[j]) for j in range(len(x))]) for k in range(3)]
        u = [self.emit.linear([(S[k + 3, j], x[j]) for j in range(len(x))]) for k in range(3)]
        return w, u

    def subspace_transpose_terms(self, i: int, n, f) -> list[list]:
        """Terms of Sᵀ (n, f), one list per joint DoF."""
        S = self.bodies[i].S
        return [[(S[k, j], n[k], None) for k in range(3)]
                + [(S[k + 3, j], f[k], None) for k in range(3)] for j in range(S.shape[1])]

    def inertia_terms(self, i: int, w, u):
        """Terms of I (w, u) = (Ī w + h × u, m u − h × w)."""
        b = self.bodies[i]
        hu = cross_terms(b.h, u)
        hw = cross_terms(b.h, w)
        n = [[(b.Ibar[k][j], w[j], None) for j in range(3)] + hu[k] for k in range(3)]
        f = [[(b.mass, u[k], None)] + [(-c, x, y) for c, x, y in hw[k]] for k in range(3)]
        return n, f

    def velocity_product_force(self, i: int, vw, vu) -> tuple[list, list]:
        """Terms of v ×* (I v), the bias force of body ``i`` at velocity (vw, vu); I v (its
        momentum) is emitted, the cross products stay terms."""
        iv_ang, iv_lin = self.inertia_terms(i, vw, vu)
        momentum_ang = [self.emit.sum_of_products(t) for t in iv_ang]
        momentum_lin = [self.emit.sum_of_products(t) for t in iv_lin]
        bias_ang = [x + y for x, y in zip(cross_terms(vw, momentum_ang),
                                          cross_terms(vu, momentum_lin))]
        return bias_ang, cross_terms(vw, momentum_lin)

    def undefined(self, bodies: list[int]) -> Undefined:
        """The error for a joint (moving ``bodies``) whose articulated inertia is exactly zero."""
        moved = set(bodies)
        for i, b in enumerate(self.bodies):  # regular numbering: parents come first
            if b.parent in moved:
                moved.add(i)
        links = [name for name, f in self.model.frames.items() if f.body in moved]
        leader = [i for i in bodies if self.bodies[i].mimic is None] or bodies
        joint = self.model.body_joint_names[leader[0]]
        return Undefined(f"forward dynamics is undefined: joint {joint!r} moves links {links} "
                         "that carry no mass or inertia")


# ----------------------------------------------------------------------------- transforms


def _motion_cross_terms(vw, vu, wJ, uJ) -> tuple[list, list]:
    """Terms of v × v_J for motions v = (vw, vu), v_J = (wJ, uJ): (vw × wJ, vw × uJ + vu × wJ)."""
    return (cross_terms(vw, wJ),
            [x + y for x, y in zip(cross_terms(vw, uJ), cross_terms(vu, wJ))])


def joint_transforms(tree: _Tree, q: list) -> list[Transform]:
    """Xup: each body's transform from its parent's coordinates, X_J(q) X_T."""
    emit = tree.emit
    out = []
    for i, b in enumerate(tree.bodies):
        qj = tree.joint_q(i, q)
        ET, rT = b.E_T, b.r_T
        if b.kind == "revolute":
            c, s = emit.call("cos", qj[0]), emit.call("sin", qj[0])
            EJ = axis_rotation_transposed(emit, b.axis, c, s)
            rJ = [0.0, 0.0, 0.0]
        elif b.kind == "prismatic":
            EJ = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
            rJ = [emit.linear([(b.axis[k], qj[0])]) for k in range(3)]
        elif b.kind == "planar":
            c, s = emit.call("cos", qj[2]), emit.call("sin", qj[2])
            EJ = axis_rotation_transposed(emit, np.array([0.0, 0.0, 1.0]), c, s)
            rJ = [qj[0], qj[1], 0.0]
        elif b.kind == "free":
            EJ = quaternion_rotation_transposed(emit, qj[3:7])
            rJ = list(qj[0:3])
        else:  # pragma: no cover - the model only makes the kinds above
            raise ValueError(f"unknown joint kind {b.kind!r}")
        # X_J X_T = plux(E_J E_T, r_T + E_Tᵀ r_J)
        E = [[emit.sum_of_products([(1.0, EJ[a][k], ET[k][c]) for k in range(3)])
              for c in range(3)] for a in range(3)]
        r = [emit.sum_of_products([(1.0, rT[a], None)] + [(1.0, ET[k][a], rJ[k])
                                                          for k in range(3)])
             for a in range(3)]
        out.append(Transform(E, r))
    return out


# ----------------------------------------------------------------------------- RNEA


def rnea(tree: _Tree, q, v, a, X=None) -> list:
    """τ values (list, length nv) of RNEA (ID.m) with v or a possibly None (zero)."""
    emit, nb = tree.emit, len(tree.bodies)
    X = X if X is not None else joint_transforms(tree, q)
    vel: list = [None] * nb
    acc: list = [None] * nb
    f_ang: list = [None] * nb
    f_lin: list = [None] * nb
    from_children: list = [None] * nb  # force terms transmitted from the children
    for i, b in enumerate(tree.bodies):
        p = b.parent
        wJ, uJ = tree.motion_subspace_times(i, tree.joint_v(i, v))
        awJ, auJ = tree.motion_subspace_times(i, tree.joint_v(i, a))
        if p < 0:
            vw, vu = wJ, uJ
            base = [0.0, 0.0, 0.0], [-x for x in tree.gravity]
            aw, au = X[i].apply_motion(emit, *base, as_terms(awJ), as_terms(auJ))
        else:
            vw, vu = X[i].apply_motion(emit, vel[p][0], vel[p][1], as_terms(wJ),
                                       as_terms(uJ))
            # a = X a_p + S q̈ + v × vJ
            cw, cu = _motion_cross_terms(vw, vu, wJ, uJ)
            aw, au = X[i].apply_motion(emit, acc[p][0], acc[p][1],
                                       [[(1.0, awJ[k], None)] + cw[k] for k in range(3)],
                                       [[(1.0, auJ[k], None)] + cu[k] for k in range(3)])
        vel[i], acc[i] = (vw, vu), (aw, au)
        # f = I a + v ×* I v
        ia_ang, ia_lin = tree.inertia_terms(i, aw, au)
        if all(is_zero(x) for x in vw + vu):
            f_ang[i] = [emit.sum_of_products(t) for t in ia_ang]
            f_lin[i] = [emit.sum_of_products(t) for t in ia_lin]
        else:
            bias_ang, bias_lin = tree.velocity_product_force(i, vw, vu)
            f_ang[i] = [emit.sum_of_products(ia_ang[k] + bias_ang[k]) for k in range(3)]
            f_lin[i] = [emit.sum_of_products(ia_lin[k] + bias_lin[k]) for k in range(3)]
    tau_terms: list[list] = [[] for _ in range(tree.model.nv)]
    for i in reversed(range(nb)):
        b = tree.bodies[i]
        if from_children[i] is not None:
            child_ang, child_lin = from_children[i]
            f_ang[i] = [emit.sum_of_products([(1.0, f_ang[i][k], None)] + child_ang[k])
                        for k in range(3)]
            f_lin[i] = [emit.sum_of_products([(1.0, f_lin[i][k], None)] + child_lin[k])
                        for k in range(3)]
        dofs, scale = tree.dofs(i)
        for d, t in zip(dofs, tree.subspace_transpose_terms(i, f_ang[i], f_lin[i])):
            tau_terms[d] += [(scale * c, x, y) for c, x, y in t]
        if b.parent >= 0:
            tn, tf = X[i].transpose_force_terms(emit, f_ang[i], f_lin[i])
            before = from_children[b.parent]
            if before is None:
                from_children[b.parent] = (tn, tf)
            else:
                from_children[b.parent] = ([before[0][k] + tn[k] for k in range(3)],
                                           [before[1][k] + tf[k] for k in range(3)])
    if a is not None:  # the rotors: armature·q̈ (no term at all where the armature is 0)
        for d, armature in enumerate(tree.armature):
            if armature:
                tau_terms[d].append((armature, a[d], None))
    return [emit.sum_of_products(t) for t in tau_terms]


# ----------------------------------------------------------------------------- CRBA


def crba(tree: _Tree, q, X=None) -> list:
    """Upper-triangle-complete M(q) as an nv × nv list of values (HandC.m)."""
    X = X if X is not None else joint_transforms(tree, q)
    return _crba_matrix(tree, X, *_composite_inertias(tree, X))


def _composite_inertias(tree: _Tree, X) -> tuple[list, list, list]:
    """Composite inertias I^c_i = I_i + Σ Xᵀ I^c_child X as (m, h, Ī) per body; m constant."""
    emit, nb = tree.emit, len(tree.bodies)
    h_terms = [[[(x, None, None)] for x in b.h] for b in tree.bodies]
    I_terms = [[[[(b.Ibar[r][c], None, None)] for c in range(3)] for r in range(3)]
               for b in tree.bodies]
    mass = [b.mass for b in tree.bodies]
    hs: list = [None] * nb
    Is: list = [None] * nb
    for i in reversed(range(nb)):
        h = [emit.sum_of_products(t) for t in h_terms[i]]
        Ib = [[None] * 3 for _ in range(3)]
        for r in range(3):
            for c in range(r, 3):
                Ib[r][c] = Ib[c][r] = emit.sum_of_products(I_terms[i][r][c])
        hs[i], Is[i] = h, Ib
        p = tree.bodies[i].parent
        if p < 0:
            continue
        E, rr = X[i].E, X[i].r
        mi = mass[i]
        mass[p] += mi
        hr = [emit.sum_of_products(t) for t in matvec_terms(E, h, transpose=True)]
        A = [[emit.sum_of_products([(1.0, Ib[a][k], E[k][c]) for k in range(3)])
              for c in range(3)] for a in range(3)]
        for a in range(3):
            h_terms[p][a] += [(1.0, hr[a], None), (mi, rr[a], None)]
        # Ī' = EᵀĪE + m(|r|² 1 − r rᵀ) − (hr rᵀ + r hrᵀ) + 2 (r·hr) 1
        for a in range(3):
            for c in range(a, 3):
                t = [(1.0, E[k][a], A[k][c]) for k in range(3)]
                t += [(-mi, rr[a], rr[c]), (-1.0, hr[a], rr[c]), (-1.0, rr[a], hr[c])]
                if a == c:
                    t += [(mi, rr[k], rr[k]) for k in range(3)]
                    t += [(2.0, rr[k], hr[k]) for k in range(3)]
                I_terms[p][a][c] += t
    return mass, hs, Is


def _crba_matrix(tree: _Tree, X, mass: list, hs: list, Is: list) -> list:
    """M from the composite inertias: H_ij = S_jᵀ (^jX_i)ᵀ I^c_i S_i up the tree."""
    emit, nb, nv = tree.emit, len(tree.bodies), tree.model.nv
    H: dict[tuple[int, int], list] = {}

    def add(d1: int, d2: int, terms: list) -> None:
        key = (min(d1, d2), max(d1, d2))
        H.setdefault(key, []).extend(terms)

    for i in range(nb):
        b = tree.bodies[i]
        dofs_i, scale_i = tree.dofs(i)
        forces = []  # F = I^c_i S_i, one (angular, linear) pair per DoF of joint i
        for j in range(b.nv):
            sw = [float(b.S[k, j]) for k in range(3)]
            su = [float(b.S[k + 3, j]) for k in range(3)]
            hu = cross_terms(hs[i], su)
            hw = cross_terms(hs[i], sw)
            Fn = [emit.sum_of_products([(1.0, Is[i][k][c], sw[c]) for c in range(3)] + hu[k])
                  for k in range(3)]
            Ff = [emit.sum_of_products([(mass[i], su[k], None)]
                                       + [(-c, x, y) for c, x, y in hw[k]])
                  for k in range(3)]
            forces.append((Fn, Ff))
        own = [tree.subspace_transpose_terms(i, Fn, Ff) for Fn, Ff in forces]  # own[col][row]
        for a in range(b.nv):
            for c in range(a, b.nv):
                add(dofs_i[a], dofs_i[c],
                    [(scale_i * scale_i * cc, x, y) for cc, x, y in own[c][a]])
        j = i
        while tree.bodies[j].parent >= 0:
            moved = []
            for Fn, Ff in forces:
                tn, tf = X[j].transpose_force_terms(emit, Fn, Ff)
                moved.append(([emit.sum_of_products(t) for t in tn],
                              [emit.sum_of_products(t) for t in tf]))
            forces = moved
            j = tree.bodies[j].parent
            dofs_j, scale_j = tree.dofs(j)
            for col, (Fn, Ff) in enumerate(forces):
                for row, t in enumerate(tree.subspace_transpose_terms(j, Fn, Ff)):
                    d1, d2 = dofs_i[col], dofs_j[row]
                    terms = [(scale_i * scale_j * cc, x, y) for cc, x, y in t]
                    add(d1, d2, terms)
                    if d1 == d2:
                        add(d1, d2, terms)
    for d, armature in enumerate(tree.armature):
        if armature:
            add(d, d, [(armature, None, None)])
    M = [[0.0] * nv for _ in range(nv)]
    for (d1, d2), terms in sorted(H.items()):
        M[d1][d2] = M[d2][d1] = emit.sum_of_products(terms)
    return M


# ----------------------------------------------------------------------------- ABA


def aba(tree: _Tree, q, v, tau) -> list:
    """q̈ by the articulated-body algorithm (FDab.m): three passes."""
    X = joint_transforms(tree, q)
    c, IA, pA = _aba_velocities(tree, X, v)
    U, D_factors, u = _aba_articulated(tree, X, tau, c, IA, pA)
    return _aba_accelerations(tree, X, c, U, D_factors, u)


def _aba_velocities(tree: _Tree, X, v) -> tuple[list, list, list]:
    """Outward: velocity-product accelerations c_i, rigid inertias and bias forces p_i."""
    emit, nb = tree.emit, len(tree.bodies)
    vel: list = [None] * nb
    c: list = [None] * nb
    IA: list = [None] * nb
    pA: list = [None] * nb
    for i, b in enumerate(tree.bodies):
        p = b.parent
        wJ, uJ = tree.motion_subspace_times(i, tree.joint_v(i, v))
        if p < 0:
            vw, vu = wJ, uJ
            c[i] = ([0.0] * 3, [0.0] * 3)
        else:
            vw, vu = X[i].apply_motion(emit, vel[p][0], vel[p][1], as_terms(wJ),
                                       as_terms(uJ))
            cw, cu = _motion_cross_terms(vw, vu, wJ, uJ)
            c[i] = ([emit.sum_of_products(t) for t in cw],
                    [emit.sum_of_products(t) for t in cu])
        vel[i] = (vw, vu)
        bias_ang, bias_lin = tree.velocity_product_force(i, vw, vu)
        pA[i] = [list(bias_ang[k]) for k in range(3)] + [bias_lin[k] for k in range(3)]
        # articulated inertia as term lists for the 6×6 upper triangle
        I6 = _rigid_inertia_matrix(b)
        IA[i] = {(r, col): [(I6[r][col], None, None)] for r in range(6) for col in range(r, 6)}
    return c, IA, pA


def _aba_articulated(tree: _Tree, X, tau, c: list, IA: list, pA: list
                     ) -> tuple[list, list, list]:
    """Inward: articulated inertias and bias forces, U = I^A S, D = Sᵀ U (factored), u."""
    emit, nb = tree.emit, len(tree.bodies)
    U: list = [None] * nb
    D_factors: list = [None] * nb
    u: list = [None] * nb
    for i in reversed(range(nb)):
        b = tree.bodies[i]
        p = b.parent
        A = [[None] * 6 for _ in range(6)]
        for (r, col), t in IA[i].items():
            A[r][col] = A[col][r] = emit.sum_of_products(t)
        p_i = [emit.sum_of_products(t) for t in pA[i]]
        S = b.S
        U_i = [[emit.sum_of_products([(1.0, A[r][k], float(S[k, j])) for k in range(6)])
                for j in range(b.nv)] for r in range(6)]  # 6 × nv
        # D = Sᵀ U + the joint's armature on the diagonal
        armature = [tree.armature[d] for d in tree.dofs(i)[0]]
        D = [[emit.sum_of_products([(float(S[k, a]), U_i[k][col], None) for k in range(6)]
                                   + ([(armature[a], None, None)] if a == col and armature[a]
                                      else []))
              for col in range(b.nv)] for a in range(b.nv)]
        tau_i = tree.joint_v(i, tau)
        u_i = [emit.sum_of_products([(1.0, tau_i[a], None)]
                                    + [(-float(S[k, a]), p_i[k], None) for k in range(6)])
               for a in range(b.nv)]
        U[i], u[i] = U_i, u_i
        try:
            D_factors[i] = ldl_factor(emit, D)
        except ZeroPivot:
            raise tree.undefined([i]) from None
        if p < 0:
            continue
        # UD = U D⁻¹ (6 × nv), Ia = IA − UD Uᵀ, pa = pA + Ia c + UD u
        UD = [ldl_solve(emit, D_factors[i], [U_i[r][a] for a in range(b.nv)]) for r in range(6)]
        Ia = [[None] * 6 for _ in range(6)]
        for r in range(6):
            for col in range(r, 6):
                Ia[r][col] = Ia[col][r] = emit.sum_of_products(
                    [(1.0, A[r][col], None)] + [(-1.0, UD[r][a], U_i[col][a]) for a in range(b.nv)])
        c_i = c[i][0] + c[i][1]
        pa = [emit.sum_of_products([(1.0, p_i[r], None)]
                                   + [(1.0, Ia[r][k], c_i[k]) for k in range(6)]
                                   + [(1.0, UD[r][a], u_i[a]) for a in range(b.nv)])
              for r in range(6)]
        # IA_p += Xᵀ Ia X ; pA_p += Xᵀ pa
        for key, t in congruence_terms(emit, X[i], Ia).items():
            IA[p][key].extend(t)
        tn, tf = X[i].transpose_force_terms(emit, pa[:3], pa[3:])
        for k in range(3):
            pA[p][k].extend(tn[k])
            pA[p][k + 3].extend(tf[k])
    return U, D_factors, u


def _aba_accelerations(tree: _Tree, X, c: list, U: list, D_factors: list, u: list) -> list:
    """Outward: q̈_i = D⁻¹(u − Uᵀ a'), a_i = a' + S q̈_i from the base's −gravity."""
    emit = tree.emit
    qdd = [0.0] * tree.model.nv
    acc: list = [None] * len(tree.bodies)
    for i, b in enumerate(tree.bodies):
        p = b.parent
        if p < 0:
            base = [0.0, 0.0, 0.0], [-x for x in tree.gravity]
            aw, au = X[i].apply_motion(emit, *base)
        else:
            aw, au = X[i].apply_motion(emit, acc[p][0], acc[p][1], as_terms(c[i][0]),
                                       as_terms(c[i][1]))
        a6 = aw + au
        rhs = [emit.sum_of_products([(1.0, u[i][j], None)]
                                    + [(-1.0, U[i][k][j], a6[k]) for k in range(6)])
               for j in range(b.nv)]
        qdd_i = ldl_solve(emit, D_factors[i], rhs)
        for d, x in zip(tree.dofs(i)[0], qdd_i):
            qdd[d] = x
        sw, su = tree.motion_subspace_times(i, qdd_i)
        acc[i] = ([emit.sum_of_products([(1.0, aw[k], None), (1.0, sw[k], None)])
                   for k in range(3)],
                  [emit.sum_of_products([(1.0, au[k], None), (1.0, su[k], None)])
                   for k in range(3)])
    return qdd


def forward_dynamics_ldlt(tree: _Tree, q, v, tau) -> list:
    """q̈ = M⁻¹(τ − C v − g) with M by CRBA and an unrolled LDLᵀ (models with mimic joints)."""
    emit = tree.emit
    X = joint_transforms(tree, q)
    M = crba(tree, q, X)
    bias = rnea(tree, q, v, None, X)
    rhs = [emit.sum_of_products([(1.0, t, None), (-1.0, b, None)]) for t, b in zip(tau, bias)]
    try:
        factors = ldl_factor(emit, M)
    except ZeroPivot as exc:
        raise tree.undefined([i for i in range(len(tree.bodies))
                              if exc.index in tree.dofs(i)[0]]) from None
    return ldl_solve(emit, factors, rhs)


# ----------------------------------------------------------------------------- kernels


def _kernel_ir(model: Model, name: str, args: list[tuple[str, int]], build) -> KernelIR:
    emit = Emitter()
    try:
        outputs = build(_Tree(model, emit), *(symbols(p, n) for p, n in args))
    except Undefined as exc:
        return KernelIR(name, args, [], [], str(exc))
    body, results = allocate_registers(emit.lines, [emit.expression(x) for x in outputs])
    return KernelIR(name, args, body, results)


def generate_kernels(model: Model) -> dict[str, KernelIR]:
    """The kernels of ``model``: τ, g, C v + g, M (row-major), q̈ and [M v, Cᵀ v, g].

    Raises ValueError when the model's constants overflow; a kernel without a value for any
    state (forward dynamics of a model with ``forward_dynamics_problem``, or a joint moving
    only massless links) has ``error`` set, the ValueError message it raises when called.
    """
    q, v = ("q", model.nq), ("v", model.nv)
    # ABA cannot couple mimic joints: those models solve M q̈ = τ − C v − g
    fd = forward_dynamics_ldlt if model.has_mimic else aba
    problem = model.forward_dynamics_problem()
    if problem:  # the model's own wording: the same error from every implementation
        def fd(*_):
            raise Undefined(problem)
    return {
        "rnea": _kernel_ir(model, "rnea", [q, v, ("a", model.nv)], rnea),
        "gravity": _kernel_ir(model, "gravity", [q], lambda tree, q: rnea(tree, q, None, None)),
        "nle": _kernel_ir(model, "nle", [q, v], lambda tree, q, v: rnea(tree, q, v, None)),
        "crba": _kernel_ir(model, "crba", [q],
                           lambda tree, q: [x for row in crba(tree, q) for x in row]),
        "aba": _kernel_ir(model, "aba", [q, v, ("u", model.nv)], fd),
        # [M q̇, Cᵀ q̇, g] (codegen_momentum): what a momentum observer needs, row-major (3, nv)
        "momentum": _kernel_ir(model, "momentum", [q, v], lambda tree, q, v: momentum_kernel(
            tree, q, v, joint_transforms(tree, q))),
    }
