# SPDX-License-Identifier: Apache-2.0
"""The stability bound of the sampled PD loop (rb_dynamics/control/stability.py) against a
simulation of that loop: a double integrator under a held command computed from the state one
period before, at gains just under and just over the bound."""

from __future__ import annotations

import numpy as np
import pytest

from rb_dynamics.control import stability as S


def simulate(kp: float, kd: float, period: float, steps: int = 20000) -> float:
    """|e| at the end (from e = 1 at rest) of e'' = u held over each period, u computed from
    the state one period before (exact discretization of the double integrator)."""
    e, v, u = 1.0, 0.0, 0.0
    for _ in range(steps):
        e, v, u = e + period * v + 0.5 * period**2 * u, v + period * u, -kp * e - kd * v
        if abs(e) > 1e6:
            return abs(e)
    return abs(e)


@pytest.mark.parametrize("period", [1e-3, 2e-3, 1e-2])
@pytest.mark.parametrize("kd_period", [0.02, 0.3, 0.625, 0.9])
def test_the_bound_separates_decay_from_growth(period, kd_period):
    kd = kd_period / period
    bound = S.max_stable_kp(kd, period)
    assert bound > 0
    assert simulate(0.98 * bound, kd, period) < 1.0
    assert simulate(1.02 * bound, kd, period, steps=200_000) > 1.0
    # the roots of the characteristic polynomial agree: on the unit circle at the bound
    a, b = bound * period**2, kd_period
    roots = np.roots([1.0, -2.0, 1 + a / 2 + b, a / 2 - b])
    assert np.abs(roots).max() == pytest.approx(1.0, abs=1e-9)


def test_the_damping_bound_and_no_damping():
    period = 1e-3
    assert S.max_stable_kd(period) == pytest.approx(1000.0)
    assert simulate(0.0, 0.99e3, period) < 1.0 + 1e-9  # kp = 0: e stays, v decays
    assert S.max_stable_kp(0.0, period) == 0.0  # undamped: no position gain is stable
    assert simulate(100.0, 0.0, period, steps=200_000) > 1.0
    assert S.max_stable_kp(1000.0, period) == 0.0


def test_the_refusal_names_the_joint_and_the_bound():
    joints = ["a", "b"]
    assert S.gain_bound_violation([100.0, 400.0], [20.0, 40.0], 1e-3, joints) is None
    text = S.gain_bound_violation([100.0, 1e9], [20.0, 40.0], 1e-3, joints)
    assert text.startswith("kp 1e+09 with kd 40 on b makes the sampled loop unstable: kp < 26")
    assert "at the state period 1 ms" in text
    text = S.gain_bound_violation([100.0], [1e9], 1e-3, ["a"])
    assert "kd 1e+09 on a" in text and "kd < 1000 " in text
    # impedance: N·m/rad on an inertia of 0.01 kg·m² acts as 100× the gain
    names = ("impedance.stiffness", "impedance.damping")
    assert S.gain_bound_violation([3000.0], [50.0], 1e-3, ["w"], names, [1.0]) is None
    text = S.gain_bound_violation([3000.0], [50.0], 1e-3, ["w"], names, [0.01])
    assert text.startswith("impedance.damping 50 on w makes the sampled loop unstable: "
                           "impedance.damping < 10 at the state period 1 ms on the effective "
                           "inertia 0.01"), text
    text = S.gain_bound_violation([3000.0], [0.5], 1e-3, ["w"], names, [1.0])
    assert text.startswith("impedance.stiffness 3000 with impedance.damping 0.5"), text


def test_the_effective_inertia_is_at_most_the_diagonal():
    M = np.array([[2.0, 0.5], [0.5, 0.4]])
    m = S.effective_inertia(M)
    assert np.all(m <= np.diag(M)) and m[1] == pytest.approx(0.4 - 0.25 / 2.0)


