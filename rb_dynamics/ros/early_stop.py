# SPDX-License-Identifier: Apache-2.0
"""The start of the nodes' processes (``ros2 run rb_dynamics rb_dynamics_node`` /
``rb_simulator``, ``python -m rb_dynamics.ros.control_node`` / ``.simulator_node``: each node
package's ``run``): a stop signal that comes while the process is still importing (rclpy,
NumPy, the node: seconds on a busy machine) ends it at once with exit code 0, as one that comes
while the node runs does within ``runtime.STOP_DEADLINE_S`` (``runtime.run_node`` takes the
signals over).

Without it Python's default handler raises KeyboardInterrupt wherever the import is: a
traceback, an interpreter teardown of half-imported modules, and an exit "killed by SIGINT".
This module imports only the standard library, so that the handler is in place before the
heavy imports begin.
"""

from __future__ import annotations

import importlib
import os
import signal
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_attributes", "run_main", "stop_at_once_until_running"]


def _exit_at_once(_signum, _frame) -> None:
    os._exit(0)  # nothing is built yet: nothing to release


def stop_at_once_until_running() -> None:
    """SIGINT and SIGTERM end the process at once, exit code 0, until ``run_node`` takes
    them over."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_at_once)


def run_main(module: str) -> int:
    """The process of ``module``'s ``main`` (its exit code), imported once the stop signals
    are handled."""
    stop_at_once_until_running()
    return importlib.import_module(module).main()


def lazy_attributes(module: str, names: list[str]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` giving ``names`` from ``module``, imported when first used
    (never by ``run_main`` before the stop signals are handled)."""
    def attribute(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(module), name)
        raise AttributeError(f"module {module.rpartition('.')[0]!r} has no attribute {name!r}")
    return attribute
