# SPDX-License-Identifier: Apache-2.0
"""Round-trip latency joint state → effort command, through our node and through a bare echo.

One run measures both, on loopback DDS with reliable QoS, at 1 kHz:
    python benchmarks/bench_latency.py [--seconds 10] [--robots ur5 panda] [--json out.json]

The driver (this process) publishes sensor_msgs/JointState and waits for each answer on
std_msgs/Float64MultiArray. The echo node answers with no computation (the floor of two DDS
hops in rclpy); our node answers with gravity compensation or computed torque. Printed: median
and p99 round trip, the median added over the echo, and messages lost.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test"))
from pin_oracle import REAL_ROBOTS, robots_dir  # noqa: E402

ECHO = """
import sys
from itertools import chain
import rclpy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from rb_dynamics.ros.runtime import run_node, take_queued

class Echo(rclpy.node.Node):
    # answers each state at once, draining the queue the way our node does

    def __init__(self):
        super().__init__("rb_dynamics")
        self.pub = self.create_publisher(Float64MultiArray, "~/effort_commands", 100)
        self.sub = self.create_subscription(JointState, "joint_states", self.echo, 100)

    def echo(self, msg):
        for state in chain([msg], take_queued(self.sub)):  # answer one, then take the next
            self.pub.publish(Float64MultiArray(data=list(state.position)))

sys.exit(run_node(Echo))
"""


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _Driver:
    """The driver's side of a run: publishes joint states, records every answer (with its
    arrival time) and the node's running totals on /diagnostics."""

    def __init__(self, joints: list[str], configurations: np.ndarray):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray

        from rb_dynamics.ros.diagnostics import read_totals

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("latency_driver", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.pub = self.node.create_publisher(JointState, "joint_states", self.qos)
        self.received: list[tuple[float, np.ndarray]] = []
        self.totals: list[tuple[float, dict[str, float]]] = []
        self.node.create_subscription(
            Float64MultiArray, "rb_dynamics/effort_commands",
            lambda m: self.received.append((time.perf_counter(), np.array(m.data))), self.qos)

        def on_diagnostics(msg):
            for status in msg.status:
                if (entry := read_totals(status)) is not None:
                    self.totals.append((time.perf_counter(), entry))

        self.node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
        self.messages = [JointState(name=joints, position=[float(x) for x in q],
                                    velocity=[0.0] * len(joints)) for q in configurations]

    def close(self) -> None:
        import rclpy

        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)

    def settle(self, quiet: float = 0.1) -> None:
        """Spin until no answer has arrived for ``quiet`` seconds."""
        quiet_until = time.monotonic() + quiet
        while time.monotonic() < quiet_until:
            count = len(self.received)
            self.executor.spin_once(timeout_sec=0.01)
            if len(self.received) != count:
                quiet_until = time.monotonic() + quiet

    def warm_up(self, deadline: float, cmd: list[str]) -> None:
        """Discovery and the first answer."""
        while not self.received and time.monotonic() < deadline:
            self.pub.publish(self.messages[0])
            self.executor.spin_once(timeout_sec=0.05)
        if not self.received:
            raise RuntimeError(f"no answer from {cmd}")

    def send_set_point(self, joints: list[str], set_point) -> None:
        from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

        trajectory = self.node.create_publisher(JointTrajectory, "rb_dynamics/joint_trajectory",
                                                self.qos)
        while trajectory.get_subscription_count() == 0:
            self.executor.spin_once(timeout_sec=0.01)
        trajectory.publish(JointTrajectory(joint_names=joints, points=[
            JointTrajectoryPoint(positions=[float(x) for x in set_point])]))

    def learn_answers(self) -> np.ndarray:
        """One round trip per state: the answer that names it, one row per state."""
        expected = []
        for message in self.messages:
            count = len(self.received)
            self.pub.publish(message)
            while len(self.received) == count:
                self.executor.spin_once(timeout_sec=0.01)
            self.settle(0.02)
            expected.append(self.received[-1][1])
        return np.array(expected)

    def next_totals(self, deadline: float) -> int:
        """Wait for the next diagnostics report (until ``deadline``); the newest one's index."""
        before = len(self.totals)
        while len(self.totals) == before and time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.05)
        return len(self.totals) - 1

    def stream(self, rate: float, seconds: float) -> list[float]:
        """Publish the states in turn at ``rate`` for ``seconds``; the send times."""
        self.received.clear()
        sent: list[float] = []
        period = 1.0 / rate
        next_time = time.perf_counter()
        end = next_time + seconds
        while next_time < end:
            now = time.perf_counter()
            if now >= next_time:
                self.pub.publish(self.messages[len(sent) % len(self.messages)])
                sent.append(now)
                next_time += period
            self.executor.spin_once(
                timeout_sec=max(0.0, min(next_time - time.perf_counter(), period)))
        return sent

    def final_totals(self) -> None:
        """Wait (at most 3 s) for a diagnostics report taken after the last answer."""
        finished = time.perf_counter()
        while not self.totals or self.totals[-1][0] < finished:
            if time.perf_counter() > finished + 3.0:
                break
            self.executor.spin_once(timeout_sec=0.05)