def simulate_pid(kp: float, kd: float, ki: float, period: float, steps: int = 40000) -> float:
    """|e| at the end (from e = 1 at rest) of the sampled loop with integral action as the law
    runs it: i ← i + ki e T on each state, u = −kp e − kd e' − i applied one period later."""
    e, v, u, i = 1.0, 0.0, 0.0, 0.0
    for _ in range(steps):
        i += ki * e * period
        e, v, u = e + period * v + 0.5 * period**2 * u, v + period * u, -kp * e - kd * v - i
        if abs(e) > 1e6:
            return abs(e)
    return abs(e)


@pytest.mark.parametrize("period", [1e-3, 1e-2])
@pytest.mark.parametrize("kp_share, kd_period", [(0.3, 0.05), (0.6, 0.4), (0.2, 0.8)])
def test_the_integral_bound_separates_decay_from_growth(period, kp_share, kd_period):
    """max_stable_ki against a simulation of the loop: just under the bound the error decays,
    just over it grows."""
    kd = kd_period / period
    kp = kp_share * S.max_stable_kp(kd, period)
    bound = S.max_stable_ki(kp, kd, period)
    assert bound > 0.0
    assert simulate_pid(kp, kd, 0.97 * bound, period) < 1.0
    assert simulate_pid(kp, kd, 1.03 * bound, period, steps=400_000) > 1.0
    text = S.gain_bound_violation([kp], [kd], period, ["j"], ki=[1.1 * bound])
    assert text.startswith(f"ki {1.1 * bound:g} with kp {kp:g} and kd {kd:g} on j makes the "
                           "sampled loop unstable: ki < "), text
    assert S.gain_bound_violation([kp], [kd], period, ["j"], ki=[0.9 * bound]) is None


def test_impedance_gains_are_critically_damped_on_each_inertia():
    k, d = S.impedance_gains([2.0, 1e-4], 2.0)
    omega = 2 * np.pi * 2.0
    np.testing.assert_allclose(k, [2.0 * omega**2, 1e-4 * omega**2])
    np.testing.assert_allclose(d, [4.0 * omega, 2e-4 * omega])
    k, d = S.impedance_gains([2.0, 1e-4], 2.0, stiffness=[50.0, 0.01])
    np.testing.assert_allclose(d, 2 * np.sqrt([100.0, 1e-6]))
    # every joint's loop is then the same, whatever its inertia: stable at 1 kHz and 50 Hz
    for period in (1e-3, 2e-2):
        assert S.gain_bound_violation(*S.impedance_gains([2.0, 1e-4], 2.0), period, ["a", "b"],
                                      inertia=[2.0, 1e-4]) is None


def test_the_guard_checks_after_the_period_is_measured_and_when_it_drifts():
    """StabilityGuard on a JointController: kp, kd stable at 1 kHz and not at 50 Hz."""
    from rb_dynamics import DEFAULT_URDF
    from rb_dynamics.control import JointController
    from rb_dynamics.model import load_model

    model = load_model(DEFAULT_URDF)
    controller = JointController(model, mode="computed_torque", kp=2000.0, kd=80.0,
                                 max_state_age=0.1)
    guard = S.StabilityGuard()
    t = 0.0
    for _ in range(S.StabilityGuard.SETTLE + 50):  # 1 kHz: stable
        t += 1e-3
        assert guard.observe(controller, t) is None
    assert guard.period == pytest.approx(1e-3)
    slow, problem = 0, None
    while problem is None and slow < 400:  # the driver slows to 50 Hz
        t += 2e-2
        slow += 1
        problem = guard.observe(controller, t)
    assert problem is not None and "on shoulder_pan_joint makes the sampled loop unstable" \
        in problem, problem
    assert slow <= S.StabilityGuard.WINDOW, slow  # found once most recent gaps are slow
    controller.set_gains(kp=50.0, kd=10.0)  # gains for 50 Hz: checked with the next state
    guard.recheck()
    assert guard.observe(controller, t + 2e-2) is None
    # a publish-rate limit lengthens the loop's period
    guard.min_period = 0.5
    guard.recheck()
    assert "kd 10 on shoulder_pan_joint" in guard.observe(controller, t + 4e-2)


