# SPDX-License-Identifier: Apache-2.0
"""``rb_dynamics_identify`` given careless input: options out of range, models too large to
identify, goal files and bags too large or empty, commands interrupted or left without an
answer. Each is refused with one line naming the option, value or place, a non-zero exit, and
nothing written; none raises, allocates without bound or waits forever."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.identification import JointStateBagWriter
from rb_dynamics.model import load_model
from rb_dynamics.ros.identification import main

CLI = [sys.executable, "-m", "rb_dynamics.ros.identification"]
JOINTS = load_model(DEFAULT_URDF).actuated_joint_names


def _bag(path: Path, n: int = 400, effort: float = 1.0) -> Path:
    """A bag of the bundled arm's joints at rest for ``n`` ms, each effort ``effort``."""
    with JointStateBagWriter(path, storage="mcap") as writer:
        for k in range(n):
            writer.write(1.0 + 1e-3 * k, JOINTS, np.zeros(len(JOINTS)), np.zeros(len(JOINTS)),
                         np.full(len(JOINTS), effort))
    return path


def _outcome(argv: list[str], capsys) -> tuple[int, str]:
    """The exit code of ``main(argv)`` (argparse's usage exit included) and its stderr."""
    try:
        code = main(argv)
    except SystemExit as done:
        code = done.code
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan")
    assert main(["plan", "--urdf", str(DEFAULT_URDF), "--out", str(out), "--period", "2",
                 "--harmonics", "3", "--time-budget", "1", "--quiet"]) == 0
    return out / "plan.json"


@pytest.mark.parametrize("options, code, expected", [
    (["--periods", "-1"], 2, "argument --periods: '-1' is outside [3, 10000]"),
    (["--periods", "1e8"], 2, "argument --periods: '1e8' is not an integer"),
    (["--periods", "100000000"], 2, "argument --periods"),
    (["--periods", "60"], 1, "--periods 60 × --period 10 s is a goal of 12002 points"),
    (["--harmonics", "200000"], 2, "argument --harmonics: '200000' is outside [2, 29]"),
    (["--acceleration", "0"], 2, "argument --acceleration: '0' is outside (0, inf]"),
    (["--acceleration", "-1"], 2, "argument --acceleration"),
    (["--lead-in", "-5"], 2, "argument --lead-in: '-5' is outside (0, inf]"),
    (["--period", "nan"], 2, "argument --period: 'nan'"),
    (["--time-budget", "inf"], 2, "argument --time-budget: 'inf'"),
    (["--joints", "elbow_joint", "elbow_joint"], 1,
     "joints ['elbow_joint'] are named more than once"),
    # 0.01 rad/s²: the joints barely move, the efforts are gravity's; a plan fit would refuse
    (["--acceleration", "0.01", "--harmonics", "2"], 1,
     "above the 10000 a fit accepts: nothing written"),
])
def test_plan_refuses_options_out_of_range(tmp_path, options, code, expected, capsys):
    out = tmp_path / "plan"
    got, err = _outcome(["plan", "--urdf", str(DEFAULT_URDF), "--out", str(out),
                         "--time-budget", "1", "--quiet", *options], capsys)
    assert got == code and expected in err and not out.exists(), err
    assert "Traceback" not in err


def _chain_urdf(links: int) -> str:
    body = '<inertial><origin xyz="0 0 0.05"/><mass value="1"/><inertia ixx="0.01" ixy="0" ' \
           'ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial>'
    parts = ['<robot name="long_chain"><link name="base"/>']
    for k in range(links):
        parent = "base" if k == 0 else f"link{k - 1}"
        axis = "0 0 1" if k % 2 == 0 else "0 1 0"
        parts.append(f'<link name="link{k}">{body}</link><joint name="joint{k}" '
                     f'type="revolute"><parent link="{parent}"/><child link="link{k}"/>'
                     f'<origin xyz="0 0 0.1"/><axis xyz="{axis}"/><limit lower="-3" '
                     'upper="3" velocity="2" effort="100"/></joint>')
    return "".join(parts) + "</robot>"


