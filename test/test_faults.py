"""Faults across processes: the simulator dies and comes back, a description with other joints
arrives mid-run; SIGTERM/SIGINT stop nodes quickly."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from pin_oracle import REAL_ROBOTS, robots_dir
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_harness import NodeProcess, Peer, write_params
from std_msgs.msg import Float64MultiArray, String

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import load_model

PANDA = Path(robots_dir(), REAL_ROBOTS["panda"][0])


def _simulator(tmp_path, name: str) -> NodeProcess:
    params = write_params(tmp_path, "rb_simulator", {"urdf_path": str(DEFAULT_URDF),
                                                     "publish_rate": 200.0})
    return NodeProcess("rb_dynamics.sim_node", params)


def _controller(tmp_path, state_timeout: float) -> NodeProcess:
    """The control node on the bundled arm, its commands remapped onto the simulator's input."""
    params = write_params(tmp_path, "rb_dynamics", {"urdf_path": str(DEFAULT_URDF),
                                                    "state_timeout": state_timeout})
    return NodeProcess("rb_dynamics.node", params, "-r",
                       "~/effort_commands:=/rb_simulator/commands")


def test_controller_stops_when_the_simulator_dies_and_resumes_with_a_new_one(tmp_path):
    control = _controller(tmp_path, state_timeout=0.2)
    sim = _simulator(tmp_path, "first")
    peer = Peer()
    commands: list[float] = []
    statuses: list[tuple[float, int, str]] = []
    peer.node.create_subscription(Float64MultiArray, "/rb_simulator/commands",
                                  lambda _m: commands.append(time.monotonic()), 100)
    peer.node.create_subscription(
        DiagnosticArray, "/diagnostics",
        lambda m: statuses.extend((time.monotonic(), s.level, s.message) for s in m.status), 10)
    try:
        assert peer.wait_for(lambda: len(commands) > 50, 20), control.output() + sim.output()
        sim.proc.send_signal(signal.SIGKILL)
        sim.proc.wait()
        killed = time.monotonic()
        peer.wait_for(lambda: False, 2.5)
        assert not [t for t in commands if t > killed + 0.3]  # nothing published without state
        assert any(t > killed and level == DiagnosticStatus.ERROR and "stale" in text
                   for t, level, text in statuses), statuses
        sim = _simulator(tmp_path, "second")
        count = len(commands)
        assert peer.wait_for(lambda: len(commands) > count + 50, 20), control.output()
        assert control.proc.poll() is None
    finally:
        peer.close()
        for process in (sim, control):
            if process.proc.poll() is not None:
                continue  # the killed simulator, when the test stopped early
            start = time.monotonic()
            process.proc.send_signal(signal.SIGTERM)
            process.proc.wait(10)
            assert time.monotonic() - start < 2.0, "no clean stop within 2 s of SIGTERM"
            assert process.proc.returncode == 0, process.output()


def test_a_description_with_other_joints_mid_run_switches_whole(tmp_path):
    """Closed loop on the bundled arm; panda's description arrives mid-run: the node switches
    to panda as a whole (its states now lack panda's joints, so it publishes nothing and says
    so), and switching back resumes the loop. No command ever has another length."""
    control = _controller(tmp_path, state_timeout=0.5)
    sim = _simulator(tmp_path, "arm")
    peer = Peer()
    commands: list[tuple[float, int, bool]] = []
    models: list[str] = []
    peer.node.create_subscription(
        Float64MultiArray, "/rb_simulator/commands",
        lambda m: commands.append((time.monotonic(), len(m.data),
                                   bool(np.all(np.isfinite(m.data))))), 100)

    def on_diagnostics(msg):
        for status in msg.status:
            models.extend(kv.value for kv in status.values if kv.key == "model")

    peer.node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                         reliability=ReliabilityPolicy.RELIABLE)
    description = peer.node.create_publisher(String, "/robot_description", latched)
    arm_joints = len(load_model(DEFAULT_URDF).actuated_joint_names)
    try:
        assert peer.wait_for(lambda: len(commands) > 100, 20), control.output() + sim.output()
        assert peer.wait_for(lambda: description.get_subscription_count() > 0, 5.0)
        description.publish(String(data=PANDA.read_text()))
        switched = time.monotonic()
        assert peer.wait_for(lambda: "panda" in models, 5.0), control.output()
        peer.wait_for(lambda: False, 1.0)
        assert not [t for t, _, _ in commands if t > switched + 0.3], control.output()
        assert "missing joints" in control.output()
        description.publish(String(data=DEFAULT_URDF.read_text()))
        count = len(commands)
        assert peer.wait_for(lambda: len(commands) > count + 50, 10), control.output()
        assert all(n == arm_joints and finite for _, n, finite in commands)
        assert control.proc.poll() is None and sim.proc.poll() is None
    finally:
        peer.close()
        for process in (sim, control):
            assert process.stop() < 2.0, "no clean stop within 2 s of SIGINT"
            assert process.proc.returncode == 0, process.output()
