# SPDX-License-Identifier: Apache-2.0
"""One dynamics interface for everything that evaluates a model: control law, services, simulator.

A ``Dynamics`` object is bound to one model and answers ``rnea``, ``gravity``,
``nonlinear_effects``, ``crba`` and ``aba`` for one state ((n,) arrays) or a batch ((N, n)).
Two implementations have these methods with the same results and the same errors:

- ``ReferenceDynamics``: the readable algorithms of ``rb_dynamics.dynamics``;
- the generated kernels of ``rb_dynamics.codegen`` (model-specialised straight-line code).

``LiveDynamics`` is what a node owns: it answers at once on the reference algorithms and builds
the generated kernels in a background thread, switching to them when they are ready, so that
loading a model never stalls a control loop or a service. Kernels are generated only for models
up to ``MAX_GENERATED_BODIES`` bodies (their size grows ~n²); larger ones stay on the reference.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

from rb_dynamics.model import Model

from . import reference as dynamics

__all__ = [
    "KERNEL_METHODS",
    "MAX_GENERATED_BODIES",
    "Dynamics",
    "LiveDynamics",
    "ReferenceDynamics",
    "compile_dynamics",
    "make_dynamics",
]

KERNEL_METHODS = ("rnea", "gravity", "nonlinear_effects", "crba", "aba")
# Generated code grows ~n² with the bodies: beyond this a model stays on the reference, O(n)
MAX_GENERATED_BODIES = 100
# compile() of one generated Python kernel holds the GIL: ~0.3 ms per 1,000 characters here
MAX_PYTHON_KERNEL_CHARS = 100_000
_log = logging.getLogger("rb_dynamics.kernels")


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


class ReferenceDynamics:
    """The reference algorithms (``rb_dynamics.dynamics``) behind the ``Dynamics`` methods."""

    kind = "reference"

    def __init__(self, model: Model) -> None:
        self.model = model

    def rnea(self, q, v, a, f_ext=None) -> np.ndarray:
        """τ = M(q) a + C(q, v) v + g(q) − Σ Jᵀ f_ext."""
        return dynamics.rnea(self.model, q, v, a, f_ext)

    def gravity(self, q) -> np.ndarray:
        """g(q), the joint forces that hold the robot still."""
        return dynamics.gravity(self.model, q)

    def nonlinear_effects(self, q, v) -> np.ndarray:
        """C(q, v) v + g(q)."""
        return dynamics.nonlinear_effects(self.model, q, v)

    def crba(self, q) -> np.ndarray:
        """The joint-space inertia matrix M(q)."""
        return dynamics.crba(self.model, q)

    def aba(self, q, v, tau, f_ext=None) -> np.ndarray:
        """q̈ = M⁻¹ (τ − C v − g + Σ Jᵀ f_ext); a ValueError when it is undefined."""
        return dynamics.aba(self.model, q, v, tau, f_ext)


def make_dynamics(model: Model, kernels: str | None = None) -> Dynamics:
    """The fastest dynamics for ``model``, built now (blocking): generated kernels (C when a
    compiler is available, else Python; ``compile_dynamics``), else the reference.

    ``kernels``: "auto", "c", "python", "reference"; None reads ``$RB_DYNAMICS_KERNELS``.
    """
    from .codegen import kernels_choice

    choice = "reference" if kernels == "reference" else kernels_choice(kernels)
    if choice == "reference" or model.n_bodies > MAX_GENERATED_BODIES:
        return ReferenceDynamics(model)
    try:
        return compile_dynamics(model, choice)
    except (ValueError, MemoryError, RecursionError) as exc:
        _log.warning("generated kernels unavailable for %r (%s): reference algorithms",
                     model.name, exc)
        return ReferenceDynamics(model)


def compile_dynamics(model: Model, kernels: str | None = None) -> Dynamics:
    """Generate and compile straight-line kernels specialised to ``model``.

    ``kernels``: "c" (compiled by the system C compiler, cached; raises ``KernelBuildError``
    when that is impossible), "python" (``FastDynamics``), or "auto": C when a compiler and
    the ``rb_dynamics._ckernels`` extension are available, else Python with one log line.
    None reads ``$RB_DYNAMICS_KERNELS`` (default "auto"). Both kinds give the same results
    (≤ 1e-12 relative), shapes and exceptions; a model whose forward dynamics is undefined
    (a joint moving only massless links) compiles, and its ``aba`` raises ValueError.
    """
    from .codegen import FastDynamics, _generate, kernels_choice

    kernels = kernels_choice(kernels)
    ir = _generate(model)
    if kernels == "python":
        return FastDynamics(model, ir)
    from . import kernel_cache

    return kernel_cache.load_or_build(model, ir, required=kernels == "c") or FastDynamics(model, ir)


class LiveDynamics:
    """Dynamics that answer at once and get faster: the reference until the generated kernels,
    built in a background thread, are ready; then those (``on_switch(kind)`` is called).

    The background thread generates the code (Python, sharing the GIL in slices) and runs the
    C compiler in subprocesses (no GIL), or loads the kernels from the cache. Without a
    compiler the Python kernels are used, but only when each is small enough that compiling
    it (which holds the GIL) cannot stall a control loop (``MAX_PYTHON_KERNEL_CHARS``).

    The methods are rebound as attributes when the kernels arrive, so a call costs no extra
    indirection; both implementations give the same results, so a caller that sees the switch
    between two calls gets consistent answers.
    """

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
        for name in KERNEL_METHODS:
            setattr(self, name, getattr(implementation, name))
        # the C trampoline object when there is one (simulation.compiled_steps uses it)
        self.kernels = getattr(implementation, "kernels", None)
        self.kind: str = getattr(implementation, "kind", "python")

    def _build(self, kernels: str | None, on_switch: Callable[[str], None] | None) -> None:
        try:
            built = self._generated(kernels)
        except Exception as exc:  # noqa: BLE001 - a background build must never raise
            built, self.problem = None, f"generated kernels unavailable: {exc}"
        if built is not None:
            self._use(built)
        self.ready.set()
        if on_switch is not None:
            on_switch(self.kind if built is not None else f"reference ({self.problem})")

    def _generated(self, kernels: str | None) -> Dynamics | None:
        from . import kernel_cache
        from .codegen import FastDynamics, _emit_python, _generate, kernels_choice

        choice = kernels_choice(kernels)
        ir = _generate(self.model)
        if choice in ("auto", "c"):
            compiled = kernel_cache.load_or_build(self.model, ir, required=choice == "c")
            if compiled is not None:
                return compiled
        largest = max(len(_emit_python(kernel)) for kernel in ir.values())
        if largest > MAX_PYTHON_KERNEL_CHARS:
            self.problem = (f"no C kernels, and the Python kernels ({largest} characters) "
                            "would hold the interpreter too long to compile: reference")
            return None
        return FastDynamics(self.model, ir)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the background build has finished (tests, benchmarks)."""
        return self.ready.wait(timeout)
