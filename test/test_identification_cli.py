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
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from rcl_interfaces.srv import GetParameters
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
)
from rb_dynamics.model import (
    DynamicsOverlay,
    apply_overlay,
    load_model,
    read_overlay,
    write_overlay,
)
from rb_dynamics.ros.identification import main
from rb_dynamics.ros.identification.rounds import effort_uncertainty
from rb_dynamics_interfaces.srv import InverseDynamics

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


def test_run_identifies_in_rounds_and_loads_each_result_into_the_controller(tmp_path):
    """``run`` on the simulated arm driven by the control node on the URDF's model: it plans,
    records while sending, fits, loads the result into the node (overlay service, description
    topic; checked by the node's own inverse dynamics) and excites again while the fit says a
    further round is due. The first round's fit already finds the arm (the recording of a
    plan the URDF's model executes in part); under its model the second round executes the
    plan; the best round's model is the arm's."""
    pytest.importorskip("control_msgs.action", reason="control_msgs (../shared/vendor) is not "
                        "installed: no FollowJointTrajectory action to send the plan to")
    true_urdf, true_overlay, true = _true_arm(tmp_path)
    out = tmp_path / "run"
    sim = Session("rb_dynamics.ros.simulator_node", tmp_path, {
        "urdf_path": str(true_urdf), "dynamics_overlay": str(true_overlay),
        "publish_rate": 1000.0, "time_step": 0.001, "publish_clock": True,
        "command_timeout": 0.2, "start_paused": True, "lockstep": True,
        "lockstep_timeout": 5.0, "effort_noise": EFFORT_NOISE, "effort_noise_relative": 0.01,
        "encoder_resolution": 2 * math.pi / 2 ** 17, "effort_delay": EFFORT_DELAY,
        "publish_jitter": 2e-4})
    control = Session("rb_dynamics.ros.control_node", tmp_path, {
        "urdf_path": str(DEFAULT_URDF), "mode": "computed_torque", "kp": KP,
        "kd": [2.0 * math.sqrt(k) for k in KP], "state_timeout": 0.1, "use_sim_time": True},
        "-r", "~/effort_commands:=/rb_simulator/commands", peer=sim.peer)
    try:
        pause = sim.peer.node.create_client(SetBool, "/rb_simulator/pause")
        assert sim.peer.wait_for(pause.service_is_ready, 60.0), sim.output()
        states = sim.received(JointState, "/joint_states")
        assert sim.peer.call(pause, SetBool.Request(data=False)).success
        # the loop is closed (the control node answers states) before the goal goes out
        assert sim.peer.wait_for(lambda: len(states) > 200, 60.0), control.output()[-3000:]
        # 2 × 14 s of lock-step sim time: minutes of wall time on a busy machine
        ran = _run("run", "--urdf", str(DEFAULT_URDF), "--out", str(out), "--period", "3",
                   "--harmonics", "4", "--periods", "4", "--lead-in", "2", "--time-budget", "8",
                   "--rounds", "2", "--min-improvement", "0", "--timeout", "60",
                   timeout=1500.0)
        print("\n" + ran.stdout)
        assert ran.returncode == 0, ran.stdout + ran.stderr + control.output()[-3000:]
        log = control.output()
        # the collision thresholds take the model the node holds: its validation RMS per joint
        held = control.call(GetParameters, "~/get_parameters", GetParameters.Request(
            names=["contact.effort_uncertainty"]), timeout=30).values[0].double_array_value
    finally:
        close_all(control, sim)
    best = json.loads((out / "rounds.json").read_text())["best"]
    sigma = effort_uncertainty(out / f"round{best}")
    assert list(held) == [sigma[j] for j in true.actuated_joint_names], (list(held), sigma)
    assert all(s > 0.0 for s in sigma.values()), sigma
    assert "contact.effort_uncertainty (the validation RMS):" in ran.stderr
    assert "condition number" in ran.stdout and "plan: condition" in ran.stderr
    followed = ran.stdout[ran.stdout.index("followed ("):]  # send's report of the first goal
    assert all(name in followed for name in true.actuated_joint_names), ran.stdout
    summary = json.loads((out / "rounds.json").read_text())
    rounds = summary["rounds"]
    # the URDF's model lacks the armature: the first round does not execute the plan in full
    assert rounds[0]["next"] is not None and len(rounds) == 2, summary
    assert "dynamics overlay:" in log, log[-3000:]
    assert f"published {out / 'round1' / 'identified.urdf'}" in ran.stderr
    assert min(rounds[1]["range_covered"].values()) >= 0.95, summary
    q = np.random.default_rng(3).uniform(-2.0, 2.0, (2000, true.nq))
    g_true = gravity(true, q)
    urdf_error = np.abs(gravity(load_model(DEFAULT_URDF), q) - g_true).max() / np.abs(
        g_true).max()
    for number in (1, 2):
        folder = out / f"round{number}"
        report = json.loads((folder / "report.json").read_text())
        identified = apply_overlay(load_model((folder / "identified.urdf").read_text()),
                                   read_overlay(folder / "overlay.yaml"))
        error = np.abs(gravity(identified, q) - g_true).max() / np.abs(g_true).max()
        print(f"round {number}: gravity error {100 * error:.3f} % of max |g| (URDF "
              f"{100 * urdf_error:.2f} %), delay {1e3 * report['delay_s']:.2f} ms; armature "
              f"true {np.round(true.armature, 4).tolist()}, identified "
              f"{np.round(identified.armature, 4).tolist()}")
        assert report["base_parameters"] == 58 and report["periods_fitted"] >= 2
        # closed loop on a short plan (3 s period): the tracking loop's own effort content and
        # a weaker excitation than the 10 s plans of the benchmark (which reach ≤ 1.25 σ)
        assert max(report["consistent"]["validation"]["rms_over_sigma"]) <= 1.5
        assert error <= 0.01 and urdf_error >= 10 * error
        assert (folder / "validation.png").exists()
    # the effort a state reports was applied over the step before it: half a step later still
    first = json.loads((out / "round1" / "report.json").read_text())
    assert abs(first["delay_s"] - (EFFORT_DELAY + 0.0005)) < 5e-4
    assert summary["best"] == 2 and rounds[1]["poor"] is None, summary


