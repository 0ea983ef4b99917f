# SPDX-License-Identifier: Apache-2.0
"""One dynamics interface for everything that evaluates a model: control law, services, simulator.

A ``Dynamics`` object is bound to one model and answers ``rnea``, ``gravity``,
``nonlinear_effects``, ``crba``, ``aba`` and ``momentum_terms`` (with ``coriolis_transpose``) for
one state ((n,) arrays) or a batch ((N, n)).
Its implementations give the same results (≤ 1e-12 relative), shapes and errors:

- ``ReferenceDynamics``: the readable algorithms of ``reference``;
- ``FastDynamics``: the model-specialised straight-line kernels of ``codegen``, run by Python;
- ``CDynamics``: the same kernels compiled by the system C compiler (``kernel_cache``).

(``payload.PayloadDynamics`` adds a payload's terms to any of them.)

Two ways to build one, on one build path:

- ``make_dynamics(model, kernels)`` builds now (blocking): a script, a test, a benchmark;
- ``LiveDynamics(model, kernels)`` answers at once on the reference and builds the generated
  kernels in a background thread, switching to them when they are ready, so that loading a
  model never stalls a control loop or a service: what a node owns.

Kernels are generated only for models up to ``MAX_GENERATED_BODIES`` bodies (their size grows
~n²); larger ones stay on the reference unless kernels are asked for explicitly.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from rb_dynamics.model import Model

from . import kernel_cache
from . import momentum as _momentum
from . import reference as _ref
from .codegen import generate_kernels
from .codegen_ir import KernelIR, emit_python, nonfinite_message

__all__ = [
    "KERNEL_CHOICES",
    "KERNEL_METHODS",
    "MAX_GENERATED_BODIES",
    "CDynamics",
    "Dynamics",
    "FastDynamics",
    "LiveDynamics",
    "ReferenceDynamics",
    "kernels_choice",
    "make_dynamics",
]

KERNEL_METHODS = ("rnea", "gravity", "nonlinear_effects", "crba", "aba", "momentum_terms",
                  "coriolis_transpose")
KERNEL_CHOICES = ("auto", "c", "python")
# Generated code grows ~n² with the bodies: beyond this a model stays on the reference, O(n)
MAX_GENERATED_BODIES = 100
# compile() of a generated Python kernel holds the GIL for a time that grows with its length:
# a background build refuses kernels longer than this rather than stall a control loop
MAX_PYTHON_KERNEL_CHARS = 100_000
_CHUNK = 16384  # states per batched kernel call: a bounded working set for large batches
_log = kernel_cache.log


class Dynamics(Protocol):
    """The engine's methods on one model (``ReferenceDynamics`` documents each one)."""

    model: Model
    kind: str

    def rnea(self, q: ArrayLike, v: ArrayLike, a: ArrayLike,
             f_ext: Mapping[str, np.ndarray] | None = None) -> np.ndarray: ...

    def gravity(self, q: ArrayLike) -> np.ndarray: ...

    def nonlinear_effects(self, q: ArrayLike, v: ArrayLike) -> np.ndarray: ...

    def crba(self, q: ArrayLike) -> np.ndarray: ...

    def aba(self, q: ArrayLike, v: ArrayLike, tau: ArrayLike,
            f_ext: Mapping[str, np.ndarray] | None = None) -> np.ndarray: ...

    def momentum_terms(self, q: ArrayLike, v: ArrayLike) -> np.ndarray: ...

    def coriolis_transpose(self, q: ArrayLike, v: ArrayLike) -> np.ndarray: ...


# ----------------------------------------------------------------------------- reference


