# SPDX-License-Identifier: Apache-2.0
"""The expression machinery of the generated kernels (``codegen``): symbolic scalars, the
emitter that writes straight-line code for sums of products, symbolic spatial transforms,
rotations and an unrolled LDLᵀ, register allocation, and the backend-neutral result
(``KernelIR``) with its Python form (``emit_python``; ``codegen_c`` writes the C form).

A value is a float constant or a ``Variable`` (a generated temporary times a pending constant
factor). Sums are passed around as term lists [(coef, x, y), …] meaning Σ coef·x·y (y may be
None) and written out only when a value is needed, so constant factors, zeros and repeated
products fold away before any code is emitted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

__all__ = ["KernelIR"]


# ----------------------------------------------------------------------------- symbolic scalars


class Variable:
    """``coef * name``: a generated variable with a pending constant factor."""

    __slots__ = ("coef", "name")

    def __init__(self, name: str, coef: float = 1.0):
        self.name = name
        self.coef = coef


def literal(x: float) -> str:
    """``x`` as a Python and C float literal (``repr``: it reads back to the same double)."""
    if not math.isfinite(x):  # only a degenerate model's constants can overflow
        raise ValueError(f"the model's constants overflow float64 in the generated code ({x})")
    return repr(float(x))


class Undefined(Exception):
    """A kernel that has no value for any state; the message is raised at call time."""


class ZeroPivot(Exception):
    """A pivot that is exactly 0 for every state: the matrix is singular by construction."""

    def __init__(self, index: int = 0):
        super().__init__(index)
        self.index = index


class Emitter:
    """Writes one kernel's straight-line code: each method returns a value (a float constant or
    a ``Variable``) and appends the assignment that computes it, if any, to ``lines``;
    constants, zeros and ones are folded as the code is written."""

    def __init__(self, prefix: str = "t"):
        self.lines: list[str] = []
        self.prefix = prefix
        self.count = 0

    def new_name(self) -> str:
        """A fresh temporary ``<prefix><k>``."""
        self.count += 1
        return f"{self.prefix}{self.count}"

    def assign(self, expr: str) -> Variable:
        """A new temporary holding ``expr``."""
        name = self.new_name()
        self.lines.append(f"{name} = {expr}")
        return Variable(name)

    def call(self, func: str, x) -> Variable | float:
        """``func(x)`` for "cos", "sin" or "sqrt" (computed now when x is a constant)."""
        if not isinstance(x, Variable):
            return {"cos": math.cos, "sin": math.sin, "sqrt": math.sqrt}[func](x)
        arg = x.name if x.coef == 1.0 else f"{literal(x.coef)}*{x.name}"
        return self.assign(f"{func}({arg})")

    def reciprocal(self, x) -> Variable | float:
        """1/x; ``ZeroPivot`` when x is the constant 0."""
        if not isinstance(x, Variable):
            if x == 0.0 or not math.isfinite(1.0 / x):
                raise ZeroPivot()
            return 1.0 / x
        return Variable(self.assign(f"1.0/{x.name}").name, 1.0 / x.coef)

    def sum_of_products(self, terms, const: float = 0.0):
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
                if isinstance(f, Variable):
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
            return Variable(items[0][0][0], items[0][1])
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
                return Variable(items[0][0][0], factor)
        # a positive term first saves a unary minus
        items.sort(key=lambda kc: kc[1] < 0)
        parts: list[str] = []
        for key, coef in items:
            prod = "*".join(key)
            mag = abs(coef)
            body = prod if mag == 1.0 else f"{literal(mag)}*{prod}"
            if not parts:
                parts.append(body if coef > 0 else f"-{body}")
            else:
                parts.append(f" + {body}" if coef > 0 else f" - {body}")
        if const != 0.0:
            parts.append(f" + {literal(const)}" if const > 0 else f" - {literal(-const)}")
        out = self.assign("".join(parts))
        out.coef = factor
        return out

    def linear(self, pairs, const: float = 0.0):
        """Σ coef·x (+ const)."""
        return self.sum_of_products([(c, x, None) for c, x in pairs], const)

    def expression(self, x) -> str:
        """An expression string for a value (used for outputs)."""
        if isinstance(x, Variable):
            return x.name if x.coef == 1.0 else f"{literal(x.coef)}*{x.name}"
        return literal(x)


def is_zero(x) -> bool:
    """True for the constant 0 (a ``Variable`` is never known to be zero)."""
    return not isinstance(x, Variable) and x == 0.0


# ----------------------------------------------------------------------------- 3-vector helpers


def cross_terms(a, b) -> list[list]:
    """Terms of a × b, one list per component."""
    return [
        [(1.0, a[1], b[2]), (-1.0, a[2], b[1])],
        [(1.0, a[2], b[0]), (-1.0, a[0], b[2])],
        [(1.0, a[0], b[1]), (-1.0, a[1], b[0])],
    ]


def matvec_terms(E, x, transpose: bool = False) -> list[list]:
    """Terms of E x (or Eᵀ x), one list per component."""
    if transpose:
        return [[(1.0, E[k][i], x[k]) for k in range(3)] for i in range(3)]
    return [[(1.0, E[i][k], x[k]) for k in range(3)] for i in range(3)]


@dataclass
class Transform:
    """Plücker transform plux(E, r) with symbolic entries: parent → body coordinates."""

    E: list
    r: list

    def apply_motion(self, emit: Emitter, w, u, extra_w=None, extra_u=None):
        """(E w, E (u − r × w)) plus optional extra term lists per component."""
        rw = cross_terms(self.r, w)
        tmp = [emit.sum_of_products([(1.0, u[k], None)] + [(-c, x, y) for c, x, y in rw[k]])
               for k in range(3)]
        ew = matvec_terms(self.E, w)
        eu = matvec_terms(self.E, tmp)
        w2 = [emit.sum_of_products(ew[k] + (extra_w[k] if extra_w else [])) for k in range(3)]
        u2 = [emit.sum_of_products(eu[k] + (extra_u[k] if extra_u else [])) for k in range(3)]
        return w2, u2

    def transpose_force_terms(self, emit: Emitter, n, f):
        """Terms of Xᵀ (n, f) = (Eᵀ n + r × Eᵀ f, Eᵀ f); Eᵀ f is emitted."""
        ef = [emit.sum_of_products(t) for t in matvec_terms(self.E, f, transpose=True)]
        en = matvec_terms(self.E, n, transpose=True)
        rf = cross_terms(self.r, ef)
        return [en[k] + rf[k] for k in range(3)], [[(1.0, ef[k], None)] for k in range(3)]


def snap(x: float, tol: float) -> float:
    """``x``, or 0, 1 or −1 when within ``tol`` of it (so that the constant folds away)."""
    for target in (0.0, 1.0, -1.0):
        if abs(x - target) <= tol:
            return target
    return float(x)


def as_terms(values: list) -> list[list]:
    """Each value as a one-term list (to add to other terms)."""
    return [[(1.0, x, None)] for x in values]


def axis_rotation_transposed(emit: Emitter, axis: np.ndarray, c, s) -> list:
    """E = R(axis, q)ᵀ with R = c·1 + s·a× + (1 − c)·a aᵀ, given c = cos q and s = sin q."""
    a = [float(x) for x in axis]
    K = [[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]]
    unit = [k for k in range(3) if abs(a[k]) == 1.0]
    one_minus_c = None if unit else emit.linear([(-1.0, c)], 1.0)
    R = [[None] * 3 for _ in range(3)]
    for i in range(3):
        for j in range(3):
            if unit:
                if i == j == unit[0]:
                    R[i][j] = 1.0
                else:
                    R[i][j] = emit.linear([(1.0 if i == j else 0.0, c), (K[i][j], s)])
            else:
                R[i][j] = emit.linear([(1.0 if i == j else 0.0, c), (K[i][j], s),
                                       (a[i] * a[j], one_minus_c)])
    return [[R[j][i] for j in range(3)] for i in range(3)]


def quaternion_rotation_transposed(emit: Emitter, quaternion: list) -> list:
    """E = R(q)ᵀ of a free joint's quaternion (x, y, z, w), normalised first."""
    x, y, z, w = quaternion
    n2 = emit.sum_of_products([(1.0, x, x), (1.0, y, y), (1.0, z, z), (1.0, w, w)])
    inv = emit.reciprocal(emit.call("sqrt", n2))
    x, y, z, w = (emit.sum_of_products([(1.0, e, inv)]) for e in (x, y, z, w))
    entry = emit.sum_of_products
    R = [
        [entry([(-2.0, y, y), (-2.0, z, z)], 1.0), entry([(2.0, x, y), (-2.0, z, w)]),
         entry([(2.0, x, z), (2.0, y, w)])],
        [entry([(2.0, x, y), (2.0, z, w)]), entry([(-2.0, x, x), (-2.0, z, z)], 1.0),
         entry([(2.0, y, z), (-2.0, x, w)])],
        [entry([(2.0, x, z), (-2.0, y, w)]), entry([(2.0, y, z), (2.0, x, w)]),
         entry([(-2.0, x, x), (-2.0, y, y)], 1.0)],
    ]
    return [[R[k][j] for k in range(3)] for j in range(3)]


