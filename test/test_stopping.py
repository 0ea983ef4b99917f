# SPDX-License-Identifier: Apache-2.0
"""A node whose callback never returns still ends within the 2 s the README promises after
SIGINT, and says where its threads were (``rb_dynamics.ros.runtime.run_node``'s watchdog):
with the interpreter free (a callback that sleeps: exit code 0) and with one C call holding the
interpreter, where no Python thread can run (faulthandler's thread ends it: exit code 1). The
code this was written against waited for that C call to return: minutes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ros_harness import STOP_LIMIT_S

STUCK_NODE = Path(__file__).with_name("stuck_node.py")


@pytest.mark.parametrize("how, code", [("sleep", 0), ("interpreter", 1)])
def test_a_node_stuck_in_a_callback_ends_within_2_s_of_sigint_saying_where(how, code):
    process = subprocess.Popen([sys.executable, str(STUCK_NODE), how], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "stuck", process.stderr.read()
        start = time.monotonic()
        process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=60.0)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 60 s after SIGINT ({how})")
        took = time.monotonic() - start
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    print(f"\nstuck ({how}): gone {took:.2f} s after SIGINT, exit code {process.returncode}")
    assert took < STOP_LIMIT_S, err
    assert process.returncode == code, err
    assert "in stick" in err, err  # the stuck callback's frame, named