class ReferenceDynamics:
    """The reference algorithms (``reference``) behind the ``Dynamics`` methods."""

    kind = "reference"

    def __init__(self, model: Model) -> None:
        self.model = model

    def rnea(self, q, v, a, f_ext=None) -> np.ndarray:
        """τ = M(q) a + C(q, v) v + g(q) − Σ Jᵀ f_ext."""
        return _ref.rnea(self.model, q, v, a, f_ext)

    def gravity(self, q) -> np.ndarray:
        """g(q), the joint forces that hold the robot still."""
        return _ref.gravity(self.model, q)

    def nonlinear_effects(self, q, v) -> np.ndarray:
        """C(q, v) v + g(q)."""
        return _ref.nonlinear_effects(self.model, q, v)

    def crba(self, q) -> np.ndarray:
        """The joint-space inertia matrix M(q)."""
        return _ref.crba(self.model, q)

    def aba(self, q, v, tau, f_ext=None) -> np.ndarray:
        """q̈ = M⁻¹ (τ − C v − g + Σ Jᵀ f_ext); a ValueError when it is undefined."""
        return _ref.aba(self.model, q, v, tau, f_ext)

    def momentum_terms(self, q, v) -> np.ndarray:
        """[M(q) v, Cᵀ(q, v) v, g(q)] as the rows of a (3, nv) array (``momentum``)."""
        return _momentum.momentum_terms(self.model, q, v)

    def coriolis_transpose(self, q, v) -> np.ndarray:
        """Cᵀ(q, v) v, for any C with Ṁ = C + Cᵀ (``momentum``)."""
        return _momentum.coriolis_transpose(self.model, q, v)


# ----------------------------------------------------------------------------- generated Python


_SCALAR_NS = {"cos": math.cos, "sin": math.sin, "sqrt": math.sqrt}
_ARRAY_NS = {"cos": np.cos, "sin": np.sin, "sqrt": np.sqrt}


def _compile(sources: dict[str, str], namespace: dict, label: str) -> dict:
    out = {}
    for name, src in sources.items():
        ns = dict(namespace)
        exec(compile(src, f"<rb_dynamics.dynamics.codegen {label} {name}>", "exec"), ns)  # noqa: S102
        out[name] = ns[name]
    return out


def _all_finite(values) -> bool:
    # a sum is the cheap test; only when it overflows are the values looked at one by one
    return math.isfinite(sum(values)) or all(map(math.isfinite, values))


def _single_state(x, n: int, name: str) -> list[float] | None:
    """A valid 1-D input as a list of floats, None for a valid batch; else the ValueError of
    ``reference.check_vector``."""
    arr = _ref.check_vector(x, n, name, finite=False)
    if arr.ndim == 2:
        return None
    values = arr.tolist()
    if not _all_finite(values):
        _ref.check_vector(arr, n, name)  # raises
    return values