def test_a_node_does_not_command_with_gains_its_driver_rate_cannot_take(tmp_path):
    """Gains set at start-up (never checked before: only a change at run time was): kp 2000,
    kd 80 are stable at 1 kHz, not at the 50 Hz this driver publishes at (kd < 1/T = 50).
    After the first states the node stops commanding (its stop command once), says why with
    the bound, and rejects goals; gains within the bound are taken and it commands again."""
    import time

    from control_msgs.action import FollowJointTrajectory
    from rclpy.action import ActionClient
    from ros_harness import control_node, fresh_name
    from trajectory_msgs.msg import JointTrajectoryPoint

    from rb_dynamics import DEFAULT_URDF
    from rb_dynamics.model import load_model

    joints = load_model(DEFAULT_URDF).actuated_joint_names
    q = np.array([0.3, -1.0, 1.2, -0.6, 0.4, 0.2])
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque",
                                   "kp": [2000.0], "kd": [80.0], "state_timeout": 0.5},
                        name=fresh_name("rb_dynamics_rate"))
    try:
        commands = node.commands
        stream = node.stream_states(joints, q, 0.02)
        assert node.wait_for_log("makes the sampled loop unstable", 30.0), node.output()
        assert "with kd 80 on shoulder_pan_joint makes the sampled loop unstable: kp < " \
            in node.output() or "kd 80 on shoulder_pan_joint makes the sampled loop unstable: " \
            "kd < " in node.output(), node.output()
        assert node.wait_for_log("unstable gains: stop command 'gravity'", 5.0), node.output()
        node.settle(commands)
        stopped = len(commands)
        node.peer.spin_for(1.0)  # 50 states: none commanded
        assert len(commands) == stopped, node.output()
        client = ActionClient(node.peer.node, FollowJointTrajectory,
                              f"/{node.name}/follow_joint_trajectory")
        assert node.wait_for(client.server_is_ready, 30.0)
        goal = FollowJointTrajectory.Goal()
        goal.trajectory.joint_names = list(joints)
        point = JointTrajectoryPoint(positions=[float(x) for x in q + 0.1])
        point.time_from_start.sec = 2
        goal.trajectory.points = [point]
        sent = client.send_goal_async(goal)
        assert node.wait_for(sent.done, 10.0) and not sent.result().accepted
        assert node.wait_for_log("the controller is not commanding: ", 5.0), node.output()
        # kd 80 is refused at run time too, naming the measured period
        result = node.set_parameters(kp=[2000.0], kd=[80.0])
        assert not result.successful and "makes the sampled loop unstable" in result.reason, \
            result
        assert node.set_parameters(kp=[100.0], kd=[20.0]).successful  # kd T 0.4: stable
        began = time.monotonic()
        assert node.wait_for(lambda: len(commands) > stopped + 10, 10.0), node.output()
        print(f"commanding again {time.monotonic() - began:.2f} s after stable gains")
        stream.stop()
    finally:
        node.close()


