# SPDX-License-Identifier: Apache-2.0
"""Simulator speed on panda (1 ms steps, joint losses and position limits on): steps per second
and real-time factor of semi-implicit Euler and RK4, on the compiled roll-out
(``simulation.compiled_steps``: the step loop in C) and on ``simulation.step`` (Python around the
same C kernels); then the ~/simulate service answering a 5 s roll-out at 1 ms with every point
(5,001), on the control node once its compiled kernels are in,
and where that time goes, measured in this process: the roll-out itself, building the answer's
points, serialising the answer, and the client's deserialisation.

    python benchmarks/bench_simulation.py [--seconds 2] [--json out.json]

Targets: semi-implicit Euler ≥ 100× real time (≤ 10 µs per step), RK4 ≥ 30× (≤ 33 µs
per step); ~/simulate 5 s at 1 ms answered in ≤ 0.1 s (constant efforts or computed torque).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))
from pin_oracle import REAL_ROBOTS, robots_dir  # noqa: E402

from rb_dynamics.dynamics import (
    KERNEL_METHODS,  # noqa: E402
    make_dynamics,  # noqa: E402
)
from rb_dynamics.model import load_model  # noqa: E402
from rb_dynamics.simulation import Simulator  # noqa: E402

TARGET_RTF = {"semi_implicit_euler": 100, "rk4": 30}
TARGET_SERVICE_S = 0.1
POSITIONS = [0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8, 0.02]
GOAL = [0.3, -0.2, 0.1, -1.8, 0.1, 1.8, 0.6, 0.03]
MODES = ("constant", "gravity_compensation", "computed_torque")


class StepOnly:
    """The same C kernels without the compiled roll-out: the simulator takes
    ``simulation.step`` each step (the Python path)."""

    def __init__(self, dyn):
        self.model, self.kind = dyn.model, dyn.kind
        for name in KERNEL_METHODS:
            setattr(self, name, getattr(dyn, name))


def steps_per_second(dyn, integrator: str, seconds: float) -> float:
    """Steps per second of ``Simulator.advance`` (100 steps per call, as the node calls it)
    holding gravity-compensating efforts from the test pose (the arm moves little: no stop)."""
    sim = Simulator(dyn, 1e-3, integrator, q0=np.array(POSITIONS))
    sim.set_command(dyn.gravity(np.array(POSITIONS)))
    sim.command_timeout = float("inf")
    sim.advance(0.1, max_steps=100)  # warm up
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        steps += sim.advance(0.1, max_steps=100)
    return steps / (time.perf_counter() - start)


def _request(model, mode: str, integrator: str):
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from rb_dynamics_interfaces.srv import Simulate

    request = Simulate.Request(joint_names=model.joint_names, positions=POSITIONS,
                               torque_mode=mode, duration=5.0, time_step=0.001,
                               integrator=integrator)
    if mode == "constant":
        request.efforts = [0.0, 1.0, 0.0, -1.0, 0.0, 0.5, 0.0, 0.0]
    if mode == "computed_torque":  # toward a goal in 1 s, then holding it
        point = JointTrajectoryPoint(positions=GOAL, velocities=[0.0] * 8,
                                     accelerations=[0.0] * 8)
        point.time_from_start.sec = 1
        request.reference = JointTrajectory(joint_names=model.joint_names, points=[point])
        request.kp, request.kd = [400.0], [40.0]
    return request


def _answer(dyn, request):
    """~/simulate's work for ``request`` in this process: (response, seconds)."""
    from rb_dynamics.ros.control_node.dynamics_services import RollOut
    from rb_dynamics_interfaces.srv import Simulate

    start = time.perf_counter()
    roll_out = RollOut(dyn, request, lambda model: None)

    async def run() -> None:
        async for _ in roll_out.run(0.005):
            pass

    asyncio.run(run())
    response = Simulate.Response()
    roll_out.fill(response)
    return response, time.perf_counter() - start