def measure(cmd: list[str], joints: list[str], configurations: np.ndarray, seconds: float,
            rate: float = 1000.0, set_point: list[float] | None = None) -> dict:
    """Stream joint states at ``rate`` and time each answer against the state it answers.

    Our node answers the newest queued state (older ones are superseded), so answers cannot be
    paired with states by order. The states cycle through ``configurations`` instead; before
    streaming, each one's answer is learnt by a single round trip, and every streamed answer is
    then recognised by its values, which names the state it answers.
    """
    proc = _start(cmd)
    driver = _Driver(joints, configurations)
    sent: list[float] = []
    base = 0  # the diagnostics report just before streaming
    try:
        deadline = time.monotonic() + 20
        driver.warm_up(deadline, cmd)
        if set_point is not None:
            driver.send_set_point(joints, set_point)
        driver.settle(0.3)
        expected = driver.learn_answers()
        base = driver.next_totals(deadline + 5)
        sent = driver.stream(rate, seconds)
        driver.settle(0.5)
        driver.final_totals()
    finally:
        driver.close()
        _stop(proc)
    rtt, unmatched = _round_trips(driver.received, expected, sent)
    return _summary(rtt, unmatched, sent, seconds, driver.totals, base)


def _round_trips(received: list[tuple[float, np.ndarray]], expected: np.ndarray,
                 sent: list[float]) -> tuple[np.ndarray, int]:
    """Each answer's round trip in ms, from the state its values name; and how many answers
    name none (or one not yet sent)."""
    rtt, last, unmatched = [], -1, 0
    cycle = len(expected)
    scale = np.abs(expected).max() + 1.0
    for t, data in received:
        distance = np.abs(expected - data).max(axis=1) if len(data) == expected.shape[1] \
            else np.full(cycle, np.inf)
        k = int(np.argmin(distance))
        if distance[k] > 1e-9 * scale:
            unmatched += 1
            continue
        i = last + 1 + (k - (last + 1)) % cycle  # answers come in order: the next state ≡ k
        if i >= len(sent) or sent[i] > t:
            unmatched += 1
            continue
        rtt.append((t - sent[i]) * 1e3)
        last = i
    return np.array(rtt), unmatched


def _summary(rtt: np.ndarray, unmatched: int, sent: list[float], seconds: float,
             totals: list[tuple[float, dict[str, float]]], base: int) -> dict:
    result = {"sent": len(sent), "answered": len(rtt), "unmatched": unmatched,
              "median_ms": float(np.median(rtt)), "p99_ms": float(np.percentile(rtt, 99)),
              "achieved_rate_hz": len(sent) / seconds}
    if len(totals) >= base + 2:  # our node counts what it received and what was superseded
        first, final = totals[base][1], totals[-1][1]
        result["received_by_node"] = final["received"] - first["received"]
        result["superseded"] = final["superseded"] - first["superseded"]
        result["lost"] = len(sent) - result["received_by_node"]
    else:  # the echo answers every state it receives
        result["superseded"] = 0
        result["lost"] = len(sent) - len(rtt)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--robots", nargs="+", default=["ur5", "panda"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(50, 200)))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="rb_latency_"))
    from rb_dynamics.model import load_model

    rows = []
    echo = [sys.executable, "-c", ECHO]
    for robot in args.robots:
        urdf = Path(robots_dir(), REAL_ROBOTS[robot][0])
        model = load_model(urdf)
        joints = model.joint_names
        rng = np.random.default_rng(7)
        configurations = rng.uniform(-1.0, 1.0, (32, len(joints)))
        if robot == "panda":  # the finger stays inside its travel
            configurations[:, -1] = rng.uniform(0.0, 0.04, 32)
        floor = measure(echo, joints, configurations, args.seconds)
        rows.append({"robot": robot, "node": "echo", **floor})
        for mode in ("gravity_compensation", "computed_torque"):
            cmd = [sys.executable, "-m", "rb_dynamics.ros.control_node", "--ros-args", "-p",
                   f"urdf_path:={urdf}", "-p", f"mode:={mode}", "-p", "state_timeout:=1.0"]
            # computed torque toward a set-point: a full RNEA with the PD term per state
            set_point = configurations[0] if mode == "computed_torque" else None
            result = measure(cmd, joints, configurations, args.seconds, set_point=set_point)
            result["added_median_ms"] = result["median_ms"] - floor["median_ms"]
            rows.append({"robot": robot, "node": mode, **result})
    print(f"{'robot':<7}{'node':<22}{'sent':>7}{'lost':>6}{'superseded':>11}{'rate Hz':>9}"
          f"{'median ms':>11}{'p99 ms':>9}{'added ms':>10}")
    for r in rows:
        added = f"{r['added_median_ms']:.3f}" if "added_median_ms" in r else "-"
        print(f"{r['robot']:<7}{r['node']:<22}{r['sent']:>7}{r['lost']:>6}{r['superseded']:>11}"
              f"{r['achieved_rate_hz']:>9.0f}{r['median_ms']:>11.3f}{r['p99_ms']:>9.3f}"
              f"{added:>10}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
