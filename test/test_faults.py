# SPDX-License-Identifier: Apache-2.0
"""Faults across processes: the simulator dies and comes back, a description with other joints
arrives mid-run; SIGTERM/SIGINT stop nodes quickly."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus
from pin_oracle import REAL_ROBOTS, robots_dir
from ros_harness import Session, close_all, control_node, fresh_name, simulator

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import load_model

PANDA = Path(robots_dir(), REAL_ROBOTS["panda"][0])


def closed_loop(tmp_path, state_timeout: float) -> tuple[Session, Session, str]:
    """The control node on the bundled arm, its commands remapped onto a simulator's input;
    the controller, the simulator and the simulator's name (to start another one under)."""
    name = fresh_name("rb_simulator")
    control = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF),
                                      "state_timeout": state_timeout},
                           "-r", f"~/effort_commands:=/{name}/commands",
                           commands_topic=f"/{name}/commands")
    return control, arm_simulator(tmp_path, name), name


def arm_simulator(tmp_path, name: str) -> Session:
    return simulator(tmp_path, {"urdf_path": str(DEFAULT_URDF), "publish_rate": 200.0},
                     name=name)


STOP_COMMAND = "joint states stopped: stop command"


def test_controller_stops_when_the_simulator_dies_and_resumes_with_a_new_one(tmp_path):
    control, sim, name = closed_loop(tmp_path, state_timeout=0.2)
    commands = control.commands
    control.statuses()  # subscribed from here on
    try:
        assert control.wait_for(lambda: len(commands) > 50, 20), control.output() + sim.output()
        stopped = control.output().count(STOP_COMMAND)
        sim.kill()
        killed = time.monotonic()
        assert control.wait_for(lambda: any(
            t > killed and s.level == DiagnosticStatus.ERROR and "stale" in s.message
            for t, s in control.statuses()), 10.0), [s.message for _, s in control.statuses()]
        # nothing is published without states but the one stop command (logged once sent; a
        # busy machine may hold the loop between its warning and it): the commands sent before
        # it may reach this busy process late; once they stopped arriving, none follows
        assert control.wait_for(lambda: control.output().count(STOP_COMMAND) > stopped, 10.0), \
            control.output()
        settled = control.peer.settle(commands, quiet=0.5, timeout=10.0)
        assert not control.wait_for(lambda: len(commands) > settled, 2.0), control.output()
        sim = arm_simulator(tmp_path, name)
        count = len(commands)
        assert control.wait_for(lambda: len(commands) > count + 50, 20), control.output()
        assert control.process.proc.poll() is None
    finally:  # (not the killed simulator)
        close_all(*[s for s in (sim, control) if s.process.proc.poll() is None],
                  sig=signal.SIGTERM)


def test_a_description_with_other_joints_mid_run_switches_whole(tmp_path):
    """Closed loop on the bundled arm; panda's description arrives mid-run: the node switches
    to panda as a whole (its states now lack panda's joints, so it publishes nothing and says
    so), and switching back resumes the loop. No command ever has another length."""
    control, sim, _ = closed_loop(tmp_path, state_timeout=0.5)
    commands = control.commands
    control.statuses()  # subscribed from here on

    def models() -> list[str]:
        return [kv.value for _, s in control.statuses() for kv in s.values if kv.key == "model"]

    arm_joints = len(load_model(DEFAULT_URDF).actuated_joint_names)
    try:
        assert control.wait_for(lambda: len(commands) > 100, 20), \
            control.output() + sim.output()
        control.describe(PANDA.read_text())
        assert control.wait_for(lambda: "panda" in models(), 5.0), control.output()
        assert control.wait_for_log("missing joints", 5.0), control.output()
        # what the node sent before the switch may reach this busy process late: once the
        # commands have stopped arriving (they never would at the loop's rate), none follows
        settled = control.peer.settle(commands, quiet=0.5, timeout=10.0)
        assert not control.wait_for(lambda: len(commands) > settled, 1.0), control.output()
        control.describe(DEFAULT_URDF.read_text())
        count = len(commands)
        assert control.wait_for(lambda: len(commands) > count + 50, 10), control.output()
        assert all(len(m.data) == arm_joints and np.all(np.isfinite(m.data))
                   for _, m in commands)
        assert control.process.proc.poll() is None and sim.process.proc.poll() is None
    finally:
        close_all(sim, control)
