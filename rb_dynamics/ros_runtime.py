"""Running an rclpy node until SIGINT/SIGTERM, without ``rclpy.spin``'s occasional signal hang.

``rclpy.spin()`` sometimes sits in the wait set after a signal (shared/notes/ros2-from-pypi.md);
spinning once with a timeout in a loop that checks a flag set by our own handlers always exits.
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from rclpy.subscription import Subscription


def take_queued(subscription: Subscription, limit: int = 1000) -> Iterator[Any]:
    """The messages already queued on ``subscription``, oldest first, at most ``limit``.

    Taken directly: one executor pass costs ~0.1 ms of CPU here, a take ~2 µs, so a callback
    that wants only the newest message (or all of them at once) drains the queue itself.
    """
    for _ in range(limit):
        with subscription.handle:
            taken = subscription.handle.take_message(subscription.msg_type, subscription.raw)
        if taken is None:
            return
        yield taken[0]


class SpinThread:
    """Spin ``node`` on an executor of its own, in a daemon thread, until ``stop()``.

    An rclpy executor pass costs more the more entities it waits on (services, parameter
    services, timers): a node that must answer fast keeps its hot path in a small node spun
    here, so that it never waits behind, nor pays for, the big node's entities.
    """

    def __init__(self, node: Node, name: str) -> None:
        self.node = node
        self._executor = SingleThreadedExecutor(context=node.context)
        self._executor.add_node(node)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._spin, name=name, daemon=True)
        self._thread.start()
        # a process that exits without stop() must not end while the thread is in rcl_wait
        atexit.register(self._halt)

    def _spin(self) -> None:
        while not self._stopping.is_set() and self.node.context.ok():
            try:
                self._executor.spin_once(timeout_sec=0.05)
            except ExternalShutdownException:
                return
            except Exception:  # a bug in one callback must not silently end the loop
                self.node.get_logger().error(
                    f"callback failed; still spinning:\n{traceback.format_exc()}",
                    throttle_duration_sec=2.0)

    def _halt(self) -> None:
        self._stopping.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def stop(self) -> None:
        """Stop spinning (within one wait), then destroy the node."""
        atexit.unregister(self._halt)
        self._halt()
        self._executor.remove_node(self.node)
        self.node.destroy_node()


def run_node(factory: Callable[..., Node], args: list[str] | None = None) -> int:
    """Create the node, spin it until a signal, shut down cleanly. Returns an exit code."""
    rclpy.init(args=sys.argv if args is None else args,
               signal_handler_options=SignalHandlerOptions.NO)
    stop = {"requested": False}

    def request_stop(_signum, _frame):
        stop["requested"] = True

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    node = None
    code = 0
    try:
        node = factory()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        while not stop["requested"] and rclpy.ok():
            executor.spin_once(timeout_sec=0.05)
    except (ValueError, RuntimeError, OSError) as exc:
        name = node.get_name() if node is not None else "rb_dynamics"
        rclpy.logging.get_logger(name).fatal(f"cannot run: {exc}")
        code = 1
    finally:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code