def test_plan_refuses_a_model_too_large_to_identify_before_allocating(tmp_path, capsys):
    """600 links: the base-parameter basis would need 9 GiB of regressors; refused from the
    sizes, before any is made (the process stays small)."""
    import resource

    urdf = tmp_path / "chain.urdf"
    urdf.write_text(_chain_urdf(600))
    out = tmp_path / "plan"
    code, err = _outcome(["plan", "--urdf", str(urdf), "--out", str(out), "--quiet"], capsys)
    assert code == 1 and "long_chain: too large to identify" in err and not out.exists(), err
    assert "600 joints × 8400 parameters" in err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 1.5 * 2 ** 20  # KiB: < 1.5 GiB


@pytest.mark.parametrize("options, code, expected", [
    (["--cutoff", "0"], 2, "argument --cutoff: '0' is outside (0, inf]"),
    (["--cutoff", "nan"], 2, "argument --cutoff: 'nan'"),
    (["--cutoff", "0.5"], 1, "cutoff 0.5 Hz: it must keep the plan's highest harmonic (1.5 Hz)"),
    (["--cutoff", "600"], 1, "stay below half the recording's rate (500 Hz)"),
    (["--delay", "1e9"], 2, "argument --delay: '1e9' is outside [-1, 1]"),
    (["--delay", "0.5"], 1, "delay 0.5 s: at most 0.05 of the excitation's period (0.1 s)"),
])
def test_fit_refuses_options_out_of_range(tmp_path, plan_json, options, code, expected,
                                          capsys):
    bag, out = _bag(tmp_path / "bag"), tmp_path / "out"
    got, err = _outcome(["fit", str(bag), "--urdf", str(DEFAULT_URDF), "--plan",
                         str(plan_json), "--out", str(out), "--quiet", *options], capsys)
    assert got == code and expected in err and not out.exists(), err


def test_fit_names_efforts_that_are_all_zero(tmp_path, plan_json, capsys):
    bag, out = _bag(tmp_path / "bag", effort=0.0), tmp_path / "out"
    code, err = _outcome(["fit", str(bag), "--urdf", str(DEFAULT_URDF), "--plan",
                          str(plan_json), "--out", str(out)], capsys)
    assert code == 1 and not out.exists(), err
    assert f"the efforts of {list(JOINTS)} are zero in all 400 joint states" in err
    assert "publishes no measured effort" in err


def test_fit_refuses_a_bag_whose_metadata_is_too_large_before_reading_it(tmp_path, plan_json,
                                                                         capsys):
    """A 2 GiB metadata.yaml (sparse: no disk taken) is refused by its size, not read."""
    import resource

    bag, out = _bag(tmp_path / "bag"), tmp_path / "out"
    os.truncate(bag / "metadata.yaml", 2 ** 31)
    start = time.monotonic()
    code, err = _outcome(["fit", str(bag), "--urdf", str(DEFAULT_URDF), "--plan",
                          str(plan_json), "--out", str(out)], capsys)
    assert code == 1 and not out.exists(), err
    assert f"metadata.yaml: {2 ** 31} bytes; a bag's metadata is at most 10000000" in err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 1.5 * 2 ** 20  # KiB
    assert time.monotonic() - start < 30.0


def test_fit_bounds_the_states_it_reads_by_the_memory_available(tmp_path, plan_json, capsys,
                                                                monkeypatch):
    """The states in a bag are counted from its metadata before any is read, against what the
    machine can hold for a fit (here a machine with room for 300 states of 6 joints)."""
    from rb_dynamics.identification import bags

    per_state = 8 * (1 + 3 * len(JOINTS)) * bags.FIT_COPIES
    monkeypatch.setattr(bags, "available_memory", lambda: 2 * 300 * per_state)
    bag, out = _bag(tmp_path / "bag"), tmp_path / "out"
    code, err = _outcome(["fit", str(bag), "--urdf", str(DEFAULT_URDF), "--plan",
                          str(plan_json), "--out", str(out)], capsys)
    assert code == 1 and not out.exists(), err
    assert "400 messages on /joint_states; this machine can fit at most 300 joint states" in err