def test_loading_a_result_into_a_controller_that_cannot_take_it_changes_nothing(tmp_path):
    """A control node given its description as the robot_description parameter takes no
    other: ``run``'s loading step says so (exit 4 of the run) before it changes the node's
    overlay, and the node's dynamics stay the URDF's."""
    true_urdf, true_overlay, _ = _true_arm(tmp_path)
    folder = tmp_path / "result"
    folder.mkdir()
    (folder / "identified.urdf").write_text(true_urdf.read_text())
    (folder / "overlay.yaml").write_text(true_overlay.read_text())
    name = fresh_name("rb_dynamics")
    topic = f"/{fresh_name('description')}"  # nobody else's: only the node could take it
    control = Session("rb_dynamics.ros.control_node", tmp_path, {
        "robot_description": Path(DEFAULT_URDF).read_text()}, name=name)
    names = load_model(DEFAULT_URDF).actuated_joint_names
    request = InverseDynamics.Request(joint_names=names, positions=[0.3] * len(names),
                                      accelerations=[1.0] * len(names))
    try:
        before = control.call(InverseDynamics, "~/inverse_dynamics", request)
        assert before.success, before.message
        loading = subprocess.run([sys.executable, "-c", (
            "import sys\nfrom pathlib import Path\n"
            "from rb_dynamics.ros.identification.rounds import LoadError, load_into_controller\n"
            "try:\n"
            "    load_into_controller(Path(sys.argv[1]), node=sys.argv[2], "
            "description_topic=sys.argv[3], say=print, timeout=5.0)\n"
            "except LoadError as exc:\n"
            "    print(exc)\n"
            "    sys.exit(4)\n"), str(folder), f"/{name}", topic],
            capture_output=True, text=True, timeout=120)
        assert loading.returncode == 4, loading.stdout + loading.stderr
        assert f"nobody subscribes to {topic}" in loading.stdout, loading.stdout
        assert "robot_description parameter" in loading.stdout, loading.stdout
        after = control.call(InverseDynamics, "~/inverse_dynamics", request)
        # (the first answer may come from the reference algorithms, the second from the
        # compiled kernels: the same to rounding)
        assert np.allclose(after.efforts, before.efforts, rtol=1e-9, atol=1e-12)
        assert "dynamics overlay:" not in control.output()
    finally:
        control.close()
