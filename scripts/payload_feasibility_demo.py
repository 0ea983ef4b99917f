# SPDX-License-Identifier: Apache-2.0
"""The feasibility report of a demo trajectory (docs/payload.md), and its plot.

    python scripts/payload_feasibility_demo.py [--out docs/payload_feasibility.png]

The bundled arm carrying 2 kg on tool0 moves through three waypoints, rest to rest (quintic),
first in 1.5 s per segment, then in 0.4 s. Prints ``feasibility_report`` for both (what
``~/trajectory_efforts`` answers) and plots |τ|/limit and |q̇|/limit along each, sampled the way
the controller samples them, with the first checked instant over each kind of limit marked
(the report checks 10 instants per segment).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rb_dynamics import DEFAULT_URDF  # noqa: E402
from rb_dynamics.control import (  # noqa: E402
    TrajectoryPoint,
    TrajectorySampler,
    feasibility_report,  # noqa: E402
)
from rb_dynamics.dynamics import Payload, with_payload  # noqa: E402
from rb_dynamics.dynamics import reference as D  # noqa: E402
from rb_dynamics.model import load_model  # noqa: E402

WAYPOINTS = np.array([
    [0.0, -1.2, 1.2, -1.0, -1.57, 0.0],
    [1.2, -0.7, 0.8, -1.7, -1.2, 0.8],
    [2.2, -1.5, 1.7, -1.8, -1.57, 1.6],
])
PAYLOAD = Payload("tool0", 2.0, [0.02, -0.015, 0.06], np.diag([6e-3, 5e-3, 3e-3]))


def trajectory(segment: float):
    """Times, positions, zero velocities and accelerations at the waypoints."""
    t = np.arange(len(WAYPOINTS)) * segment
    zero = np.zeros_like(WAYPOINTS)
    return t, WAYPOINTS, zero, zero.copy()


def sampled(model, t, q, v, a, step: float = 1e-3):
    """(times, q̇, τ) every ``step`` s along the controller's spline, with the payload."""
    points = [TrajectoryPoint(t[k] - t[0], q[k], v[k], a[k]) for k in range(1, len(t))]
    sampler = TrajectorySampler(points, t[0], q[0], v[0])
    times = np.arange(t[0], t[-1] + step / 2, step)
    states = np.array([np.concatenate(sampler.sample(s)[:3]) for s in times])
    n = model.nv
    qs, vs, accs = states[:, :n], states[:, n:2 * n], states[:, 2 * n:]
    return times, vs, D.rnea(with_payload(model, PAYLOAD), qs, vs, accs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "payload_feasibility.png")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model = load_model(DEFAULT_URDF)
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.5), sharey="row")
    colors = plt.cm.tab10(np.arange(model.nv))
    for column, segment in enumerate((1.5, 0.4)):
        t, q, v, a = trajectory(segment)
        report = feasibility_report(model, t, q, v, a, PAYLOAD)
        print(f"--- {segment} s per segment, with {PAYLOAD}\n{report.summary()}\n")
        times, vs, tau = sampled(model, t, q, v, a)
        for k, name in enumerate(model.joint_names):
            axes[0, column].plot(times, np.abs(tau[:, k]) / model.effort_limit[k],
                                 color=colors[k], lw=1.2, label=name)
            axes[1, column].plot(times, np.abs(vs[:, k]) / model.velocity_limit[k],
                                 color=colors[k], lw=1.2)
        for row in range(2):
            axes[row, column].axhline(1.0, color="k", lw=0.8)
        title = "feasible" if report.feasible else "NOT feasible"
        axes[0, column].set_title(f"{segment} s per segment: {title}")
        for row, kind in enumerate(("effort", "velocity")):
            first = next((x for x in report.violations if x.kind == kind), None)
            if first is None:
                continue
            limit = (model.effort_limit if kind == "effort" else model.velocity_limit)[
                model.joint_names.index(first.joint)]
            where = (first.time, abs(first.value) / limit)
            axes[row, column].plot(*where, "kx", ms=10, mew=2)
            axes[row, column].annotate(f"first {kind} violation:\n{first.joint}, "
                                       f"t = {first.time:.3f} s", where, xytext=(10, 2),
                                       textcoords="offset points", fontsize=8)
        axes[1, column].set_xlabel("time (s)")
    axes[0, 0].set_ylim(0.0, 1.45)  # room for the label over the limit
    axes[0, 0].set_ylabel("|τ| / effort limit")
    axes[1, 0].set_ylabel("|q̇| / velocity limit")
    axes[0, 0].legend(fontsize=7, loc="upper right")
    fig.suptitle("~/trajectory_efforts: the bundled arm with 2 kg on tool0, three waypoints")
    fig.tight_layout()
    fig.savefig(args.out, dpi=80)
    print(f"plot: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