class FastDynamics:
    """The generated kernels of ``model`` (``codegen.generate_kernels``) run by Python.

    Each method accepts one state as (n,) arrays (run on Python floats) or a batch as (N, n)
    arrays (run on numpy arrays, one per scalar of the algorithm; 1-D arguments are broadcast
    against batched ones) and returns numpy arrays shaped like the reference's. External
    wrenches (``f_ext``) are handed to the reference algorithms.
    """

    kind = "python"

    def __init__(self, model: Model, ir: dict[str, KernelIR] | None = None):
        self.model = model
        self.ir = ir if ir is not None else generate_kernels(model)
        self.sources = {name: emit_python(k) for name, k in self.ir.items()}
        self._undefined = {name: k.error for name, k in self.ir.items() if k.error is not None}
        self._scalar = _compile(self.sources, _SCALAR_NS, "scalar")
        self._array = _compile(self.sources, _ARRAY_NS, "array")

    @property
    def source(self) -> str:
        """The generated Python source of every kernel."""
        return "\n\n".join(self.sources.values())

    def _run(self, kernel: str, inputs: list, shape_out: tuple[int, ...]) -> np.ndarray:
        """Validate one state or a batch, run the kernel, refuse a non-finite result."""
        if kernel in self._undefined:
            raise ValueError(self._undefined[kernel])
        values = [_single_state(x, n, name) for x, n, name in inputs]
        if None in values:
            return self._batch(kernel, inputs, shape_out)
        try:
            out = self._scalar[kernel](*values)
        except (ArithmeticError, ValueError):  # 1/0, or math.cos(inf) after an overflow
            raise ValueError(nonfinite_message(kernel)) from None
        if not _all_finite(out):
            raise ValueError(nonfinite_message(kernel))
        return np.array(out) if len(shape_out) == 1 else np.array(out).reshape(shape_out)

    def _batch(self, kernel: str, inputs: list, shape_out: tuple[int, ...]) -> np.ndarray:
        arrays = [_ref.check_vector(x, n, name) for x, n, name in inputs]
        N = max(a.shape[0] for a in arrays if a.ndim == 2)
        cols = []
        for a, (_, n, name) in zip(arrays, inputs):
            if a.ndim == 2 and a.shape[0] != N:
                raise ValueError(f"{name} has {a.shape[0]} rows, expected {N}")
            cols.append(np.ascontiguousarray(np.broadcast_to(a, (N, n)).T))
        kern = self._array[kernel]
        size = int(np.prod(shape_out))
        out = np.empty((size, N))
        with np.errstate(all="ignore"):  # a non-finite result is refused below
            for start in range(0, N, _CHUNK):
                stop = min(start + _CHUNK, N)
                res = kern(*(c[:, start:stop] for c in cols))
                for k, x in enumerate(res):
                    out[k, start:stop] = x
        if not np.isfinite(out).all():
            raise ValueError(nonfinite_message(kernel))
        return np.ascontiguousarray(out.T).reshape((N,) + shape_out)

    def rnea(self, q: ArrayLike, v: ArrayLike, a: ArrayLike,
             f_ext: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Inverse dynamics τ = M a + C v + g (external wrenches: reference fallback)."""
        m = self.model
        if f_ext:
            return _ref.rnea(m, q, v, a, f_ext)
        return self._run("rnea", [(q, m.nq, "q"), (v, m.nv, "v"), (a, m.nv, "a")], (m.nv,))

    def gravity(self, q: ArrayLike) -> np.ndarray:
        """Generalized gravity g(q)."""
        m = self.model
        return self._run("gravity", [(q, m.nq, "q")], (m.nv,))

    def nonlinear_effects(self, q: ArrayLike, v: ArrayLike) -> np.ndarray:
        """C(q, v) v + g(q)."""
        m = self.model
        return self._run("nle", [(q, m.nq, "q"), (v, m.nv, "v")], (m.nv,))

    def crba(self, q: ArrayLike) -> np.ndarray:
        """Joint-space inertia matrix M(q) (exactly symmetric)."""
        m = self.model
        return self._run("crba", [(q, m.nq, "q")], (m.nv, m.nv))

    def aba(self, q: ArrayLike, v: ArrayLike, tau: ArrayLike,
            f_ext: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Forward dynamics q̈ (ABA; models with mimic joints use CRBA + unrolled LDLᵀ)."""
        m = self.model
        if "aba" in self._undefined:
            raise ValueError(self._undefined["aba"])
        if f_ext:
            return _ref.aba(m, q, v, tau, f_ext)
        return self._run("aba", [(q, m.nq, "q"), (v, m.nv, "v"), (tau, m.nv, "tau")], (m.nv,))

    def momentum_terms(self, q: ArrayLike, v: ArrayLike) -> np.ndarray:
        """[M(q) v, Cᵀ(q, v) v, g(q)], (3, nv) or (N, 3, nv)."""
        m = self.model
        return self._run("momentum", [(q, m.nq, "q"), (v, m.nv, "v")], (3, m.nv))

    def coriolis_transpose(self, q: ArrayLike, v: ArrayLike) -> np.ndarray:
        """Cᵀ(q, v) v."""
        return self.momentum_terms(q, v)[..., 1, :]


# ----------------------------------------------------------------------------- compiled C


class CDynamics:
    """The generated kernels of ``model`` compiled to C: ``FastDynamics``' results (bit
    identical on one state, ≤ 1e-12 relative in a batch), shapes and exceptions.

    The methods are the trampoline's own (``kernel_cache.CompiledKernels.kernels``), so a call
    runs no Python frame; ``kernels`` also rolls out many simulation steps in C.
    """

    kind = "c"

    def __init__(self, model: Model, ir: dict[str, KernelIR],
                 compiled: kernel_cache.CompiledKernels) -> None:
        self.model, self.ir = model, ir
        self.sources, self.path = compiled.sources, compiled.path
        self._compiled = compiled  # keeps the library loaded while the trampoline is used
        self.kernels = compiled.kernels
        _answer_with(self, compiled.kernels)

    @property
    def source(self) -> str:
        """The generated C source of every kernel."""
        return "\n".join(self.sources.values())

    def coriolis_transpose(self, q: ArrayLike, v: ArrayLike) -> np.ndarray:
        """Cᵀ(q, v) v: a row of ``momentum_terms``."""
        return self.momentum_terms(q, v)[..., 1, :]


def _answer_with(target: Any, source: Any) -> None:
    """Make ``target``'s dynamics methods ``source``'s own bound callables: a call through
    ``target`` then runs no extra Python frame (the C kernels' calls are shorter than one).
    The C trampoline has no ``coriolis_transpose``: ``CDynamics`` has its own."""
    target.rnea = source.rnea
    target.gravity = source.gravity
    target.nonlinear_effects = source.nonlinear_effects
    target.crba = source.crba
    target.aba = source.aba
    target.momentum_terms = source.momentum_terms
    if hasattr(source, "coriolis_transpose"):
        target.coriolis_transpose = source.coriolis_transpose


# ----------------------------------------------------------------------------- building


def kernels_choice(kernels: str | None = None) -> str:
    """``kernels`` checked against ``KERNEL_CHOICES`` (or "reference"); None reads
    ``$RB_DYNAMICS_KERNELS``, by default "auto"."""
    if kernels is None:
        kernels = os.environ.get("RB_DYNAMICS_KERNELS", "").strip().lower() or "auto"
        if kernels not in KERNEL_CHOICES:
            raise ValueError(f"RB_DYNAMICS_KERNELS must be one of {KERNEL_CHOICES}, "
                             f"not {kernels!r}")
    elif kernels not in KERNEL_CHOICES + ("reference",):
        raise ValueError(f"kernels must be one of {KERNEL_CHOICES}, not {kernels!r}")
    return kernels


def _build(model: Model, choice: str, max_python_chars: int | None = None
           ) -> tuple[Dynamics | None, str]:
    """The generated kernels of ``model`` for ``choice`` ("auto", "c" or "python"): C when
    asked for or available, else Python, else (None, why not) when the Python kernels are
    longer than ``max_python_chars``. Raises ``KernelBuildError`` ("c" impossible) and what
    code generation raises (ValueError for constants that overflow)."""
    ir = generate_kernels(model)
    if choice in ("auto", "c"):
        compiled = kernel_cache.load_or_build(model, ir, required=choice == "c")
        if compiled is not None:
            return CDynamics(model, ir, compiled), ""
    if max_python_chars is not None:
        largest = max(len(emit_python(kernel)) for kernel in ir.values())
        if largest > max_python_chars:
            return None, (f"no C kernels, and the Python kernels ({largest} characters) "
                          "would hold the interpreter too long to compile: reference")
    return FastDynamics(model, ir), ""


def make_dynamics(model: Model, kernels: str | None = None) -> Dynamics:
    """The dynamics of ``model``, built now (blocking).

    ``kernels``:
    - "auto" (None reads ``$RB_DYNAMICS_KERNELS``, by default "auto"): the fastest available,
      C when a compiler and the ``_ckernels`` extension are there (compiled once, cached;
      otherwise one log line), else the generated Python kernels; the reference for a model
      over ``MAX_GENERATED_BODIES`` bodies or whose kernels cannot be generated;
    - "c": ``CDynamics``, or ``KernelBuildError`` when that is impossible;
    - "python": ``FastDynamics``;
    - "reference": ``ReferenceDynamics``.

    "c" and "python" raise ValueError for a model whose constants overflow in generated code.
    Kernels are generated even for a model whose forward dynamics is undefined (a joint
    moving only massless links): their ``aba`` raises the reference's ValueError.
    """
    choice = kernels_choice(kernels)
    if choice == "reference":
        return ReferenceDynamics(model)
    if choice != "auto":
        return _build(model, choice)[0]
    if model.n_bodies > MAX_GENERATED_BODIES:
        return ReferenceDynamics(model)
    try:
        return _build(model, choice)[0]
    except (ValueError, MemoryError, RecursionError) as exc:
        _log.warning("generated kernels unavailable for %r (%s): reference algorithms",
                     model.name, exc)
        return ReferenceDynamics(model)


class LiveDynamics:
    """Dynamics that answer at once and get faster: the reference until the generated kernels,
    built in a background thread (``make_dynamics``' build), are ready; then those
    (``on_switch(kind)`` is called).

    The background thread generates the code (Python, sharing the GIL in slices) and runs the
    C compiler in subprocesses (no GIL), or loads the kernels from the cache. Without a
    compiler the Python kernels are used, but only when each is small enough that compiling
    it (which holds the GIL) cannot stall a control loop (``MAX_PYTHON_KERNEL_CHARS``).

    ``implementation`` is the current ``Dynamics``; ``_use`` makes its methods this
    object's own attributes, so that a call goes straight to the implementation: a forwarding
    method or property would add an interpreted step to every call, comparable on an arm to
    the C kernel's own work. Both implementations give the same results, so a caller that
    sees the switch between two calls (or between two methods) gets consistent answers.
    """

    rnea: Callable[..., np.ndarray]
    gravity: Callable[..., np.ndarray]
    nonlinear_effects: Callable[..., np.ndarray]
    crba: Callable[..., np.ndarray]
    aba: Callable[..., np.ndarray]
    momentum_terms: Callable[..., np.ndarray]
    coriolis_transpose: Callable[..., np.ndarray]

    def __init__(self, model: Model, kernels: str | None = None,
                 on_switch: Callable[[str], None] | None = None) -> None:
        self.model = model
        self.ready = threading.Event()
        self.problem = ""  # why the generated kernels are not used, once known
        self._use(ReferenceDynamics(model))
        if kernels == "reference" or model.n_bodies > MAX_GENERATED_BODIES:
            self.problem = ("kept on the reference algorithms" if kernels == "reference" else
                            f"{model.n_bodies} bodies > {MAX_GENERATED_BODIES}: generated "
                            "kernels would be too large; reference algorithms")
            self.ready.set()
            return
        self._thread = threading.Thread(target=self._build, args=(kernels, on_switch),
                                        name=f"kernels {model.name}", daemon=True)
        self._thread.start()

    def _use(self, implementation: Dynamics) -> None:
        """Answer with ``implementation`` from the next call on."""
        self.implementation = implementation
        _answer_with(self, implementation)

    @property
    def kind(self) -> str:
        """The current implementation's kind: "reference", then "c" or "python"."""
        return self.implementation.kind

    @property
    def kernels(self):
        """The C trampoline of the current implementation, or None (``simulation`` rolls
        many steps out in it)."""
        return getattr(self.implementation, "kernels", None)

    def _build(self, kernels: str | None, on_switch: Callable[[str], None] | None) -> None:
        try:
            built, self.problem = _build(self.model, kernels_choice(kernels),
                                         MAX_PYTHON_KERNEL_CHARS)
        except Exception as exc:  # noqa: BLE001 - a background build must never raise
            built, self.problem = None, f"generated kernels unavailable: {exc}"
        if built is not None:
            self._use(built)
        self.ready.set()
        if on_switch is not None:
            on_switch(self.kind if built is not None else f"reference ({self.problem})")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the background build has finished (tests, benchmarks)."""
        return self.ready.wait(timeout)
