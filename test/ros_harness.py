"""Real processes on real DDS (loopback, a random domain): start nodes, talk to them, stop them."""

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

import rclpy
from rclpy.executors import SingleThreadedExecutor

from rb_dynamics.ros_env import keep_local

keep_local(os.environ)  # conftest has set them for pytest; this is for other users of the harness
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="rb_dynamics_ros_log_"))


def write_params(directory: Path, node_name: str, params: dict) -> Path:
    """A ROS 2 parameter file (YAML; JSON is valid YAML)."""
    path = directory / f"{node_name}_params.yaml"
    path.write_text(json.dumps({node_name: {"ros__parameters": params}}))
    return path


def answer_after(peer: Peer, send: Callable[[], None], answers: list, timeout: float = 5.0):
    """Send the same message every 0.1 s until answers come; the last one is returned.

    Every message sent is the same, and DDS keeps one writer's order, so once the answers to
    messages still in flight have arrived the last answer is this message's. None on timeout.
    """
    before = len(answers)
    for _ in range(int(timeout / 0.1)):
        send()
        if peer.wait_for(lambda: len(answers) > before, 0.1):
            peer.wait_for(lambda: False, 0.15)
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

    def call(self, client, request, timeout: float = 10.0):
        """Call and wait for the answer. wait_for_service only says the server hears requests;
        its response writer may not have matched this client's reader yet, and a response
        sent then is lost (DDS discovery is per endpoint). So the first call of each client
        waits a moment after discovery, and a call unanswered for a while is sent once more
        (every service here is a pure function of its request)."""
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"service {client.srv_name} not available")
        if id(client) not in self._called:
            self._called.add(id(client))
            self.wait_for(lambda: False, 0.3)
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
