# SPDX-License-Identifier: Apache-2.0
"""Our generated kernels, compiled C and Python, against Pinocchio, on the same states, in one run.

    python benchmarks/bench_dynamics.py [--json out.json] [--quick] [--models ur5 panda talos]

Models ur5, panda (mimic finger) and talos (free-flyer root) from example-robot-data.
The C kernels are compiled into a fresh temporary cache, so the compile time is measured too.
Single-state rnea, gravity, crba and aba: median µs per call over many repetitions.
Batched rnea and aba at N = 10,000: median time of one batched call / N, against a plain
Python loop of the Pinocchio call over the same 10,000 states (rows pre-split into a list, so
the loop times only the calls). Pinocchio's ``aba`` refuses mimic joints: for panda it runs on
the model without the mimic (the finger as an independent joint, nv = 9), ours on the model
with it (nv = 8, M⁻¹ via CRBA and an unrolled LDLᵀ). Each row also reports the largest
relative difference between the two results on the benchmark states (panda aba: against
M⁻¹(τ − b) from Pinocchio's crba and rnea on the mimic model).

Targets for the C kernels (checked here, never in tests): single-state rnea, gravity, crba and
aba ≤ 0.5× Pinocchio on ur5 and panda, ≤ 1× on talos; batched rnea and aba ≤ 0.2× the Pinocchio
loop per state on ur5 and panda, ≤ 1× on talos. The Python kernels' times and ratios are printed
for comparison.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np
import pinocchio as pin

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from pin_oracle import Oracle, random_state, rel_err, robots_dir

from rb_dynamics.dynamics import make_dynamics
from rb_dynamics.model import load_model

MODELS = {
    "ur5": ("ur_description/urdf/ur5_robot.urdf", False),
    "panda": ("panda_description/urdf/panda.urdf", False),
    "talos": ("talos_data/robots/talos_reduced.urdf", True),
}
# largest allowed ratio C / Pinocchio, one state and batched (per state, against a Python loop):
# talos' kernels are long enough that Pinocchio's own cost dominates the loop's, hence 1×
TARGETS = {"ur5": (0.5, 0.2), "panda": (0.5, 0.2), "talos": (1.0, 1.0)}
N_BATCH = 10_000


def _median_per_call(fn, calls_per_run: int, repeat: int) -> float:
    """Median over ``repeat`` runs of the time per call, in µs."""
    runs = timeit.repeat(fn, number=1, repeat=repeat)
    return statistics.median(runs) / calls_per_run * 1e6


class _Case:
    def __init__(self, name: str, rel: str, floating: bool, n_single: int):
        xml = Path(robots_dir(), rel).read_text()
        self.name = name
        self.model = load_model(xml, floating_base=floating)
        start = time.perf_counter()
        self.fast = make_dynamics(self.model, kernels="c")
        self.compile_s = time.perf_counter() - start
        start = time.perf_counter()
        self.py = make_dynamics(self.model, kernels="python")
        self.generate_s = time.perf_counter() - start
        self.oracle = Oracle(self.model, xml)
        rng = np.random.default_rng(2024)
        states = [random_state(self.model, rng) for _ in range(N_BATCH)]
        self.Q, self.V, self.A, self.TAU = (np.array(x) for x in zip(*states))
        o = self.oracle
        self.Qp = [o.q(q) for q in self.Q]
        self.Vp = [o.v(v) for v in self.V]
        self.Ap = [o.v(a) for a in self.A]
        self.TAUp = [o.v(t) for t in self.TAU]
        # Pinocchio's aba needs a model without mimic joints
        if self.model.has_mimic:
            full = [o.full_state(q, v) for q, v in zip(self.Q, self.V)]
            self.aba_pm, self.aba_pd = o.full.pm, o.full.pd
            self.Qf = [x[0] for x in full]
            self.Vf = [x[1] for x in full]
            self.TAUf = [o.full.v(self._full_tau(t)) for t in self.TAU]
        else:
            self.aba_pm, self.aba_pd = o.pm, o.pd
            self.Qf, self.Vf, self.TAUf = self.Qp, self.Vp, self.TAUp
        self.n_single = n_single

    def _full_tau(self, tau: np.ndarray) -> np.ndarray:
        """τ in the mimic-free model's coordinates: the mimic joint gets no torque."""
        fm, m = self.oracle.full.model, self.model
        out = np.zeros(fm.nv)
        for name, vi in zip(fm.joint_names, fm.joint_v_index):
            if name not in m.mimic_joints:
                out[vi] = tau[m.joint_v_index[m.joint_names.index(name)]]
        return out


