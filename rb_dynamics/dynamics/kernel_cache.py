# SPDX-License-Identifier: Apache-2.0
"""Per-model C kernels: compiled by the system C compiler, cached on disk, called through
the fixed trampoline ``rb_dynamics.dynamics.trampoline._ckernels``.

``load_or_build(model, ir)`` is the one entry: it loads the model's library from the cache, or
compiles it first (blocking; the compiler runs in subprocesses, so a caller in a background
thread leaves the GIL free meanwhile), and returns the trampoline bound to it
(``CompiledKernels``), which ``implementations.CDynamics`` wraps.

Compiler: ``$CC`` (split like a shell word list), else ``cc`` or ``gcc`` on PATH. Flags: always
``-ffp-contract=off`` and never ``-ffast-math``, so results stay bit-comparable with the Python
kernels; the optimisation level falls with the kernel's size, because compile time grows
faster than linearly with the length of straight-line code. Each kernel is its own translation
unit and the units compile in parallel.

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
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rb_dynamics.model import Model

from . import reference as _ref
from .codegen_c import ABI, emit_c
from .codegen_ir import KernelIR, nonfinite_message

try:
    from .trampoline import _ckernels
except ImportError as exc:  # built by setup.py (optional extension)
    _ckernels = None
    _NO_TRAMPOLINE = (f"the extension rb_dynamics.dynamics.trampoline._ckernels is not built "
                      f"({exc})")

__all__ = ["CompiledKernels", "KernelBuildError", "cache_dir"]

log = logging.getLogger(__name__)  # the kernels' builds and their fallbacks

KERNELS = ("rnea", "gravity", "nle", "crba", "aba", "momentum")  # _ckernels.Kernels' order
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


def _plan(model: Model, ir: dict[str, KernelIR]) -> _Plan:
    if _ckernels is None:
        raise _Failed(_NO_TRAMPOLINE)
    if _ckernels.ABI != ABI:  # an extension built from an older _ckernels.c
        raise _Failed(f"rb_dynamics.dynamics.trampoline._ckernels has ABI {_ckernels.ABI}, "
                      f"expected {ABI}: rebuild it (pip install -e . or python setup.py "
                      "build_ext --inplace)")
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


@dataclass(frozen=True)
class CompiledKernels:
    """A model's C kernels, loaded: the trampoline bound to the library's entry points.

    ``kernels`` (a ``_ckernels.Kernels``) has the ``Dynamics`` methods ``rnea``, ``gravity``,
    ``nonlinear_effects``, ``crba``, ``aba`` and ``momentum_terms`` (the checks, shapes and
    errors of the Python kernels) and ``rollout`` (many simulation steps in C). ``library``
    must stay referenced while ``kernels`` is used: the trampoline calls addresses inside it.
    """

    kernels: object
    library: ctypes.CDLL
    path: Path
    sources: dict[str, str]  # kernel name → C translation unit ("" when undefined)


def _spec(plan: _Plan, library: ctypes.CDLL, name: str) -> tuple:
    """What _ckernels.Kernels needs to call and check one kernel."""
    m, ir = plan.model, plan.ir[name]
    entry = [None, None]
    if ir.error is None:
        entry = [ctypes.cast(getattr(library, f"rb_{name}{suffix}"), ctypes.c_void_p).value
                 for suffix in ("", "_n")]
    names = _ARG_NAMES.get(name, tuple(p for p, _ in ir.args))
    fallback = {"rnea": _ref.rnea, "aba": _ref.aba}.get(name)  # external wrenches
    if fallback is not None:
        names += ("f_ext",)
        fallback = functools.partial(fallback, m)
    rows = {"crba": m.nv, "momentum": 3}.get(name, 0)  # matrix results: (rows, nv)
    return (*entry, names, tuple(n for _, n in ir.args), 2 if rows else 1, m.nv, rows,
            ir.error, nonfinite_message(name), fallback)


def _load(plan: _Plan) -> CompiledKernels:
    try:
        library = ctypes.CDLL(str(plan.path))
        kernels = _ckernels.Kernels(tuple(_spec(plan, library, name) for name in KERNELS))
    except (OSError, AttributeError, TypeError, ValueError) as exc:  # unreadable or foreign
        raise _Failed(f"cannot load {plan.path}: {exc}") from None
    return CompiledKernels(kernels, library, plan.path, plan.units)


def _load_or_compile(model: Model, ir: dict[str, KernelIR]) -> tuple[CompiledKernels, str]:
    plan = _plan(model, ir)
    cached = plan.path.exists()
    if cached:
        with contextlib.suppress(_Failed):
            return _load(plan), "loaded from the cache"
    done = _build(plan, replace=cached)  # a library that does not load is rebuilt over
    return _load(plan), done


def load_or_build(model: Model, ir: dict[str, KernelIR],
                  required: bool = False) -> CompiledKernels | None:
    """The C kernels of ``model`` (its generated ``ir``), compiled now if the cache does not hold
    them (blocking); on failure None and one warning, or ``KernelBuildError`` when
    ``required``."""
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
