# SPDX-License-Identifier: Apache-2.0
"""The ROS 2 tools as a user runs them: colcon, ``ros2 launch``, ``ros2 param``, in processes.

launch, launch_ros and the ros2 CLI have no wheel on PyPI: ``make setup`` installs them into the
Jazzy venv from ``../shared/vendor`` when that folder is there (``RB_DYNAMICS_VENDOR`` names
another). Without them ``MISSING`` says why, and the tests that need them skip with that reason.

Every command runs with the venv's ``bin`` first on PATH, this session's ROS_DOMAIN_ID and
loopback discovery (inherited from conftest), and the colcon install of rb_dynamics first on
AMENT_PREFIX_PATH and PYTHONPATH, as ``source install/setup.bash`` would set them.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
VENV_BIN = Path(sys.executable).parent


def _missing() -> str | None:
    absent = [name for name in ("ros2", "colcon", "xacro") if not (VENV_BIN / name).exists()]
    # (the repository's launch/ folder is a namespace package "launch": it has no origin)
    absent += [name for name in ("launch", "launch_ros", "ros2cli")
               if getattr(importlib.util.find_spec(name), "origin", None) is None]
    if not absent:
        return None
    return (f"{', '.join(absent)} not installed in {VENV}: launch, launch_ros and the ros2 CLI "
            "are not on PyPI; `make setup` installs them into the Jazzy venv from "
            "../shared/vendor (or $RB_DYNAMICS_VENDOR) when that folder exists")


MISSING = _missing()


@dataclass
class Result:
    """What a command printed and how it ended."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (f"$ {' '.join(self.args)}\nexit {self.returncode}\n--- stdout\n{self.stdout}"
                f"--- stderr\n{self.stderr}")


def environment(prefix: Path | None = None) -> dict[str, str]:
    """This process's environment, with the venv's tools and (if given) a colcon install.

    ``prefix`` is a colcon (isolated) install base holding rb_dynamics.
    """
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", "")])
    ament = [str(VENV)]
    python = []
    if prefix is not None:
        package = prefix / "rb_dynamics"
        ament.insert(0, str(package))
        python += [str(p) for p in package.glob("lib/python3*/site-packages")]
    env["AMENT_PREFIX_PATH"] = os.pathsep.join(ament)
    env["PYTHONPATH"] = os.pathsep.join(python + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONUNBUFFERED"] = "1"  # node logs reach the log file before a failure is reported
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run(args: list[str], prefix: Path | None = None, timeout: float = 60.0) -> Result:
    """Run a command to its end; on timeout its whole process group is killed and it raises."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=environment(prefix), cwd=ROOT, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        stdout, stderr = proc.communicate()
        raise TimeoutError(f"{args} still running after {timeout} s\n{stdout}\n{stderr}") from None
    return Result(list(args), proc.returncode, stdout, stderr)


def ros2(*args: str, prefix: Path | None = None, timeout: float = 60.0) -> Result:
    """``ros2 <verb> ...``; pass ``--no-daemon`` to the verbs that take it, so that no daemon is
    spawned (``stop_daemon`` ends one that was)."""
    return run([str(VENV_BIN / "ros2"), *args], prefix, timeout)


def stop_daemon() -> None:
    """End the ros2 CLI daemon of this session's ROS_DOMAIN_ID, if a command started one."""
    if MISSING is None:
        ros2("daemon", "stop", timeout=30.0)


@cache
def colcon_install() -> Path:
    """rb_dynamics built the ROS way (``colcon build``) into a temporary install base.

    Once per test session (cached); removed at exit. Data files land in
    ``<base>/rb_dynamics/share/rb_dynamics`` and the executables in ``lib/rb_dynamics``.
    """
    base = Path(tempfile.mkdtemp(prefix="rb_dynamics_colcon_"))
    atexit.register(shutil.rmtree, base, True)
    result = run([str(VENV_BIN / "colcon"), "--log-base", str(base / "log"), "build",
                  "--base-paths", str(ROOT), "--packages-select", "rb_dynamics",
                  "--build-base", str(base / "build"), "--install-base", str(base / "install"),
                  "--event-handlers", "console_direct-"], timeout=300.0)
    if result.returncode != 0:
        raise RuntimeError(f"colcon build of rb_dynamics failed\n{result}")
    return base / "install"


def _stat(pid: str) -> tuple[str, int] | None:
    """(state, session id) of a process from /proc, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces
    return fields[0], int(fields[3])


def session_processes(sid: int) -> dict[int, str]:
    """Live processes (zombies aside) of session ``sid``: pid -> command line."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(entry)
        if stat is None or stat[1] != sid or stat[0] == "Z":
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        found[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


def _default_sigint() -> None:
    # A process started in the background by a non-interactive shell ignores SIGINT, and so
    # does everything it starts (an ignored signal stays ignored across exec): give the
    # launch the default disposition it has when started from a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Launch:
    """``ros2 launch ...`` in a session of its own, SIGINT as from a terminal (see above).

    Every process the launch starts stays in its session (launch starts no new one), so
    ``processes`` lists them and, after the launch exited, whatever outlived it.
    """

    def __init__(self, prefix: Path, *args: str):
        self.args = [str(VENV_BIN / "ros2"), "launch", *args]
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (the child's stdout)
            prefix="ros2_launch_", suffix=".log", delete=False)
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=environment(prefix), cwd=ROOT, start_new_session=True,
                                     preexec_fn=_default_sigint)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def processes(self) -> dict[int, str]:
        return session_processes(self.proc.pid)

    def interrupt(self, timeout: float = 15.0) -> float:
        """SIGINT to ``ros2 launch`` alone (it forwards it to what it started); the seconds
        until it exited. If it hangs, the whole session is killed and TimeoutError raised."""
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise TimeoutError(f"ros2 launch ignored SIGINT for {timeout} s\n"
                                   f"{self.output()}") from None
        return time.monotonic() - start

    def kill(self) -> None:
        """Kill whatever of the session is left (clean-up after a failure)."""
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
