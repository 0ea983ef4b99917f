# SPDX-License-Identifier: Apache-2.0
"""The rclpy floor and the package's closed loop, measured in one run.

    python benchmarks/bench_floor.py [--seconds 5] [--json out.json]

The floor: two bare rclpy processes in lock-step ping-pong, a driver publishing
sensor_msgs/JointState (6 joints) and an echo answering each with std_msgs/Float64MultiArray,
the driver sending the next state when the answer arrives. No computation: what two processes
and two DDS hops cost in rclpy. Measured with each executor the distribution offers
(``SingleThreadedExecutor``, and ``rclpy.experimental.EventsExecutor`` where it exists).

The package's closed loop: ``rb_simulator`` in lock-step (one step per command) and
``rb_dynamics_node`` in each mode on the bundled arm, with and without the demo's reference
publisher. Steps per second are counted from the simulator's joint_states stamps (one step:
one ``time_step``), over the same wall-clock window as each process's CPU time
(/proc/<pid>/stat), which is printed per step. Every row also prints its ratio to the events
floor (or the single-threaded one where there is no events executor).
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

ROOT = Path(__file__).resolve().parents[1]
TIME_STEP = 0.001  # s: the simulator's step in the closed loop

PING_PONG = r"""
import json, sys, time
import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

role, executor_name, seconds, warm_up = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
    float(sys.argv[4])
rclpy.init()
node = rclpy.create_node(f"floor_{role}")
if executor_name == "events":
    from rclpy.experimental import EventsExecutor
    executor = EventsExecutor()
else:
    from rclpy.executors import SingleThreadedExecutor
    executor = SingleThreadedExecutor()
executor.add_node(node)
qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
names = [f"joint_{k}" for k in range(6)]
if role == "echo":
    pub = node.create_publisher(Float64MultiArray, "floor_commands", qos)
    answer = Float64MultiArray()

    def on_state(msg):
        answer.data = msg.position
        pub.publish(answer)

    node.create_subscription(JointState, "floor_states", on_state, qos)
    while rclpy.ok():
        executor.spin_once(timeout_sec=0.1)
else:
    pub = node.create_publisher(JointState, "floor_states", qos)
    state = JointState(name=names, position=[0.1] * 6, velocity=[0.0] * 6, effort=[0.0] * 6)
    count = [0]

    def on_command(msg):
        count[0] += 1
        state.position[0] = count[0] * 1e-6
        pub.publish(state)

    node.create_subscription(Float64MultiArray, "floor_commands", on_command, qos)
    while pub.get_subscription_count() == 0:
        executor.spin_once(timeout_sec=0.05)
    deadline = time.monotonic() + 10.0
    while count[0] == 0 and time.monotonic() < deadline:  # discovery: resend until answered
        pub.publish(state)
        executor.spin_once(timeout_sec=0.05)
    end = time.monotonic() + warm_up
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.05)
    print("WINDOW", flush=True)
    start, first = time.monotonic(), count[0]
    while time.monotonic() - start < seconds:
        executor.spin_once(timeout_sec=0.05)
    elapsed, steps = time.monotonic() - start, count[0] - first
    print("DONE " + json.dumps({"steps": steps, "seconds": elapsed}), flush=True)
