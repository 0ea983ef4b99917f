"""Simulator speed on panda: steps per second (as a real-time factor at 1 kHz) with
semi-implicit Euler and RK4, and the control node's ~/simulate service answering a 5 s
roll-out at 1 ms.

    python benchmarks/bench_simulation.py
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test"))
from pin_oracle import REAL_ROBOTS, robots_dir  # noqa: E402

from rb_dynamics.codegen import compile_dynamics  # noqa: E402
from rb_dynamics.model import load_model  # noqa: E402
from rb_dynamics.simulation import Simulator  # noqa: E402


def steps_per_second(model, integrator: str, seconds: float = 3.0) -> float:
    fast = compile_dynamics(model)
    sim = Simulator(fast, 1e-3, integrator)
    sim.set_command(np.zeros(model.nv))
    sim.command_timeout = float("inf")
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        steps += sim.advance(0.1, max_steps=100)
    return steps / (time.perf_counter() - start)


def rollout_service_seconds(urdf: Path) -> dict[str, float]:
    """Seconds from call to answer of ~/simulate, 5 s at 1 ms with every point (5001), on the
    control node once its compiled kernels are in, per integrator."""
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(50, 200)))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="rb_bench_sim_"))
    from ros_harness import control_node

    from rb_dynamics_interfaces.srv import Simulate

    node = control_node(Path(tempfile.mkdtemp(prefix="rb_bench_sim_")),
                        {"urdf_path": str(urdf)}, name="rb_dynamics_bench")
    try:
        assert node.wait_for_log("dynamics kernels: c", 120.0), node.output()
        model = load_model(urdf)
        positions = [0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8, 0.02]
        node.call(Simulate, "~/simulate", Simulate.Request(
            joint_names=model.joint_names, positions=positions, duration=0.01), timeout=30)
        times = {}
        for integrator in ("semi_implicit_euler", "rk4"):
            request = Simulate.Request(joint_names=model.joint_names, positions=positions,
                                       torque_mode="gravity_compensation", duration=5.0,
                                       time_step=0.001, integrator=integrator)
            start = time.perf_counter()
            answer = node.call(Simulate, "~/simulate", request, timeout=60)
            times[integrator] = time.perf_counter() - start
            assert answer.success, answer.message
            assert len(answer.trajectory.points) == 5001
        return times
    finally:
        node.close()


def main() -> int:
    urdf = Path(robots_dir(), REAL_ROBOTS["panda"][0])
    model = load_model(urdf)
    print(f"{'panda':<8}{'integrator':<22}{'steps/s':>10}{'RTF @ 1 kHz':>13}{'target':>8}")
    for integrator, target in (("semi_implicit_euler", 10), ("rk4", 3)):
        rate = steps_per_second(model, integrator)
        print(f"{'':<8}{integrator:<22}{rate:>10.0f}{rate / 1000:>13.1f}{'≥ ' + str(target):>8}")
    print()
    print(f"{'~/simulate, panda, 5 s at 1 ms, 5001 points':<46}{'answer (s)':>11}{'target':>9}")
    for integrator, seconds in rollout_service_seconds(urdf).items():
        target = "≤ 1" if integrator == "semi_implicit_euler" else "-"
        print(f"{'  gravity compensation, ' + integrator:<46}{seconds:>11.3f}{target:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
