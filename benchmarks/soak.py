# SPDX-License-Identifier: Apache-2.0
"""Soak: simulator and control node in closed loop at 1 kHz for a long time (not run in CI).

    python benchmarks/soak.py [--minutes 10] [--urdf PATH] [--mode computed_torque]

A monitor process records every joint state (by its stamp) and command, reads the control
node's running totals on /diagnostics (states received and superseded, commands, and the stamp
of the newest state they cover), and samples each node's resident memory, open file
descriptors and threads every 5 s. Printed at the end:

- states lost: published in the window but never received by the control node (transport);
- states superseded: received while a newer one was already queued, so answered by that newer
  one's command (by design: a command for an older state is stale before it is sent);
- commands, and the check received = commands + superseded;
- memory growth after the first minute, fd/thread growth, and the state → command latency
  of the first and the last minute: the control node's own per-second p99 of "state age at
  command" (simulator's stamp → command published, one clock on one machine), as the median and
  the worst second of each minute. The monitor does not time messages itself: on two cores it
  shares the CPU with both nodes, so its own receive times measure its scheduling, not theirs.
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
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from rb_dynamics.diagnostics import read_totals
    from rb_dynamics.ros_runtime import take_queued

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
    states, commands = [0], [0]
    stamps: list[int] = []  # ns, of every state the monitor saw
    totals: list[tuple[float, dict]] = []  # (monotonic, the control node's running totals)

    # each callback also takes what queued behind its message: an executor pass costs ~0.5 ms
    # of CPU, which the monitor would otherwise take from the two nodes it watches
    def on_state(msg):
        for state in (msg, *take_queued(state_sub)):
            states[0] += 1
            stamps.append(state.header.stamp.sec * 1_000_000_000 + state.header.stamp.nanosec)

    def on_diagnostics(msg):
        for status in msg.status:
            if (entry := read_totals(status)) is not None:
                totals.append((time.monotonic(), entry))

    def on_command(_msg):
        commands[0] += 1 + sum(1 for _ in take_queued(command_sub))

    state_sub = node.create_subscription(JointState, "joint_states", on_state, qos)
    command_sub = node.create_subscription(Float64MultiArray, f"/{SIM}/commands", on_command,
                                           qos)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
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
    ages = np.array([(t - t0, entry["age_p99_ms"]) for t, entry in totals if t >= t0])
    first = ages[ages[:, 0] < 60, 1]
    last = ages[ages[:, 0] > ages[-1, 0] - 60, 1]
    after_minute = [s for s in samples if s["t"] >= 60] or samples
    # the control node's totals at two reports bracket the window; the monitor's stamps say
    # how many states were published between the two newest stamps those totals cover
    window = [entry for t, entry in totals if t >= t0]
    first_totals, last_totals = window[0], window[-1]
    stamp_array = np.sort(np.array(stamps, dtype=np.int64))
    published = int(np.searchsorted(stamp_array, last_totals["stamp"], side="right")
                    - np.searchsorted(stamp_array, first_totals["stamp"], side="right"))
    received = last_totals["received"] - first_totals["received"]
    delta = {key: last_totals[key] - first_totals[key] for key in ("superseded", "commands")}
    report = {
        "minutes": args.minutes, "states": states[0] - base_states,
        "commands": commands[0] - base_commands,
        "window_states_published": published,
        "window_states_received_by_control": received,
        "window_states_lost": published - received,
        "window_states_superseded": delta["superseded"],
        "window_commands": delta["commands"],
        "window_received_minus_commands_minus_superseded":
            received - delta["commands"] - delta["superseded"],
        "shutdown": shutdown,
        "latency_p99_ms_first_minute_median_second": float(np.nanmedian(first)),
        "latency_p99_ms_last_minute_median_second": float(np.nanmedian(last)),
        "latency_p99_ms_first_minute_worst_second": float(np.nanmax(first)),
        "latency_p99_ms_last_minute_worst_second": float(np.nanmax(last)),
        "latency_p99_first_to_last_change_percent":
            100.0 * (np.nanmedian(last) / np.nanmedian(first) - 1.0),
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