"""


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (s)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ping_pong(executor: str, seconds: float) -> dict:
    """The bare floor with ``executor``: round trips/s and CPU µs per round trip per process."""
    def start(role: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", PING_PONG, role, executor, str(seconds),
                                 "1.0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)

    echo = start("echo")
    driver = start("driver")
    try:
        if driver.stdout.readline().strip() != "WINDOW":
            raise RuntimeError(f"the {executor} ping-pong did not start")
        cpu = {"driver": _cpu_seconds(driver.pid), "echo": _cpu_seconds(echo.pid)}
        line = driver.stdout.readline()
        cpu = {"driver": _cpu_seconds(driver.pid) - cpu["driver"],
               "echo": _cpu_seconds(echo.pid) - cpu["echo"]}
        result = json.loads(line.split(" ", 1)[1])
    finally:
        _stop(driver)
        _stop(echo)
    steps = max(result["steps"], 1)
    return {"rate": result["steps"] / result["seconds"],
            "cpu_us": {name: 1e6 * value / steps for name, value in cpu.items()}}


def _spawn(module: str, node_name: str, params: dict, extra: list[str], log_dir: Path
           ) -> subprocess.Popen:
    path = log_dir / f"{node_name}.yaml"
    path.write_text(json.dumps({node_name: {"ros__parameters": params}}))
    log = open(log_dir / f"{node_name}.log", "w")  # noqa: SIM115 - the child's stdout
    return subprocess.Popen([sys.executable, "-m", module, "--ros-args", "--params-file",
                             str(path), *extra], stdout=log, stderr=subprocess.STDOUT)


def closed_loop(mode: str, reference: bool, seconds: float) -> dict:
    """Simulator (lock-step) + control node in ``mode`` (+ the reference publisher): steps/s
    and CPU µs per step per process."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from rb_dynamics import DEFAULT_URDF

    log_dir = Path(tempfile.mkdtemp(prefix="rb_floor_"))
    sim = _spawn("rb_dynamics.ros.simulator_node", "rb_simulator", {
        "urdf_path": str(DEFAULT_URDF), "publish_rate": 1000.0, "time_step": TIME_STEP,
        "publish_clock": True, "lockstep": True,
        # no step without a command, however long the node takes to start
        "lockstep_timeout": 1.0e6}, [], log_dir)
    processes = {"simulator": sim, "node": _spawn("rb_dynamics.ros.control_node", "rb_dynamics", {
        "urdf_path": str(DEFAULT_URDF), "mode": mode, "use_sim_time": True,
        "state_timeout": 0.5}, ["-r", "~/effort_commands:=/rb_simulator/commands"], log_dir)}
    if reference:
        processes["reference"] = subprocess.Popen(
            [sys.executable, "-m", "rb_dynamics.demo.reference_publisher", "--ros-args", "-p",
             "use_sim_time:=true"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("floor_watch", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    stamps: list[float] = []
    commands: list[float] = []
    node.create_subscription(JointState, "joint_states", lambda m: stamps.append(
        m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec), qos_profile_sensor_data)
    node.create_subscription(Float64MultiArray, "/rb_simulator/commands",
                             lambda m: commands.append(time.monotonic()), qos_profile_sensor_data)
    try:
        deadline = time.monotonic() + 120.0
        # measured once the loop is closed (the node commands) and has run a simulated second
        while (not commands or len(stamps) < 2 or stamps[-1] - stamps[0] < 1.0) \
                and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
            if any(p.poll() is not None for p in processes.values()):
                raise RuntimeError(f"a node exited: see {log_dir}")
        if not commands or len(stamps) < 2:
            raise RuntimeError(f"the closed loop did not start: see {log_dir}")
        cpu0 = {name: _cpu_seconds(p.pid) for name, p in processes.items()}
        t0, sim0 = time.monotonic(), stamps[-1]
        while time.monotonic() - t0 < seconds:
            executor.spin_once(timeout_sec=0.05)
        elapsed, sim1 = time.monotonic() - t0, stamps[-1]
        cpu = {name: _cpu_seconds(p.pid) - cpu0[name] for name, p in processes.items()}
    finally:
        for proc in processes.values():
            _stop(proc)
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
    steps = max(round((sim1 - sim0) / TIME_STEP), 1)
    return {"rate": steps / elapsed, "real_time_factor": (sim1 - sim0) / elapsed,
            "cpu_us": {name: 1e6 * value / steps for name, value in cpu.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--modes", nargs="+",
                        default=["gravity_compensation", "computed_torque", "impedance"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(50, 200)))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="rb_floor_log_"))

    rows = []
    from rb_dynamics.ros.runtime import events_executor_available

    executors = ["single", *(["events"] if events_executor_available() else [])]
    for executor in executors:
        rows.append({"what": f"ping-pong ({executor})", **ping_pong(executor, args.seconds)})
    floor = rows[-1]
    for mode in args.modes:
        for reference in (False, True):
            label = f"closed loop {mode}" + (" + reference" if reference else "")
            rows.append({"what": label, **closed_loop(mode, reference, args.seconds)})
    publishing = floor["cpu_us"]["driver"]  # the floor's publishing process
    print(f"floor: {floor['what']}, {floor['rate']:.0f} round trips/s, "
          f"{publishing:.0f} µs CPU per step in its publishing process")
    print(f"{'what':<48}{'steps/s':>9}{'× floor':>9}   CPU µs per step (× floor's publisher)")
    for row in rows:
        row["ratio_to_floor"] = row["rate"] / floor["rate"]
        cpu = "  ".join(f"{name} {us:.0f} ({us / publishing:.2f})"
                        for name, us in row["cpu_us"].items())
        print(f"{row['what']:<48}{row['rate']:>9.0f}{row['ratio_to_floor']:>9.2f}   {cpu}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
