# SPDX-License-Identifier: Apache-2.0
"""An idle control node on sim time stays idle while /clock runs.

rcl triggers the guard condition of a cancelled timer on a ROS-time clock at every /clock
message once the timer's due time has passed (rclpy's executor then finds nothing ready, and
says so: "workaround rcl issue with cancelled timers"). The FollowJointTrajectory server's
result-expiry timer is such a timer between goals: on the node's sim-time clock, from
``action_result_timeout`` of simulated time on, every simulated step woke the node's
executor for a pass over all its entities (~2 ms of Python each), a core's third at a 1 kHz
simulator with no goal at all. The server now times results on a steady clock of its own
(``trajectory_action.result_clock``), where rcl_action times them from the goal's end on
that clock (Jazzy on).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from builtin_interfaces.msg import Time
from ros_harness import control_node
from rosgraph_msgs.msg import Clock

from rb_dynamics import DEFAULT_URDF


def _thread_cpu(pid: int, tid: int) -> float:
    """CPU seconds (user + system) one thread of a process has used."""
    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.alone  # a CPU share: nothing else of the suite beside it
def test_an_idle_node_on_sim_time_is_not_woken_by_every_clock_message(tmp_path):
    """No goal, no states: /clock at ~1 kHz for 4 s of simulated time, past the 1 s
    ``action_result_timeout``; over the last 1.5 s the node's main thread (its executor) uses
    less than a tenth of a core (before: a third of one, all of it passes for nothing)."""
    session = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "use_sim_time": True,
                                      "action_result_timeout": 1.0})
    publisher = session.publisher(Clock, "/clock")
    stop, ticks = threading.Event(), [0]

    def tick() -> None:  # simulated time 1 ms per message, as fast as ~1 kHz
        while not stop.is_set():
            ticks[0] += 1
            publisher.publish(Clock(clock=Time(sec=ticks[0] // 1000,
                                               nanosec=ticks[0] % 1000 * 1_000_000)))
            time.sleep(0.001)

    try:
        assert session.wait_for_log("model '", timeout=60.0), session.output()
        clock = threading.Thread(target=tick, daemon=True)
        clock.start()
        # past the result timeout in simulated time, and the pid's main thread settled
        assert session.peer.wait_for(lambda: ticks[0] >= 2500, 60.0)
        pid = session.process.proc.pid
        cpu, start = _thread_cpu(pid, pid), time.monotonic()
        session.peer.spin_for(1.5)
        share = (_thread_cpu(pid, pid) - cpu) / (time.monotonic() - start)
        print(f"main thread: {share:.3f} of a core, {ticks[0]} clock messages")
        assert share < 0.1, (share, session.output()[-2000:])
    finally:
        stop.set()
        session.close()