def congruence_terms(emit: Emitter, X: Transform, A: list) -> dict:
    """Upper-triangle terms of Xᵀ A X for a symmetric 6×6 A in body coordinates.

    With B_ab = Eᵀ A_ab E:  C22 = B22, C12 = B12 + r× B22,
    C11 = B11 + r× B12ᵀ − B12 r× − r× B22 r×.
    """
    E, r = X.E, X.r

    def rotated(M, sym: bool):  # Eᵀ M E
        T = [[emit.sum_of_products([(1.0, M[a][k], E[k][c]) for k in range(3)])
              for c in range(3)] for a in range(3)]
        out = [[None] * 3 for _ in range(3)]
        for a in range(3):
            for c in range(a if sym else 0, 3):
                out[a][c] = emit.sum_of_products([(1.0, E[k][a], T[k][c]) for k in range(3)])
                if sym:
                    out[c][a] = out[a][c]
        return out

    A11 = [[A[a][c] for c in range(3)] for a in range(3)]
    A12 = [[A[a][c + 3] for c in range(3)] for a in range(3)]
    A22 = [[A[a + 3][c + 3] for c in range(3)] for a in range(3)]
    B11, B12, B22 = rotated(A11, True), rotated(A12, False), rotated(A22, True)
    # (r× M)_ac = Σ_k rx[a][k] M[k][c] with rx = [[0, -r2, r1], [r2, 0, -r0], [-r1, r0, 0]]
    RX = [[(0, None, 0.0), (-1.0, r[2], None), (1.0, r[1], None)],
          [(1.0, r[2], None), (0, None, 0.0), (-1.0, r[0], None)],
          [(-1.0, r[1], None), (1.0, r[0], None), (0, None, 0.0)]]

    def rx_times_terms(M, a, c):  # (r× M)_ac
        return [(s, rk, M[k][c]) for k, (s, rk, _) in enumerate(RX[a]) if s != 0]

    def times_rx_terms(M, a, c):  # (M r×)_ac = Σ_k M[a][k] rx[k][c]
        return [(RX[k][c][0], M[a][k], RX[k][c][1]) for k in range(3) if RX[k][c][0] != 0]

    out: dict = {}
    C12 = [[emit.sum_of_products([(1.0, B12[a][c], None)] + rx_times_terms(B22, a, c))
            for c in range(3)] for a in range(3)]
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


