# SPDX-License-Identifier: Apache-2.0
"""Running rclpy nodes: until SIGINT/SIGTERM within a bounded time, a thread per hot path,
a worker thread that keeps only the newest request, throttled warnings, the answer of a failed
service call, draining a subscription's queue, a lifecycle service that refuses an invalid
transition instead of raising, and what a node has built kept out of the cyclic collector's
full passes.

``rclpy.spin()`` can stay in the wait set after a signal; spinning once with a timeout in a
loop that checks a flag set by our own handlers always exits. The signal is seen at once, not
when the wait ends: Python runs a handler only when the main thread is back in the interpreter,
so a thread of its own reads the signal's byte from a wakeup fd (``signal.set_wakeup_fd``),
sets the flag and triggers a guard condition of the node, which ends the executor's wait
(rclpy's ``Executor.wake()`` does not: the executor rebuilds its wait set and waits on). The
wait can then be long (``SPIN_TIMEOUT_S``: a single-threaded executor's pass that finds nothing
to do still rebuilds its wait set from every entity of the node, milliseconds of Python for the
control node), except on rclpy's EventsExecutor, which serves no guard condition
(``UNWAKEABLE_SPIN_TIMEOUT_S``). A watchdog bounds the whole shutdown (``STOP_DEADLINE_S``):
a node whose callback is stuck still exits, and says where its threads were. After a clean
shutdown the process exits without tearing down the interpreter's heap (which the watchdog
cannot bound: it grows with the Python objects alive, the goals an action server keeps for its
clients among them).
"""

from __future__ import annotations

import atexit
import faulthandler
import gc
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.signals import SignalHandlerOptions
from rclpy.subscription import Subscription

from .rclpy_private import change_state_service, clock_subscription_on

STOP_DEADLINE_S = 1.2  # after a signal the process is gone within this (the README says 2 s)
SPIN_TIMEOUT_S = 1.0  # the main executor's longest wait when a stop ends it at once
# ... and on rclpy's EventsExecutor, which serves no guard condition to end it with: the stop
# flag is seen within this
UNWAKEABLE_SPIN_TIMEOUT_S = 0.05
LAST_RESORT_S = 0.3  # see _exit_after
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ThrottledLogger:
    """Logs a warning at most every ``period`` seconds per kind (``key``, else the text); the
    last text, logged or not, is kept for /diagnostics (``last``)."""

    def __init__(self, logger: Any, period: float = 2.0) -> None:
        self.logger, self.period = logger, period
        self.last = ""
        self._when: dict[str, float] = {}

    def __call__(self, text: str, key: str | None = None) -> None:
        key = key or text
        now = time.monotonic()
        if now - self._when.get(key, -math.inf) >= self.period:
            self._when[key] = now
            self.logger.warning(text)
        self.last = text


def failed_response(response: Any, exc: BaseException, logger: Any, service: str) -> Any:
    """``response`` answering success=false, for a service callback that caught ``exc``: the
    text of a ValueError (bad input, said to the caller) or KeyError (an unknown name) as the
    message; anything else is logged as an internal error of ``service`` and answered as such
    (a service answers, it never kills the node)."""
    if isinstance(exc, ValueError):
        response.success, response.message = False, str(exc)
    elif isinstance(exc, KeyError):
        response.success, response.message = False, str(exc.args[0] if exc.args else exc)
    else:
        logger.error(f"{service}: internal error: {exc!r}")
        response.success, response.message = False, f"internal error: {exc!r}"
    return response


def refuse_invalid_transitions(node: Node) -> None:
    """Make a lifecycle node's ``~/change_state`` answer success=false, with a warning naming the
    transitions it could take, for a transition its current state does not have.

    The rclpy of Jazzy's wheels raises RCLError ("Transition is not registered") out of the
    service callback instead, which ends the process: any client (not only ``ros2 lifecycle
    set``, which checks first) could stop the node. The state machine is unchanged when rcl
    refuses the transition, so answering "no" is all that is left to do. A node without the
    service (not a lifecycle node) is left as it is.
    """
    found = change_state_service(node)
    if found is None:
        return
    service, machine = found
    change_state = service.callback

    def refusing(request: Any, response: Any) -> Any:
        try:
            return change_state(request, response)
        except RuntimeError as exc:
            _, state = machine.current_state
            possible = ", ".join(f"{label} ({number})" for number, label, *_ in
                                 machine.available_transitions) or "none"
            node.get_logger().warning(
                f"change_state refused: transition {request.transition.id} "
                f"'{request.transition.label}' is not possible from {state} (possible: "
                f"{possible}): {exc}")
            response.success = False
            return response

    service.callback = refusing


