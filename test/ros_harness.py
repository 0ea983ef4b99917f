"""Real processes on real DDS (loopback, a random domain): start nodes, talk to them, stop them.

``Session`` is the one way the tests meet a node: the node in its own process (``NodeProcess``)
and the test's own rclpy node (``Peer``) with publishers, subscriptions and clients made on
first use by name, the parameter calls, the state → command exchange of a controller, and
``close`` that asserts the node stops cleanly within ``STOP_LIMIT_S`` of SIGINT.
"""

from __future__ import annotations

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
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParametersAtomically
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from rb_dynamics.ros_env import keep_local

keep_local(os.environ)  # conftest has set them for pytest; this is for other users of the harness
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="rb_dynamics_ros_log_"))


def write_params(directory: Path, node_name: str, params: dict) -> Path:
    """A ROS 2 parameter file (YAML; JSON is valid YAML)."""
    path = directory / f"{node_name}_params.yaml"
    path.write_text(json.dumps({node_name: {"ros__parameters": params}}))
    return path


STOP_LIMIT_S = 2.0  # the README promises a stop within 2 s of SIGINT/SIGTERM


def answer_after(peer: Peer, send: Callable[[], None], answers: list, timeout: float = 5.0):
    """Send the same message every 0.1 s until answers come; the last one is returned.

    Every message sent is the same, and DDS keeps one writer's order, so once the answers to
    messages still in flight have arrived (the answers go quiet) the last answer is this
    message's. None on timeout.
    """
    before = len(answers)
    for _ in range(int(timeout / 0.1)):
        send()
        if peer.wait_for(lambda: len(answers) > before, 0.1):
            peer.settle(answers)
            return answers[-1]
    return None


