"""Faults across processes: the simulator dies and comes back; SIGTERM stops nodes quickly."""

from __future__ import annotations

import signal
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from ros_harness import NodeProcess, Peer, write_params
from std_msgs.msg import Float64MultiArray

from rb_dynamics import DEFAULT_URDF


def _simulator(tmp_path, name: str) -> NodeProcess:
    params = write_params(tmp_path, "rb_simulator", {"urdf_path": str(DEFAULT_URDF),
                                                     "publish_rate": 200.0})
    return NodeProcess("rb_dynamics.sim_node", params)


def test_controller_stops_when_the_simulator_dies_and_resumes_with_a_new_one(tmp_path):
    control = NodeProcess(
        "rb_dynamics.node",
        write_params(tmp_path, "rb_dynamics", {"urdf_path": str(DEFAULT_URDF),
                                               "state_timeout": 0.2}),
        "-r", "~/effort_commands:=/rb_simulator/commands")
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
