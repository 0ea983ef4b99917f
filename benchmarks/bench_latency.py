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
import rclpy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from rb_dynamics.ros_runtime import run_node

class Echo(rclpy.node.Node):
    # answers each state at once, draining the queue the way our node does

    def __init__(self):
        super().__init__("rb_dynamics")
        self.pub = self.create_publisher(Float64MultiArray, "~/effort_commands", 100)
        self.sub = self.create_subscription(JointState, "joint_states", self.echo, 100)

    def echo(self, msg):
        while msg is not None:
            self.pub.publish(Float64MultiArray(data=list(msg.position)))
            with self.sub.handle:
                taken = self.sub.handle.take_message(self.sub.msg_type, self.sub.raw)
            msg = None if taken is None else taken[0]

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


def measure(cmd: list[str], joints: list[str], q: list[float], seconds: float,
            rate: float = 1000.0) -> dict:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    proc = _start(cmd)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("latency_driver", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    pub = node.create_publisher(JointState, "joint_states", qos)
    sent: list[float] = []
    received: list[float] = []
    node.create_subscription(Float64MultiArray, "rb_dynamics/effort_commands",
                             lambda _m: received.append(time.perf_counter()), qos)
    msg = JointState(name=joints, position=q, velocity=[0.0] * len(q))
    try:
        deadline = time.monotonic() + 20
        while not received and time.monotonic() < deadline:  # warm up: discovery, first answer
            pub.publish(msg)
            executor.spin_once(timeout_sec=0.05)
        if not received:
            raise RuntimeError(f"no answer from {cmd}")
        quiet_until = time.monotonic() + 0.3  # let the warm-up answers drain, then count afresh
        while time.monotonic() < quiet_until:
            count = len(received)
            executor.spin_once(timeout_sec=0.05)
            if len(received) != count:
                quiet_until = time.monotonic() + 0.3
        received.clear()
        period = 1.0 / rate
        next_time = time.perf_counter()
        end = next_time + seconds
        while next_time < end:
            now = time.perf_counter()
            if now >= next_time:
                sent.append(now)
                pub.publish(msg)
                next_time += period
            executor.spin_once(timeout_sec=max(0.0, min(next_time - time.perf_counter(), period)))
        settle = time.perf_counter() + 0.5
        while time.perf_counter() < settle and len(received) < len(sent):
            executor.spin_once(timeout_sec=0.01)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
        _stop(proc)
    # answers come back in order (one reliable writer each way): pair them up
    n = min(len(sent), len(received))
    rtt = (np.array(received[:n]) - np.array(sent[:n])) * 1e3
    return {"sent": len(sent), "answered": len(received), "lost": len(sent) - len(received),
            "median_ms": float(np.median(rtt)), "p99_ms": float(np.percentile(rtt, 99)),
            "achieved_rate_hz": len(sent) / seconds}


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
        q = [0.1 * (k + 1) for k in range(len(joints))]
        floor = measure(echo, joints, q, args.seconds)
        rows.append({"robot": robot, "node": "echo", **floor})
        for mode in ("gravity_compensation", "computed_torque"):
            cmd = [sys.executable, "-m", "rb_dynamics.node", "--ros-args", "-p",
                   f"urdf_path:={urdf}", "-p", f"mode:={mode}", "-p", "state_timeout:=1.0"]
            result = measure(cmd, joints, q, args.seconds)
            result["added_median_ms"] = result["median_ms"] - floor["median_ms"]
            rows.append({"robot": robot, "node": mode, **result})
    print(f"{'robot':<7}{'node':<22}{'sent':>7}{'lost':>6}{'rate Hz':>9}{'median ms':>11}"
          f"{'p99 ms':>9}{'added ms':>10}")
    for r in rows:
        added = f"{r['added_median_ms']:.3f}" if "added_median_ms" in r else "-"
        print(f"{r['robot']:<7}{r['node']:<22}{r['sent']:>7}{r['lost']:>6}"
              f"{r['achieved_rate_hz']:>9.0f}{r['median_ms']:>11.3f}{r['p99_ms']:>9.3f}"
              f"{added:>10}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