def _single_rows(case: _Case, repeat: int) -> list[dict]:
    pm, pd, n = case.oracle.pm, case.oracle.pd, case.n_single
    Q, V, A, TAU = (list(x[:n]) for x in (case.Q, case.V, case.A, case.TAU))
    Qp, Vp, Ap = case.Qp[:n], case.Vp[:n], case.Ap[:n]
    Qf, Vf, TAUf = case.Qf[:n], case.Vf[:n], case.TAUf[:n]
    apm, apd = case.aba_pm, case.aba_pd
    o = case.oracle

    def loop(f, *cols):
        def run():
            for args in zip(*cols):
                f(*args)
        return run

    def pin_rnea(q, v, a):
        return pin.rnea(pm, pd, q, v, a)

    def pin_gravity(q):
        return pin.computeGeneralizedGravity(pm, pd, q)

    def pin_crba(q):
        return pin.crba(pm, pd, q)

    def pin_aba(q, v, tau):
        return pin.aba(apm, apd, q, v, tau)

    k, fast = min(20, n), case.fast
    errs = {
        "rnea": max(rel_err(fast.rnea(Q[i], V[i], A[i]), o.from_v(pin_rnea(Qp[i], Vp[i], Ap[i])))
                    for i in range(k)),
        "gravity": max(rel_err(fast.gravity(Q[i]), o.from_v(pin_gravity(Qp[i])))
                       for i in range(k)),
        "crba": max(rel_err(fast.crba(Q[i]), o.matrix(_sym(pin_crba(Qp[i])))) for i in range(k)),
        "aba": max(rel_err(fast.aba(Q[i], V[i], TAU[i]), _pin_fd(case, i)) for i in range(k)),
    }
    theirs = {"rnea": loop(pin_rnea, Qp, Vp, Ap), "gravity": loop(pin_gravity, Qp),
              "crba": loop(pin_crba, Qp), "aba": loop(pin_aba, Qf, Vf, TAUf)}
    rows = []
    for func, pin_run in theirs.items():
        args = {"rnea": (Q, V, A), "gravity": (Q,), "crba": (Q,), "aba": (Q, V, TAU)}[func]
        c_run = loop(getattr(case.fast, func), *args)
        py_run = loop(getattr(case.py, func), *args)
        times = []
        for run in (c_run, py_run, pin_run):
            run()  # warm up
            times.append(_median_per_call(run, n, repeat))
        note = ""
        if func == "aba" and case.model.has_mimic:
            note = "pin.aba on the model without mimic (nv+1)"
        rows.append(_row(case, func, *times, errs[func], note))
    return rows


def _sym(M: np.ndarray) -> np.ndarray:
    return np.triu(M) + np.triu(M, 1).T


def _pin_fd(case: _Case, i: int) -> np.ndarray:
    """Pinocchio's forward dynamics at state i: its aba, or M⁻¹(τ − b) for mimic models."""
    o = case.oracle
    if not case.model.has_mimic:
        return o.from_v(pin.aba(o.pm, o.pd, case.Qp[i], case.Vp[i], case.TAUp[i]))
    M = _sym(pin.crba(o.pm, o.pd, case.Qp[i]))
    bias = pin.rnea(o.pm, o.pd, case.Qp[i], case.Vp[i], np.zeros(o.pm.nv))
    return o.from_v(np.linalg.solve(M, case.TAUp[i] - bias))


