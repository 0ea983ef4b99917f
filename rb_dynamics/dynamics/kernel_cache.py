# SPDX-License-Identifier: Apache-2.0
"""Per-model C kernels: compiled by the system C compiler, cached on disk, called through
the fixed trampoline ``rb_dynamics.dynamics._ckernels``.

``backend.compile_dynamics(model)`` uses ``load_or_build``; nodes that must not wait
for a compiler use ``cached_kernels`` (a cache hit or None, no compiler run) and
``start_compile`` (generation and compilation in a background thread, the compiler itself in
subprocesses, so the GIL is free meanwhile).

Compiler: ``$CC`` (split like a shell word list), else ``cc`` or ``gcc`` on PATH. Flags: always
``-ffp-contract=off`` and never ``-ffast-math``, so results stay bit-comparable with the Python
kernels; the optimisation level falls with the kernel's size, because compile time grows
faster than linearly with the length of straight-line code (talos' ABA: ~9 s at -O2, ~0.2 s
at -O0). Each kernel is its own translation unit and the units compile in parallel.

Cache: ``$RB_DYNAMICS_CACHE``, else ``$XDG_CACHE_HOME/rb_dynamics/kernels``, else
``~/.cache/rb_dynamics/kernels``. A library is keyed by a hash of its C sources, the flags,
the compiler (resolved path, size and mtime: no subprocess needed to look it up), the
interpreter and numpy ABI and the trampoline ABI. It is written to a temporary file in the
cache directory and renamed into place, under a lock file, so processes starting together
compile once and never load a partial file. Any failure (no compiler, a failed compile, no
trampoline, a cache directory that cannot be created or written) falls back to the Python
kernels with one log line; a read-only cache directory still serves the libraries it holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import logging
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rb_dynamics.model import Model

from . import reference as _ref
from .codegen import KernelIR, _generate, kernels_choice, nonfinite_message
from .codegen_c import ABI, emit_c

try:
    from . import _ckernels
except ImportError as exc:  # built by setup.py (optional extension)
    _ckernels = None
    _NO_TRAMPOLINE = f"the extension rb_dynamics.dynamics._ckernels is not built ({exc})"

__all__ = ["CDynamics", "KernelBuild", "KernelBuildError", "cache_dir", "cached_kernels",
           "start_compile"]

log = logging.getLogger("rb_dynamics.kernels")

KERNELS = ("rnea", "gravity", "nle", "crba", "aba")  # the order _ckernels.Kernels expects
_ARG_NAMES = {"rnea": ("q", "v", "a"), "aba": ("q", "v", "tau")}  # else the generator's
_COMPILE_TIMEOUT_S = 600.0


class KernelBuildError(RuntimeError):
    """C kernels were required (``kernels="c"``) but cannot be built or loaded."""


class _Failed(Exception):
    """Why the C kernels are not available (the log line / the error message)."""


# ----------------------------------------------------------------------------- the compiler


@dataclass(frozen=True)
class _Compiler:
    argv: list[str]
    identity: str  # changes when the compiler is replaced or upgraded


def _find_compiler() -> _Compiler:
    env = os.environ.get("CC", "").strip()
    try:
        candidates = [shlex.split(env)] if env else [["cc"], ["gcc"]]
    except ValueError as exc:
        raise _Failed(f"CC={env!r} cannot be parsed: {exc}") from None
    for argv in candidates:
        path = shutil.which(argv[0]) if argv else None
        if path is not None:
            st = os.stat(path)
            identity = f"{os.path.realpath(path)} {st.st_size} {st.st_mtime_ns} {argv[1:]}"
            return _Compiler([path, *argv[1:]], identity)
    if env:
        raise _Failed(f"the compiler CC={env!r} is not found")
    raise _Failed("no C compiler (cc or gcc) on PATH; set CC")


def _opt_flags(ir: KernelIR) -> list[str]:
    """Flags for one kernel: fast code for the kernels a controller calls every cycle, a fast
    compile for the huge ones (straight-line code compiles superlinearly at -O2)."""
    lines = len(ir.body)
    level = "-O2" if lines <= 1500 else "-O1" if lines <= 3000 else "-O0"
    # -fno-math-errno only lets sqrt be one instruction: it changes no value
    return [level, "-fPIC", "-ffp-contract=off", "-fno-math-errno"]


# ----------------------------------------------------------------------------- the cache


def cache_dir() -> Path:
    """Where compiled kernels are kept (see the module docstring)."""
    env = os.environ.get("RB_DYNAMICS_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    try:
        base = Path(xdg) if xdg else Path.home() / ".cache"
    except RuntimeError as exc:  # no HOME and no passwd entry
        raise _Failed(f"no cache directory ({exc}); set RB_DYNAMICS_CACHE") from None
    return base / "rb_dynamics" / "kernels"


@dataclass
class _Plan:
    """Everything needed to find the library of one model, or to build it."""

    model: Model
    ir: dict[str, KernelIR]
    units: dict[str, str]  # kernel name → C source ("" when the kernel is undefined)
    flags: dict[str, list[str]]
    compiler: _Compiler
    path: Path


def _plan(model: Model, ir: dict[str, KernelIR] | None) -> _Plan:
    if _ckernels is None:
        raise _Failed(_NO_TRAMPOLINE)
    if _ckernels.ABI != ABI:  # an extension built from an older _ckernels.c
        raise _Failed(f"rb_dynamics.dynamics._ckernels has ABI {_ckernels.ABI}, expected "
                      f"{ABI}: rebuild it (pip install -e . or python setup.py build_ext "
                      "--inplace)")
    if ir is None:
        ir = _generate(model)
    compiler = _find_compiler()
    units = {name: emit_c(ir[name]) for name in KERNELS}
    flags = {name: _opt_flags(ir[name]) for name in KERNELS}
    h = hashlib.sha256()
    # the library links no Python, but a key per interpreter and numpy ABI costs nothing and
    # keeps environments that share a cache directory apart
    for part in (f"abi {ABI} {_ckernels.ABI}", compiler.identity, platform.machine(),
                 sysconfig.get_config_var("EXT_SUFFIX") or sys.version, np.__version__):
        h.update(part.encode() + b"\0")
    for name in KERNELS:
        h.update(f"{name} {flags[name]}\0{units[name]}\0".encode())
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", model.name)[:40] or "model"
    path = cache_dir() / f"{stem}-{h.hexdigest()[:32]}.so"
    return _Plan(model, ir, units, flags, compiler, path)


# The compiler runs at a lower priority: on a small machine it would otherwise take the cores
# from the control loop it is building kernels for
_NICE = shutil.which("nice")


def _run(argv: list[str]) -> subprocess.Popen:
    if _NICE:
        argv = [_NICE, "-n", "10", *argv]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def _wait(proc: subprocess.Popen, what: str) -> None:
    try:
        out, _ = proc.communicate(timeout=_COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise _Failed(f"{what}: the compiler took longer than {_COMPILE_TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        tail = out.decode(errors="replace").strip().splitlines()[-3:]
        raise _Failed(f"{what} failed (exit {proc.returncode}): {' | '.join(tail)}")


def _compile(plan: _Plan, workdir: Path) -> Path:
    """Compile the units in parallel (largest first), link them; the library's path."""
    cc = plan.compiler.argv
    jobs = sorted((n for n in KERNELS if plan.units[n]), key=lambda n: -len(plan.units[n]))
    running: list[tuple[str, subprocess.Popen]] = []
    objects = []
    slots = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else os.cpu_count() or 1)
    try:
        for name in jobs:
            src, obj = workdir / f"{name}.c", workdir / f"{name}.o"
            src.write_text(plan.units[name])
            if len(running) >= slots:
                _wait(running[0][1], f"compiling {running[0][0]}")
                running.pop(0)
            running.append((name, _run([*cc, *plan.flags[name], "-c", str(src), "-o", str(obj)])))
            objects.append(str(obj))
        while running:
            _wait(running[0][1], f"compiling {running[0][0]}")
            running.pop(0)
    finally:
        for _, proc in running:  # after a failure: stop the others
            proc.kill()
            proc.communicate()
    lib = workdir / "kernels.so"
    _wait(_run([*cc, "-shared", "-o", str(lib), *objects, "-lm"]), "linking")
    return lib