class NodeProcess:
    """A node of this package in its own process, stopped by SIGINT then SIGKILL."""

    def __init__(self, module: str, params_file: Path | None = None, *extra: str):
        cmd = [sys.executable, "-m", module, "--ros-args"]
        if params_file is not None:
            cmd += ["--params-file", str(params_file)]
        cmd += list(extra)
        # the log file must outlive this constructor: it is the child process's stdout
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix=module.replace(".", "_"), suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self, timeout: float = 5.0) -> float:
        """SIGINT, wait; SIGKILL if it hangs. Returns the seconds the shutdown took."""
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
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

    def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            self.executor.spin_once(timeout_sec=0.02)
        return condition()

    def settle(self, growing: list, quiet: float = 0.1, timeout: float = 5.0) -> int:
        """Spin until ``growing`` has not grown for ``quiet`` seconds (what was in flight has
        arrived); its length then."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            size = len(growing)
            if not self.wait_for(lambda size=size: len(growing) > size, quiet):
                break
        return len(growing)

    def call(self, client, request, timeout: float = 10.0):
        """Call and wait for the answer. wait_for_service only says the server hears requests;
        its response writer may not have matched this client's reader yet, and a response
        sent then is lost (DDS discovery is per endpoint). So the first call of each client
        waits a moment after discovery, and a call unanswered for a while is sent once more
        (every service here is a pure function of its request)."""
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"service {client.srv_name} not available")
        if id(client) not in self._called:  # (the only fixed wait: see the docstring)
            self._called.add(id(client))
            discovery = time.monotonic() + 0.3
            self.wait_for(lambda: time.monotonic() > discovery, 0.3)
        deadline = time.monotonic() + timeout
        future = client.call_async(request)
        self.wait_for(future.done, min(timeout / 2, 5.0))
        if not future.done():  # a slow answer to the first request still counts
            futures = (future, client.call_async(request))
            self.wait_for(lambda: any(f.done() for f in futures),
                          max(deadline - time.monotonic(), 0.0))
            future = next((f for f in futures if f.done()), future)
        if not future.done():
            raise TimeoutError(f"service {client.srv_name} did not answer")
        return future.result()

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def _parameter_value(value: Any) -> ParameterValue:
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


class Session:
    """A node of this package in its own process and the test's peer wired to it.

    ``module`` runs with ``params`` (written to a file in ``directory``) under the name
    ``name`` (``-r __node:=name``, so that the nodes of different tests never answer each
    other; ``default_name`` is the node's own). Topics and services relative to the node
    (``~/x``) are spelled ``name/x`` here.
    """

    def __init__(self, module: str, directory: Path, params: dict | None = None, *extra: str,
                 name: str | None = None, default_name: str = "rb_dynamics",
                 state_qos: Any = 10) -> None:
        self.name = name or default_name
        args = [*extra] + (["-r", f"__node:={name}"] if name else [])
        params_file = write_params(directory, self.name, params) if params is not None else None
        self.process = NodeProcess(module, params_file, *args)
        self.peer = Peer(f"{self.name}_test_peer")
        self._publishers: dict[str, Any] = {}
        self._received: dict[str, list] = {}
        self._clients: dict[str, Any] = {}
        self.state_qos = state_qos

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
            self.peer.node.create_subscription(
                msg_type, topic, lambda m: messages.append((time.monotonic(), m)), qos)
        return self._received[topic]

    def call(self, srv_type: Any, service: str, request: Any, timeout: float = 15.0) -> Any:
        service = self.topic(service)
        if service not in self._clients:
            self._clients[service] = self.peer.node.create_client(srv_type, service)
        return self.peer.call(self._clients[service], request, timeout)

    def publish_matched(self, msg_type: Any, topic: str, msg: Any, qos: Any = 10) -> None:
        """Publish once the node's subscription is matched (a message sent earlier is lost)."""
        publisher = self.publisher(msg_type, topic, qos)
        assert self.wait_for(lambda: publisher.get_subscription_count() > 0, 10.0), \
            f"nobody subscribes to {self.topic(topic)}\n{self.output()}"
        publisher.publish(msg)

    def set_parameters(self, **values: Any) -> Any:
        """All at once (SetParametersAtomically); the rcl_interfaces SetParametersResult."""
        request = SetParametersAtomically.Request(parameters=[
            ParameterMsg(name=name, value=_parameter_value(value))
            for name, value in values.items()])
        return self.call(SetParametersAtomically, "~/set_parameters_atomically", request).result

    # -- a controller: joint states in, effort commands out ---------------------------

    @property
    def commands(self) -> list:
        return self.received(Float64MultiArray, "~/effort_commands")

    def send_state(self, names, q, v=None, stamp_ns: int = 0,
                   topic: str = "joint_states") -> None:
        msg = JointState(name=list(names), position=[float(x) for x in q])
        if v is not None:
            msg.velocity = [float(x) for x in v]
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        self.publisher(JointState, topic, self.state_qos).publish(msg)

    def command_after(self, names, q, v=None, timeout: float = 8.0,
                      stamp_ns: int = 0) -> np.ndarray | None:
        """Send the same state until commands answer it; the command answering it, or None."""
        commands = self.commands
        answer = answer_after(self.peer, lambda: self.send_state(names, q, v, stamp_ns),
                              commands, timeout)
        return None if answer is None else np.array(answer[1].data)

    # -- the process -------------------------------------------------------------------

    def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> bool:
        return self.peer.wait_for(condition, timeout)

    def output(self) -> str:
        return self.process.output()

    def wait_for_log(self, text: str, timeout: float = 10.0) -> bool:
        return self.wait_for(lambda: text in self.output(), timeout)

    def close(self) -> float:
        """Stop the node (SIGINT); it must be gone within STOP_LIMIT_S with exit code 0."""
        self.peer.close()
        seconds = self.process.stop()
        assert seconds < STOP_LIMIT_S, f"took {seconds:.2f} s to stop\n{self.output()}"
        assert self.process.proc.returncode == 0, self.output()
        return seconds