def ldl_factor(emit: Emitter, D: list) -> tuple[list, list]:
    """Unrolled LDLᵀ of a symmetric positive-definite matrix of values: (L, 1/d); a
    ``ZeroPivot`` with the index of a pivot that is the constant 0."""
    n = len(D)
    L = [[0.0] * n for _ in range(n)]
    Ld = [[0.0] * n for _ in range(n)]  # L_jk d_k
    d_inverse: list = [None] * n
    d: list = [None] * n
    for j in range(n):
        d[j] = emit.sum_of_products([(1.0, D[j][j], None)]
                                    + [(-1.0, L[j][k], Ld[j][k]) for k in range(j)])
        try:
            d_inverse[j] = emit.reciprocal(d[j])
        except ZeroPivot:
            raise ZeroPivot(j) from None
        L[j][j] = 1.0
        for i in range(j + 1, n):
            s = emit.sum_of_products([(1.0, D[i][j], None)]
                                     + [(-1.0, L[i][k], Ld[j][k]) for k in range(j)])
            L[i][j] = emit.sum_of_products([(1.0, s, d_inverse[j])])
            Ld[i][j] = s
    return L, d_inverse


def ldl_solve(emit: Emitter, factors: tuple[list, list], b: list) -> list:
    """x with L D Lᵀ x = b, ``factors`` from ``ldl_factor``: L y = b, z = D⁻¹ y, Lᵀ x = z."""
    L, d_inverse = factors
    n = len(b)
    y: list = [None] * n
    for i in range(n):
        y[i] = emit.sum_of_products([(1.0, b[i], None)]
                                    + [(-1.0, L[i][k], y[k]) for k in range(i)])
    z = [emit.sum_of_products([(1.0, y[i], d_inverse[i])]) for i in range(n)]
    x: list = [None] * n
    for i in reversed(range(n)):
        x[i] = emit.sum_of_products([(1.0, z[i], None)]
                                    + [(-1.0, L[k][i], x[k]) for k in range(i + 1, n)])
    return x


# ----------------------------------------------------------------------------- compilation


_TEMP = re.compile(r"\bt\d+\b")


def allocate_registers(lines: list[str], results: list[str]) -> tuple[list[str], list[str]]:
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


def symbols(prefix: str, n: int) -> list:
    """The input variables ``<prefix>0`` … ``<prefix><n−1>`` of a kernel."""
    return [Variable(f"{prefix}{k}") for k in range(n)]


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
    "momentum": "the momentum terms",
}


def nonfinite_message(kernel: str) -> str:
    """The ValueError text of every implementation for a non-finite result of ``kernel``."""
    why = ("a singular articulated inertia or mass matrix, a zero free-flyer quaternion "
           "or an overflow" if kernel == "aba" else "a zero free-flyer quaternion or an overflow")
    return f"{QUANTITIES[kernel]} is undefined at this state: the result is not finite ({why})"