@contextlib.contextmanager
def _locked(plan: _Plan):
    """Holds ``<library>.lock``: one process compiles a model, the others wait for it."""
    with open(plan.path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(plan: _Plan, replace: bool = False) -> str:
    """Compile ``plan`` into the cache unless it is there (or ``replace``: it does not load);
    what was done (for the log)."""
    directory = plan.path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK):
            raise PermissionError(f"{directory} is not writable")
        with _locked(plan):
            if plan.path.exists() and not replace:  # another process built it meanwhile
                return "compiled by another process"
            start = time.perf_counter()
            workdir = Path(tempfile.mkdtemp(prefix=".build-", dir=directory))
            try:
                # same directory as the target: the rename is atomic, readers never see a
                # partial library
                os.replace(_compile(plan, workdir), plan.path)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
    except OSError as exc:
        raise _Failed(f"cache directory {directory}: {exc}") from None
    levels = sorted({plan.flags[n][0] for n in KERNELS if plan.units[n]})
    return f"compiled in {time.perf_counter() - start:.2f} s ({', '.join(levels)})"


# ----------------------------------------------------------------------------- the kernels


class CDynamics:
    """Compiled, model-specialised kernels; the interface, results (≤ 1e-12 relative, bit
    identical on one state), shapes and exceptions of ``codegen.FastDynamics``.

    ``rnea``, ``gravity``, ``nonlinear_effects``, ``crba`` and ``aba`` are the trampoline's
    methods, bound here so that a call runs no Python frame.
    """

    kind = "c"

    def __init__(self, plan: _Plan):
        self.model, self.ir, self.sources, self.path = plan.model, plan.ir, plan.units, plan.path
        self._library = ctypes.CDLL(str(plan.path))  # kept: the addresses below live in it
        kernels = _ckernels.Kernels(tuple(self._spec(name) for name in KERNELS))
        self.kernels = kernels  # the trampoline object: also rolls out many steps in C
        self.rnea = kernels.rnea
        self.gravity = kernels.gravity
        self.nonlinear_effects = kernels.nonlinear_effects
        self.crba = kernels.crba
        self.aba = kernels.aba

    def _spec(self, name: str) -> tuple:
        """What _ckernels.Kernels needs to call and check one kernel."""
        m, ir = self.model, self.ir[name]
        entry = [None, None]
        if ir.error is None:
            entry = [ctypes.cast(getattr(self._library, f"rb_{name}{suffix}"),
                                 ctypes.c_void_p).value for suffix in ("", "_n")]
        names = _ARG_NAMES.get(name, tuple(p for p, _ in ir.args))
        fallback = {"rnea": _ref.rnea, "aba": _ref.aba}.get(name)  # external wrenches
        if fallback is not None:
            names += ("f_ext",)
            fallback = functools.partial(fallback, m)
        return (*entry, names, tuple(n for _, n in ir.args), 2 if name == "crba" else 1,
                m.nv, ir.error, nonfinite_message(name), fallback)

    @property
    def source(self) -> str:
        """The generated C source of every kernel."""
        return "\n".join(self.sources.values())