def test_reading_a_bag_holds_its_states_in_arrays_made_once(tmp_path):
    """Reading 10,000 states allocates a few times the recording's own arrays (the reader's
    own buffers), not a list of arrays per message (16 times)."""
    import tracemalloc

    from rb_dynamics.identification import read_joint_states

    n = 10_000
    bag = tmp_path / "bag"
    with JointStateBagWriter(bag, storage="mcap") as writer:
        for k in range(n):
            writer.write(1.0 + 1e-3 * k, JOINTS, np.full(len(JOINTS), 1e-3 * k),
                         np.zeros(len(JOINTS)), np.ones(len(JOINTS)))
    tracemalloc.start()
    try:
        rec = read_joint_states(bag, JOINTS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    arrays = rec.stamps.nbytes + rec.position.nbytes + rec.effort.nbytes + rec.velocity.nbytes
    assert len(rec.stamps) == n
    print(f"peak {peak / 2 ** 20:.1f} MiB for {arrays / 2 ** 20:.1f} MiB of arrays")
    assert peak < 8 * arrays


def _goal_file(path: Path, points: int, seconds_per_point: float = 0.05) -> Path:
    lines = ["trajectory:", "  joint_names: [elbow_joint]", "  points:"]
    for k in range(points):
        t = (k + 1) * seconds_per_point
        lines.append(f"  - {{positions: [0.0], time_from_start: {{sec: {int(t)}, nanosec: "
                     f"{int(round((t - int(t)) * 1e9))}}}}}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("case, expected", [
    ("no_points", "trajectory.points is empty or missing: a goal needs at least one point"),
    ("no_names", "trajectory.joint_names is empty or missing"),
    ("not_a_goal", "not a FollowJointTrajectory goal (no 'trajectory' mapping)"),
    ("too_many_points", "10001 points; a controller takes at most 10000"),
    ("too_large", "is larger than 20000000 bytes"),
])
def test_send_refuses_goal_files_before_asking_for_the_server(tmp_path, case, expected, capsys):
    """Refused at once (exit 1) whatever the server: a goal without points or joint names, more
    points than a controller takes, a file larger than any plan writes (53 MB: refused by its
    size, not read)."""
    goal = tmp_path / "goal.yaml"
    if case == "no_points":
        goal.write_text("trajectory:\n  joint_names: [elbow_joint]\n  points: []\n")
    elif case == "no_names":
        goal.write_text("trajectory:\n  joint_names: []\n  points: [{positions: [0.0]}]\n")
    elif case == "not_a_goal":
        goal.write_text("[1, 2, 3]\n")
    elif case == "too_many_points":
        _goal_file(goal, 10_001)
    else:
        goal.write_text("trajectory:\n  points:\n" + "  - {positions: [0.0]}\n" * 2_400_000)
        assert goal.stat().st_size > 50_000_000
    start = time.monotonic()
    code, err = _outcome(["send", str(goal), "--action", "/nowhere", "--timeout", "1"], capsys)
    assert code == 1 and expected in err, err
    assert time.monotonic() - start < 20.0


def _lines_until(proc: subprocess.Popen, text: str, timeout: float) -> str:
    """The process's stderr up to the line containing ``text`` (or all of it by ``timeout``)."""
    seen = ""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while text not in seen and time.monotonic() < deadline:
            if selector.select(timeout=0.5):
                line = proc.stderr.readline()
                if not line:
                    break
                seen += line
    return seen