def rollout_breakdown(dyn, mode: str, integrator: str) -> dict[str, float]:
    """Seconds of each part of one ~/simulate answer, in this process (best of 3): the
    roll-out keeping 2 points (the steps and the law), with its 5,001 points, serialising the
    answer, deserialising it (what the client does)."""
    from rclpy.serialization import deserialize_message, serialize_message

    from rb_dynamics_interfaces.srv import Simulate

    best: dict[str, float] = {}
    for _ in range(3):
        request = _request(dyn.model, mode, integrator)
        request.output_decimation = 5000
        _, steps_only = _answer(dyn, request)
        request.output_decimation = 1
        response, total = _answer(dyn, request)
        start = time.perf_counter()
        data = serialize_message(response)
        serialise = time.perf_counter() - start
        start = time.perf_counter()
        deserialize_message(data, Simulate.Response)
        deserialise = time.perf_counter() - start
        parts = {"roll-out, 2 points": steps_only, "roll-out, 5001 points": total,
                 "serialise": serialise, "client deserialise": deserialise}
        best = {k: min(v, best.get(k, v)) for k, v in parts.items()}
    return best


def rollout_service_seconds(urdf: Path, repeat: int = 3) -> dict[tuple[str, str], float]:
    """Seconds from call to answer of ~/simulate (best of ``repeat``), 5 s at 1 ms with every
    point (5,001), on the control node once its compiled kernels are in."""
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
        node.call(Simulate, "~/simulate", Simulate.Request(
            joint_names=model.joint_names, positions=POSITIONS, duration=0.01), timeout=60)
        times = {}
        for mode in MODES:
            for integrator in ("semi_implicit_euler", "rk4"):
                request = _request(model, mode, integrator)
                best = float("inf")
                for _ in range(repeat):
                    start = time.perf_counter()
                    answer = node.call(Simulate, "~/simulate", request, timeout=60)
                    best = min(best, time.perf_counter() - start)
                    assert answer.success, answer.message
                    assert len(answer.trajectory.points) == 5001
                times[mode, integrator] = best
        return times
    finally:
        node.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per simulator figure")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    urdf = Path(robots_dir(), REAL_ROBOTS["panda"][0])
    model = load_model(urdf)
    dyn = make_dynamics(model, "c")
    results: dict = {"simulator": [], "service": [], "breakdown": []}

    print(f"{'panda, 1 ms':<13}{'integrator':<21}{'path':<8}{'steps/s':>10}{'µs/step':>9}"
          f"{'RTF':>8}{'target':>8}")
    for integrator, target in TARGET_RTF.items():
        for path, d in (("C", dyn), ("Python", StepOnly(dyn))):
            rate = steps_per_second(d, integrator, args.seconds)
            ok = f"≥ {target}" if path == "C" else ""
            print(f"{'':<13}{integrator:<21}{path:<8}{rate:>10.0f}{1e6 / rate:>9.2f}"
                  f"{rate / 1000:>8.1f}{ok:>8}")
            results["simulator"].append({"integrator": integrator, "path": path,
                                         "steps_per_s": rate, "rtf": rate / 1000})
    print()
    print(f"{'~/simulate, panda, 5 s at 1 ms, 5001 points':<48}{'answer (s)':>11}"
          f"{'target':>9}")
    for (mode, integrator), seconds in rollout_service_seconds(urdf).items():
        print(f"  {mode + ', ' + integrator:<46}{seconds:>11.3f}{'≤ 0.1':>9}")
        results["service"].append({"mode": mode, "integrator": integrator, "seconds": seconds})
    print()
    print("where the time goes, in process (s):")
    print(f"  {'':<46}{'2 points':>10}{'5001 points':>13}{'serialise':>11}{'deserialise':>13}")
    for mode in MODES:
        for integrator in ("semi_implicit_euler", "rk4"):
            parts = rollout_breakdown(dyn, mode, integrator)
            print(f"  {mode + ', ' + integrator:<46}" + "".join(
                f"{v:>{w}.3f}" for v, w in zip(parts.values(), (10, 13, 11, 13))))
            results["breakdown"].append({"mode": mode, "integrator": integrator, **parts})
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