def take_queued(subscription: Subscription, limit: int = 1000) -> Iterator[Any]:
    """The messages already queued on ``subscription``, oldest first, at most ``limit``.

    Taken directly: a take costs far less than an executor pass, so a callback that wants only
    the newest message (or all of them at once) drains the queue itself.
    """
    for msg, _info in take_queued_with_info(subscription, limit):
        yield msg


def take_queued_with_info(subscription: Subscription, limit: int = 1000
                          ) -> Iterator[tuple[Any, dict]]:
    """``take_queued``, each message with rclpy's message info (``source_timestamp``,
    ``received_timestamp``, ``publication_sequence_number``, ... as the distribution has)."""
    for _ in range(limit):
        with subscription.handle:
            taken = subscription.handle.take_message(subscription.msg_type, subscription.raw)
        if taken is None:
            return
        yield taken


def companion_node(node: Node, suffix: str, topics: tuple[str, ...] = ()) -> Node:
    """A node ``<node's name>_<suffix>`` in ``node``'s context and namespace, without
    parameters of its own (no parameter services, no global arguments) nor rosout. The
    ``topics`` it names as written are remapped to what ``node`` resolves them to (``node``'s
    remappings apply; the global arguments, which could rename it, do not)."""
    remaps = [arg for topic in topics
              for arg in ("-r", f"{topic}:={node.resolve_topic_name(topic)}")]
    return Node(f"{node.get_name()}_{suffix}", namespace=node.get_namespace(),
                context=node.context, use_global_arguments=False,
                cli_args=["--ros-args", *remaps] if remaps else None,
                start_parameter_services=False, enable_rosout=False)


def polled_node(node: Node, suffix: str) -> Node:
    """A ``companion_node`` that no executor waits on: its subscriptions are read with
    ``take_queued`` when their messages are due (say, at a simulation step), so a flood costs
    takes at that pace, never an executor pass per message. Give them ``not_spun`` as the
    callback; destroy it with ``node``."""
    return companion_node(node, suffix)


def not_spun(_msg: Any) -> None:
    """The callback of a subscription of a ``polled_node`` (rclpy wants one)."""


LISTENER_RECHECK_S = 0.1  # how often a ListenedPublisher asks how many subscribe


class ListenedPublisher:
    """A publisher for what goes out per state that skips messages nobody subscribes to.

    ``listened()`` says whether a message would reach anyone: the number of matched
    subscriptions, asked again at most every ``LISTENER_RECHECK_S`` (a subscriber that appears
    gets its first message within that; the topic is volatile: it would have missed the ones
    before anyway). Filling and publishing a message for nobody costs the loop as much as for
    a listener (rclpy converts it to C and hands it to the middleware either way)."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self._count, self._asked = 0, -math.inf

    def listened(self) -> bool:
        now = time.monotonic()
        if now - self._asked >= LISTENER_RECHECK_S:
            self._asked, self._count = now, self.publisher.get_subscription_count()
        return self._count > 0

    def publish(self, msg: Any) -> None:
        """``msg`` to the subscribers, if there are any."""
        if self.listened():
            self.publisher.publish(msg)


class SpinThread:
    """Spin ``node`` on an executor of its own, in a daemon thread, until ``stop()``.

    An rclpy executor pass costs more the more entities it waits on (services, parameter
    services, timers): a node that must answer fast keeps its hot path in a small node spun
    here, so that it never waits behind, nor pays for, the big node's entities.
    """

    def __init__(self, node: Node, name: str, events: bool = False) -> None:
        self.node = node
        self._executor = node_executor(events, node.context)
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

    def stop(self, destroy: bool = True) -> None:
        """Stop spinning (within one wait), then destroy the node (unless not ``destroy``)."""
        atexit.unregister(self._halt)
        self._halt()
        self._executor.remove_node(self.node)
        if destroy:
            self.node.destroy_node()


class ClockReader:
    """``node``'s /clock subscription (``use_sim_time``) on a ``companion_node`` spun on a
    thread of its own: a simulator publishes /clock at every step, and each message would
    otherwise be a pass of ``node``'s executor over all its entities. ``node``'s clock,
    timers and ``use_sim_time`` parameter behave as before (``rclpy_private``); where rclpy
    keeps its time source elsewhere, nothing changes."""

    def __init__(self, node: Node) -> None:
        holder = companion_node(node, "clock", topics=("/clock",))
        self._spin: SpinThread | None = None
        if clock_subscription_on(node, holder):
            self._spin = SpinThread(holder, "clock", events=True)
        else:
            holder.destroy_node()

    def stop(self) -> None:
        if self._spin is not None:
            self._spin.stop()
            self._spin = None


class LatestOnlyWorker:
    """Runs ``work(*args)`` on a thread of its own, one request at a time: a request that
    arrives while an older one waits replaces it (a burst of descriptions builds one model).
    ``stop`` ends the thread after the request being worked on, if any."""

    def __init__(self, work: Callable[..., None], name: str) -> None:
        self._work = work
        self._wake = threading.Condition()
        self._pending: tuple | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, *args) -> None:
        with self._wake:
            self._pending = args
            self._wake.notify()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._pending is not None or self._stopping)
                if self._stopping:
                    return
                args, self._pending = self._pending, None
            self._work(*args)


# The cyclic collector's full passes run on the node's executor thread between callbacks, every
# FULL_PASS_PERIOD s, and never because objects were allocated. Why: rclpy builds a large
# message as hundreds of thousands of young objects, none of them garbage, and a full pass
# triggered meanwhile walks all of them holding the interpreter while the control loop's thread
# waits; between callbacks no message is alive (large ones are released, release_gradually).
# The passes over the young generations, which walk a bounded number of objects, still run on
# allocation.
FULL_PASS_PERIOD = 10.0  # s
_NO_FULL_PASS_ON_ALLOCATION = 1 << 30  # middle-generation passes before a full one: never


def collect_on_schedule() -> None:
    """Set the cyclic garbage collector as the nodes run it: no full pass on allocation
    (``run_node`` runs one every ``FULL_PASS_PERIOD`` s between callbacks)."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, _NO_FULL_PASS_ON_ALLOCATION)