def test_gains_unstable_at_every_rate_are_refused_before_any_period_or_robot(tmp_path):
    """kp 1e9 (kd 20) is unstable at any state rate a driver has. The code this was written
    against started with it in the parameter file and sent 19 of its first 21 commands at the
    effort limit before its first check; and a change before the description arrived was
    answered successful with an empty reason. Now the node does not start, naming the
    parameter, and the change is refused with the reason."""
    from ros_harness import control_node, fresh_name, refused_start

    output = refused_start("rb_dynamics.ros.control_node", tmp_path, {
        "urdf_path": str(_default_urdf()), "mode": "computed_torque", "kp": [1e9]},
        timeout=30.0)
    assert "kp 1e+09 with kd 20 on every joint makes the sampled loop unstable: kp < " \
        in output and "at the state period 0.1 ms, the shortest period a driver plausibly " \
        "has (10000 Hz): unstable at every state rate" in output, output
    assert S.implausible_gain_problem([2000.0], [80.0]) is None  # fine up to 10 kHz
    node = control_node(tmp_path, {"mode": "computed_torque"},
                        name=fresh_name("rb_dynamics_plausible"))
    try:
        assert node.wait_for_log("waiting for a robot description", 30.0), node.output()
        result = node.set_parameters(kp=[1e9])
        assert not result.successful and result.reason.startswith(
            "kp 1e+09 with kd 20 on every joint makes the sampled loop unstable"), result
        result = node.set_parameters(kp=[100.0, 1e9], kd=[20.0])
        assert not result.successful and "on joint 1 " in result.reason, result
        assert node.set_parameters(kp=[2000.0], kd=[80.0]).successful
    finally:
        node.close()


def _default_urdf():
    from rb_dynamics import DEFAULT_URDF

    return DEFAULT_URDF


def test_the_law_commands_only_after_its_gains_were_checked_at_the_measured_period(tmp_path):
    """kp 2000, kd 80: plausible (stable up to 10 kHz), unstable at this driver's 50 Hz. The
    code this was written against commanded with them from the first state until its check
    after 20 states (an error of 0.2 rad made 1500 N·m, clamped at the limit). Now every
    command before the check is the stop command's effort, the gravity at the measured pose,
    and after it the node stops saying why."""
    from ros_harness import control_node, fresh_name

    from rb_dynamics import DEFAULT_URDF
    from rb_dynamics.dynamics import reference
    from rb_dynamics.model import load_model

    model = load_model(DEFAULT_URDF)
    joints = model.actuated_joint_names
    q0 = np.array([0.3, -1.0, 1.2, -0.6, 0.4, 0.2])
    q1 = q0 + 0.2
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque",
                                   "kp": [2000.0], "kd": [80.0], "state_timeout": 0.5},
                        name=fresh_name("rb_dynamics_first"))
    try:
        commands = node.commands
        assert node.command_after(joints, q0) is not None, node.output()  # holds at q0
        stream = node.stream_states(joints, q1, 0.02)
        assert node.wait_for_log("makes the sampled loop unstable", 30.0), node.output()
        stream.stop()
        node.settle(commands)
        gravity = [reference.gravity(model, q) for q in (q0, q1)]
        sent = np.array([c[1].data for c in commands])
        worst = np.abs(sent).max(axis=0)
        law = [k for k, c in enumerate(sent)
               if not any(np.allclose(c, g, rtol=1e-9, atol=1e-9) for g in gravity)]
        print(f"{len(sent)} commands, largest per joint {np.round(worst, 2).tolist()}; "
              f"{len(law)} not the gravity hold")
        assert not law, (law, sent[law[:3]].tolist(), node.output())
    finally:
        node.close()


