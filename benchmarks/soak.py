"""Soak: simulator and control node in closed loop at 1 kHz for a long time (not run in CI).

    python benchmarks/soak.py [--minutes 10] [--urdf PATH] [--mode computed_torque]

A monitor process counts joint states and commands, and samples each node's resident memory,
open file descriptors and threads every 5 s. Printed at the end: messages lost (states the
controller did not answer), memory growth after the first minute, fd/thread growth, and the
state → command latency p99 of the first and the last minute.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rb_dynamics import DEFAULT_URDF  # noqa: E402
from rb_dynamics.main_job import SIM, _spawn, _stop  # noqa: E402


def _proc_stats(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"rss_kb": int(fields["VmRSS"].split()[0]), "threads": int(fields["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--urdf", type=Path, default=DEFAULT_URDF)
    parser.add_argument("--mode", default="computed_torque")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(50, 200)))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    log_dir = Path(tempfile.mkdtemp(prefix="rb_dynamics_soak_"))
    os.environ.setdefault("ROS_LOG_DIR", str(log_dir / "ros"))

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    sim = _spawn("rb_dynamics.sim_node", {
        "urdf_path": str(args.urdf), "publish_rate": 1000.0, "time_step": 0.001,
        "command_timeout": 0.5}, [], log_dir)
    control = _spawn("rb_dynamics.node", {
        "urdf_path": str(args.urdf), "mode": args.mode, "state_timeout": 0.5,
        "friction_compensation": True}, ["-r", f"~/effort_commands:=/{SIM}/commands"], log_dir)
    rclpy.init()
    node = rclpy.create_node("rb_soak_monitor")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    states, commands, latency = [0], [0], []
    last_state = [0.0]

    def on_state(_msg):
        states[0] += 1
        last_state[0] = time.monotonic()

    def on_command(_msg):
        commands[0] += 1
        latency.append((time.monotonic(), time.monotonic() - last_state[0]))

    node.create_subscription(JointState, "joint_states", on_state, qos)
    node.create_subscription(Float64MultiArray, f"/{SIM}/commands", on_command, qos)
    samples = []
    try:
        start = time.monotonic()
        while commands[0] == 0 and time.monotonic() - start < 30:
            executor.spin_once(timeout_sec=0.05)
        t0 = time.monotonic()
        base_states, base_commands = states[0], commands[0]
        next_sample = t0
        while (now := time.monotonic()) - t0 < args.minutes * 60:
            executor.spin_once(timeout_sec=0.001)
            if now >= next_sample:
                samples.append({"t": now - t0, "simulator": _proc_stats(sim.pid),
                                "control": _proc_stats(control.pid)})
                next_sample += 5.0
                print(f"\r  {now - t0:6.0f} s  states {states[0] - base_states:8d}  "
                      f"commands {commands[0] - base_commands:8d}", end="", flush=True)
            if sim.poll() is not None or control.poll() is not None:
                raise RuntimeError(f"a node died: see {log_dir}")
        print()
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown()
        shutdown = {"simulator": _stop(sim), "control": _stop(control)}
    lat = np.array([(t - t0, d * 1e3) for t, d in latency if t >= t0])
    first = lat[lat[:, 0] < 60, 1]
    last = lat[lat[:, 0] > lat[-1, 0] - 60, 1]
    after_minute = [s for s in samples if s["t"] >= 60] or samples
    report = {
        "minutes": args.minutes, "states": states[0] - base_states,
        "commands": commands[0] - base_commands,
        "unanswered_states": (states[0] - base_states) - (commands[0] - base_commands),
        "shutdown": shutdown,
        "latency_p99_ms_first_minute": float(np.percentile(first, 99)),
        "latency_p99_ms_last_minute": float(np.percentile(last, 99)),
    }
    for name in ("simulator", "control"):
        report[f"{name}_rss_growth_mb_after_first_minute"] = (
            after_minute[-1][name]["rss_kb"] - after_minute[0][name]["rss_kb"]) / 1024
        report[f"{name}_fd_growth"] = samples[-1][name]["fds"] - samples[0][name]["fds"]
        report[f"{name}_thread_growth"] = samples[-1][name]["threads"] - samples[0][name]["threads"]
    for key, value in report.items():
        print(f"{key:<45} {value}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