def _batch_rows(case: _Case, repeat: int) -> list[dict]:
    pm, pd, fast, o = case.oracle.pm, case.oracle.pd, case.fast, case.oracle
    apm, apd = case.aba_pm, case.aba_pd
    Q, V, A, TAU = case.Q, case.V, case.A, case.TAU
    Qp, Vp, Ap = case.Qp, case.Vp, case.Ap
    Qf, Vf, TAUf = case.Qf, case.Vf, case.TAUf
    rnea, aba = pin.rnea, pin.aba

    def pin_rnea_loop():
        for q, v, a in zip(Qp, Vp, Ap):
            rnea(pm, pd, q, v, a)

    def pin_aba_loop():
        for q, v, t in zip(Qf, Vf, TAUf):
            aba(apm, apd, q, v, t)

    tau = fast.rnea(Q, V, A)
    qdd = fast.aba(Q, V, TAU)
    idx = range(0, N_BATCH, N_BATCH // 20)
    err_rnea = max(rel_err(tau[i], o.from_v(rnea(pm, pd, Qp[i], Vp[i], Ap[i]))) for i in idx)
    err_aba = max(rel_err(qdd[i], _pin_fd(case, i)) for i in idx)
    rows = []
    for func, kernels, theirs, err in (
        ("rnea batch", lambda k: k.rnea(Q, V, A), pin_rnea_loop, err_rnea),
        ("aba batch", lambda k: k.aba(Q, V, TAU), pin_aba_loop, err_aba),
    ):
        times = []
        for run in (functools.partial(kernels, case.fast),
                    functools.partial(kernels, case.py), theirs):
            run()
            times.append(_median_per_call(run, N_BATCH, repeat))
        note = f"N={N_BATCH}, per state; pin: Python loop"
        if func == "aba batch" and case.model.has_mimic:
            note += " on the model without mimic"
        rows.append(_row(case, func, *times, err, note))
    return rows


def _row(case: _Case, func: str, t_c: float, t_py: float, t_pin: float, err: float,
         note: str) -> dict:
    target = TARGETS[case.name]["batch" in func]
    return {
        "model": case.name, "function": func, "c_us": t_c, "python_us": t_py,
        "pinocchio_us": t_pin, "ratio": t_c / t_pin, "python_ratio": t_py / t_pin,
        "target_ratio": target, "meets_target": bool(t_c / t_pin <= target),
        "max_rel_err": err, "note": note,
    }


def _print_table(rows: list[dict]) -> None:
    header = (f"{'model':<7} {'function':<11} {'C µs':>8} {'py µs':>8} {'pin µs':>8} "
              f"{'C/pin':>6} {'py/pin':>7} {'target':>7} {'ok':>3} {'rel err':>8}  note")
    print(header)
    print("-" * len(header))
    for r in rows:
        ok = "yes" if r["meets_target"] else "NO"
        print(f"{r['model']:<7} {r['function']:<11} {r['c_us']:>8.3f} {r['python_us']:>8.3f} "
              f"{r['pinocchio_us']:>8.3f} {r['ratio']:>6.2f} {r['python_ratio']:>7.2f} "
              f"{'≤' + format(r['target_ratio'], 'g'):>7} {ok:>3} {r['max_rel_err']:>8.1e}  "
              f"{r['note']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (noisier)")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)
    single_repeat, batch_repeat = (15, 3) if args.quick else (61, 9)
    rows: list[dict] = []
    compile_times, generate_times = {}, {}
    with tempfile.TemporaryDirectory(prefix="rb_dynamics_bench_cache_") as cache:
        os.environ["RB_DYNAMICS_CACHE"] = cache  # a cold cache: the compile time is measured
        for name in args.models:
            rel, floating = MODELS[name]
            case = _Case(name, rel, floating, n_single=50 if name == "talos" else 100)
            compile_times[name], generate_times[name] = case.compile_s, case.generate_s
            reps = max(single_repeat // 3, 5) if name == "talos" else single_repeat
            rows += _single_rows(case, reps)
            rows += _batch_rows(case, batch_repeat)
    _print_table(rows)
    print("C kernels, generation + compile (s): "
          + ", ".join(f"{k} {v:.2f}" for k, v in compile_times.items()))
    print("Python kernels, generation (s): "
          + ", ".join(f"{k} {v:.2f}" for k, v in generate_times.items()))
    if args.json:
        meta = {
            "python": platform.python_version(), "numpy": np.__version__,
            "pinocchio": pin.__version__, "machine": platform.machine(),
            "cpu_count": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "single_state_repeats": single_repeat, "batch_repeats": batch_repeat,
            "n_batch": N_BATCH, "compile_seconds": compile_times,
            "python_generate_seconds": generate_times,
        }
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
        print(f"wrote {args.json}")
    missed = [r for r in rows if r["meets_target"] is False]
    print("targets: " + ("all met" if not missed else
                         "MISSED " + ", ".join(f"{r['model']} {r['function']}" for r in missed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