def test_record_interrupted_before_any_message_writes_nothing(tmp_path):
    out = tmp_path / "bag"
    proc = subprocess.Popen([*CLI, "record", "--out", str(out), "--topic", "/nothing_here",
                             "--wait", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        seen = _lines_until(proc, "waiting for /nothing_here", 120.0)
        assert "waiting for /nothing_here" in seen, seen
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 4, stdout + stderr
    assert "stopped before any message on /nothing_here; nothing recorded" in stdout
    assert "Traceback" not in stderr and not out.exists()


# An action server that accepts every goal and never ends one: it stands for a controller
# that hangs, or (killed) one that died mid-goal
STALLING_SERVER = """
import sys, threading, rclpy
from rclpy.action import ActionServer, CancelResponse
from rclpy.executors import MultiThreadedExecutor
from control_msgs.action import FollowJointTrajectory

rclpy.init()
node = rclpy.create_node("stalling_server")
forever = threading.Event()

def execute(handle):
    print("executing", flush=True)
    while not forever.wait(0.05):
        if handle.is_cancel_requested:
            handle.canceled()
            print("cancelled", flush=True)
            return FollowJointTrajectory.Result()
    return FollowJointTrajectory.Result()

server = ActionServer(node, FollowJointTrajectory, sys.argv[1], execute,
                      cancel_callback=lambda _: CancelResponse.ACCEPT)
print("ready", flush=True)
executor = MultiThreadedExecutor()
executor.add_node(node)
executor.spin()
"""


@pytest.fixture
def stalling_server(tmp_path):
    pytest.importorskip("control_msgs.action", reason="control_msgs (../shared/vendor) is not "
                        "installed: no FollowJointTrajectory action")
    script = tmp_path / "stalling_server.py"
    script.write_text(STALLING_SERVER)
    action = f"/stalling_{os.getpid()}/follow_joint_trajectory"
    proc = subprocess.Popen([sys.executable, str(script), action], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert _line(proc) == "ready"
        yield proc, action
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _line(proc: subprocess.Popen, wait: float = 120.0,
          other: subprocess.Popen | None = None) -> str:
    """The next line ``proc`` prints, within ``wait`` s; else fails, with what ``other`` (the
    sender) printed if it has ended (a line never printed must not hang the suite)."""
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(wait)
    if read:
        return read[0].strip()
    said = ""
    if other is not None and other.poll() is not None:
        said = "".join(other.communicate())
    raise AssertionError(f"no line from the server in {wait:g} s; the sender: "
                         f"{said or 'still running'}")


# --timeout of a sender whose server goes silent: the time the test waits for the silence to
# be told, and also the time the sender waits for the server to appear (a fresh process's
# discovery, which a busy machine can stretch past a few seconds)
SILENCE_S = 10.0


def _sender(goal: Path, action: str, timeout: float) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "send", str(goal), "--action", action, "--timeout",
                             str(timeout)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_send_gives_up_on_a_server_that_dies_mid_goal(tmp_path, stalling_server):
    """The result is awaited while the server answers: silent (no feedback, no result) for
    --timeout s, the command ends (exit 4) naming the cause; it never waits forever."""
    server, action = stalling_server
    goal = _goal_file(tmp_path / "goal.yaml", 20)  # 1 s
    sender = _sender(goal, action, SILENCE_S)
    try:
        assert _line(server, other=sender) == "executing"
        sent = time.monotonic()
        server.kill()
        server.wait(timeout=30)
        stdout, stderr = sender.communicate(timeout=120)
        waited = time.monotonic() - sent
    finally:
        if sender.poll() is None:
            sender.kill()
    assert sender.returncode == 4, stdout + stderr
    assert (f"neither feedback nor a result from {action} for {SILENCE_S:g} s (--timeout) "
            "during the goal of 1.0 s: the server stopped answering") in stdout
    assert waited >= SILENCE_S and "Traceback" not in stderr


def test_send_interrupted_cancels_the_goal_and_exits(tmp_path, stalling_server):
    server, action = stalling_server
    goal = _goal_file(tmp_path / "goal.yaml", 2000)  # 100 s
    sender = _sender(goal, action, 60.0)
    try:
        assert _line(server, other=sender) == "executing"
        sender.send_signal(signal.SIGINT)
        stdout, stderr = sender.communicate(timeout=60)
    finally:
        if sender.poll() is None:
            sender.kill()
    assert sender.returncode == 4, stdout + stderr
    assert "interrupted; the goal was cancelled" in stdout and "Traceback" not in stderr
    assert _line(server) == "cancelled"


def test_record_reports_the_states_it_lost(tmp_path):
    """A driver's stamps 1 ms apart with 100 states missing: the recording says so."""
    from ros_harness import Peer
    from sensor_msgs.msg import JointState

    out = tmp_path / "bag"
    proc = subprocess.Popen([*CLI, "record", "--out", str(out), "--topic", "/lossy_states",
                             "--duration", "3"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peer = Peer("lossy_driver")
    try:
        assert "waiting for /lossy_states" in _lines_until(proc, "waiting for", 120.0)
        publisher = peer.node.create_publisher(JointState, "/lossy_states", 1000)
        assert peer.wait_for(lambda: publisher.get_subscription_count() > 0, 60.0)
        for k in [*range(100), *range(200, 300)]:
            msg = JointState(name=list(JOINTS), position=[0.0] * len(JOINTS),
                             effort=[1.0] * len(JOINTS))
            msg.header.stamp.sec, msg.header.stamp.nanosec = 10, k * 1_000_000
            publisher.publish(msg)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        peer.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout + stderr
    assert "recorded 200 joint states" in stdout, stdout + stderr
    assert ("100 states lost: 1 gap(s) in the header stamps, the longest 0.101 s after "
            "t = 0.099 s (states every 1 ms)") in stdout, stdout