def freeze_long_lived() -> None:
    """Move every object alive now out of the cyclic garbage collector's reach (``gc.freeze``):
    its full passes then walk only the objects made since. Call once a node has built what it
    keeps (its entities, a model, compiled kernels).

    Why: a full pass holds the interpreter for as long as it walks every tracked object, a time
    that grows with the heap, and a large message triggers one (rclpy builds a 10,000-point goal
    as ~60,000 objects): the control loop's thread would wait it out. Frozen objects are still
    freed by reference counting when no longer used; only reference cycles among them would be
    kept, and what a node builds to keep has none that it drops.
    """
    gc.freeze()


# How many objects one ``del`` may free: freeing is one call into the interpreter that no other
# thread can interrupt, and a point of a trajectory message is several objects.
RELEASE_SLICE = 1000


def release_gradually(items: list) -> None:
    """Empty ``items`` (a message's list field, in place) a slice at a time.

    Why: dropping a large message frees all its objects in one uninterruptible call, which holds
    the interpreter for as long as that takes (a 100,000-point trajectory: tens of milliseconds)
    while the control loop's thread waits; between slices the interpreter can switch threads.
    """
    while items:
        del items[-RELEASE_SLICE:]


def _arm_last_resort(deadline: float) -> None:
    """faulthandler's own thread, which needs no interpreter, dumps every thread's stack and
    ends the process (exit code 1) ``deadline`` s from now, unless it has ended: the backstop
    of ``_exit_after``, which a thread holding the interpreter for good keeps from running.
    Armed by the code that asks for the stop, which holds the interpreter at that moment."""
    try:
        faulthandler.dump_traceback_later(deadline, exit=True)
    except (RuntimeError, ValueError, AttributeError):  # no stderr to write to
        pass


def dump_stacks_on(sig: int = signal.SIGUSR1) -> None:
    """``kill -USR1 <pid>`` prints every thread's stack on stderr, whatever holds the
    interpreter (faulthandler's C handler): what a process that does not stop is doing."""
    try:
        faulthandler.register(sig, all_threads=True)
    except (RuntimeError, ValueError, AttributeError):  # no stderr to write to
        pass


