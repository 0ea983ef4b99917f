# SPDX-License-Identifier: Apache-2.0
"""Contact figures (docs/contact.md): every number the contact issue asks for, measured here.

1. Cᵀ(q, q̇) q̇ against Pinocchio's ``computeCoriolisMatrix(q, q̇)ᵀ q̇`` on ur5, panda, solo12,
   talos and the kitchen-sink URDF (fixed and floating), reference and generated kernels.
2. The observer on exact data: a step of external effort, the deviation from the first-order
   response (test/test_contact_observer.py's data).
3. In closed loop (test/contact_rig.py: computed torque along the main job's fast motion,
   effort noise σ = 0.05 N·m), bundled arm and Panda: a 20 N push at the tool (world x) for
   0.5 s: ‖r − JᵀF‖/‖JᵀF‖ once settled (after 10/K), the force's magnitude and direction from
   ~/external_wrench's estimate (both wrench models, and where each is published), the
   detection delay with the default thresholds.
4. False detections over ``--minutes`` of the fast motion without contact: with the
   simulator's own model, and with the simulator's inertial parameters perturbed by ±30 %
   while the observer keeps the URDF's (detections per minute, the largest |r| per joint).
5. Cost: the observer and the detector per joint state (C kernels), against the computed-torque
   law's own cost per state in the same run.
6. What the control node's contact monitor adds per joint state (its hook on the loop's thread:
   the efforts by name, the stamp, the observer, the detector, publishing at 100 Hz), on a
   ControlNode in this process fed states directly (no executor thread: no GIL waits), beside
   the loop's own state update and command (``JointController.update_state``, ``compute``).

    python benchmarks/bench_contact.py [--minutes 10] [--json out.json] [--plot docs/contact.png]

``--plot`` draws the figure of docs/contact.md: the true external efforts (Jᵀ F) and the estimates
around a push on the bundled arm in fast motion, with the instant it was detected.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import timeit
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))
from contact_rig import ContactRig, Push, arm_path, perturb, steady_error, wrench_errors  # noqa: E402
from pin_oracle import load_case, oracle_models, random_state, rel_err  # noqa: E402

from rb_dynamics.control import (  # noqa: E402
    CollisionDetector,
    MomentumObserver,
)
from rb_dynamics.dynamics import friction_effort, make_dynamics  # noqa: E402
from rb_dynamics.model import load_model  # noqa: E402

ARMS = ("default_arm", "panda")
PUSH = np.array([20.0, 0.0, 0.0])


def coriolis_accuracy(states: int = 20) -> dict:
    """Worst relative error of Cᵀ q̇ per model and implementation against Pinocchio."""
    import test_momentum as tm  # Pinocchio's Cᵀ q̇ in our coordinates

    out = {}
    for param in oracle_models():
        name, model, xml = load_case(param.values[0])
        oracle = tm.Oracle(model, xml)
        rng = np.random.default_rng(1)
        cases = [random_state(model, rng)[:2] for _ in range(states)]
        truth = [tm._pinocchio_coriolis_transpose(oracle, q, v) for q, v in cases]
        for kind in ("reference", "python", "c"):
            dyn = make_dynamics(model, kind)
            out[(name, kind)] = max(rel_err(dyn.coriolis_transpose(q, v), ct)
                                    for (q, v), ct in zip(cases, truth))
    return out


def exact_step() -> float:
    """Worst deviation from the first-order response, as a fraction of the step."""
    import test_contact_observer as tco

    model = load_model(arm_path("default_arm"))
    import dataclasses

    model = dataclasses.replace(model, damping=np.zeros(6), friction=np.zeros(6))
    dyn = make_dynamics(model, "c")
    t_step = 0.2
    data = tco._exact_data(dyn, "held", tco._step_at(t_step, tco.STEP),
                           t_step + 10 / tco.GAINS.min())
    observer = MomentumObserver(dyn, tco.GAINS)
    worst = 0.0
    for t, q, v, effort in data:
        observer.update(t, q, v, effort)
        ideal = tco.STEP * (1 - np.exp(-tco.GAINS * max(t - t_step, 0.0)))
        worst = max(worst, float(np.max(np.abs(observer.estimate - ideal) / np.abs(tco.STEP))))
    return worst


def push_figures(robot: str, substeps: int) -> dict:
    rig = ContactRig(robot, seed=1, substeps=substeps)
    push = Push(rig.link, PUSH, 0.6, 0.5)
    run = rig.run(1.3, [push])
    error, mask = steady_error(run, push, 10 / rig.gains)
    out = {"tau_error": error, "detections": [(d.time, d.joints) for d in run.detections]}
    out["delay_ms"] = 1e3 * (run.detections[0].time - push.start) if run.detections else None
    for model, force_only in (("force", True), ("wrench", False)):
        magnitude, angle, missing = wrench_errors(rig, run, mask, force_only=force_only)
        out[model] = {"magnitude": magnitude, "angle_deg": angle,
                      "published": 1.0 - missing / mask.sum()}
    return out


def false_detections(robot: str, minutes: float, perturbed: bool) -> dict:
    plant = None
    if perturbed:
        plant = perturb(load_model(arm_path(robot)), 0.3, np.random.default_rng(7))
    rig = ContactRig(robot, seed=2, plant=plant, substeps=1)
    started = time.perf_counter()
    run = rig.run(60.0 * minutes, record=False, keep_largest=True)
    return {"detections": len(run.detections), "per_minute": len(run.detections) / minutes,
            "largest": run.largest.round(3).tolist(), "wall_s": time.perf_counter() - started,
            "observer_us": 1e6 * run.observer_seconds / run.states,
            "law_us": 1e6 * run.law_seconds / run.states}


def cost(robot: str, repeats: int = 20000) -> dict:
    """µs per state: observer + detector, the computed-torque law, on the same states."""
    rig = ContactRig(robot)
    model = rig.model
    rng = np.random.default_rng(0)
    q, v = rig.q0 + rng.uniform(-0.3, 0.3, model.nq), rng.uniform(-1, 1, model.nv)
    effort = rig.dyn.gravity(q)
    observer = MomentumObserver(rig.dyn, 200.0)
    detector = CollisionDetector(rig.joints, model.velocity_indices(rig.joints), 2.0)
    detector.watch(observer)
    clock = [0.0]

    def observe():
        clock[0] += 1e-3
        if observer.update(clock[0], q, v, effort) and detector.needed(observer.over):
            detector.check(clock[0], observer.estimate)

    q_d, v_d, a_d = q + 0.01, v, np.zeros(model.nv)
    law = rig.law
    best = {}
    for name, fn in (("observer", observe), ("law", lambda: law.effort(q, v, q_d, v_d, a_d)),
                     ("kernel", lambda: rig.dyn.momentum_terms(q, v)),
                     ("friction", lambda: friction_effort(model, v))):
        best[name] = 1e6 * min(timeit.repeat(fn, number=repeats, repeat=5)) / repeats
    return best


def plot(path: Path) -> None:
    """True and estimated external efforts around a push (the bundled arm, fast motion)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rig = ContactRig("default_arm", seed=1)
    push = Push(rig.link, PUSH, 0.6, 0.5)
    run = rig.run(1.3, [push])
    fig, axes = plt.subplots(3, 2, figsize=(11, 7.5), sharex=True)
    for k, (ax, joint) in enumerate(zip(axes.T.reshape(-1), rig.joints)):
        ax.plot(run.t, run.truth[:, k], "k--", lw=1.2, label="true Jᵀ F (simulator)")
        ax.plot(run.t, run.estimate[:, k], lw=1.0, label="estimate r (observer)")
        ax.axvspan(push.start, push.start + push.duration, color="0.9", zorder=0)
        for d in run.detections:
            ax.axvline(d.time, color="r", lw=0.8, label="collision detected")
        ax.set_title(joint, fontsize=9)
        ax.set_ylabel("N·m")
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("s")
    axes[0, 0].legend(fontsize=8, loc="upper left")
    fig.suptitle("20 N push at tool0 (world x) for 0.5 s while computed torque follows the fast "
                 "motion; effort noise σ 0.05 N·m, K = 200/s", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


def hook_cost(states: int = 5000) -> dict:
    """µs per state of ``ContactMonitor._on_state`` and of the loop's own work (best of 5)."""
    import os
    import random

    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(50, 200)))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    import rclpy
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from rb_dynamics import DEFAULT_URDF
    from rb_dynamics.ros.control_node.node import ControlNode

    rclpy.init()
    node = ControlNode(parameter_overrides=[Parameter("urdf_path", value=str(DEFAULT_URDF)),
                                            Parameter("mode", value="computed_torque")])
    try:
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline and (
                node.loop.controller is None or node.model_loader.dynamics.kind != "c"):
            rclpy.spin_once(node, timeout_sec=0.05)
        controller = node.loop.controller
        q = np.array([0.1, -1.2, 1.3, -0.6, 0.8, 0.2])
        msg = JointState(name=controller.joints, position=q.tolist(), velocity=[0.3] * 6,
                         effort=controller.law.dynamics.gravity(q).tolist())
        count = [0]

        def state():
            count[0] += 1
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(
                10**12 + count[0] * 1_000_000, 1_000_000_000)
            controller.update_state(msg.name, msg.position, msg.velocity, 0.0)

        def best(work, before=None) -> float:
            runs = []
            for _ in range(5):
                total = 0.0
                for _ in range(states):
                    if before is not None:
                        before()
                    started = time.perf_counter()
                    work()
                    total += time.perf_counter() - started
                runs.append(total / states)
            return 1e6 * min(runs)

        return {"hook": best(lambda: node.contact._on_state(msg, controller), state),
                "update_state": best(state), "compute": best(lambda: controller.compute(0.0))}
    finally:
        node.destroy_node()
        rclpy.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    if args.plot:
        plot(args.plot)
    report: dict = {}
    print("1. C^T(q, v) v against Pinocchio's computeCoriolisMatrix(q, v)^T v, worst "
          "relative error")
    accuracy = coriolis_accuracy()
    for (name, kind), err in sorted(accuracy.items()):
        print(f"   {name:<28} {kind:<10} {err:.1e}")
    report["coriolis"] = {f"{n} {k}": e for (n, k), e in accuracy.items()}
    report["exact_step"] = exact_step()
    print(f"2. exact data, step of external effort: worst deviation from the first-order "
          f"response {report['exact_step']:.1e} of the step")
    print("3. 20 N push at the tool (world x) for 0.5 s, fast motion, noise 0.05 N·m, K = 200/s")
    for robot in ARMS:
        for substeps in (4, 1):
            f = push_figures(robot, substeps)
            report[f"push {robot} {substeps}"] = f
            print(f"   {robot:<12} physics 1/{substeps} ms: |r - JtF|/|JtF| ≤ "
                  f"{f['tau_error']:.3f}; "
                  f"detected after {f['delay_ms']:.1f} ms ({len(f['detections'])} detection(s)); "
                  + "; ".join(f"{m}: |F| ±{f[m]['magnitude']:.3f}, ≤ {f[m]['angle_deg']:.2f}°, "
                              f"published {100 * f[m]['published']:.0f} %" for m in ("force",
                                                                                     "wrench")))
    print(f"4. false detections over {args.minutes:g} min of fast motion (threshold 2 N·m)")
    for robot in ARMS:
        for perturbed in (False, True):
            f = false_detections(robot, args.minutes, perturbed)
            report[f"false {robot} {'perturbed' if perturbed else 'exact'}"] = f
            print(f"   {robot:<12} {'±30 % inertia' if perturbed else 'same model   '}: "
                  f"{f['detections']} detections ({f['per_minute']:.2f}/min), max |r| "
                  f"{f['largest']} N·m (wall {f['wall_s']:.0f} s)")
    print("5. cost per joint state (best of 5), C kernels")
    for robot in ARMS:
        c = cost(robot)
        report[f"cost {robot}"] = c
        print(f"   {robot:<12} observer + detector {c['observer']:.1f} µs (the momentum kernel "
              f"alone {c['kernel']:.1f} µs; the friction law in numpy, which the C step does "
              f"not call, {c['friction']:.1f} µs); "
              f"the computed-torque law {c['law']:.1f} µs (ratio "
              f"{c['observer'] / c['law']:.2f})")
    c = hook_cost()
    report["node cost"] = c
    print(f"6. the control node's contact monitor (bundled arm): {c['hook']:.1f} µs per state; "
          f"the loop's own state update {c['update_state']:.1f} µs and command "
          f"{c['compute']:.1f} µs")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