def _load(plan: _Plan) -> CDynamics:
    try:
        return CDynamics(plan)
    except (OSError, AttributeError, TypeError, ValueError) as exc:  # unreadable or foreign
        raise _Failed(f"cannot load {plan.path}: {exc}") from None


def cached_kernels(model: Model, ir: dict[str, KernelIR] | None = None) -> CDynamics | None:
    """The C kernels of ``model`` if the cache already holds them (no compiler runs), else None.

    Costs the code generation (~0.01 s for an arm, ~0.1 s for a humanoid) and a library load.
    None too when ``$RB_DYNAMICS_KERNELS`` is "python".
    """
    if kernels_choice() == "python":
        return None
    try:
        plan = _plan(model, ir)
        return _load(plan) if plan.path.exists() else None
    except _Failed:
        return None


def _load_or_compile(model: Model, ir: dict[str, KernelIR] | None) -> tuple[CDynamics, str]:
    plan = _plan(model, ir)
    cached = plan.path.exists()
    if cached:
        with contextlib.suppress(_Failed):
            return _load(plan), "loaded from the cache"
    done = _build(plan, replace=cached)  # a library that does not load is rebuilt over
    return _load(plan), done


def load_or_build(model: Model, ir: dict[str, KernelIR] | None = None,
                  required: bool = False) -> CDynamics | None:
    """The C kernels of ``model``, compiled now if needed (blocking); on failure None and one
    warning, or ``KernelBuildError`` when ``required``."""
    try:
        kernels, done = _load_or_compile(model, ir)
    except _Failed as exc:
        if required:
            raise KernelBuildError(f"no C kernels for model {model.name!r}: {exc}") from None
        log.warning("C kernels unavailable for model %r (%s): using the Python kernels",
                    model.name, exc)
        return None
    log.info("C kernels for model %r: %s (%s)", model.name, done, kernels.path)
    return kernels


class KernelBuild:
    """C kernels being generated and compiled in a background thread (``start_compile``)."""

    def __init__(self, model: Model):
        self.model = model
        self._done = threading.Event()
        self._result: tuple[CDynamics | None, str] = (None, "still compiling")
        # a daemon thread: interpreter exit does not wait for a compile nobody will use
        self._thread = threading.Thread(target=self._run, name=f"rb_dynamics kernels "
                                        f"{model.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if kernels_choice() == "python":
                self._result = (None, "RB_DYNAMICS_KERNELS=python")
                return
            kernels, done = _load_or_compile(self.model, None)
            self._result = (kernels, done)
            log.info("C kernels for model %r: %s (%s)", self.model.name, done, kernels.path)
        except _Failed as exc:
            self._result = (None, str(exc))
            log.warning("C kernels unavailable for model %r (%s): using the Python kernels",
                        self.model.name, exc)
        except Exception as exc:  # a background build must never raise
            self._result = (None, f"{type(exc).__name__}: {exc}")
            log.warning("C kernels unavailable for model %r (%s)", self.model.name,
                        self._result[1])
        finally:
            self._done.set()

    def done(self) -> bool:
        """True once ``result`` returns without waiting."""
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> tuple[CDynamics | None, str]:
        """(kernels, what was done) or (None, why not); waits up to ``timeout`` seconds."""
        self._done.wait(timeout)
        return self._result


def start_compile(model: Model) -> KernelBuild:
    """Start loading or compiling the C kernels of ``model`` without blocking the caller (the
    result is None with the reason when ``$RB_DYNAMICS_KERNELS`` is "python")."""
    return KernelBuild(model)
