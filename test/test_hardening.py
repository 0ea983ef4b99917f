# SPDX-License-Identifier: Apache-2.0
"""Nothing a user or a peer sends may kill, stall or fool the nodes, across processes.

Each test plays a hostile or careless peer against the real nodes on loopback DDS and checks
that the node lives (stops cleanly on SIGINT, exit code 0), says what is wrong, and keeps
serving what it still can. Figures (stalls, refusal times) are printed.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from geometry_msgs.msg import Wrench
from pin_oracle import REAL_ROBOTS, arm_torques, rel_err, robots_dir
from rclpy.serialization import deserialize_message, serialize_message
from ros_harness import Session, fresh_name
from ros_harness import control_node as start_control_node
from ros_harness import simulator as start_simulator
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
from urdf_samples import chain_urdf

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import ReferenceDynamics
from rb_dynamics.model import load_model
from rb_dynamics_interfaces.srv import ForwardDynamics, InverseDynamics, Simulate

UR5 = Path(robots_dir(), REAL_ROBOTS["ur5"][0])
# an idle node's stop (SIGINT to exit), when nothing but the signal ends its executor's wait
IDLE_STOP_S = 0.3
UR5_JOINTS = load_model(UR5).actuated_joint_names
UR5_LIMIT = load_model(UR5).effort_limit


def control_node(tmp_path: Path, **params) -> Session:
    return start_control_node(tmp_path, {"state_timeout": 1.0, **params},
                              name=fresh_name("rb_dynamics_hardening"), state_qos=100)


def simulator(tmp_path: Path, **params) -> Session:
    return start_simulator(tmp_path, params, name=fresh_name("rb_simulator_hardening"))


def statuses(session: Session) -> list[str]:
    return [s.message for _, s in session.statuses()]


def gaps(times: list[float]) -> float:
    return float(np.diff(times).max()) if len(times) > 1 else float("inf")


def inverse_request(names, q, v=None) -> InverseDynamics.Request:
    n = len(names)
    return InverseDynamics.Request(joint_names=list(names), positions=[float(x) for x in q],
                                   velocities=[float(x) for x in (v if v is not None
                                                                  else np.zeros(n))],
                                   accelerations=[0.0] * n)


# ----------------------------------------------------------------------------- 1–3: models


def test_descriptions_without_moving_joints_are_taken_and_nothing_is_commanded(tmp_path):
    """A bare link, or only fixed joints (a camera mount), used to kill both nodes."""
    bare = '<robot name="bare"><link name="base"/></robot>'
    mount = ('<robot name="camera_mount"><link name="base"/><link name="camera">'
             '<inertial><mass value="0.2"/><inertia ixx="1e-4" iyy="1e-4" izz="1e-4"/>'
             '</inertial></link><joint name="mount" type="fixed"><parent link="base"/>'
             '<child link="camera"/><origin xyz="0 0 0.1"/></joint></robot>')
    node = control_node(tmp_path, urdf_path=str(DEFAULT_URDF))
    joints = load_model(DEFAULT_URDF).actuated_joint_names
    assert node.command_after(joints, np.zeros(6)) is not None, node.output()
    for name, xml in (("bare", bare), ("camera_mount", mount)):
        node.describe(xml)
        assert node.wait_for_log(f"model '{name}'"), node.output()
        answer = node.call(InverseDynamics, "~/inverse_dynamics", inverse_request([], []))
        assert answer.success and list(answer.efforts) == [], answer.message
    assert "no actuated joints" in node.output()
    node.close()
    sim = simulator(tmp_path, robot_description=bare)
    states = sim.received(JointState, "joint_states")
    assert sim.wait_for(lambda: len(states) > 3, 30.0), sim.output()
    assert list(states[-1][1].name) == []
    sim.close()


def test_a_deep_chain_is_taken_and_a_deeper_one_refused_with_the_limit(tmp_path):
    """A chain deeper than ~500 links raised RecursionError in the tree walk."""
    node = control_node(tmp_path, urdf_path=str(DEFAULT_URDF))
    node.describe(chain_urdf(600))
    assert node.wait_for_log("model 'chain600'", 60.0), node.output()
    names = [f"j{i}" for i in range(1, 601)]
    answer = node.call(InverseDynamics, "~/inverse_dynamics",
                       inverse_request(names, np.full(600, 0.01)), timeout=30.0)
    assert answer.success and np.all(np.isfinite(answer.efforts)), answer.message
    node.describe(chain_urdf(1200))
    assert node.wait_for_log("more than 1000 moving joints", 60.0), node.output()
    assert "keeping 'chain600'" in node.output()
    node.close()


def test_a_massless_leaf_loads_and_forward_dynamics_name_its_links(tmp_path):
    """A moving joint whose child has no <inertial> made the code generator raise
    ZeroDivisionError, which ended both nodes."""
    xml = chain_urdf(3, "leafy", massless_tip=True)
    names = ["j1", "j2", "j3", "tool_joint"]
    why = "moves links ['tool', 'tool_tip'] that carry no mass or inertia"
    node = control_node(tmp_path, robot_description=xml)
    answer = node.call(InverseDynamics, "~/inverse_dynamics", inverse_request(names, [0.1] * 4))
    assert answer.success, answer.message
    forward = node.call(ForwardDynamics, "~/forward_dynamics", ForwardDynamics.Request(
        joint_names=names, positions=[0.1] * 4, velocities=[0.0] * 4, efforts=[0.0] * 4))
    assert not forward.success and why in forward.message, forward.message
    rollout = node.call(Simulate, "~/simulate", Simulate.Request(
        joint_names=names, positions=[0.1] * 4, efforts=[0.0] * 4, duration=0.01))
    assert not rollout.success and why in rollout.message, rollout.message
    node.close()
    sim = simulator(tmp_path, robot_description=xml)
    assert sim.wait_for_log(why), sim.output()
    resume = sim.call(SetBool, "~/pause", SetBool.Request(data=False))
    assert not resume.success and why in resume.message, resume.message
    states = sim.received(JointState, "joint_states")
    assert sim.wait_for(lambda: len(states) > 3, 10.0)  # still publishing, paused
    sim.close()


# ----------------------------------------------------------------------------- 4–6: stalls


def _reference_gravity_time(urdf: Path, q: np.ndarray) -> float:
    """Seconds the reference algorithms take here, now, for the gravity of ``urdf`` at ``q``
    (best of 5): the yardstick of a control loop's work per state before the compiled kernels
    are ready, on this machine under its load."""
    dynamics = ReferenceDynamics(load_model(urdf))
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        dynamics.gravity(q)
        best = min(best, time.perf_counter() - began)
    return best


@pytest.mark.alone  # against a baseline of this run: no other test beside it
def test_loading_a_large_model_never_stalls_the_loop_or_the_services(tmp_path):
    """A 200-link reload once held the control loop 3.7 s (code generation holding the
    interpreter); now the model is built off the executor, the loop runs on the reference
    algorithms until the compiled kernels are ready, and the services answer meanwhile."""
    n = 60
    names = [f"j{i}" for i in range(1, n + 1)]
    q = np.full(n, 0.05)
    path = tmp_path / "chain60.urdf"
    path.write_text(chain_urdf(n, "chain60", mass=0.1))
    node = control_node(tmp_path, urdf_path=str(path))  # so that the topic may replace it
    commands = node.commands
    node.stream_states(names, q)
    assert node.wait_for(lambda: len(commands) > 0, 20.0), node.output()
    start = len(commands)
    latencies = []

    def probe(text: str, count: int, timeout: float) -> None:
        """Call a service every 0.1 s until the log holds ``text`` ``count`` times."""
        def seen() -> bool:
            return node.output().count(text) >= count

        deadline = time.monotonic() + timeout
        while not seen() and time.monotonic() < deadline:
            began = time.monotonic()
            answer = node.call(InverseDynamics, "~/inverse_dynamics", inverse_request(names, q))
            latencies.append(time.monotonic() - began)
            assert answer.success, answer.message
            node.wait_for(seen, 0.1)

    # the compiler runs niced: on a machine whose cores are busy (another suite beside this
    # one) a cold 60-link build takes minutes
    probe("dynamics kernels: c", 1, 600.0)
    assert "dynamics kernels: c" in node.output(), node.output()
    # the baseline, on this machine under its load now: the loop and a service call with
    # nothing being built
    quiet, until = len(commands), time.monotonic() + 1.5
    node.wait_for(lambda: time.monotonic() >= until, 5.0)  # 1.5 s of streaming
    baseline_gap = gaps([t for t, _ in commands[quiet:]])
    began = time.monotonic()
    node.call(InverseDynamics, "~/inverse_dynamics", inverse_request(names, q))
    baseline_call = time.monotonic() - began
    start, latencies[:] = len(commands), []
    heavier = chain_urdf(n, "chain60_heavier", mass=0.2)  # new kernels: a new compile
    node.describe(heavier)
    probe("dynamics kernels: c", 2, 600.0)
    node.wait_for(lambda: len(commands) > start + 100, 5.0)
    times = [t for t, _ in commands[start:]]
    print(f"\n60-link chain rebuilt: largest command gap {1e3 * gaps(times):.1f} ms over "
          f"{len(times)} commands (baseline {1e3 * baseline_gap:.1f} ms); service latency max "
          f"{1e3 * max(latencies):.0f} ms (baseline {1e3 * baseline_call:.0f} ms)")
    assert node.output().count("dynamics kernels: c") >= 2, node.output()
    # a build that held the loop took seconds; the build holds the interpreter only in short
    # slices, so the loop's largest gap stays within a few of its quiet ones plus the answers
    # of the reference algorithms meanwhile, slower while the compiler takes the cores (the
    # gaps: 10-25 best-case reference gravities on this kind of machine, idle or busy)
    reference = _reference_gravity_time(path, q)
    print(f"reference gravity here: {1e3 * reference:.1f} ms")
    assert gaps(times) < 4.0 * baseline_gap + 50.0 * reference
    assert max(latencies) < 1.0 + 4.0 * baseline_call
    node.close()


@pytest.mark.alone  # against a baseline of this run: no other test beside it
def test_oversized_requests_are_refused_and_the_loop_keeps_its_pace(tmp_path):
    """10⁶ wrenches took 42 s, a 10⁵-point trajectory held the loop 2.4 s, a 10⁵-point
    ~/simulate reference never answered."""
    node = control_node(tmp_path, urdf_path=str(UR5), mode="computed_torque")
    commands = node.commands
    node.stream_states(UR5_JOINTS, np.zeros(6))
    assert node.wait_for(lambda: len(commands) > 10, 20.0), node.output()
    request = ForwardDynamics.Request(
        joint_names=UR5_JOINTS, positions=[0.0] * 6, efforts=[0.0] * 6,
        wrench_links=["wrist_3_link"] * 100_000, wrenches=[Wrench()] * 100_000)
    # the baseline: rclpy turning these bytes into Python objects, which the node's process does
    # before any of its code sees the request (holding the interpreter, so the loop waits)
    began = time.monotonic()
    deserialize_message(serialize_message(request), ForwardDynamics.Request)
    rclpy_reads_it = time.monotonic() - began

    def trajectory(points: int, seconds: float = 1.0) -> JointTrajectory:
        msg = JointTrajectory(joint_names=UR5_JOINTS)
        for k in range(points):
            p = JointTrajectoryPoint(positions=[0.1 * np.sin(k / points)] * 6)
            p.time_from_start.sec, p.time_from_start.nanosec = divmod(
                round((k + 1) * seconds / points * 1e9), 1_000_000_000)
            msg.points.append(p)
        return msg

    # built before the measured window: this process streams the states, and building a
    # 10⁵-point message here would stop the stream, not the node
    huge, large = trajectory(100_000), trajectory(10_000, 2.0)
    start = len(commands)
    began = time.monotonic()
    forward = node.call(ForwardDynamics, "~/forward_dynamics", request, timeout=30.0)
    refused_in = time.monotonic() - began
    assert not forward.success and "at most 1000" in forward.message, forward.message
    node.publish_matched(JointTrajectory, "~/joint_trajectory", huge)
    assert node.wait_for_log("ignored unread", 20.0), node.output()
    node.publish_matched(JointTrajectory, "~/joint_trajectory", large)
    rollout = node.call(Simulate, "~/simulate", Simulate.Request(
        joint_names=UR5_JOINTS, positions=[0.0] * 6, duration=0.1,
        torque_mode="computed_torque", reference=huge), timeout=30.0)
    assert not rollout.success and "at most 10000" in rollout.message, rollout.message
    ok = node.call(Simulate, "~/simulate", Simulate.Request(
        joint_names=UR5_JOINTS, positions=[0.0] * 6, duration=0.1,
        torque_mode="computed_torque", reference=trajectory(100)))
    assert ok.success, ok.message
    node.wait_for(lambda: len(commands) > start + 200, 5.0)
    times = [t for t, _ in commands[start:]]
    print(f"\n10⁵ wrenches refused in {refused_in:.2f} s (request round trip); largest "
          f"command gap meanwhile {1e3 * gaps(times):.0f} ms; rclpy reading the request here "
          f"{1e3 * rclpy_reads_it:.0f} ms")
    # beyond what rclpy itself costs (measured here, in this run), the node adds little
    assert gaps(times) < 0.5 + 2.0 * rclpy_reads_it
    node.close()


def test_sigint_during_a_long_roll_out_stops_within_2_s(tmp_path):
    """A signal while a callback was busy took 7.8–9.8 s to end the node. The node
    stays on the reference algorithms, whose roll-out steps in Python (~20 s for this one):
    the compiled roll-out would answer it in well under a second."""
    node = control_node(tmp_path, urdf_path=str(UR5), dynamics_kernels="reference")
    request = Simulate.Request(joint_names=UR5_JOINTS, positions=[0.0] * 6, duration=100.0,
                               time_step=0.001, output_decimation=100, integrator="rk4",
                               torque_mode="gravity_compensation")
    future = node.call_async(Simulate, "~/simulate", request)
    # the roll-out takes seconds: a second in, it is still busy
    assert not node.wait_for(future.done, 1.0)
    took = node.close()  # SIGINT: gone within 2 s, exit code 0
    print(f"\nSIGINT during a 100 s roll-out: stopped in {took:.2f} s")


@pytest.mark.alone  # a wall-clock bound: with another suite beside it, 0.72 s once
def test_sigint_ends_an_idle_nodes_wait_at_once(tmp_path):
    """A control node with nothing to do (no joint states) waits in its executor for up to a
    second at a time. The code this was written against asked the executor to wake
    (``Executor.wake()``), which only has it rebuild its wait set and wait on: the stop came
    when the next timer fired, 0.46–1.0 s after SIGINT with both cores busy, most of the 2 s
    promised. Now it ends the wait: each of three stops well under a second."""
    took = []
    for _ in range(3):
        node = control_node(tmp_path, urdf_path=str(DEFAULT_URDF))
        # idle: started, its kernels loaded (then nothing runs but its timers)
        assert node.wait_for_log("dynamics kernels:", 60.0), node.output()
        node.wait_for(lambda: False, 1.0)
        took.append(node.close())
    print(f"\nSIGINT to an idle control node: gone in {[round(t, 3) for t in took]} s")
    assert max(took) < IDLE_STOP_S, took


@pytest.mark.parametrize("module", ["rb_dynamics.ros.control_node",
                                    "rb_dynamics.ros.simulator_node"])
def test_sigint_while_the_process_imports_ends_it_at_once_with_exit_code_0(module):
    """A stop signal while the process still imports (NumPy is loaded, rclpy and the node are
    not yet: seconds on a busy machine). The code this was written against raised
    KeyboardInterrupt inside the import: a traceback and an exit killed by SIGINT (-2), after
    1.2–3.4 s with both cores busy. Now the process ends at once, exit code 0."""
    from ros_harness import STOP_LIMIT_S, NodeProcess

    node = NodeProcess(module)
    maps = Path(f"/proc/{node.proc.pid}/maps")
    deadline = time.monotonic() + 60.0
    try:
        while node.proc.poll() is None and time.monotonic() < deadline:
            try:
                if "_multiarray_umath" in maps.read_text():  # NumPy's core: importing
                    break
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.001)
        assert node.proc.poll() is None, node.output()
        took = node.stop(timeout=10.0)
    finally:
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()
    print(f"\nSIGINT while {module} imports: gone in {took:.2f} s, exit code "
          f"{node.proc.returncode}")
    assert node.proc.returncode == 0, node.output()
    assert "Traceback" not in node.output(), node.output()
    assert took < STOP_LIMIT_S, node.output()


# ----------------------------------------------------------------------------- 7–11: results


def test_huge_finite_inputs_answer_false_instead_of_nan(tmp_path):
    """V = 1e200 answered success=true with NaN."""
    node = control_node(tmp_path, urdf_path=str(UR5))
    inverse = node.call(InverseDynamics, "~/inverse_dynamics",
                        inverse_request(UR5_JOINTS, [0.1] * 6, [1e200] * 6))
    assert not inverse.success and "not finite" in inverse.message, inverse.message
    forward = node.call(ForwardDynamics, "~/forward_dynamics", ForwardDynamics.Request(
        joint_names=UR5_JOINTS, positions=[0.1] * 6, velocities=[1e200] * 6,
        efforts=[0.0] * 6))
    assert not forward.success and "not finite" in forward.message, forward.message
    node.close()


def _pin_rnea(q, a):
    return arm_torques(UR5, UR5_JOINTS, q, a=a, limit=UR5_LIMIT)


def test_a_trajectory_that_ended_is_refused_and_the_set_point_stands(tmp_path):
    """A trajectory already over drove the arm to its end at saturated torque."""
    node = control_node(tmp_path, urdf_path=str(UR5), mode="computed_torque", kp=[100.0],
                        kd=[20.0])
    assert node.command_after(UR5_JOINTS, np.zeros(6)) is not None, node.output()
    goal = np.array([0.2, -0.3, 0.4, 0.1, 0.2, 0.3])
    node.publish_matched(JointTrajectory, "~/joint_trajectory", JointTrajectory(
        joint_names=UR5_JOINTS, points=[JointTrajectoryPoint(positions=goal.tolist())]))
    q = np.zeros(6)
    assert node.wait_for(lambda: rel_err(node.command_after(UR5_JOINTS, q),
                                         _pin_rnea(q, 100.0 * goal)) < 1e-9, 10.0)
    old = JointTrajectory(joint_names=UR5_JOINTS, points=[JointTrajectoryPoint(
        positions=[1.0] * 6)])
    old.points[0].time_from_start.sec = 1
    now = time.time()
    old.header.stamp.sec, old.header.stamp.nanosec = int(now) - 10, 0
    node.publish_matched(JointTrajectory, "~/joint_trajectory", old)
    assert node.wait_for_log("ended", 5.0), node.output()
    assert rel_err(node.command_after(UR5_JOINTS, q), _pin_rnea(q, 100.0 * goal)) < 1e-9
    node.close()


def test_an_overflowing_reference_is_refused_cleanly_and_does_not_poison_the_next(tmp_path):
    """A reference at 1e308 raised ValueError from the loop every 2 s with a traceback,
    and broke the next trajectory too. A point past ±1e9 is refused where it is read; the
    gain of 1e300 that made a reference 1e9 rad away overflow is refused as unstable at every
    state rate, so the node never computes with it; the next trajectory is followed."""
    node = control_node(tmp_path, urdf_path=str(UR5), mode="computed_torque", kp=[100.0],
                        kd=[20.0], refuse_infeasible_trajectories=False)
    q = np.zeros(6)
    assert node.command_after(UR5_JOINTS, q) is not None, node.output()
    node.publish_matched(JointTrajectory, "~/joint_trajectory", JointTrajectory(
        joint_names=UR5_JOINTS, points=[JointTrajectoryPoint(positions=[1e308] * 6)]))
    assert node.wait_for_log("is implausibly large", 5.0), node.output()
    result = node.set_parameters(kp=[1e300])
    assert not result.successful and "unstable at every state rate" in result.reason, result
    commands = node.commands
    # a driver's stream from here: states sent by hand, slowly on a busy machine, would go
    # stale, and the reference after a gap is the measured position
    # (JointController.restart_trajectory)
    stream = node.stream_states(UR5_JOINTS, q, period=0.005)
    count = len(commands)
    assert node.wait_for(lambda: len(commands) > count + 5, 30.0), node.output()
    goal = np.array([0.2, -0.3, 0.4, 0.1, 0.2, 0.3])
    node.publish_matched(JointTrajectory, "~/joint_trajectory", JointTrajectory(
        joint_names=UR5_JOINTS, points=[JointTrajectoryPoint(positions=goal.tolist())]))
    expected = _pin_rnea(q, 100.0 * goal)
    assert node.wait_for(lambda: rel_err(commands[-1][1].data, expected) < 1e-9, 30.0), \
        node.output()
    stream.stop()
    assert "Traceback" not in node.output()
    node.close()


def test_a_feed_forward_beyond_the_effort_limit_is_refused_naming_it(tmp_path):
    """A point's effort of 1e8 N·m on shoulder_pan (inside the 1e9 plausibility bound; the URDF
    allows 150): the code this was written against took it and commanded +150 N·m on the pan
    for as long as the reference lasted, saying only "effort clamped". Refused with the
    trajectory, naming the joint, the point and the value; the hold goes on."""
    model = load_model(DEFAULT_URDF)
    joints = model.actuated_joint_names
    node = control_node(tmp_path, urdf_path=str(DEFAULT_URDF), mode="computed_torque",
                        kp=[100.0], kd=[20.0])
    q = np.array([0.3, -1.0, 1.2, -0.6, 0.4, 0.2])
    stream = node.stream_states(joints, q, period=0.005)
    commands = node.commands
    assert node.wait_for(lambda: len(commands) > 30, 30.0), node.output()
    points = [JointTrajectoryPoint(positions=(q + 0.05 * k).tolist(), effort=[0.0] * 6)
              for k in (1, 2)]
    for k, point in enumerate(points):
        point.time_from_start.sec = k + 1
    points[1].effort[0] = 1e8
    node.publish_matched(JointTrajectory, "~/joint_trajectory",
                         JointTrajectory(joint_names=joints, points=points))
    assert node.wait_for_log("trajectory: not feasible: effort limit of shoulder_pan_joint "
                             "exceeded at point 1 (t = 2 s): 1e+08 against 150", 10.0), \
        node.output()
    count = len(commands)
    assert node.wait_for(lambda: len(commands) > count + 100, 30.0), node.output()
    pan = np.array([c[1].data[0] for c in commands[count:]])
    assert np.abs(pan - ReferenceDynamics(model).gravity(q)[0]).max() < 1e-6, pan.max()
    assert "clamped" not in node.output(), node.output()
    stream.stop()
    node.close()


def test_gains_set_without_a_model_are_checked_now_and_again_on_load(tmp_path):
    """With no model, NaN or negative gains were accepted, and then every description
    was refused."""
    node = control_node(tmp_path)
    assert node.wait_for_log("waiting for a robot description", 30.0)  # a start, maybe busy
    for bad in ([float("nan")], [-5.0]):
        result = node.set_parameters(kp=bad)
        assert not result.successful and "finite and ≥ 0" in result.reason, result.reason
    assert node.set_parameters(kp=[10.0, 20.0, 30.0]).successful  # joints unknown yet
    node.describe(UR5.read_text())
    assert node.wait_for_log("kp needs 1 or 6 values", 30.0), node.output()
    assert node.wait_for(lambda: any("kp needs 1 or 6 values" in m for m in statuses(node)),
                         5.0)
    assert node.set_parameters(kp=[100.0] * 6).successful
    assert node.wait_for_log("model 'ur5'", 30.0), node.output()
    assert node.command_after(UR5_JOINTS, np.zeros(6)) is not None
    node.close()


def test_the_simulator_refuses_parameters_it_cannot_apply(tmp_path):
    """Time_step −1, integrator "bogus" and a NaN gravity were accepted and ignored."""
    sim = simulator(tmp_path, urdf_path=str(UR5))
    for name, value in (("time_step", -1.0), ("integrator", "bogus"),
                        ("gravity", [float("nan")] * 3), ("real_time_factor", 0.0),
                        ("command_timeout", float("nan"))):
        result = sim.set_parameters(**{name: value})
        assert not result.successful, (name, value)
    assert sim.set_parameters(real_time_factor=0.5, command_timeout=0.2).successful
    sim.close()
