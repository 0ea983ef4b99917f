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
from rb_dynamics.demo.main_job import SIM, _spawn, _stop  # noqa: E402


def _proc_stats(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"rss_kb": int(fields["VmRSS"].split()[0]), "threads": int(fields["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--urdf", type=Path, default=DEFAULT_URDF)
    parser.add_argument("--mode", default="computed_torque")
    parser.add_argument("--json", type=Path)
    return parser.parse_args()


def _start_nodes(args: argparse.Namespace, log_dir: Path):
    """The simulator and the control node, its commands remapped to the simulator's input."""
    sim = _spawn("rb_dynamics.ros.simulator_node", {
        "urdf_path": str(args.urdf), "publish_rate": 1000.0, "time_step": 0.001,
        "command_timeout": 0.5}, [], log_dir)
    control = _spawn("rb_dynamics.ros.control_node", {
        "urdf_path": str(args.urdf), "mode": args.mode, "state_timeout": 0.5,
        "friction_compensation": True}, ["-r", f"~/effort_commands:=/{SIM}/commands"], log_dir)
    return sim, control


class _Monitor:
    """Counts every joint state (keeping its stamp) and command, and records the control
    node's running totals from /diagnostics."""

    def __init__(self):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray

        from rb_dynamics.ros.diagnostics import read_totals
        from rb_dynamics.ros.runtime import take_queued

        rclpy.init()
        self.node = rclpy.create_node("rb_soak_monitor")
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.states = self.commands = 0
        self.stamps: list[int] = []  # ns, of every state the monitor saw
        self.totals: list[tuple[float, dict]] = []  # (monotonic, the control node's totals)

        # each callback also takes what queued behind its message: an executor pass costs
        # ~0.5 ms of CPU, which the monitor would otherwise take from the two nodes it watches
        def on_state(msg):
            for state in (msg, *take_queued(state_sub)):
                self.states += 1
                self.stamps.append(state.header.stamp.sec * 1_000_000_000
                                   + state.header.stamp.nanosec)

        def on_diagnostics(msg):
            for status in msg.status:
                if (entry := read_totals(status)) is not None:
                    self.totals.append((time.monotonic(), entry))

        def on_command(_msg):
            self.commands += 1 + sum(1 for _ in take_queued(command_sub))

        state_sub = self.node.create_subscription(JointState, "joint_states", on_state, qos)
        command_sub = self.node.create_subscription(Float64MultiArray, f"/{SIM}/commands",
                                                    on_command, qos)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)

    def run(self, minutes: float, sim, control, log_dir: Path):
        """From the first command (waiting up to 30 s), watch for ``minutes``, sampling both
        nodes' resources every 5 s. Returns the window's start, the counts at that start and
        the samples."""
        start = time.monotonic()
        while self.commands == 0 and time.monotonic() - start < 30:
            self.executor.spin_once(timeout_sec=0.05)
        t0 = time.monotonic()
        base_states, base_commands = self.states, self.commands
        samples = []
        next_sample = t0
        while (now := time.monotonic()) - t0 < minutes * 60:
            self.executor.spin_once(timeout_sec=0.001)
            if now >= next_sample:
                samples.append({"t": now - t0, "simulator": _proc_stats(sim.pid),
                                "control": _proc_stats(control.pid)})
                next_sample += 5.0
                print(f"\r  {now - t0:6.0f} s  states {self.states - base_states:8d}  "
                      f"commands {self.commands - base_commands:8d}", end="", flush=True)
            if sim.poll() is not None or control.poll() is not None:
                raise RuntimeError(f"a node died: see {log_dir}")
        print()
        return t0, base_states, base_commands, samples

    def close(self) -> None:
        import rclpy

        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown()


def _window_counts(totals: list[tuple[float, dict]], stamps: list[int], t0: float) -> dict:
    # the control node's totals at two reports bracket the window; the monitor's stamps say
    # how many states were published between the two newest stamps those totals cover
    window = [entry for t, entry in totals if t >= t0]
    first_totals, last_totals = window[0], window[-1]
    stamp_array = np.sort(np.array(stamps, dtype=np.int64))
    published = int(np.searchsorted(stamp_array, last_totals["stamp"], side="right")
                    - np.searchsorted(stamp_array, first_totals["stamp"], side="right"))
    received = last_totals["received"] - first_totals["received"]
    delta = {key: last_totals[key] - first_totals[key] for key in ("superseded", "commands")}
    return {
        "window_states_published": published,
        "window_states_received_by_control": received,
        "window_states_lost": published - received,
        "window_states_superseded": delta["superseded"],
        "window_commands": delta["commands"],
        "window_received_minus_commands_minus_superseded":
            received - delta["commands"] - delta["superseded"],
    }


def _latencies(totals: list[tuple[float, dict]], t0: float) -> dict:
    """The control node's per-second p99 state age, over the first and the last minute."""
    ages = np.array([(t - t0, entry["age_p99_ms"]) for t, entry in totals if t >= t0])
    first = ages[ages[:, 0] < 60, 1]
    last = ages[ages[:, 0] > ages[-1, 0] - 60, 1]
    return {
        "latency_p99_ms_first_minute_median_second": float(np.nanmedian(first)),
        "latency_p99_ms_last_minute_median_second": float(np.nanmedian(last)),
        "latency_p99_ms_first_minute_worst_second": float(np.nanmax(first)),
        "latency_p99_ms_last_minute_worst_second": float(np.nanmax(last)),
        "latency_p99_first_to_last_change_percent":
            100.0 * (np.nanmedian(last) / np.nanmedian(first) - 1.0),
    }


def _growth(samples: list[dict]) -> dict:
    """Memory growth after the first minute, fd and thread growth over the run, per node."""
    after_minute = [s for s in samples if s["t"] >= 60] or samples
    report = {}
    for name in ("simulator", "control"):
        report[f"{name}_rss_growth_mb_after_first_minute"] = (
            after_minute[-1][name]["rss_kb"] - after_minute[0][name]["rss_kb"]) / 1024
        report[f"{name}_fd_growth"] = samples[-1][name]["fds"] - samples[0][name]["fds"]
        report[f"{name}_thread_growth"] = samples[-1][name]["threads"] - samples[0][name]["threads"]
    return report


def main() -> int:
    args = _arguments()
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(50, 200)))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    log_dir = Path(tempfile.mkdtemp(prefix="rb_dynamics_soak_"))
    os.environ.setdefault("ROS_LOG_DIR", str(log_dir / "ros"))
    sim, control = _start_nodes(args, log_dir)
    monitor = _Monitor()
    try:
        t0, base_states, base_commands, samples = monitor.run(args.minutes, sim, control,
                                                              log_dir)
    finally:
        monitor.close()
        shutdown = {"simulator": _stop(sim), "control": _stop(control)}
    report = {
        "minutes": args.minutes, "states": monitor.states - base_states,
        "commands": monitor.commands - base_commands,
        **_window_counts(monitor.totals, monitor.stamps, t0),
        "shutdown": shutdown,
        **_latencies(monitor.totals, t0),
        **_growth(samples),
    }
    for key, value in report.items():
        print(f"{key:<45} {value}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