def _exit_after(deadline: float, name: str) -> None:
    """Watchdog: the process exits ``deadline`` s after a stop was asked, whatever runs, and
    says where each thread was (``_arm_last_resort`` backs it up)."""
    time.sleep(deadline)
    try:
        sys.stderr.write(f"[{name}] the shutdown did not end within {deadline} s of the stop "
                         "signal: exiting anyway; the threads were at:\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(all_threads=True)
    except (OSError, RuntimeError, ValueError, AttributeError):
        pass
    os._exit(0)


def _watch_signals(fd: int, on_stop: Callable[[], None]) -> None:
    """(A thread) ``on_stop()`` as soon as a stop signal's number arrives on ``fd``, the
    wakeup fd the interpreter writes to when a signal with a Python handler comes in."""
    while True:
        try:
            numbers = os.read(fd, 64)
        except OSError:
            return
        if not numbers:
            return
        if any(number in STOP_SIGNALS for number in numbers):
            on_stop()


def thread_states(pid: int) -> str:
    """Each thread of ``pid``: its name, its scheduler state (R, S, D: uninterruptible, Z...)
    and the kernel function it waits in, from /proc (what keeps a process from ending when
    its own code has asked to exit)."""
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            name = (task / "comm").read_text().strip()
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = (task / "wchan").read_text().strip()
        except OSError:
            continue
        lines.append(f"thread {task.name} {name!r}: state {state}, waiting in {wchan or '-'}")
    return "\n".join(lines) or "no threads left (the process is ending)"


def _exit_now(code: int) -> None:
    """End the process with ``code`` once its output is out, skipping the interpreter's
    teardown (everything that needs closing is closed)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing to keep
            pass
    try:  # the C streams too: rcutils writes the log lines there
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass
    os._exit(code)


def events_executor_available() -> bool:
    """Whether this distribution's rclpy has the EventsExecutor (Jazzy ≥ 7.1.4, Kilted; not
    Humble)."""
    try:
        from rclpy.experimental import EventsExecutor  # noqa: F401
    except ImportError:
        return False
    return True


def node_executor(events: bool, context: Context | None = None) -> Executor:
    """An executor for one node: rclpy's EventsExecutor when ``events`` and the distribution
    has it, else the SingleThreadedExecutor. The single-threaded one rebuilds its wait set
    from every entity of its nodes at each pass (services, parameter services, QoS event
    handlers, timers: milliseconds of Python for a node of this package), the events one
    dispatches each event alone. Give ``events`` only to a node without guard conditions: the
    EventsExecutor never serves them (the control node hands work to its executor by them)."""
    if events and events_executor_available():
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=context)
    return SingleThreadedExecutor(context=context)


def run_node(factory: Callable[..., Node], args: list[str] | None = None,
             name: str = "rb_dynamics", events: bool = False) -> int:
    """Create the node, spin it until a signal, shut down cleanly, and end the process with an
    exit code (it returns only when an unexpected exception ends it, raising it): 1 when the
    node cannot be built or its environment breaks (logged as fatal under the node's name, or
    ``name`` when there is no node yet), else 0. ``events``: see ``node_executor``."""
    rclpy.init(args=sys.argv if args is None else args,
               signal_handler_options=SignalHandlerOptions.NO)
    stop, once = threading.Event(), threading.RLock()  # (a second signal may interrupt it)
    node = executor = None
    wake: list[Callable[[], None]] = []  # what ends the executor's current wait, once there is one

    def request_stop() -> None:
        with once:
            if stop.is_set():
                return
            stop.set()
        _arm_last_resort(STOP_DEADLINE_S + LAST_RESORT_S)
        threading.Thread(target=_exit_after, args=(STOP_DEADLINE_S, label()),
                         daemon=True).start()
        for end_wait in wake:
            end_wait()

    dump_stacks_on(signal.SIGUSR1)
    previous = {sig: signal.signal(sig, lambda _signum, _frame: request_stop())
                for sig in STOP_SIGNALS}
    reader, writer = os.pipe()
    os.set_blocking(writer, False)
    previous_fd = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    threading.Thread(target=_watch_signals, args=(reader, request_stop), name="signals",
                     daemon=True).start()

    def label() -> str:
        return node.get_name() if node is not None else name

    code = 0
    try:
        node = factory()
        collect_on_schedule()
        freeze_long_lived()
        executor = node_executor(events)
        executor.add_node(node)
        spin_timeout = UNWAKEABLE_SPIN_TIMEOUT_S
        if isinstance(executor, SingleThreadedExecutor):
            # its wake() only has it rebuild its wait set and wait on: a callback to run is
            # what ends spin_once
            wake.append(node.create_guard_condition(lambda: None).trigger)
            spin_timeout = SPIN_TIMEOUT_S
        full_pass_due = time.monotonic() + FULL_PASS_PERIOD
        while not stop.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=spin_timeout)
            if time.monotonic() >= full_pass_due:  # between callbacks: see FULL_PASS_PERIOD
                gc.collect()
                full_pass_due = time.monotonic() + FULL_PASS_PERIOD
    except (ValueError, RuntimeError, OSError) as exc:
        rclpy.logging.get_logger(label()).fatal(f"cannot run: {exc}")
        code = 1
    finally:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(previous_fd)
    _exit_now(code)
    return code
