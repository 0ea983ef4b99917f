# SPDX-License-Identifier: Apache-2.0
"""Real processes on real DDS (loopback, a random domain): start nodes, talk to them, stop them.

``Session`` is the one way the tests meet a node they start: the node in its own process
(``NodeProcess``) and the test's own rclpy node (``Peer``) with publishers, subscriptions and
clients made on first use by name, the parameter calls, the state → command exchange of a
controller, the node's own diagnostics, and ``close`` that asserts the node stops cleanly within
``STOP_LIMIT_S`` of SIGINT. ``control_node`` and ``simulator`` start the package's two nodes
under names of their own. Nodes that work together (a simulator and its controller) share one
peer (``peer=``), so one wait sees both; a node kept for a whole module is ``shared`` (its
fixture closes it, not the end of the test that happened to start it). ``refused_start`` runs a
node that must refuse its configuration at start. Nodes the tests do not start themselves
(``ros2 launch`` starts them) are met by a bare ``Peer``.

Waits are on events (a message, a log line, an answer, a list that stops growing); where a test
shows that something does NOT happen it waits, bounded, for that very event:
``assert not session.wait_for(lambda: <it happened>, t)``.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParametersAtomically
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String

from rb_dynamics.ros.environment import keep_local
from rb_dynamics.ros.runtime import thread_states

keep_local(os.environ)  # conftest has set them for pytest; this is for other users of the harness
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="rb_dynamics_ros_log_"))


def write_params(directory: Path, node_name: str, params: dict) -> Path:
    """A ROS 2 parameter file (YAML; JSON is valid YAML)."""
    path = directory / f"{node_name}_params.yaml"
    path.write_text(json.dumps({node_name: {"ros__parameters": params}}))
    return path


STOP_LIMIT_S = 2.0  # the README promises a stop within 2 s of SIGINT/SIGTERM
SLOW_STOP_S = 1.5  # a node not gone this long after the signal has its threads' states taken
# how robot_state_publisher offers /robot_description: the last one, to late joiners too
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                     reliability=ReliabilityPolicy.RELIABLE)
_serial = itertools.count()
_open: list[Session] = []  # sessions not closed yet, oldest first


def own_name(module: str) -> str:
    """The name a node of this package gives itself (``NODE_NAME`` of the module that makes the
    node: ``module`` itself, or its ``node`` module when ``module`` is a node's package)."""
    found = importlib.import_module(module)
    if not hasattr(found, "NODE_NAME"):
        found = importlib.import_module(f"{module}.node")
    return found.NODE_NAME


def fresh_name(base: str) -> str:
    """A node name no other node of this test session has (no answers from an earlier test's
    node, nor from its lingering discovery data)."""
    return f"{base}_{next(_serial)}"


IN_FLIGHT_S = 0.1  # answers to messages sent this long before are taken to have arrived
RESEND_S = 5.0  # a service request unanswered this long is sent again (Peer.call)


def answer_after(peer: Peer, send: Callable[[], None], answers: list, timeout: float = 5.0):
    """Send the same message every 20 ms until answers come, and on for ``IN_FLIGHT_S`` after
    the first; the last answer is returned (None on timeout).

    Every message sent is the same, and DDS keeps one writer's order, so the answers to
    messages still in flight arrive first and the last one is this message's. The sending goes
    on while they arrive: a node that stops hearing states sends its ``stop_command`` after
    ``state_timeout``, which would otherwise be taken for the answer.
    """
    before = len(answers)
    deadline = time.monotonic() + timeout
    first = None
    while time.monotonic() < deadline:
        send()
        peer.spin_for(0.02)
        now = time.monotonic()
        if first is None and len(answers) > before:
            first = now
        if first is not None and now - first >= IN_FLIGHT_S:
            return answers[-1]
    return None


class NodeProcess:
    """A node of this package in its own process, stopped by SIGINT then SIGKILL."""

    def __init__(self, module: str, params_file: Path | None = None, *extra: str,
                 prelude: str = "", env: dict[str, str] | None = None):
        # ``prelude``: Python run first in the child (say, hiding a package it could import);
        # ``env``: the child's whole environment (default: this process's)
        launcher = ["-c", f"{prelude}\nimport runpy\nrunpy.run_module({module!r}, "
                    "run_name='__main__', alter_sys=True)"] if prelude else ["-m", module]
        cmd = [sys.executable, *launcher, "--ros-args"]
        if params_file is not None:
            cmd += ["--params-file", str(params_file)]
        cmd += list(extra)
        # the log file must outlive this constructor: it is the child process's stdout
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix=module.replace(".", "_"), suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self, timeout: float = 5.0, sig: int = signal.SIGINT) -> float:
        """``sig``, wait; if it hangs, SIGUSR1 (a node of this package prints its threads'
        stacks) and SIGKILL. Returns the seconds the shutdown took."""
        start = time.monotonic()
        self.threads_when_slow = ""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                try:
                    self.proc.wait(SLOW_STOP_S)
                except subprocess.TimeoutExpired:  # what its threads are doing, for the report
                    self.threads_when_slow = thread_states(self.proc.pid)
                    self.proc.wait(max(timeout - SLOW_STOP_S, 0.0))
            except subprocess.TimeoutExpired:
                took = time.monotonic() - start
                self.proc.send_signal(signal.SIGUSR1)  # a node prints its threads' stacks
                try:
                    self.proc.wait(0.5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                return took
        return time.monotonic() - start


class Peer:
    """The test's own rclpy node, spun by hand while waiting for a condition."""

    def __init__(self, name: str = "test_peer"):
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._called: set[int] = set()
        self.users = 1  # the sessions talking through this peer; the last one closes it

    def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            self.executor.spin_once(timeout_sec=0.02)
        return condition()

    def run_sim_time(self, now: Callable[[], float], seconds: float, stall: float = 60.0,
                     logs: Callable[[], str] = str) -> None:
        """Spin until ``seconds`` of simulated time have passed (``now()``: the newest
        simulated instant seen), however slowly this machine runs the loop; fails (with
        ``logs()``) when simulated time makes no progress for ``stall`` s of wall time."""
        until = now() + seconds
        progress, moved = now(), time.monotonic()
        while now() < until:
            if now() > progress:
                progress, moved = now(), time.monotonic()
            assert time.monotonic() - moved < stall, "the loop stalled:\n" + logs()
            self.executor.spin_once(timeout_sec=0.01)

    def spin_for(self, seconds: float) -> None:
        """Spin for ``seconds``, handling whatever arrives."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.executor.spin_once(timeout_sec=min(left, 0.02))

    def settle(self, growing: list, quiet: float = 0.1, timeout: float = 5.0) -> int:
        """Spin until ``growing`` has not grown for ``quiet`` seconds (what was in flight has
        arrived); its length then."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            size = len(growing)
            if not self.wait_for(lambda size=size: len(growing) > size, quiet):
                break
        return len(growing)

    def ready(self, client, timeout: float = 10.0) -> None:
        """Wait until ``client`` can be called. wait_for_service only says the server hears
        requests; its response writer may not have matched this client's reader yet, and a
        response sent then is lost (DDS discovery is per endpoint). So the first call of each
        client waits a moment after discovery (the only fixed wait of the harness)."""
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"service {client.srv_name} not available")
        if id(client) not in self._called:
            self._called.add(id(client))
            discovery = time.monotonic() + 0.3
            self.wait_for(lambda: time.monotonic() > discovery, 0.3)

    def call(self, client, request, timeout: float = 10.0):
        """Call and wait for the answer (``ready`` first). A request unanswered for
        ``RESEND_S`` is sent again until ``timeout``, and any answer counts: a response the
        server sends before its writer has matched this client's reader is lost, and under
        load that match can take seconds (every service here is a pure function of its
        request)."""
        self.ready(client, timeout)
        deadline = time.monotonic() + timeout
        futures = [client.call_async(request)]
        while True:
            left = deadline - time.monotonic()
            if self.wait_for(lambda: any(f.done() for f in futures), min(RESEND_S, left)):
                return next(f for f in futures if f.done()).result()
            if left <= RESEND_S:
                raise TimeoutError(f"service {client.srv_name} did not answer "
                                   f"{len(futures)} requests in {timeout:.0f} s")
            futures.append(client.call_async(request))

    def close(self) -> None:
        self.users -= 1
        if self.users > 0:
            return
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def parameter_value(value: Any) -> ParameterValue:
    """A Python value as the typed ParameterValue a node is sent (numbers in a list: double[])."""
    pv = ParameterValue()
    if isinstance(value, str):
        pv.type, pv.string_value = ParameterType.PARAMETER_STRING, value
    elif isinstance(value, bool):
        pv.type, pv.bool_value = ParameterType.PARAMETER_BOOL, value
    elif isinstance(value, int):
        pv.type, pv.integer_value = ParameterType.PARAMETER_INTEGER, value
    elif isinstance(value, float):
        pv.type, pv.double_value = ParameterType.PARAMETER_DOUBLE, value
    elif all(isinstance(x, str) for x in value):
        pv.type, pv.string_array_value = ParameterType.PARAMETER_STRING_ARRAY, list(value)
    else:
        pv.type = ParameterType.PARAMETER_DOUBLE_ARRAY
        pv.double_array_value = [float(x) for x in value]
    return pv