def test_the_period_is_the_drivers_when_the_clock_comes_in_bursts(tmp_path):
    """On sim time, states stamped every 1 ms while /clock reaches the node every 6 ms (a busy
    simulator, or a node whose clock messages queue): kd 200 is stable at the driver's 1 ms
    (kd T 0.2), not at 6 ms. The code this was written against measured the period on its
    clock, so 6 ms, and stopped commanding, refusing the identification's own goal in a busy
    CI run. The period is the one between the states' stamps: the law commands."""
    from ros_harness import control_node, fresh_name
    from rosgraph_msgs.msg import Clock

    from rb_dynamics import DEFAULT_URDF
    from rb_dynamics.model import load_model

    joints = load_model(DEFAULT_URDF).actuated_joint_names
    q = np.array([0.3, -1.0, 1.2, -0.6, 0.4, 0.2])
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF), "mode": "computed_torque",
                                   "kp": [10000.0], "kd": [200.0], "state_timeout": 0.5,
                                   "use_sim_time": True},
                        name=fresh_name("rb_dynamics_bursts"), state_qos=100)
    try:
        commands = node.commands
        clock = node.publisher(Clock, "/clock")
        tick = Clock()
        step_ns, start_ns = 1_000_000, 100 * 1_000_000_000
        k = 0

        def step(timeout: float = 1.0) -> bool:
            """One state (and /clock every 6th), answered (within ``timeout`` s) before the
            next as in lock-step: the node takes every state whatever the machine's load."""
            nonlocal k
            stamp_ns = start_ns + k * step_ns
            if k % 6 == 0:
                tick.clock.sec, tick.clock.nanosec = divmod(stamp_ns, 1_000_000_000)
                clock.publish(tick)
            count = len(commands)
            node.send_state(joints, q, stamp_ns=stamp_ns)
            k += 1
            return node.wait_for(lambda: len(commands) > count, timeout)

        # the first states may precede the match of the node's reader: sent until answered
        assert node.wait_for(lambda: step() and step() and step(), 60.0), node.output()
        answered = sum(step(10.0) for _ in range(200))  # (a busy machine may hold a node)
        assert "unstable" not in node.output(), node.output()
        assert answered == 200, (answered, node.output())
    finally:
        node.close()


POSE = np.array([2.56, 1.59, -0.03, 2.16, -3.12, 1.04])  # the shoulder pan at 1/51 of its q = 0


def test_impedance_defaults_are_stable_at_every_pose():
    """Impedance with every parameter at its default (K, D derived at impedance.frequency on
    each joint's inertia) against the existing check at 2000 random poses of the bundled arm at
    1 ms and 2 ms: derived on the smallest inertia over the workspace, they are stable at
    every one (gains derived on the inertia at q = 0 are unstable at 17 and 67 of them, and at
    POSE)."""
    from rb_dynamics import DEFAULT_URDF
    from rb_dynamics.control import JointController
    from rb_dynamics.model import load_model

    model = load_model(DEFAULT_URDF)
    controller = JointController(model, mode="impedance")
    controller.set_gains(**dict(zip(("stiffness", "damping"),
                                    S.impedance_gains_for(controller, 2.0, None, None))))
    rng = np.random.default_rng(1)  # not the seed the gains were derived with
    poses = [POSE, *rng.uniform(model.position_lower, model.position_upper, (2000, model.nq))]
    for period in (1e-3, 2e-3):
        unstable = []
        for q in poses:
            controller.q = q
            why = S.active_gain_problem(controller, period)
            if why is not None:
                unstable.append(why)
        print(f"{period * 1e3:g} ms: unstable at {len(unstable)} of {len(poses)} poses")
        assert not unstable, (len(unstable), unstable[:2])


def test_impedance_defaults_hold_the_arm_at_a_folded_pose_in_lock_step(tmp_path):
    """The bundled arm at POSE on the simulator in lock-step at 1 kHz, the control node in
    impedance with every impedance parameter at its default. The code this was written against
    said "impedance.damping 95.241 on shoulder_pan_joint makes the sampled loop unstable …
    not commanding" after 20 states and the arm went limp; now it holds the pose."""
    from payload_rig import ClosedLoop

    from rb_dynamics import DEFAULT_URDF

    rig = ClosedLoop(tmp_path, DEFAULT_URDF, POSE, effort_noise=0.0, mode="impedance")
    try:
        rig.start()
        rig.run_for(1.0)
        output = rig.control.output()
        assert "makes the sampled loop unstable" not in output, rig.logs()
        drift = np.abs(rig.mean_position(0.1) - POSE).max()
        print(f"largest drift from the pose after 1 s: {drift:.2e} rad")
        assert drift < 0.02, rig.logs()
    finally:
        rig.close()
