# SPDX-License-Identifier: Apache-2.0
"""Model-specialised dynamics kernels (Featherstone §10.4, "model-based code generator").

This module writes straight-line code for a given kinematic tree, which
``backend.compile_dynamics(model)`` compiles: as C (``codegen_c``, compiled and cached by
``kernel_cache``, several times faster than Pinocchio per call) when a C compiler is available,
else as Python. Every spatial quantity
is unrolled into scalars; joint axes, tree transforms and inertias become literal constants,
and terms that are exactly 0 or 1 are folded away, so a revolute joint about z costs one
``cos``/``sin`` pair and a handful of products. Transforms are kept as (E rotation, r
translation) and expanded symbolically.

The Python backend runs the same function body on Python floats (one state: no numpy in the
inner code) and on numpy arrays of shape (N,) (structure of arrays over a batch: each scalar of
the algorithm is one array), with ``cos``/``sin``/``sqrt`` bound to ``math`` or ``numpy``.

Snapping: constant rotation entries within 1e-14 of 0 or ±1 (cos(π/2) = 6e-17 from URDF rpy
angles) and inertia entries below 1e-14 of the body's largest are treated as exact, which
changes results by ~1e-14 relative at most. ``fast.source`` shows the generated code.

External wrenches (``f_ext``) fall back to the reference ``rb_dynamics.dynamics``. Both
backends refuse a non-finite result with ValueError (a singular matrix in forward dynamics, a
zero free-flyer quaternion, an overflow). A joint that moves only links without mass or inertia
has a zero pivot for every state: generation still succeeds, and ``aba`` raises ValueError
naming the joint and the links.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from rb_dynamics.model import Model, transform_parts

__all__ = ["KernelIR"]

_ROT_SNAP = 1e-14
_INERTIA_SNAP = 1e-14


# ----------------------------------------------------------------------------- symbolic scalars


class _Var:
    """``coef * name``: a generated variable with a pending constant factor."""

    __slots__ = ("coef", "name")

    def __init__(self, name: str, coef: float = 1.0):
        self.name = name
        self.coef = coef


def _fmt(x: float) -> str:
    if not math.isfinite(x):  # only a degenerate model's constants can overflow
        raise ValueError(f"the model's constants overflow float64 in the generated code ({x})")
    return repr(float(x))


class _Undefined(Exception):
    """A kernel that has no value for any state; the message is raised at call time."""


class _ZeroPivot(Exception):
    """A pivot that is exactly 0 for every state: the matrix is singular by construction."""

    def __init__(self, index: int = 0):
        super().__init__(index)
        self.index = index


class _Gen:
    """Emits assignments for sums of products, folding constants, zeros and ones."""

    def __init__(self, prefix: str = "t"):
        self.lines: list[str] = []
        self.prefix = prefix
        self.count = 0

    def new_name(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"

    def assign(self, expr: str) -> _Var:
        name = self.new_name()
        self.lines.append(f"{name} = {expr}")
        return _Var(name)

    def call(self, func: str, x) -> _Var | float:
        if not isinstance(x, _Var):
            return {"cos": math.cos, "sin": math.sin, "sqrt": math.sqrt}[func](x)
        arg = x.name if x.coef == 1.0 else f"{_fmt(x.coef)}*{x.name}"
        return self.assign(f"{func}({arg})")

    def recip(self, x) -> _Var | float:
        if not isinstance(x, _Var):
            if x == 0.0 or not math.isfinite(1.0 / x):
                raise _ZeroPivot()
            return 1.0 / x
        return _Var(self.assign(f"1.0/{x.name}").name, 1.0 / x.coef)

    def sop(self, terms, const: float = 0.0):
        """Σ coef·x·y (+ const) for terms (coef, x, y); x, y are values, y may be None."""
        acc: dict[tuple[str, ...], float] = {}
        order: list[tuple[str, ...]] = []
        for coef, x, y in terms:
            if coef == 0.0:
                continue
            names: list[str] = []
            for f in (x, y):
                if f is None:
                    continue
                if isinstance(f, _Var):
                    coef *= f.coef
                    names.append(f.name)
                else:
                    coef *= f
            if coef == 0.0:
                continue
            if not names:
                const += coef
                continue
            key = tuple(sorted(names))
            if key in acc:
                acc[key] += coef
            else:
                acc[key] = coef
                order.append(key)
        items = [(k, acc[k]) for k in order if acc[k] != 0.0]
        if not items:
            return const
        if len(items) == 1 and const == 0.0 and len(items[0][0]) == 1:
            return _Var(items[0][0][0], items[0][1])
        # Fold a common factor (and a common sign) into the result's pending coefficient.
        factor = 1.0
        mags = {abs(c) for _, c in items}
        if const == 0.0 and len(mags) == 1:
            factor = mags.pop()
        if const == 0.0 and all(c < 0 for _, c in items):
            factor = -factor
        if factor != 1.0:
            items = [(k, c / factor) for k, c in items]
            if len(items) == 1 and len(items[0][0]) == 1:
                return _Var(items[0][0][0], factor)
        # a positive term first saves a unary minus
        items.sort(key=lambda kc: kc[1] < 0)
        parts: list[str] = []
        for key, coef in items:
            prod = "*".join(key)
            mag = abs(coef)
            body = prod if mag == 1.0 else f"{_fmt(mag)}*{prod}"
            if not parts:
                parts.append(body if coef > 0 else f"-{body}")
            else:
                parts.append(f" + {body}" if coef > 0 else f" - {body}")
        if const != 0.0:
            parts.append(f" + {_fmt(const)}" if const > 0 else f" - {_fmt(-const)}")
        out = self.assign("".join(parts))
        out.coef = factor
        return out

    def lin(self, pairs, const: float = 0.0):
        """Σ coef·x (+ const)."""
        return self.sop([(c, x, None) for c, x in pairs], const)

    def ref(self, x) -> str:
        """An expression string for a value (used for outputs)."""
        if isinstance(x, _Var):
            return x.name if x.coef == 1.0 else f"{_fmt(x.coef)}*{x.name}"
        return _fmt(x)


def _is_zero(x) -> bool:
    return not isinstance(x, _Var) and x == 0.0


# ----------------------------------------------------------------------------- 3-vector helpers


def _cross_terms(a, b) -> list[list]:
    """Terms of a × b, one list per component."""
    return [
        [(1.0, a[1], b[2]), (-1.0, a[2], b[1])],
        [(1.0, a[2], b[0]), (-1.0, a[0], b[2])],
        [(1.0, a[0], b[1]), (-1.0, a[1], b[0])],
    ]


def _matvec_terms(E, x, transpose: bool = False) -> list[list]:
    if transpose:
        return [[(1.0, E[k][i], x[k]) for k in range(3)] for i in range(3)]
    return [[(1.0, E[i][k], x[k]) for k in range(3)] for i in range(3)]


@dataclass
class _Xform:
    """Plücker transform plux(E, r) with symbolic entries: parent → body coordinates."""

    E: list
    r: list

    def motion(self, g: _Gen, w, u, extra_w=None, extra_u=None):
        """(E w, E (u − r × w)) plus optional extra term lists per component."""
        rw = _cross_terms(self.r, w)
        tmp = [g.sop([(1.0, u[k], None)] + [(-c, x, y) for c, x, y in rw[k]]) for k in range(3)]
        ew = _matvec_terms(self.E, w)
        eu = _matvec_terms(self.E, tmp)
        w2 = [g.sop(ew[k] + (extra_w[k] if extra_w else [])) for k in range(3)]
        u2 = [g.sop(eu[k] + (extra_u[k] if extra_u else [])) for k in range(3)]
        return w2, u2

    def force_t_terms(self, g: _Gen, n, f):
        """Terms of Xᵀ (n, f) = (Eᵀ n + r × Eᵀ f, Eᵀ f); Eᵀ f is emitted."""
        ef = [g.sop(t) for t in _matvec_terms(self.E, f, transpose=True)]
        en = _matvec_terms(self.E, n, transpose=True)
        rf = _cross_terms(self.r, ef)
        return [en[k] + rf[k] for k in range(3)], [[(1.0, ef[k], None)] for k in range(3)]


def _snap(x: float, tol: float) -> float:
    for target in (0.0, 1.0, -1.0):
        if abs(x - target) <= tol:
            return target
    return float(x)


# ----------------------------------------------------------------------------- the generator


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
        Ic = [[_snap(x, _INERTIA_SNAP * scale) for x in row] for row in I6.tolist()]
        h = [Ic[2][4], Ic[0][5], Ic[1][3]]
        Ibar = [[Ic[min(a, b)][max(a, b)] for b in range(3)] for a in range(3)]
        jm = model.joint[i]
        out.append(_Body(
            parent=model.parent[i], kind=jm.kind,
            axis=np.array([_snap(x, _ROT_SNAP) for x in jm.axis]),
            E_T=[[_snap(x, _ROT_SNAP) for x in row] for row in E.tolist()],
            r_T=[float(x) for x in r], S=model.S[i], mass=Ic[5][5], h=h, Ibar=Ibar,
            q_index=model.body_q_index[i], v_index=model.body_v_index[i],
            mimic=model.body_mimic[i], nv=jm.nv))
    return out


class _Kernel:
    """Symbolic versions of the algorithms on a list of bodies, emitting into one _Gen."""

    def __init__(self, model: Model, g: _Gen):
        self.model = model
        self.bodies = _bodies(model)
        self.g = g
        self.gravity = [float(x) for x in model.gravity]

    # --- joint variables -------------------------------------------------------------
    def joint_q(self, i: int, q: list) -> list:
        b = self.bodies[i]
        if b.mimic is None:
            return q[b.q_index:b.q_index + self.model.joint[i].nq]
        ql, _, mult, off = b.mimic
        return [self.g.lin([(mult, q[ql])], off)]

    def joint_v(self, i: int, v: list | None) -> list:
        b = self.bodies[i]
        if v is None:
            return [0.0] * b.nv
        if b.mimic is None:
            return v[b.v_index:b.v_index + b.nv]
        _, vl, mult, _ = b.mimic
        return [self.g.lin([(mult, v[vl])])]

    def dofs(self, i: int) -> tuple[list[int], float]:
        b = self.bodies[i]
        if b.mimic is None:
            return list(range(b.v_index, b.v_index + b.nv)), 1.0
        return [b.mimic[1]], b.mimic[2]

    def s_times(self, i: int, x: list):
        """S x as (angular, linear) 3-vectors of values (lazy: folded linear forms)."""
        S = self.bodies[i].S
        w = [self.g.lin([(S[k, j], x[j]) for j in range(len(x))]) for k in range(3)]
        u = [self.g.lin([(S[k + 3, j], x[j]) for j in range(len(x))]) for k in range(3)]
        return w, u

    def st_terms(self, i: int, n, f) -> list[list]:
        """Terms of Sᵀ (n, f), one list per joint DoF."""
        S = self.bodies[i].S
        return [[(S[k, j], n[k], None) for k in range(3)]
                + [(S[k + 3, j], f[k], None) for k in range(3)] for j in range(S.shape[1])]

    # --- transforms ------------------------------------------------------------------
    def xup(self, q: list) -> list[_Xform]:
        g = self.g
        out = []
        for i, b in enumerate(self.bodies):
            qj = self.joint_q(i, q)
            ET, rT = b.E_T, b.r_T
            if b.kind == "revolute":
                c, s = g.call("cos", qj[0]), g.call("sin", qj[0])
                EJ = self._axis_rotation_t(b.axis, c, s)
                rJ = [0.0, 0.0, 0.0]
            elif b.kind == "prismatic":
                EJ = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
                rJ = [g.lin([(b.axis[k], qj[0])]) for k in range(3)]
            elif b.kind == "planar":
                c, s = g.call("cos", qj[2]), g.call("sin", qj[2])
                EJ = self._axis_rotation_t(np.array([0.0, 0.0, 1.0]), c, s)
                rJ = [qj[0], qj[1], 0.0]
            elif b.kind == "free":
                x, y, z, w = qj[3:7]
                n2 = g.sop([(1.0, x, x), (1.0, y, y), (1.0, z, z), (1.0, w, w)])
                inv = g.recip(g.call("sqrt", n2))
                x, y, z, w = (g.sop([(1.0, e, inv)]) for e in (x, y, z, w))
                R = [
                    [g.sop([(-2.0, y, y), (-2.0, z, z)], 1.0), g.sop([(2.0, x, y), (-2.0, z, w)]),
                     g.sop([(2.0, x, z), (2.0, y, w)])],
                    [g.sop([(2.0, x, y), (2.0, z, w)]), g.sop([(-2.0, x, x), (-2.0, z, z)], 1.0),
                     g.sop([(2.0, y, z), (-2.0, x, w)])],
                    [g.sop([(2.0, x, z), (-2.0, y, w)]), g.sop([(2.0, y, z), (2.0, x, w)]),
                     g.sop([(-2.0, x, x), (-2.0, y, y)], 1.0)],
                ]
                EJ = [[R[k][j] for k in range(3)] for j in range(3)]
                rJ = list(qj[0:3])
            else:  # pragma: no cover - the model only makes the kinds above
                raise ValueError(f"unknown joint kind {b.kind!r}")
            # X_J X_T = plux(E_J E_T, r_T + E_Tᵀ r_J)
            E = [[g.sop([(1.0, EJ[a][k], ET[k][c]) for k in range(3)]) for c in range(3)]
                 for a in range(3)]
            r = [g.sop([(1.0, rT[a], None)] + [(1.0, ET[k][a], rJ[k]) for k in range(3)])
                 for a in range(3)]
            out.append(_Xform(E, r))
        return out

    def _axis_rotation_t(self, axis: np.ndarray, c, s) -> list:
        """Eᵀ... i.e. E = R(axis, q)ᵀ with R = c·1 + s·a× + (1 − c)·a aᵀ."""
        g = self.g
        a = [float(x) for x in axis]
        K = [[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]]
        unit = [k for k in range(3) if abs(a[k]) == 1.0]
        omc = None if unit else g.lin([(-1.0, c)], 1.0)
        R = [[None] * 3 for _ in range(3)]
        for i in range(3):
            for j in range(3):
                if unit:
                    if i == j == unit[0]:
                        R[i][j] = 1.0
                    else:
                        R[i][j] = g.lin([(1.0 if i == j else 0.0, c), (K[i][j], s)])
                else:
                    R[i][j] = g.lin([(1.0 if i == j else 0.0, c), (K[i][j], s),
                                     (a[i] * a[j], omc)])
        return [[R[j][i] for j in range(3)] for i in range(3)]

    # --- inertia products --------------------------------------------------------------
    def inertia_terms(self, i: int, w, u):
        """Terms of I (w, u) = (Ī w + h × u, m u − h × w)."""
        b = self.bodies[i]
        hu = _cross_terms(b.h, u)
        hw = _cross_terms(b.h, w)
        n = [[(b.Ibar[k][j], w[j], None) for j in range(3)] + hu[k] for k in range(3)]
        f = [[(b.mass, u[k], None)] + [(-c, x, y) for c, x, y in hw[k]] for k in range(3)]
        return n, f

    # --- RNEA ------------------------------------------------------------------------
    def rnea(self, q, v, a, X=None):
        """τ values (list, length nv) of RNEA with v or a possibly None (zero)."""
        g, nb = self.g, len(self.bodies)
        X = X if X is not None else self.xup(q)
        vel: list = [None] * nb
        acc: list = [None] * nb
        fn: list = [None] * nb
        ff: list = [None] * nb
        ext: list = [None] * nb
        for i, b in enumerate(self.bodies):
            p = b.parent
            wJ, uJ = self.s_times(i, self.joint_v(i, v))
            awJ, auJ = self.s_times(i, self.joint_v(i, a))
            if p < 0:
                vw, vu = wJ, uJ
                base = [0.0, 0.0, 0.0], [-x for x in self.gravity]
                aw, au = X[i].motion(g, *base, [[(1.0, x, None)] for x in awJ],
                                     [[(1.0, x, None)] for x in auJ])
            else:
                vw, vu = X[i].motion(g, vel[p][0], vel[p][1], [[(1.0, x, None)] for x in wJ],
                                     [[(1.0, x, None)] for x in uJ])
                # a = X a_p + S q̈ + v × vJ
                cw = _cross_terms(vw, wJ)
                cu = [x + y for x, y in zip(_cross_terms(vw, uJ), _cross_terms(vu, wJ))]
                aw, au = X[i].motion(g, acc[p][0], acc[p][1],
                                     [[(1.0, awJ[k], None)] + cw[k] for k in range(3)],
                                     [[(1.0, auJ[k], None)] + cu[k] for k in range(3)])
            vel[i], acc[i] = (vw, vu), (aw, au)
            # f = I a + v ×* I v
            na, fa = self.inertia_terms(i, aw, au)
            if all(_is_zero(x) for x in vw + vu):
                fn[i] = [g.sop(t) for t in na]
                ff[i] = [g.sop(t) for t in fa]
            else:
                nv_, fv_ = self.inertia_terms(i, vw, vu)
                hn = [g.sop(t) for t in nv_]
                hf = [g.sop(t) for t in fv_]
                c1 = [x + y for x, y in zip(_cross_terms(vw, hn), _cross_terms(vu, hf))]
                c2 = _cross_terms(vw, hf)
                fn[i] = [g.sop(na[k] + c1[k]) for k in range(3)]
                ff[i] = [g.sop(fa[k] + c2[k]) for k in range(3)]
        tau_terms: list[list] = [[] for _ in range(self.model.nv)]
        for i in reversed(range(nb)):
            b = self.bodies[i]
            if ext[i] is not None:  # forces transmitted from the children
                en, ef = ext[i]
                fn[i] = [g.sop([(1.0, fn[i][k], None)] + en[k]) for k in range(3)]
                ff[i] = [g.sop([(1.0, ff[i][k], None)] + ef[k]) for k in range(3)]
            dofs, scale = self.dofs(i)
            for d, t in zip(dofs, self.st_terms(i, fn[i], ff[i])):
                tau_terms[d] += [(scale * c, x, y) for c, x, y in t]
            if b.parent >= 0:
                tn, tf = X[i].force_t_terms(g, fn[i], ff[i])
                pe = ext[b.parent]
                if pe is None:
                    ext[b.parent] = (tn, tf)
                else:
                    ext[b.parent] = ([pe[0][k] + tn[k] for k in range(3)],
                                     [pe[1][k] + tf[k] for k in range(3)])
        return [g.sop(t) for t in tau_terms]

    # --- CRBA ------------------------------------------------------------------------
    def crba(self, q, X=None):
        """Upper-triangle-complete M(q) as an nv × nv list of values (HandC.m)."""
        X = X if X is not None else self.xup(q)
        return self._crba_matrix(X, *self._composite_inertias(X))

    def _composite_inertias(self, X) -> tuple[list, list, list]:
        """Composite inertias I^c_i = I_i + Σ Xᵀ I^c_child X as (m, h, Ī) per body."""
        g, nb = self.g, len(self.bodies)
        # composite inertia (m, h, Ī) per body; m constant
        m = [b.mass for b in self.bodies]
        h_terms = [[[(x, None, None)] for x in b.h] for b in self.bodies]
        I_terms = [[[[(b.Ibar[r][c], None, None)] for c in range(3)] for r in range(3)]
                   for b in self.bodies]
        mass = list(m)
        hs: list = [None] * nb
        Is: list = [None] * nb
        for i in reversed(range(nb)):
            h = [g.sop(t) for t in h_terms[i]]
            Ib = [[None] * 3 for _ in range(3)]
            for r in range(3):
                for c in range(r, 3):
                    Ib[r][c] = Ib[c][r] = g.sop(I_terms[i][r][c])
            hs[i], Is[i] = h, Ib
            p = self.bodies[i].parent
            if p < 0:
                continue
            E, rr = X[i].E, X[i].r
            mi = mass[i]
            mass[p] += mi
            hr = [g.sop(t) for t in _matvec_terms(E, h, transpose=True)]
            A = [[g.sop([(1.0, Ib[a][k], E[k][c]) for k in range(3)]) for c in range(3)]
                 for a in range(3)]
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

    def _crba_matrix(self, X, mass: list, hs: list, Is: list) -> list:
        """M from the composite inertias: H_ij = S_jᵀ (^jX_i)ᵀ I^c_i S_i up the tree."""
        g, nb, nv = self.g, len(self.bodies), self.model.nv
        H: dict[tuple[int, int], list] = {}

        def add(d1: int, d2: int, terms: list) -> None:
            key = (min(d1, d2), max(d1, d2))
            H.setdefault(key, []).extend(terms)

        for i in range(nb):
            b = self.bodies[i]
            dofs_i, sc_i = self.dofs(i)
            Fs = []
            for j in range(b.nv):
                sw = [float(b.S[k, j]) for k in range(3)]
                su = [float(b.S[k + 3, j]) for k in range(3)]
                hu = _cross_terms(hs[i], su)
                hw = _cross_terms(hs[i], sw)
                Fn = [g.sop([(1.0, Is[i][k][c], sw[c]) for c in range(3)] + hu[k])
                      for k in range(3)]
                Ff = [g.sop([(mass[i], su[k], None)] + [(-c, x, y) for c, x, y in hw[k]])
                      for k in range(3)]
                Fs.append((Fn, Ff))
            st = [self.st_terms(i, Fn, Ff) for Fn, Ff in Fs]  # st[col][row]
            for a in range(b.nv):
                for c in range(a, b.nv):
                    add(dofs_i[a], dofs_i[c],
                        [(sc_i * sc_i * cc, x, y) for cc, x, y in st[c][a]])
            j = i
            while self.bodies[j].parent >= 0:
                Fs2 = []
                for Fn, Ff in Fs:
                    tn, tf = X[j].force_t_terms(g, Fn, Ff)
                    Fs2.append(([g.sop(t) for t in tn], [g.sop(t) for t in tf]))
                Fs = Fs2
                j = self.bodies[j].parent
                dofs_j, sc_j = self.dofs(j)
                for col, (Fn, Ff) in enumerate(Fs):
                    for row, t in enumerate(self.st_terms(j, Fn, Ff)):
                        d1, d2 = dofs_i[col], dofs_j[row]
                        terms = [(sc_i * sc_j * cc, x, y) for cc, x, y in t]
                        add(d1, d2, terms)
                        if d1 == d2:
                            add(d1, d2, terms)
        M = [[0.0] * nv for _ in range(nv)]
        for (d1, d2), terms in sorted(H.items()):
            M[d1][d2] = M[d2][d1] = g.sop(terms)
        return M

    # --- ABA -------------------------------------------------------------------------
    def aba(self, q, v, tau):
        """q̈ by the articulated-body algorithm (FDab.m): three passes."""
        X = self.xup(q)
        cvec, IA, pA = self._aba_velocities(X, v)
        U, fac, uu = self._aba_articulated(X, tau, cvec, IA, pA)
        return self._aba_accelerations(X, cvec, U, fac, uu)

    def _aba_velocities(self, X, v) -> tuple[list, list, list]:
        """Outward: velocity-product accelerations c_i, rigid inertias and bias forces p_i."""
        g, nb = self.g, len(self.bodies)
        vel: list = [None] * nb
        cvec: list = [None] * nb
        IA: list = [None] * nb
        pA: list = [None] * nb
        for i, b in enumerate(self.bodies):
            p = b.parent
            wJ, uJ = self.s_times(i, self.joint_v(i, v))
            if p < 0:
                vw, vu = wJ, uJ
                cvec[i] = ([0.0] * 3, [0.0] * 3)
            else:
                vw, vu = X[i].motion(g, vel[p][0], vel[p][1], [[(1.0, x, None)] for x in wJ],
                                     [[(1.0, x, None)] for x in uJ])
                cw = _cross_terms(vw, wJ)
                cu = [x + y for x, y in zip(_cross_terms(vw, uJ), _cross_terms(vu, wJ))]
                cvec[i] = ([g.sop(t) for t in cw], [g.sop(t) for t in cu])
            vel[i] = (vw, vu)
            nvv, fvv = self.inertia_terms(i, vw, vu)
            hn = [g.sop(t) for t in nvv]
            hf = [g.sop(t) for t in fvv]
            c1 = [x + y for x, y in zip(_cross_terms(vw, hn), _cross_terms(vu, hf))]
            c2 = _cross_terms(vw, hf)
            pA[i] = [[t for t in c1[k]] for k in range(3)] + [c2[k] for k in range(3)]
            # articulated inertia as term lists for the 6×6 upper triangle
            I6 = _rigid_inertia_matrix(b)
            IA[i] = {(r, c): [(I6[r][c], None, None)] for r in range(6) for c in range(r, 6)}
        return cvec, IA, pA

    def _aba_articulated(self, X, tau, cvec: list, IA: list, pA: list
                         ) -> tuple[list, list, list]:
        """Inward: articulated inertias and bias forces, U = I^A S, D = Sᵀ U (factored), u."""
        g, nb = self.g, len(self.bodies)
        U: list = [None] * nb
        fac: list = [None] * nb
        uu: list = [None] * nb
        for i in reversed(range(nb)):
            b = self.bodies[i]
            p = b.parent
            A = [[None] * 6 for _ in range(6)]
            for (r, c), t in IA[i].items():
                A[r][c] = A[c][r] = g.sop(t)
            pa_vals = [g.sop(t) for t in pA[i]]
            S = b.S
            Ui = [[g.sop([(1.0, A[r][k], float(S[k, j])) for k in range(6)]) for j in range(b.nv)]
                  for r in range(6)]  # 6 × nv
            D = [[g.sop([(float(S[k, a]), Ui[k][c], None) for k in range(6)])
                  for c in range(b.nv)] for a in range(b.nv)]
            tj = self.joint_v(i, tau)
            ui = [g.sop([(1.0, tj[a], None)] + [(-float(S[k, a]), pa_vals[k], None)
                                                  for k in range(6)]) for a in range(b.nv)]
            U[i], uu[i] = Ui, ui
            try:
                fac[i] = _ldl(g, D)
            except _ZeroPivot:
                raise self.undefined([i]) from None
            if p < 0:
                continue
            # UD = U D⁻¹ (6 × nv), Ia = IA − UD Uᵀ, pa = pA + Ia c + UD u
            UDt = [_ldl_solve(g, fac[i], [Ui[r][a] for a in range(b.nv)]) for r in range(6)]
            Ia = [[None] * 6 for _ in range(6)]
            for r in range(6):
                for c in range(r, 6):
                    Ia[r][c] = Ia[c][r] = g.sop([(1.0, A[r][c], None)] + [
                        (-1.0, UDt[r][a], Ui[c][a]) for a in range(b.nv)])
            cc = cvec[i][0] + cvec[i][1]
            pa = [g.sop([(1.0, pa_vals[r], None)]
                        + [(1.0, Ia[r][k], cc[k]) for k in range(6)]
                        + [(1.0, UDt[r][a], ui[a]) for a in range(b.nv)]) for r in range(6)]
            # IA_p += Xᵀ Ia X ; pA_p += Xᵀ pa
            for key, t in _congruence_terms(g, X[i], Ia).items():
                IA[p][key].extend(t)
            tn, tf = X[i].force_t_terms(g, pa[:3], pa[3:])
            for k in range(3):
                pA[p][k].extend(tn[k])
                pA[p][k + 3].extend(tf[k])
        return U, fac, uu

    def _aba_accelerations(self, X, cvec: list, U: list, fac: list, uu: list) -> list:
        """Outward: q̈_i = D⁻¹(u − Uᵀ a'), a_i = a' + S q̈_i from the base's −gravity."""
        g = self.g
        qdd = [0.0] * self.model.nv
        acc: list = [None] * len(self.bodies)
        for i, b in enumerate(self.bodies):
            p = b.parent
            if p < 0:
                base = [0.0, 0.0, 0.0], [-x for x in self.gravity]
                aw, au = X[i].motion(g, *base)
            else:
                aw, au = X[i].motion(g, acc[p][0], acc[p][1],
                                     [[(1.0, x, None)] for x in cvec[i][0]],
                                     [[(1.0, x, None)] for x in cvec[i][1]])
            a6 = aw + au
            rhs = [g.sop([(1.0, uu[i][j], None)] + [(-1.0, U[i][k][j], a6[k]) for k in range(6)])
                   for j in range(b.nv)]
            qi = _ldl_solve(g, fac[i], rhs)
            for d, x in zip(self.dofs(i)[0], qi):
                qdd[d] = x
            sw, su = self.s_times(i, qi)
            acc[i] = ([g.sop([(1.0, aw[k], None), (1.0, sw[k], None)]) for k in range(3)],
                      [g.sop([(1.0, au[k], None), (1.0, su[k], None)]) for k in range(3)])
        return qdd

    def fd_crba(self, q, v, tau):
        """q̈ = M⁻¹(τ − C v − g) with M by CRBA and an unrolled LDLᵀ (mimic models)."""
        g = self.g
        X = self.xup(q)
        M = self.crba(q, X)
        bias = self.rnea(q, v, None, X)
        rhs = [g.sop([(1.0, t, None), (-1.0, b, None)]) for t, b in zip(tau, bias)]
        try:
            fac = _ldl(g, M)
        except _ZeroPivot as exc:
            raise self.undefined([i for i in range(len(self.bodies))
                                  if exc.index in self.dofs(i)[0]]) from None
        return _ldl_solve(g, fac, rhs)

    def undefined(self, bodies: list[int]) -> _Undefined:
        """The error for a joint (moving ``bodies``) whose articulated inertia is exactly zero."""
        moved = set(bodies)
        for i, b in enumerate(self.bodies):  # regular numbering: parents come first
            if b.parent in moved:
                moved.add(i)
        links = [name for name, f in self.model.frames.items() if f.body in moved]
        leader = [i for i in bodies if self.bodies[i].mimic is None] or bodies
        joint = self.model.body_joint_names[leader[0]]
        return _Undefined(f"forward dynamics is undefined: joint {joint!r} moves links {links} "
                          "that carry no mass or inertia")


def _rigid_inertia_matrix(b: _Body) -> list:
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


def _congruence_terms(g: _Gen, X: _Xform, A: list) -> dict:
    """Upper-triangle terms of Xᵀ A X for a symmetric 6×6 A in body coordinates.

    With B_ab = Eᵀ A_ab E:  C22 = B22, C12 = B12 + r× B22,
    C11 = B11 + r× B12ᵀ − B12 r× − r× B22 r×.
    """
    E, r = X.E, X.r

    def rot(M, sym: bool):
        T = [[g.sop([(1.0, M[a][k], E[k][c]) for k in range(3)]) for c in range(3)]
             for a in range(3)]
        out = [[None] * 3 for _ in range(3)]
        for a in range(3):
            for c in range(a if sym else 0, 3):
                out[a][c] = g.sop([(1.0, E[k][a], T[k][c]) for k in range(3)])
                if sym:
                    out[c][a] = out[a][c]
        return out

    A11 = [[A[a][c] for c in range(3)] for a in range(3)]
    A12 = [[A[a][c + 3] for c in range(3)] for a in range(3)]
    A22 = [[A[a + 3][c + 3] for c in range(3)] for a in range(3)]
    B11, B12, B22 = rot(A11, True), rot(A12, False), rot(A22, True)
    # (r× M)_ac = Σ_k rx[a][k] M[k][c] with rx = [[0, -r2, r1], [r2, 0, -r0], [-r1, r0, 0]]
    RX = [[(0, None, 0.0), (-1.0, r[2], None), (1.0, r[1], None)],
          [(1.0, r[2], None), (0, None, 0.0), (-1.0, r[0], None)],
          [(-1.0, r[1], None), (1.0, r[0], None), (0, None, 0.0)]]

    def rx_times_terms(M, a, c):  # (r× M)_ac
        return [(s, rk, M[k][c]) for k, (s, rk, _) in enumerate(RX[a]) if s != 0]

    def times_rx_terms(M, a, c):  # (M r×)_ac = Σ_k M[a][k] rx[k][c]
        return [(RX[k][c][0], M[a][k], RX[k][c][1]) for k in range(3) if RX[k][c][0] != 0]

    out: dict = {}
    C12 = [[g.sop([(1.0, B12[a][c], None)] + rx_times_terms(B22, a, c)) for c in range(3)]
           for a in range(3)]
    B21 = [[B12[c][a] for c in range(3)] for a in range(3)]
    for a in range(3):
        for c in range(3):
            out[(a, c + 3)] = [(1.0, C12[a][c], None)]
        for c in range(a, 3):
            out[(a + 3, c + 3)] = [(1.0, B22[a][c], None)]
            # C11 = B11 + r× B21 − C12 r×
            t = [(1.0, B11[a][c], None)] + rx_times_terms(B21, a, c)
            t += [(-s, x, y) for s, x, y in times_rx_terms(C12, a, c)]
            out[(a, c)] = t
    return out


def _ldl(g: _Gen, D: list):
    """Unrolled LDLᵀ of a symmetric positive-definite matrix of values: (L, 1/d)."""
    n = len(D)
    L = [[0.0] * n for _ in range(n)]
    Ld = [[0.0] * n for _ in range(n)]  # L_jk d_k
    dinv: list = [None] * n
    d: list = [None] * n
    for j in range(n):
        d[j] = g.sop([(1.0, D[j][j], None)] + [(-1.0, L[j][k], Ld[j][k]) for k in range(j)])
        try:
            dinv[j] = g.recip(d[j])
        except _ZeroPivot:
            raise _ZeroPivot(j) from None
        L[j][j] = 1.0
        for i in range(j + 1, n):
            s = g.sop([(1.0, D[i][j], None)] + [(-1.0, L[i][k], Ld[j][k]) for k in range(j)])
            L[i][j] = g.sop([(1.0, s, dinv[j])])
            Ld[i][j] = s
    return L, dinv


def _ldl_solve(g: _Gen, fac, b: list) -> list:
    L, dinv = fac
    n = len(b)
    y: list = [None] * n
    for i in range(n):
        y[i] = g.sop([(1.0, b[i], None)] + [(-1.0, L[i][k], y[k]) for k in range(i)])
    z = [g.sop([(1.0, y[i], dinv[i])]) for i in range(n)]
    x: list = [None] * n
    for i in reversed(range(n)):
        x[i] = g.sop([(1.0, z[i], None)] + [(-1.0, L[k][i], x[k]) for k in range(i + 1, n)])
    return x


# ----------------------------------------------------------------------------- compilation


_TEMP = re.compile(r"\bt\d+\b")


def _allocate(lines: list[str], results: list[str]) -> tuple[list[str], list[str]]:
    """Dead-code elimination and register allocation of the temporaries ``t<k>``.

    Reusing a name as soon as its value is dead keeps the batched path's working set (one
    array per live temporary) small enough to stay in cache, and the C compiler's register
    allocator fast; the scalar path is unaffected.
    """
    parsed = []
    for line in lines:
        target, expr = line.split(" = ", 1)
        parsed.append((target, expr, _TEMP.findall(expr)))
    result_uses = [u for r in results for u in _TEMP.findall(r)]
    live = set(result_uses)
    keep = [False] * len(parsed)
    for i in reversed(range(len(parsed))):
        target, _, uses = parsed[i]
        if target in live:
            keep[i] = True
            live.discard(target)
            live.update(uses)
    parsed = [p for p, k in zip(parsed, keep) if k]
    last_use: dict[str, int] = {}
    for i, (_, _, uses) in enumerate(parsed):
        for u in uses:
            last_use[u] = i
    for u in result_uses:
        last_use[u] = len(parsed)
    slot: dict[str, str] = {}
    free: list[str] = []
    count = 0
    out = []
    for i, (target, expr, uses) in enumerate(parsed):
        expr = _TEMP.sub(lambda mt: slot[mt.group(0)], expr)
        for u in dict.fromkeys(uses):  # not a set: the source must not depend on the hash seed
            if last_use[u] == i:
                free.append(slot[u])
        if free:
            name = free.pop()
        else:
            name = f"r{count}"
            count += 1
        slot[target] = name
        out.append(f"{name} = {expr}")
    return out, [_TEMP.sub(lambda mt: slot[mt.group(0)], r) for r in results]


@dataclass
class KernelIR:
    """One generated kernel, backend-neutral: ``r<k> = expr`` lines valid in Python and C.

    Inputs are vectors unpacked into scalars ``<prefix><k>``; ``error`` is set instead of a
    body when the kernel has no value for any state of this model (raised at call time).
    """

    name: str
    args: list[tuple[str, int]]  # (prefix, length) per input vector
    body: list[str]
    outputs: list[str]  # one expression per output scalar
    error: str | None = None


def _symbols(prefix: str, n: int) -> list:
    return [_Var(f"{prefix}{k}") for k in range(n)]


def _kernel_ir(model: Model, name: str, args: list[tuple[str, int]], build) -> KernelIR:
    g = _Gen()
    try:
        outputs = build(_Kernel(model, g), *(_symbols(p, n) for p, n in args))
    except _Undefined as exc:
        return KernelIR(name, args, [], [], str(exc))
    body, results = _allocate(g.lines, [g.ref(x) for x in outputs])
    return KernelIR(name, args, body, results)


def generate_kernels(model: Model) -> dict[str, KernelIR]:
    """The five kernels of ``model``: τ, g, C v + g, M (row-major) and q̈."""
    q, v = ("q", model.nq), ("v", model.nv)
    fd = _Kernel.fd_crba if model.has_mimic else _Kernel.aba  # ABA cannot couple mimic joints
    problem = model.forward_dynamics_problem()
    if problem:  # the model's own wording: the same error from every backend
        def fd(*_):
            raise _Undefined(problem)
    return {
        "rnea": _kernel_ir(model, "rnea", [q, v, ("a", model.nv)], _Kernel.rnea),
        "gravity": _kernel_ir(model, "gravity", [q], lambda k, q: k.rnea(q, None, None)),
        "nle": _kernel_ir(model, "nle", [q, v], lambda k, q, v: k.rnea(q, v, None)),
        "crba": _kernel_ir(model, "crba", [q],
                           lambda k, q: [x for row in k.crba(q) for x in row]),
        "aba": _kernel_ir(model, "aba", [q, v, ("u", model.nv)], fd),
    }


def emit_python(ir: KernelIR) -> str:
    """The Python source of one kernel: a function of the input vectors returning a tuple."""
    lines = [f"def {ir.name}({', '.join(a for a, _ in ir.args)}):"]
    if ir.error is not None:
        lines.append(f"    raise ValueError({ir.error!r})")
        return "\n".join(lines) + "\n"
    for arg, n in ir.args:
        if n:
            names = ", ".join(f"{arg}{k}" for k in range(n))
            lines.append(f"    {names}, = {arg}")
    lines += [f"    {line}" for line in ir.body]
    lines.append(f"    return ({''.join(x + ', ' for x in ir.outputs)})")
    return "\n".join(lines) + "\n"


# What each kernel computes, for the error raised when a result is not finite (a singular
# matrix in forward dynamics, a zero free-flyer quaternion, or an overflow): never inf/NaN.
QUANTITIES = {
    "rnea": "inverse dynamics", "gravity": "gravity", "nle": "nonlinear effects",
    "crba": "the mass matrix", "aba": "forward dynamics",
}


def nonfinite_message(kernel: str) -> str:
    """The ValueError text of every implementation for a non-finite result of ``kernel``."""
    why = ("a singular articulated inertia or mass matrix, a zero free-flyer quaternion "
           "or an overflow" if kernel == "aba" else "a zero free-flyer quaternion or an overflow")
    return f"{QUANTITIES[kernel]} is undefined at this state: the result is not finite ({why})"
