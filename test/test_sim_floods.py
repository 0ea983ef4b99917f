# SPDX-License-Identifier: Apache-2.0
"""The simulator under a flood on one of its input topics (a runaway controller on
``~/commands``, a force-sensor driver gone wild on ``~/external_wrench``): a peer process
publishes as fast as it can (test/flood.py) while the test counts the joint_states the
simulator publishes, by their stamps.

The baseline is the same peer flooding a topic nobody reads: the flooding process takes a core
whichever topic it floods, and on a busy machine that alone slows the simulator. What the
flood may cost beyond it is the simulator's reading: inputs are taken newest-first at the
steps (commands free-running, wrenches always) or drained behind each callback (lock-step
commands: every command is a step), never an executor pass per message. A wrench publisher
beyond ``external_wrench_max_rate`` is not listened to for a while (the middleware would still
carry its every message into the simulator's process): the simulator keeps the baseline's pace,
and listens again once the flood is over.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from geometry_msgs.msg import WrenchStamped
from ros_harness import Session
from sensor_msgs.msg import JointState

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.ros.flood_guard import MAX_QUIET_S

FLOOD_S = 3.0  # seconds of each flood
RATE = 250.0  # joint_states/s the simulator is asked for
FLOODS = {"commands": ("/rb_simulator/commands", "efforts:6"),
          "wrench": ("/rb_simulator/external_wrench", "wrench:wrist_3_link")}


@pytest.mark.alone  # against a baseline of this run: no other test beside it
@pytest.mark.parametrize("lockstep", [False, True], ids=["free-running", "lock-step"])
@pytest.mark.parametrize("flooded", list(FLOODS))
def test_a_flood_costs_the_simulator_little_beyond_the_flooding_process(tmp_path, flooded,
                                                                       lockstep):
    """joint_states keep (free-running) their rate, or (lock-step) at least it: every
    command is a step. A simulator that handles every command in an executor pass falls to a
    few states a second (2 % of the rate)."""
    topic, kind = FLOODS[flooded]
    sim = Session("rb_dynamics.ros.simulator_node", tmp_path, {
        "urdf_path": str(DEFAULT_URDF), "publish_rate": RATE, "lockstep": lockstep,
        "lockstep_timeout": 0.1})
    peer = sim.peer
    stamps: list[float] = []  # when the simulator published each state (the system clock)
    peer.node.create_subscription(
        JointState, "joint_states",
        lambda m: stamps.append(m.header.stamp.sec + m.header.stamp.nanosec * 1e-9), 1000)

    def flood(target: str, *unheard: str) -> tuple[float, float, str]:
        """States per second while a peer floods ``target``, the simulator's CPU seconds per
        second meanwhile (all its threads: the middleware's too); what the peer says it sent."""
        process = subprocess.Popen([sys.executable, str(Path(__file__).with_name("flood.py")),
                                    target, str(FLOOD_S), kind, *unheard],
                                   stdout=subprocess.PIPE, text=True)
        try:
            assert process.stdout.readline().strip() == "flooding"
            start, cpu = time.time(), cpu_seconds(sim.process.proc.pid)
            peer.wait_for(lambda: process.poll() is not None, 30)
            end, cpu = time.time(), cpu_seconds(sim.process.proc.pid) - cpu
            sent = process.stdout.read().strip()
        finally:
            if process.poll() is None:
                process.kill()
        # the states published during the flood, still in flight, are in
        peer.wait_for(lambda: stamps and stamps[-1] > end + 0.2, 10.0)
        return sum(start <= t < end for t in stamps) / (end - start), cpu / (end - start), sent

    try:
        # the generated kernels are in (a fresh cache per session: they are being compiled)
        assert peer.wait_for(lambda: "dynamics for the steps" in sim.output(), 60), sim.output()
        assert peer.wait_for(lambda: len(stamps) > 10, 10), sim.output()
        baseline, baseline_cpu, _ = flood("/rb_flood_unheard", "unheard")
        during, during_cpu, sent = flood(topic)
        if flooded == "wrench":
            heard_again = wrench_heard_again(sim)
        output = sim.output()
    finally:
        sim.close()
    print(f"\n{'lock-step' if lockstep else 'free-running'} simulator, {topic} flood ({sent}): "
          f"joint_states {during:.0f}/s, simulator CPU {during_cpu:.2f} s/s; {baseline:.0f}/s "
          f"and {baseline_cpu:.2f} s/s with an unheard flood")
    assert "Traceback" not in output, output
    if flooded == "commands":
        # what remains is the middleware receiving the flood in the simulator's process (its
        # threads, not its executor): 63-72 % of the baseline's states on a quiet machine,
        # 32-80 % with both cores kept busy by others (25 % once, beside two other suites); the
        # load varies between the windows, hence the margin: a simulator the flood stops fails
        assert during > 0.15 * min(baseline, RATE), (baseline, during)
        return
    assert f"{topic} comes at" in output and "not read for 1 s" in output, output
    # what is left of the flood's cost: the topic listened to for ~0.1 s at each re-opening
    # (3 in the flood). The simulator's CPU: 1.6-1.9x the baseline's (0.16-0.19 against
    # 0.09-0.12 s/s, idle and with both cores kept busy); listening throughout (the code before
    # the guard), 4.5x (0.49-0.52 s/s, idle: half a core for the middleware's receiving)
    assert during_cpu < WRENCH_FLOOD_CPU * baseline_cpu, (baseline_cpu, during_cpu)
    assert during > WRENCH_FLOOD_SHARE * min(baseline, RATE), (baseline, during)
    assert heard_again, output


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system, all threads) of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


WRENCH_FLOOD_SHARE = 0.6  # of the baseline's states the simulator keeps under a wrench flood
WRENCH_FLOOD_CPU = 2.5  # times the baseline's CPU the simulator may use under a wrench flood


def wrench_heard_again(sim: Session) -> bool:
    """Whether, once a flood is over, the simulator hears ~/external_wrench again (within the
    longest quiet time a flood can earn, and then some): the flood's own push (1 N) still acts,
    each state comes with its true efforts, until a message that ends it is heard (one more,
    zero, then none)."""
    truth = sim.received(JointState, "~/true_external_efforts")
    publisher = sim.publisher(WrenchStamped, "~/external_wrench")

    def ended() -> bool:
        publisher.publish(WrenchStamped())  # (again: a reader that came back missed it)
        return bool(truth) and not any(truth[-1][1].effort)

    return sim.peer.wait_for(ended, MAX_QUIET_S + 10.0)
