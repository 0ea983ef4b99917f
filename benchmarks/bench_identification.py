# SPDX-License-Identifier: Apache-2.0
"""The acceptance figures of the whole-arm identification, over several seeds.

For each robot (the bundled arm, example-robot-data's Panda with its 7 arm joints):

1. plan an excitation from the unperturbed URDF (10 s period, 5 harmonics, 5 periods):
   planning time, condition number, peak efforts against the limits;
2. per seed, a "true" robot: every body's inertial parameters perturbed up to ±30 % (kept
   physical), armature, viscous and Coulomb friction and effort offsets drawn from published
   ranges (fractions of the effort limits, ``identification.synthetic``); its joint states
   recorded at 1 kHz with jitter (σ 0.2 ms), efforts 2 ms late with noise σ = 0.05 N·m + 1 %;
3. the fit (``identification.identify``): validation RMS per joint over the true noise σ,
   the consistent set's RMS over the unconstrained fit's, M(q) positive definite on 10⁴
   random poses, gravity error over max |g| (and the unperturbed URDF's), fit time;
4. the same robot with unmodelled Stribeck friction and 1 % outliers: validation RMS over the
   realistic case's; and the realistic data fitted with the delay ignored.

The robot follows the plan exactly (inverse dynamics, in-process): the recording is what the
sensor model makes of the true efforts. The closed-loop figure (computed-torque tracking with
the identified model against the URDF's) is ``bench_identification_closed_loop.py``'s.

    .venv/bin/python benchmarks/bench_identification.py [--seeds 3] [--robots default_arm panda]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: BLAS threads fight on 2 cores

import numpy as np  # noqa: E402

from rb_dynamics import DEFAULT_URDF  # noqa: E402
from rb_dynamics.dynamics import crba, gravity  # noqa: E402
from rb_dynamics.identification import (  # noqa: E402
    ParameterLayout,
    SensorModel,
    base_parameters,
    identify,
    perturbed_model,
    plan_excitation,
    synthetic_recording,
)
from rb_dynamics.model import load_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))

PERIODS = 5
REALISTIC = SensorModel(rate=1000.0, jitter=2e-4, delay=0.002, noise=0.05, noise_relative=0.01)
HOSTILE = SensorModel(rate=1000.0, jitter=2e-4, delay=0.002, noise=0.05, noise_relative=0.01,
                      outliers=0.01)


def _robot(name: str) -> tuple[str, tuple[str, ...]]:
    if name == "default_arm":
        return Path(DEFAULT_URDF).read_text(), ()
    from pin_oracle import REAL_ROBOTS, robots_dir

    text = Path(robots_dir(), REAL_ROBOTS[name][0]).read_text()
    return text, tuple(f"panda_joint{k}" for k in range(1, 8)) if name == "panda" else ()


def _random_poses(model, n: int, rng) -> np.ndarray:
    lo = np.where(np.isfinite(model.position_lower), model.position_lower, -np.pi)
    hi = np.where(np.isfinite(model.position_upper), model.position_upper, np.pi)
    return rng.uniform(lo, hi, (n, model.nq))


def _one_seed(text, model, plan, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    true = perturbed_model(model, rng, joints=plan.trajectory.joints)
    recording, sigma = synthetic_recording(true, plan.trajectory, PERIODS, REALISTIC, rng)
    true_sigma = np.sqrt(np.mean(sigma ** 2, axis=0))
    ident = identify(text, recording, plan.trajectory)
    poses = _random_poses(model, 10_000, np.random.default_rng(seed + 1000))
    M = crba(ident.model, poses)  # the armature on its diagonal
    vi = ident.layout.v_index
    g_true = gravity(true, poses)[:, vi]
    scale = np.abs(g_true).max()
    g_error = np.abs(gravity(ident.model, poses)[:, vi] - g_true).max() / scale
    g_urdf = np.abs(gravity(model, poses)[:, vi] - g_true).max() / scale
    ignored = identify(text, recording, plan.trajectory, delay=0.0, consistent=False)
    rng2 = np.random.default_rng(seed)
    true2 = perturbed_model(model, rng2, joints=plan.trajectory.joints, stribeck=True)
    rec2, sigma2 = synthetic_recording(true2, plan.trajectory, PERIODS, HOSTILE, rng2)
    hostile = identify(text, rec2, plan.trajectory)
    true_sigma2 = np.sqrt(np.mean(sigma2 ** 2, axis=0))
    realistic_ratio = ident.validation.rms / true_sigma
    return {
        "seed": seed,
        "delay_ms": 1e3 * ident.fit.delay,
        "validation_rms_over_sigma": realistic_ratio.tolist(),
        "consistent_over_unconstrained": (ident.consistent_validation.rms
                                          / ident.validation.rms).tolist(),
        "min_eig_M": float(np.linalg.eigvalsh(M).min()),
        "min_eig_pseudo_inertia": float(ident.consistent.min_eigenvalue.min()),
        "gravity_error": float(g_error), "gravity_error_urdf": float(g_urdf),
        "fit_seconds": ident.seconds,
        "delay_ignored_rms_over_sigma": (ignored.validation.rms / true_sigma).tolist(),
        "hostile_rms_over_sigma": (hostile.validation.rms / true_sigma2).tolist(),
        "hostile_over_realistic": float(np.max(hostile.validation.rms / true_sigma2)
                                        / np.max(realistic_ratio)),
        "outliers_dropped": hostile.data.outliers,
    }


def _stats(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"median {np.median(values):.4g}, worst {values.max():.4g}"


def run(robot: str, seeds: int, budget: float) -> dict:
    text, joints = _robot(robot)
    model = load_model(text)
    layout = ParameterLayout(model, joints)
    base = base_parameters(layout)
    t0 = time.perf_counter()
    plan = plan_excitation(base, time_budget=budget)
    plan_seconds = time.perf_counter() - t0
    effort_ratio = plan.peak_effort / (plan.limits.effort / 0.9)
    print(f"\n{robot}: {layout.n_joints} joints, {base.count} base parameters; plan "
          f"{plan_seconds:.1f} s, condition {plan.condition:.1f}, trajectory "
          f"{PERIODS * plan.trajectory.period:.0f} s (+ lead-in); peak |τ|/limit "
          f"{effort_ratio.max():.2f}", flush=True)
    rows = []
    for seed in range(seeds):
        row = _one_seed(text, model, plan, seed)
        rows.append(row)
        print(f"  seed {seed}: val RMS/σ max {max(row['validation_rms_over_sigma']):.3f}, "
              f"consistent/WLS max {max(row['consistent_over_unconstrained']):.4f}, "
              f"gravity {100 * row['gravity_error']:.3f} % (URDF "
              f"{100 * row['gravity_error_urdf']:.1f} %), min eig M "
              f"{row['min_eig_M']:.2e}, delay {row['delay_ms']:.3f} ms, fit "
              f"{row['fit_seconds']:.1f} s; delay ignored: val RMS/σ max "
              f"{max(row['delay_ignored_rms_over_sigma']):.2f}; Stribeck + outliers: "
              f"{row['hostile_over_realistic']:.2f}× realistic", flush=True)

    def every(key):
        return [v for r in rows for v in np.ravel(r[key])]

    gain = np.array(every("gravity_error_urdf")) / np.array(every("gravity_error"))
    summary = {
        "plan_seconds": plan_seconds, "condition": plan.condition,
        "validation_rms_over_sigma": _stats(every("validation_rms_over_sigma")),
        "consistent_over_unconstrained": _stats(every("consistent_over_unconstrained")),
        "min_eig_M (worst = smallest)": f"{min(every('min_eig_M')):.3e}",
        "gravity_error_percent": _stats(100 * np.array(every("gravity_error"))),
        "urdf_over_identified_gravity_error (worst = smallest)": f"{min(gain):.1f}",
        "fit_seconds": _stats(every("fit_seconds")),
        "delay_ms": _stats(every("delay_ms")),
        "delay_ignored_rms_over_sigma": _stats(every("delay_ignored_rms_over_sigma")),
        "hostile_over_realistic": _stats(every("hostile_over_realistic")),
    }
    print(f"  {robot} over {seeds} seeds (per joint where it applies):")
    for key, value in summary.items():
        print(f"    {key}: {value}")
    return {"summary": summary, "seeds": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robots", nargs="+", default=["default_arm", "panda"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--plan-budget", type=float, default=35.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = {robot: run(robot, args.seeds, args.plan_budget) for robot in args.robots}
    print("\ncomputed-torque tracking with the identified model against the URDF's, in closed "
          "loop: benchmarks/bench_identification_closed_loop.py")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