class Stream:
    """A driver publishing the same joint state every ``period`` s on the peer's executor (it
    runs while the test waits); ``sent`` counts the states, ``stop`` ends it."""

    def __init__(self, session: Session, names, q, period: float) -> None:
        self.sent = 0
        msg = JointState(name=list(names), position=[float(x) for x in q],
                         velocity=[0.0] * len(q))
        publisher = session.publisher(JointState, session.states_topic, session.state_qos)

        def publish() -> None:
            publisher.publish(msg)
            self.sent += 1

        self.peer = session.peer
        self.timer = session.peer.node.create_timer(period, publish)

    def stop(self) -> None:
        self.peer.node.destroy_timer(self.timer)


class Session:
    """A node of this package in its own process and the test's peer wired to it.

    ``module`` runs with ``params`` (a dict written to a file in ``directory``, or a parameter
    file as it is) under the name ``name`` (``-r __node:=name``, so that the nodes of different
    tests never answer each other; by default the node's own, ``own_name``). Topics and services
    relative to the node (``~/x``) are spelled ``name/x`` here. A controller hears joint states
    on ``states_topic`` (with ``state_qos``) and sends efforts on ``commands_topic``.
    ``peer``: another session's peer to talk through (one executor for nodes that work
    together); ``shared``: the session outlives the test that started it (a module's fixture
    closes it); ``env``: the node process's environment (default: this process's).
    """

    def __init__(self, module: str, directory: Path, params: dict | Path | None = None,
                 *extra: str, name: str | None = None, state_qos: Any = 10,
                 states_topic: str = "joint_states",
                 commands_topic: str = "~/effort_commands", prelude: str = "",
                 peer: Peer | None = None, shared: bool = False,
                 env: dict[str, str] | None = None) -> None:
        self.name = name or own_name(module)
        args = [*extra] + (["-r", f"__node:={name}"] if name else [])
        params_file = (write_params(directory, self.name, params) if isinstance(params, dict)
                       else params)
        self.process = NodeProcess(module, params_file, *args, prelude=prelude, env=env)
        if peer is None:
            peer = Peer(f"{self.name}_test_peer")
        else:
            peer.users += 1
        self.peer, self.shared = peer, shared
        self._publishers: dict[str, Any] = {}
        self._received: dict[str, list] = {}
        self._subscriptions: dict[str, Any] = {}
        self._clients: dict[str, Any] = {}
        self.state_qos, self.states_topic = state_qos, states_topic
        self.commands_topic = commands_topic
        _open.append(self)

    # -- topics and services, made on first use --------------------------------------

    def topic(self, name: str) -> str:
        return name.replace("~", self.name, 1) if name.startswith("~") else name

    def publisher(self, msg_type: Any, topic: str, qos: Any = 10) -> Any:
        topic = self.topic(topic)
        if topic not in self._publishers:
            self._publishers[topic] = self.peer.node.create_publisher(msg_type, topic, qos)
        return self._publishers[topic]

    def received(self, msg_type: Any, topic: str, qos: Any = 100) -> list:
        """Every message received on ``topic`` since the first call, as (monotonic time, msg)."""
        topic = self.topic(topic)
        if topic not in self._received:
            messages: list = []
            self._received[topic] = messages
            self._subscriptions[topic] = self.peer.node.create_subscription(
                msg_type, topic, lambda m: messages.append((time.monotonic(), m)), qos)
        return self._received[topic]

    def matched(self, topic: str) -> bool:
        """Whether a writer on ``topic`` is matched to this peer's reader (made by
        ``received``); where rclpy cannot say (Humble), whether one is in the graph."""
        topic = self.topic(topic)
        count = getattr(self._subscriptions[topic], "get_publisher_count", None)
        return (count() if count else self.peer.node.count_publishers(topic)) > 0

    def client(self, srv_type: Any, service: str) -> Any:
        service = self.topic(service)
        if service not in self._clients:
            self._clients[service] = self.peer.node.create_client(srv_type, service)
        return self._clients[service]

    def call(self, srv_type: Any, service: str, request: Any, timeout: float = 15.0) -> Any:
        try:
            return self.peer.call(self.client(srv_type, service), request, timeout)
        except TimeoutError as error:
            raise TimeoutError(f"{error}\n{self.output()}") from None

    def call_async(self, srv_type: Any, service: str, request: Any,
                   timeout: float = 15.0) -> Any:
        """Send the request once the service can answer (``Peer.ready``); the future."""
        client = self.client(srv_type, service)
        self.peer.ready(client, timeout)
        return client.call_async(request)

    def publish_matched(self, msg_type: Any, topic: str, msg: Any, qos: Any = 10) -> None:
        """Publish once the node's subscription is matched (a message sent earlier is lost)."""
        publisher = self.publisher(msg_type, topic, qos)
        assert self.wait_for(lambda: publisher.get_subscription_count() > 0, 10.0), \
            f"nobody subscribes to {self.topic(topic)}\n{self.output()}"
        publisher.publish(msg)

    def describe(self, xml: str) -> None:
        """Publish a description on /robot_description as robot_state_publisher does."""
        self.publish_matched(String, "/robot_description", String(data=xml), LATCHED)

    def set_parameters(self, **values: Any) -> Any:
        """All at once (SetParametersAtomically); the rcl_interfaces SetParametersResult."""
        request = SetParametersAtomically.Request(parameters=[
            ParameterMsg(name=name, value=parameter_value(value))
            for name, value in values.items()])
        return self.call(SetParametersAtomically, "~/set_parameters_atomically", request).result

    def statuses(self) -> list[tuple[float, DiagnosticStatus]]:
        """This node's statuses on /diagnostics since the first call, as (time, status)."""
        return [(t, s) for t, array in self.received(DiagnosticArray, "/diagnostics")
                for s in array.status if s.hardware_id == self.name]

    # -- a controller: joint states in, effort commands out ---------------------------

    @property
    def commands(self) -> list:
        return self.received(Float64MultiArray, self.commands_topic)

    def send_state(self, names, q, v=None, stamp_ns: int = 0, topic: str | None = None) -> None:
        """A joint state; ``v`` None: at rest (zero velocities, given: a state without them
        is refused by default)."""
        msg = JointState(name=list(names), position=[float(x) for x in q],
                         velocity=[0.0] * len(q) if v is None else [float(x) for x in v])
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        self.publish_state(msg, topic)

    def publish_state(self, msg: JointState, topic: str | None = None) -> None:
        """On ``topic``, or where the controller hears joint states."""
        self.publisher(JointState, topic or self.states_topic, self.state_qos).publish(msg)

    def command_after(self, names, q, v=None, timeout: float = 30.0,
                      stamp_ns: int = 0) -> np.ndarray | None:
        """Send the same state until commands answer it; the command answering it, or None.

        The first state is sent once the node's command writer is matched to this peer: the
        node answers the first states before its gains are checked, and answers sent before
        the match are lost (with gains unstable at this hand-sent rate they are all there is).
        """
        commands = self.commands
        if not self.wait_for(lambda: self.matched(self.commands_topic), timeout):
            print(f"command_after: no command writer matched in {timeout} s")
            return None
        answer = answer_after(self.peer, lambda: self.send_state(names, q, v, stamp_ns),
                              commands, timeout)
        if answer is None:  # say whether the states had a reader (discovery) or not (the node)
            states = self.publisher(JointState, self.states_topic, self.state_qos)
            print(f"command_after: no answer in {timeout} s; the state writer matched "
                  f"{states.get_subscription_count()} reader(s); commands heard so far: "
                  f"{len(commands)}")
            return None
        return np.array(answer[1].data)

    def stream_states(self, names, q, period: float = 0.002) -> Stream:
        return Stream(self, names, q, period)

    # -- the process -------------------------------------------------------------------

    def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> bool:
        return self.peer.wait_for(condition, timeout)

    def settle(self, growing: list) -> int:
        """Wait until ``growing`` stops growing (what was in flight has arrived); its length."""
        return self.peer.settle(growing)

    def output(self) -> str:
        return self.process.output()

    def wait_for_log(self, text: str, timeout: float = 10.0, count: int = 1) -> bool:
        """Wait until the node's output holds ``text`` ``count`` times."""
        return self.wait_for(lambda: self.output().count(text) >= count, timeout)

    def close(self, sig: int = signal.SIGINT) -> float:
        """Stop the node (SIGINT, or ``sig``); it must be gone within STOP_LIMIT_S with exit
        code 0."""
        self._release()  # (closing twice is a mistake of the test: ValueError)
        seconds = self.process.stop(sig=sig)
        assert seconds < STOP_LIMIT_S, (f"took {seconds:.2f} s to stop; {SLOW_STOP_S} s after "
                                        f"the signal its threads were:\n"
                                        f"{self.process.threads_when_slow}\n{self.output()}")
        assert self.process.proc.returncode == 0, self.output()
        return seconds

    def kill(self) -> None:
        """SIGKILL the node (a crash), and close the peer."""
        self._release()
        self.process.proc.kill()
        self.process.proc.wait()

    def _release(self) -> None:
        """No longer open: its peer closes (when no other session talks through it)."""
        _open.remove(self)
        self.peer.close()


