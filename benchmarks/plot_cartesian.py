# SPDX-License-Identifier: Apache-2.0
"""The Cartesian impedance in the package's simulator (1 kHz, the UR5 of example-robot-data, whose
URDF has no joint friction): the static deflection under a constant wrench against F/K, and a
5 cm step of the target against the designed critically damped response. No ROS.

    python benchmarks/plot_cartesian.py [--plot docs/cartesian_impedance.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))
from pin_oracle import REAL_ROBOTS, robots_dir  # noqa: E402

from rb_dynamics.control import CartesianGains, CartesianImpedance  # noqa: E402
from rb_dynamics.dynamics import default_payload_link, make_dynamics  # noqa: E402
from rb_dynamics.model import load_model  # noqa: E402
from rb_dynamics.simulation import Simulator  # noqa: E402

PERIOD = 1e-3
Q0 = np.array([0.0, -1.2, 1.5, -1.9, -1.57, 0.0])
K_T, K_R = np.array([800.0, 1200.0, 1500.0]), np.array([40.0, 60.0, 80.0])
PUSH = np.array([10.0, -12.0, 15.0, 0.4, -0.6, 0.8])  # N, N·m; base axes
STEP = 0.05  # m along x


def run(law: CartesianImpedance, seconds: float, push: np.ndarray | None = None,
        step: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(times, errors e over time) of the closed loop from Q0 held, with a push held in base
    axes or a step of the target along x at t = 0."""
    sim = Simulator(law.dynamics, PERIOD, q0=Q0)
    law.hold(Q0)
    if step:
        target = law.target.copy()
        target[0, 3] += step
        law.reset_target(target)
    limit = law.model.effort_limit
    errors = []
    for _ in range(round(seconds / PERIOD)):
        tau, state = law.effort(sim.q, sim.v, PERIOD)
        errors.append(state.error)
        sim.set_command(np.clip(tau, -limit, limit))
        if push is not None:
            R = state.pose[:3, :3]
            sim.set_external_wrench(law.link, np.concatenate([R.T @ push[:3], R.T @ push[3:]]))
        sim.advance(PERIOD)
    return np.arange(len(errors)) * PERIOD, np.array(errors)


def x_mode_frequency(law: CartesianImpedance) -> float:
    """ω (rad/s) of the mode of Λ ẍ + K x = 0 that moves most along x at Q0."""
    _, _, Lambda, _, _ = law.operational_terms(Q0)
    K = law.stiffness_matrix()
    w, modes = np.linalg.eig(np.linalg.solve(Lambda, K))
    k = int(np.argmax(np.abs(modes[0]) / np.linalg.norm(modes, axis=0)))
    return float(np.sqrt(w[k].real))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", help="write the figure here (PNG)")
    args = parser.parse_args(argv)
    model = load_model(Path(robots_dir(), REAL_ROBOTS["ur5"][0]))
    dynamics = make_dynamics(model)
    link = default_payload_link(model)
    law = CartesianImpedance(dynamics, link, CartesianGains(K_T, K_R))
    t_push, e_push = run(law, 2.0, push=PUSH)
    ratio = -e_push / (PUSH / np.concatenate([K_T, K_R]))
    print("deflection / (F/K) at 2 s, x y z rx ry rz:", np.round(ratio[-1], 4))
    law = CartesianImpedance(dynamics, link, CartesianGains(K_T, K_R),
                             max_linear_rate=np.inf, max_angular_rate=np.inf)
    omega = x_mode_frequency(law)
    t_step, e_step = run(law, 1.5, step=STEP)
    travel = STEP - e_step[:, 0]
    designed = STEP * (1.0 - (1.0 + omega * t_step) * np.exp(-omega * t_step))
    print(f"step {STEP * 100:.0f} cm: overshoot {(travel.max() / STEP - 1) * 100:.2f} %, "
          f"largest gap to the designed response {np.abs(travel - designed).max() * 1e3:.2f} mm "
          f"(ω = {omega:.1f} rad/s)")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        for k, name in enumerate(("x", "y", "z", "rx", "ry", "rz")):
            left.plot(t_push, ratio[:, k], label=name)
        left.axhspan(0.98, 1.02, color="0.9", label="±2 %")
        left.set(xlabel="time after the push (s)", ylabel="deflection / (F / K)",
                 title="constant wrench at tool0 (UR5)", ylim=(0.0, 1.3))
        left.legend(ncol=2, fontsize=8)
        right.plot(t_step, travel * 1e3, label="simulated")
        right.plot(t_step, designed * 1e3, "--", label=f"designed, ω = {omega:.1f} rad/s")
        right.set(xlabel="time after the step (s)", ylabel="x travel (mm)",
                  title=f"{STEP * 100:.0f} cm target step, critically damped")
        right.legend(fontsize=8)
        fig.suptitle("Cartesian impedance on the UR5, the package's simulator at 1 kHz")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=90)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
