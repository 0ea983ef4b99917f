# SPDX-License-Identifier: Apache-2.0
"""``rb_dynamics_identify`` end to end across processes and real DDS: the simulator plays a real
arm — inertias other than the URDF's, armature, viscous and Coulomb friction, effort offsets (its
dynamics overlay), effort noise 0.05 N·m + 1 %, a 17-bit encoder, efforts 2 ms late, jitter —
and the control node (computed torque, the URDF's model) executes the planned excitation sent by
``send``; ``record`` writes
the simulator's joint states into a rosbag2 with rosbags; ``fit`` identifies the arm from that
bag. And the command's refusals of bad bags, each naming the cause and writing nothing."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from ros_harness import Session, close_all, fresh_name
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import gravity
from rb_dynamics.identification import (
    JointStateBagWriter,
    ParameterLayout,
    corrected_urdf,
    own_link_inertias,
    perturbed_model,
    read_plan,
)
from rb_dynamics.model import (
    DynamicsOverlay,
    apply_overlay,
    load_model,
    read_overlay,
    write_overlay,
)
from rb_dynamics.ros.identification import main

CLI = [sys.executable, "-m", "rb_dynamics.ros.identification"]
KP = [400.0, 400.0, 400.0, 2500.0, 1e4, 4e4]  # per joint, 1/s² (as the payload tests)
EFFORT_NOISE = 0.05  # N·m, + 1 % of the effort
EFFORT_DELAY = 0.002  # s: the efforts lag the positions


def _run(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def _true_arm(tmp_path: Path) -> tuple[Path, Path, object]:
    """The simulator's arm: the bundled arm's URDF with perturbed inertias, and an overlay of
    armature, viscous and Coulomb friction and effort offsets; and its model."""
    text = Path(DEFAULT_URDF).read_text()
    model = load_model(text)
    true = perturbed_model(model, np.random.default_rng(28))
    layout = ParameterLayout(model, (), ())
    welded = [I - own for I, own in zip(model.inertia, own_link_inertias(model, text))]
    urdf, overlay = tmp_path / "true_arm.urdf", tmp_path / "true_arm_overlay.yaml"
    urdf.write_text(corrected_urdf(text, layout, layout.parameters(true), welded))
    write_overlay(DynamicsOverlay.from_model(true), overlay)
    return urdf, overlay, apply_overlay(load_model(urdf.read_text()), read_overlay(overlay))


def test_plan_send_record_fit_on_the_simulated_arm(tmp_path):
    pytest.importorskip("control_msgs.action", reason="control_msgs (../shared/vendor) is not "
                        "installed: no FollowJointTrajectory action to send the plan to")
    plan_dir, bag, out = tmp_path / "plan", tmp_path / "bag", tmp_path / "out"
    planned = _run("plan", "--urdf", str(DEFAULT_URDF), "--out", str(plan_dir), "--period",
                   "3", "--harmonics", "4", "--periods", "5", "--lead-in", "3",
                   "--time-budget", "8")
    assert planned.returncode == 0, planned.stderr
    assert "condition number" in planned.stdout and "plan: condition" in planned.stderr
    true_urdf, true_overlay, true = _true_arm(tmp_path)
    start = read_plan(plan_dir / "plan.json")[0].evaluate(np.zeros(1))[0][0]
    sim = Session("rb_dynamics.ros.simulator_node", tmp_path, {
        "urdf_path": str(true_urdf), "dynamics_overlay": str(true_overlay),
        "initial_positions": start.tolist(), "publish_rate": 1000.0, "time_step": 0.001,
        "publish_clock": True, "command_timeout": 0.2, "start_paused": True, "lockstep": True,
        "lockstep_timeout": 5.0, "effort_noise": EFFORT_NOISE, "effort_noise_relative": 0.01,
        "encoder_resolution": 2 * math.pi / 2 ** 17, "effort_delay": EFFORT_DELAY,
        "publish_jitter": 2e-4})
    control = Session("rb_dynamics.ros.control_node", tmp_path, {
        "urdf_path": str(DEFAULT_URDF), "mode": "computed_torque", "kp": KP,
        "kd": [2.0 * math.sqrt(k) for k in KP], "state_timeout": 0.1, "use_sim_time": True},
        "-r", "~/effort_commands:=/rb_simulator/commands", peer=sim.peer)
    recorder = None
    try:
        pause = sim.peer.node.create_client(SetBool, "/rb_simulator/pause")
        assert sim.peer.wait_for(pause.service_is_ready, 60.0), sim.output()
        recorder = subprocess.Popen([*CLI, "record", "--out", str(bag), "--storage", "sqlite3"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        states = sim.received(JointState, "/joint_states")
        assert sim.peer.call(pause, SetBool.Request(data=False)).success
        # the loop is closed (the control node answers states) before the goal goes out
        assert sim.peer.wait_for(lambda: len(states) > 200, 60.0), control.output()[-3000:]
        # 18 s of lock-step sim time: minutes of wall time on a busy machine
        sent = _run("send", str(plan_dir / "excitation.yaml"), "--action",
                    "/rb_dynamics/follow_joint_trajectory", "--timeout", "60", timeout=900.0)
        assert sent.returncode == 0 and "error_code 0" in sent.stdout, (
            sent.stdout + sent.stderr + control.output()[-3000:])
        print("\n" + sent.stdout)
        followed = sent.stdout[sent.stdout.index("followed ("):]
        assert all(name in followed for name in true.actuated_joint_names), sent.stdout
        recorder.send_signal(signal.SIGINT)
        stdout, stderr = recorder.communicate(timeout=60)
        assert recorder.returncode == 0, stdout + stderr
        assert "recorded" in stdout and (bag / "metadata.yaml").exists()
    finally:
        if recorder is not None and recorder.poll() is None:
            recorder.kill()
        close_all(control, sim)

    fitted = _run("fit", str(bag), "--urdf", str(DEFAULT_URDF), "--plan",
                  str(plan_dir / "plan.json"), "--out", str(out))
    assert fitted.returncode == 0, fitted.stdout + fitted.stderr
    report = json.loads((out / "report.json").read_text())
    print("\n" + fitted.stdout)
    identified = load_model((out / "identified.urdf").read_text())
    q = np.random.default_rng(3).uniform(-2.0, 2.0, (2000, true.nq))
    g_true = gravity(true, q)
    error = np.abs(gravity(identified, q) - g_true).max() / np.abs(g_true).max()
    urdf_error = np.abs(gravity(load_model(DEFAULT_URDF), q) - g_true).max() / np.abs(
        g_true).max()
    print(f"gravity error: identified {100 * error:.3f} %, URDF {100 * urdf_error:.2f} % of "
          "max |g|")
    fitted_model = apply_overlay(identified, read_overlay(out / "overlay.yaml"))
    for field in ("armature", "damping", "friction", "effort_offset"):
        print(f"{field}: true {np.round(getattr(true, field), 4).tolist()}, identified "
              f"{np.round(getattr(fitted_model, field), 4).tolist()}")
    assert report["base_parameters"] == 58 and report["periods_fitted"] >= 3
    # the effort a state reports was applied over the step before it: half a step later still
    assert abs(report["delay_s"] - (EFFORT_DELAY + 0.0005)) < 5e-4
    # closed loop on a short plan (3 s period): the tracking loop's own effort content and a
    # weaker excitation than the 10 s plans of the benchmark (which reach ≤ 1.25 σ)
    assert max(report["consistent"]["validation"]["rms_over_sigma"]) <= 1.5
    assert error <= 0.01 and urdf_error >= 10 * error
    assert (out / "overlay.yaml").exists() and (out / "validation.png").exists()


def test_send_gives_the_goal_tolerances_and_an_arm_that_does_not_follow_aborts_it(tmp_path):
    """A goal file without tolerances gets ``--path-tolerance``: an arm whose shoulder_pan has
    viscous friction (20 N·m·s/rad) the controller's model lacks, under computed torque at kp
    1/s² (the model's feed-forward alone would follow an exact model), leaves the path, the
    server aborts the goal, ``send`` exits 4 saying why and how far each joint followed (from
    the server's feedback)."""
    pytest.importorskip("control_msgs.action", reason="control_msgs (../shared/vendor) is not "
                        "installed: no FollowJointTrajectory action to send to")
    joints = load_model(DEFAULT_URDF).actuated_joint_names
    start = [0.3, -1.2, 1.4, -0.8, 0.9, 0.2]
    states = f"/{fresh_name('send_tolerance')}/joint_states"
    friction = tmp_path / "pan_friction.yaml"
    write_overlay(DynamicsOverlay(joints={joints[0]: {"viscous": 20.0}}), friction)
    sim = Session("rb_dynamics.ros.simulator_node", tmp_path, {
        "urdf_path": str(DEFAULT_URDF), "dynamics_overlay": str(friction),
        "initial_positions": start, "publish_rate": 500.0, "command_timeout": 1.0,
        "start_paused": True}, "-r", f"joint_states:={states}",
        name=fresh_name("rb_simulator"))
    control = Session("rb_dynamics.ros.control_node", tmp_path, {
        "urdf_path": str(DEFAULT_URDF), "mode": "computed_torque", "kp": [1.0] * 6,
        "kd": [2.0] * 6, "state_timeout": 5.0},
        "-r", f"~/effort_commands:=/{sim.name}/commands", "-r", f"joint_states:={states}",
        name=fresh_name("rb_dynamics"), peer=sim.peer)
    goal = tmp_path / "swing.yaml"
    goal.write_text(yaml.safe_dump({"trajectory": {"joint_names": joints, "points": [
        {"positions": [start[0] + 1.2, *start[1:]], "time_from_start": {"sec": 6}}]}}))
    try:
        # the loop is closed (the control node answers the paused arm's states) before the
        # arm moves and the goal goes out
        heard = control.received(Float64MultiArray, f"/{sim.name}/commands")
        assert sim.peer.wait_for(lambda: len(heard) > 50, 60.0), control.output()[-3000:]
        pause = sim.peer.node.create_client(SetBool, f"/{sim.name}/pause")
        assert sim.peer.wait_for(pause.service_is_ready, 60.0), sim.output()
        assert sim.peer.call(pause, SetBool.Request(data=False)).success
        sent = _run("send", str(goal), "--action", f"/{control.name}/follow_joint_trajectory",
                    "--timeout", "30", "--path-tolerance", "0.2")
    finally:
        close_all(control, sim)
    print("\n" + sent.stdout)
    assert sent.returncode == 4, sent.stdout + sent.stderr
    assert "path tolerance violation: shoulder_pan_joint" in sent.stdout, sent.stdout
    assert "left the planned path" in sent.stdout and "--path-tolerance" in sent.stdout
    report = sent.stdout[sent.stdout.index("followed ("):].splitlines()
    rows = [line.split() for line in report[1:len(joints) + 1]]
    assert [row[0] for row in rows] == joints, sent.stdout
    assert all(float(row[-1]) >= float(row[-2]) >= 0.0 for row in rows), sent.stdout


def test_send_keeps_a_goal_files_own_tolerances():
    pytest.importorskip("control_msgs.action", reason="control_msgs (../shared/vendor) is not "
                        "installed")
    from control_msgs.action import FollowJointTrajectory
    from control_msgs.msg import JointTolerance

    from rb_dynamics.ros.identification.ros_commands import (
        GOAL_TIME_TOLERANCE,
        _give_tolerances,
    )

    bare = FollowJointTrajectory.Goal()
    bare.trajectory.joint_names = ["a", "b"]
    _give_tolerances(bare, 0.5, 0.1)
    assert [(t.name, t.position) for t in bare.path_tolerance] == [("a", 0.5), ("b", 0.5)]
    assert [(t.name, t.position) for t in bare.goal_tolerance] == [("a", 0.1), ("b", 0.1)]
    assert bare.goal_time_tolerance.sec == GOAL_TIME_TOLERANCE  # a field, not a timing
    own = FollowJointTrajectory.Goal()
    own.trajectory.joint_names = ["a", "b"]
    own.path_tolerance = [JointTolerance(name="a", position=0.05)]
    _give_tolerances(own, 0.5, 0.0)
    assert [(t.name, t.position) for t in own.path_tolerance] == [("a", 0.05)]
    assert not own.goal_tolerance and own.goal_time_tolerance.sec == 0


def _bag(path: Path, names, effort=True, n=400, position=0.0) -> Path:
    with JointStateBagWriter(path, storage="mcap") as writer:
        for k in range(n):
            writer.write(1.0 + 1e-3 * k, names, np.full(len(names), position),
                         np.zeros(len(names)), np.ones(len(names)) if effort else None)
    return path


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan")
    assert main(["plan", "--urdf", str(DEFAULT_URDF), "--out", str(out), "--period", "2",
                 "--harmonics", "3", "--time-budget", "1", "--quiet"]) == 0
    return out / "plan.json"


@pytest.mark.parametrize("case, expected", [
    ("other_joints", "never published: ['shoulder_pan_joint'"),
    ("no_effort", "carry no efforts"),
    ("too_short", "too short"),
    ("no_bag", "no such bag or folder"),
    ("huge_positions", "is 1e+300 at t = 0.0000 s"),
    ("truncated", "cannot read the bag"),
    ("fifo", "not a regular file or a folder"),
    ("fifo_in_the_bag", "not a regular file or a folder"),
    ("device", "not a regular file or a folder"),
])
def test_fit_refuses_bad_bags_naming_the_cause_and_writes_nothing(tmp_path, plan_json, case,
                                                                  expected, capsys):
    """The command itself (its main, in this process): exit code 1, the cause on stderr; a
    device or a FIFO is refused before it is opened (it would be read without end, or wait
    for a writer)."""
    joints = load_model(DEFAULT_URDF).actuated_joint_names
    bag = tmp_path / "bag"
    if case == "other_joints":
        _bag(bag, ["gripper_joint"])
    elif case == "no_effort":
        _bag(bag, joints, effort=False)
    elif case == "too_short":
        _bag(bag, joints)
    elif case == "huge_positions":
        _bag(bag, joints, position=1e300)
    elif case == "truncated":
        data = next(_bag(bag, joints).glob("*.mcap"))
        data.write_bytes(data.read_bytes()[:1000])
    elif case == "fifo":
        bag = tmp_path / "bag.mcap"
        os.mkfifo(bag)
    elif case == "fifo_in_the_bag":
        data = next(_bag(bag, joints).glob("*.mcap"))
        data.unlink()
        os.mkfifo(data)
    elif case == "device":
        bag = Path("/dev/zero")
    out = tmp_path / "out"
    code = main(["fit", str(bag), "--urdf", str(DEFAULT_URDF), "--plan", str(plan_json),
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and expected in err and not out.exists(), err


@pytest.mark.parametrize("content, expected", [
    ("fifo", "is not a regular file"),
    ("device", "is not a regular file"),
    ("a: &a [1, 1]\nb: [*a, *a]\n", "aliases (*a) are not taken"),
    ("trajectory: " + "[" * 100_000 + "\n", "nested deeper"),
])
def test_plan_and_goal_files_that_are_no_plain_files_are_refused_at_once(tmp_path, plan_json,
                                                                         content, expected,
                                                                         capsys):
    """``fit --plan`` and ``send`` read their file bounded: a device, a FIFO (which would wait
    for a writer), YAML aliases or deep nesting give exit code 1 and the cause, at once."""
    if content == "device":
        path = Path("/dev/zero")
    else:
        path = tmp_path / "file"
        if content == "fifo":
            os.mkfifo(path)
        else:
            path.write_text(content)
    bag = _bag(tmp_path / "bag", load_model(DEFAULT_URDF).actuated_joint_names)
    commands = [["send", str(path), "--action", "/nowhere", "--timeout", "1"]]
    if content in ("fifo", "device"):  # plan.json is JSON: aliases and nesting do not apply
        commands.append(["fit", str(bag), "--urdf", str(DEFAULT_URDF), "--plan", str(path),
                         "--out", str(tmp_path / "out")])
    for command in commands:
        assert main(command) == 1, command
        err = capsys.readouterr().err
        assert expected in err, (command, err)
    assert not (tmp_path / "out").exists()


def test_every_subcommand_has_help_and_usage_errors_exit_2(capsys):
    for command in ("plan", "fit", "send", "record"):
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        assert done.value.code == 0
        assert "usage: rb_dynamics_identify " + command in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        main(["fit"])
    assert done.value.code == 2
    # the console script's module runs as a program too
    ran = _run("--help", timeout=120)
    assert ran.returncode == 0 and "Exit codes: 0 ok, 1 bad input" in ran.stdout


def test_ros2_run_finds_the_command():
    """``ros2 run rb_dynamics rb_dynamics_identify`` in a colcon install of the package."""
    import ros_tools

    if ros_tools.MISSING is not None:
        pytest.skip(str(ros_tools.MISSING))
    prefix = ros_tools.colcon_install()
    done = ros_tools.ros2("run", "rb_dynamics", "rb_dynamics_identify", "plan", "--help",
                          prefix=prefix)
    assert done.returncode == 0 and "usage: rb_dynamics_identify plan" in done.stdout, done


def test_a_folder_of_bags_reads_as_one_recording_by_joint_name(tmp_path):
    """Two bags (MCAP, SQLite3) in a folder, the joints listed in different orders and with a
    gripper joint between them: one recording, by name, at the header stamps."""
    from rb_dynamics.identification import read_joint_states

    joints = ["a", "b"]
    stamps = 5.0 + 1e-3 * np.arange(300)
    q = np.column_stack([np.sin(stamps), np.cos(stamps)])
    with JointStateBagWriter(tmp_path / "run" / "part1", storage="mcap") as writer:
        for k in range(150):
            writer.write(stamps[k], ["a", "gripper", "b"], [q[k, 0], 0.0, q[k, 1]],
                         [0.0] * 3, [q[k, 1], 9.0, q[k, 0]])
    with JointStateBagWriter(tmp_path / "run" / "part2", storage="sqlite3") as writer:
        for k in range(150, 300):
            writer.write(stamps[k], ["b", "a"], q[k, ::-1], [0.0] * 2, q[k])
    rec = read_joint_states(tmp_path / "run", joints)
    assert np.allclose(rec.stamps, stamps, atol=1e-9) and np.array_equal(rec.position, q)
    assert np.array_equal(rec.effort, q[:, ::-1])  # effort of a = cos, of b = sin, in both