def open_sessions() -> list[Session]:
    return list(_open)


def left_open_since(before: set[Session]) -> list[Session]:
    """Sessions opened since ``before`` was taken and not closed, except shared ones."""
    return [s for s in _open if s not in before and not s.shared]


def abandon(sessions: list[Session]) -> None:
    """Stop, unchecked, sessions a failed test left open: their nodes would otherwise outlive
    the test run and go on answering (a latched /robot_description, say) in later tests."""
    for session in sessions:
        if session in _open:
            session._release()
            session.process.stop(timeout=2.0)


def close_all(*sessions: Session, sig: int = signal.SIGINT) -> None:
    """``close`` every session: each is stopped even when an earlier one fails its checks."""
    failures = []
    for session in sessions:
        try:
            session.close(sig)
        except AssertionError as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


def refused_start(module: str, directory: Path, params: dict, *extra: str,
                  timeout: float = 60.0) -> str:
    """Run a node (under its own name) whose configuration it must refuse: it exits with code 1
    within ``timeout`` (SIGKILL otherwise, and the check fails); its output."""
    process = NodeProcess(module, write_params(directory, own_name(module), params), *extra)
    try:
        process.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    finally:
        process.stop()
    assert process.proc.returncode == 1, process.output()
    return process.output()


def control_node(directory: Path, params: dict | Path | None = None, *extra: str,
                 **kwargs: Any) -> Session:
    """The control node (rb_dynamics.ros.control_node) under a name of its own."""
    kwargs.setdefault("name", fresh_name("rb_dynamics"))
    return Session("rb_dynamics.ros.control_node", directory, params, *extra, **kwargs)


def simulator(directory: Path, params: dict | Path | None = None, *extra: str,
              **kwargs: Any) -> Session:
    """The topic simulator (rb_dynamics.ros.simulator_node) under a name of its own."""
    kwargs.setdefault("name", fresh_name("rb_simulator"))
    return Session("rb_dynamics.ros.simulator_node", directory, params, *extra, **kwargs)
