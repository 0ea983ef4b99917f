# SPDX-License-Identifier: Apache-2.0
"""Joint drives (position / velocity / effort commands) in the in-process simulator, no ROS."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ros2_control_samples import (
    PANDA_ARM,
    PANDA_FINGERS,
    panda_block,
    robot_xml,
    with_blocks,
)
from topic_hardware_emulator import TopicHardwareEmulator

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import ReferenceDynamics, make_dynamics
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import (
    COMMAND_FIELDS,
    JointCommand,
    command_layout,
    load_model,
    read_ros2_control,
)
from rb_dynamics.simulation import (
    DEFAULT_BANDWIDTH,
    JointDrives,
    ServoSimulator,
    make_drives,
    max_stable_bandwidth,
    servo_gains,
    step_spectral_radius,
)

DT = 1e-3
PANDA_READY = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.0])


def setup(xml: str, q0: np.ndarray, integrator: str = "semi_implicit_euler", **drive_options):
    model = load_model(xml)
    layout = command_layout(model, read_ros2_control(xml))
    fast = make_dynamics(model)
    drives = make_drives(model, layout, q0, dt=DT, integrator=integrator, dynamics=fast,
                         **drive_options)
    sim = ServoSimulator(fast, drives, dt=DT, integrator=integrator, q0=q0)
    return model, layout, fast, drives, sim


def command(drives, layout, time, **fields):
    """fields: joint -> (field, value) pairs, e.g. panda_joint1=("velocity", 0.5)."""
    names = list(fields)
    values = {f: [math.nan] * len(names) for f in COMMAND_FIELDS}
    for i, (field, value) in enumerate(fields.values()):
        values[field][i] = value
    cmd = layout.decode(names, values["position"], values["velocity"], values["effort"])
    assert cmd.refused == ()
    return drives.command(cmd, time)


def ur_style_default_arm(pan: str) -> str:
    """default_arm with the pan joint on ``pan`` commands, the rest on position."""
    model = load_model(DEFAULT_URDF)
    states = '<state_interface name="position"/><state_interface name="velocity"/>' \
             '<state_interface name="effort"/>'
    joints = "".join(
        f'<joint name="{n}"><command_interface name="{pan if i == 0 else "position"}"/>'
        f'{states}</joint>' for i, n in enumerate(model.actuated_joint_names))
    block = f'<ros2_control name="arm" type="system"><hardware><plugin>mock_components/' \
            f'GenericSystem</plugin></hardware>{joints}</ros2_control>'
    return DEFAULT_URDF.read_text().replace("</robot>", block + "</robot>")


def slider_xml(mass: float = 1.0) -> str:
    """One prismatic joint along x (gravity is along z): an exactly linear servo plant."""
    return f"""<robot name="slider"><link name="base"/>
      <link name="cart"><inertial><mass value="{mass}"/>
        <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
      <joint name="slide" type="prismatic"><parent link="base"/><child link="cart"/>
        <axis xyz="1 0 0"/><limit lower="-100" upper="100" effort="1e6" velocity="1e3"/></joint>
      <ros2_control name="s" type="system"><hardware><plugin>p</plugin></hardware>
        <joint name="slide"><command_interface name="position"/></joint></ros2_control>
    </robot>"""


# ----------------------------------------------------------------------------- the gripper


def test_panda_fingers_follow_position_commands_through_the_hardware_protocol():
    """Arm in effort (gravity compensation each ms), fingers in position, every command a
    JointState written as joint_state_topic_hardware_interface writes it, states read back."""
    xml = with_blocks(robot_xml("panda"), panda_block())
    model, layout, fast, drives, sim = setup(xml, PANDA_READY)
    (system,) = read_ros2_control(xml)
    hardware = TopicHardwareEmulator(system, model.mimic_joints)
    target, settle, names = 0.03, None, PANDA_ARM + PANDA_FINGERS
    hardware.set_command("panda_finger_joint1", "position", target)
    for _ in range(500):
        hardware.read(names, [*sim.q, sim.q[7]], [*sim.v, sim.v[7]],
                      [*sim.applied_effort, 0.0])
        for joint, tau in zip(PANDA_ARM, fast.gravity(sim.q)):
            hardware.set_command(joint, "effort", tau)
        msg = hardware.write()
        cmd = layout.decode(msg["name"], msg["position"], msg["velocity"], msg["effort"])
        assert cmd.refused == ()
        drives.command(cmd, sim.time)
        sim.advance(DT)
        if abs(sim.q[7] - target) > 0.5e-3:
            settle = None
        elif settle is None:
            settle = sim.time
    error = sim.q[7] - target
    drift = np.abs(sim.q[:7] - PANDA_READY[:7]).max()
    print(f"\nfinger: 0 -> {target} m, within 0.5 mm after {settle:.3f} s, "
          f"error after 0.5 s {error:.2e} m; arm drift {drift:.1e} rad")
    # critically damped at 10 Hz: 2 % settling 5.8/ω = 0.093 s, plus the URDF's damping
    assert settle < 0.12
    assert abs(error) < 1e-6
    assert np.abs(sim.q[:7] - PANDA_READY[:7]).max() < 1e-6
    assert hardware.states[("panda_finger_joint2", "position")] == pytest.approx(target,
                                                                                abs=1e-6)


def test_commands_outside_the_block_range_are_clamped_and_reported():
    xml = with_blocks(robot_xml("panda"), panda_block())
    model, layout, fast, drives, sim = setup(xml, PANDA_READY)
    clamped = command(drives, layout, 0.0, panda_finger_joint1=("position", 0.07),
                      panda_joint5=("effort", 50.0))  # finger max 0.04; joint 5: URDF 12 N·m
    assert clamped.tolist() == [[True, False], [False, False], [False, True]]
    assert drives.target[0, 7] == 0.04 and drives.target[2, 4] == 12.0
    assert sim.applied_effort[4] == 12.0


# ----------------------------------------------------------------------------- drive model


def test_default_gains_scale_with_each_joints_inertia():
    xml = with_blocks(robot_xml("panda"), panda_block(arm="position"))
    model = load_model(xml)
    layout = command_layout(model, read_ros2_control(xml))
    gains = servo_gains(model, PANDA_READY, layout.joints, bandwidth=50.0, damping_ratio=0.7)
    inertia = np.diag(D.crba(model, PANDA_READY))
    np.testing.assert_allclose(gains.kp, inertia * 2500.0, rtol=1e-12)
    np.testing.assert_allclose(gains.kd, 2 * 0.7 * inertia * 50.0, rtol=1e-12)
    assert inertia[7] == pytest.approx(2 * 0.015)  # the mimic finger adds its mass
    override = servo_gains(model, PANDA_READY, layout.joints, overrides={"panda_joint1": (1, 2)})
    assert (override.kp[0], override.kd[0]) == (1, 2)
    with pytest.raises(ValueError, match="bandwidth"):
        servo_gains(model, PANDA_READY, layout.joints, bandwidth=-1.0)


def test_efforts_are_clamped_to_the_urdf_limit():
    xml = with_blocks(robot_xml("panda"), panda_block(arm="position"))
    model, layout, fast, drives, sim = setup(xml, PANDA_READY)
    command(drives, layout, 0.0, panda_joint4=("position", -0.1),  # 2.3 rad away: kp·e ≫ 87
            panda_joint6=("position", 3.7))
    tau = sim.applied_effort
    assert tau[3] == 87.0 and tau[5] == 12.0
    sim.advance(0.05)
    assert abs(sim.applied_effort[3]) <= 87.0 and np.all(np.isfinite(sim.q))


def test_timeouts_zero_efforts_brake_velocities_and_hold_positions():
    xml = ur_style_default_arm("effort")
    model = load_model(xml)
    layout = command_layout(model, read_ros2_control(xml))
    layout.allowed[:, :] = True  # every joint takes every field
    gains = servo_gains(model, model.neutral_configuration(), layout.joints)
    drives = JointDrives(model, layout, gains, command_timeout=0.5)
    q, v = np.zeros(model.nq), np.full(model.nv, 0.01)  # small: no effort clamping
    drives.hold(q)
    command(drives, layout, 0.0, shoulder_pan_joint=("effort", 5.0),
            shoulder_lift_joint=("velocity", 0.05), elbow_joint=("position", 0.005))
    kp, kd = gains.kp, gains.kd
    for t, pan, lift in ((0.4, 5.0, kd[1] * (0.05 - 0.01)), (0.6, 0.0, kd[1] * (0.0 - 0.01))):
        tau = drives.joint_efforts(q, v, t)
        assert tau[0] == pytest.approx(pan)
        assert tau[1] == pytest.approx(lift)
        assert tau[2] == pytest.approx(kp[2] * 0.005 - kd[2] * 0.01)  # held after the timeout
    # a new message replaces the joint's whole command: no stale position term
    command(drives, layout, 1.0, elbow_joint=("velocity", -0.05))
    assert drives.joint_efforts(q, v, 1.0)[2] == pytest.approx(kd[2] * (-0.05 - 0.01))
    # both fields: position loop with velocity feed-forward
    cmd = layout.decode(["elbow_joint"], position=[0.005], velocity=[0.05])
    drives.command(cmd, 1.0)
    assert drives.joint_efforts(q, v, 1.0)[2] == pytest.approx(kp[2] * 0.005 + kd[2] * 0.04)
    assert np.all(np.abs(drives.joint_efforts(q, v, 1.0)) < drives.effort_limit)


def test_start_up_holds_positions_and_honours_command_initial_values():
    fingers = """<joint name="panda_finger_joint1"><command_interface name="position">
      <param name="initial_value">0.01</param></command_interface></joint>"""
    xml = with_blocks(robot_xml("panda"), panda_block(fingers, arm="position"))
    q0 = PANDA_READY.copy()
    q0[7] = 0.03
    model, layout, fast, drives, sim = setup(xml, q0)
    assert drives.modes()["panda_joint2"] == ("position",)
    np.testing.assert_allclose(drives.target[0, :7], q0[:7])
    assert drives.target[0, 7] == 0.01  # the block's command initial_value
    sim.advance(0.3)
    assert sim.q[7] == pytest.approx(0.01, abs=1e-5)
    command(drives, layout, sim.time, panda_joint2=("position", 0.0))
    sim.reset()
    assert drives.target[0, 1] == q0[1] and sim.drives.stamp[1] == 0.0


# ----------------------------------------------------------------------------- loops


def test_velocity_command_converges_on_panda_joint1():
    xml = with_blocks(robot_xml("panda"), panda_block(arm="velocity"))
    model, layout, fast, drives, sim = setup(xml, PANDA_READY, gravity_feedforward=True)
    command(drives, layout, 0.0, panda_joint1=("velocity", 0.5))
    for _ in range(3):
        sim.advance(0.1)
        command(drives, layout, sim.time, panda_joint1=("velocity", 0.5))
    print(f"\npanda joint 1 velocity after 0.3 s: {sim.v[0]:.6f} rad/s (command 0.5)")
    # damping 0.003 against kd ≈ 67 leaves 2e-5 rad/s
    assert sim.v[0] == pytest.approx(0.5, abs=1e-4)
    assert np.abs(sim.v[1:7]).max() < 1e-2  # the others brake (gravity fed forward)


def test_velocity_loop_settles_where_drive_and_friction_balance():
    """default_arm's pan joint has damping 0.5 and Coulomb friction 1.0: the steady state
    solves kd (v_cmd − v) = damping·v + friction·tanh(v/ε)."""
    xml = ur_style_default_arm("velocity")
    q0 = load_model(xml).neutral_configuration()
    model, layout, fast, drives, sim = setup(xml, q0, gravity_feedforward=True)
    for _ in range(10):
        command(drives, layout, sim.time, shoulder_pan_joint=("velocity", 1.0))
        sim.advance(0.1)
    kd, c, f = drives.gains.kd[0], model.damping[0], model.friction[0]
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (low + high)
        balance = kd * (1.0 - mid) - c * mid - f * math.tanh(mid / 0.1)
        low, high = (mid, high) if balance > 0 else (low, mid)
    print(f"\ndefault_arm pan: {sim.v[0]:.6f} rad/s, balance predicts {low:.6f}")
    assert sim.v[0] == pytest.approx(low, abs=1e-5)


@pytest.mark.parametrize("robot", ["panda", "default_arm"])
def test_position_servo_on_every_joint_is_stable_at_1ms(robot):
    """Every joint steps 0.1 rad; at rest each drive balances gravity and friction:
    kp e − g(q) = friction·tanh(q̇/ε) + damping·q̇ (+ kd q̇), so e = g/kp without friction.
    default_arm's light wrists (0.2 N·m of friction on 1.3e-4 kg·m²) are friction-limited:
    kp = 0.52 N·m/rad there, a stick band of 0.38 rad, which they creep through."""
    if robot == "panda":
        xml = with_blocks(robot_xml("panda"), panda_block(arm="position"))
        q0 = PANDA_READY
    else:
        xml = ur_style_default_arm("position")
        q0 = np.array([0.0, -1.2, 1.5, -1.0, -1.5, 0.0])
    model, layout, fast, drives, sim = setup(xml, q0)
    stiff = layout.allowed[0]
    radius = step_spectral_radius(model, q0, layout.joints, drives.gains, stiff, stiff, DT)
    limit = max_stable_bandwidth(model, q0, layout, DT)
    assert radius <= 1.0 and limit > 1.5 * DEFAULT_BANDWIDTH
    target = q0 + 0.1 * np.where(np.arange(model.nq) < 7, 1.0, 0.0)
    target = np.clip(target, model.position_lower, model.position_upper)
    drives.command(JointCommand(np.arange(model.nv), np.vstack(
        [target, np.full((2, model.nv), np.nan)])), 0.0)
    top = 0.0
    for _ in range(10):
        sim.advance(0.1)
        top = max(top, np.abs(sim.v).max())
    kp, kd = drives.gains.kp, drives.gains.kd
    drive = kp * (target - sim.q) - fast.gravity(sim.q)
    losses = model.friction * np.tanh(sim.v / 0.1) + (model.damping + kd) * sim.v
    print(f"\n{robot}: step spectral radius {radius:.6f}, largest stable bandwidth "
          f"{limit:.0f} rad/s (default {DEFAULT_BANDWIDTH:.0f}); peak speed {top:.2f} rad/s; "
          f"after 1 s: error {np.abs(sim.q - target).max():.2e} (g/kp "
          f"{np.abs(fast.gravity(sim.q) / kp).max():.2e}), |v| {np.abs(sim.v).max():.1e}")
    assert top < 2.0 and np.abs(sim.v).max() < 0.05
    np.testing.assert_allclose(drive, losses, atol=3e-4)  # N·m: creeping wrists still accelerate
    # and the feed-forward removes the gravity sag of the joints friction does not hold
    model, layout, fast, drives, sim = setup(xml, q0, gravity_feedforward=True)
    drives.command(JointCommand(np.arange(model.nv), np.vstack(
        [target, np.full((2, model.nv), np.nan)])), 0.0)
    sim.advance(1.0)
    free = model.friction / kp < 1e-3
    assert np.abs(sim.q - target)[free].max() < 1e-4


@pytest.mark.parametrize("integrator", ["semi_implicit_euler", "rk4"])
def test_the_stability_check_predicts_divergence_of_a_slider(integrator):
    xml = slider_xml()
    model = load_model(xml)
    layout = command_layout(model, read_ros2_control(xml))
    q0 = np.zeros(1)
    limit = max_stable_bandwidth(model, q0, layout, DT, integrator, margin=1.0)
    if integrator == "semi_implicit_euler":  # (ωh)² + 4ζωh = 4 at ζ = 1
        assert limit * DT == pytest.approx(2 * math.sqrt(2) - 2, rel=0.011)
    with pytest.raises(ValueError, match=r"servo_bandwidth .* largest stable bandwidth here"):
        make_drives(model, layout, q0, dt=DT, integrator=integrator, bandwidth=1.05 * limit,
                    margin=1.0)
    for factor, grows in ((0.97, False), (1.05, True)):
        gains = servo_gains(model, q0, layout.joints, factor * limit)
        drives = JointDrives(model, layout, gains)
        sim = ServoSimulator(ReferenceDynamics(model), drives, dt=DT, integrator=integrator,
                             q0=q0)
        drives.target[0, 0] = 0.01
        sim.advance(0.3)
        assert (abs(sim.q[0] - 0.01) > 0.01) == grows, (factor, sim.q)


@pytest.mark.parametrize("integrator", ["semi_implicit_euler", "rk4"])
def test_the_stability_check_predicts_divergence_of_coupled_panda(integrator):
    """Every joint on position: the coupled modes, not the diagonal, set the limit."""
    xml = with_blocks(robot_xml("panda"), panda_block(arm="position"))
    model = load_model(xml)
    model.effort_limit[:] = 1e9  # no saturation: the linear analysis holds
    layout = command_layout(model, read_ros2_control(xml))
    fast = make_dynamics(model)
    limit = max_stable_bandwidth(model, PANDA_READY, layout, DT, integrator, margin=1.0)
    for factor, grows in ((0.95, False), (1.05, True)):
        gains = servo_gains(model, PANDA_READY, layout.joints, factor * limit)
        drives = JointDrives(model, layout, gains, gravity=fast.gravity)  # an equilibrium
        sim = ServoSimulator(fast, drives, dt=DT, integrator=integrator, q0=PANDA_READY,
                             v0=np.full(model.nv, 1e-3))
        sim.advance(0.5)
        assert (np.abs(sim.v).max() > 1.0) == grows, (factor, np.abs(sim.v).max())
    print(f"\npanda, {integrator}: every joint on position is stable up to "
          f"{limit:.0f} rad/s at 1 ms (no inertia margin)")


def test_the_default_margin_refuses_a_step_too_long_for_the_default_bandwidth():
    xml = with_blocks(robot_xml("panda"), panda_block(arm="position"))
    model = load_model(xml)
    layout = command_layout(model, read_ros2_control(xml))
    with pytest.raises(ValueError, match="unstable at dt=0.005"):
        make_drives(model, layout, PANDA_READY, dt=0.005)
    make_drives(model, layout, PANDA_READY, dt=0.001)


def test_set_command_routes_efforts_to_the_effort_joints_only():
    xml = with_blocks(robot_xml("panda"), panda_block())
    model, layout, fast, drives, sim = setup(xml, PANDA_READY)
    tau = np.zeros(model.nv)
    tau[3], tau[7] = 100.0, 5.0  # joint 4 limit 87; the finger takes no effort
    clamped = sim.set_command(tau)
    assert clamped.tolist() == [False, False, False, True, False, False, False, False]
    assert sim.applied_effort[3] == 87.0
    assert drives.modes()["panda_finger_joint1"] == ("position",)
    assert not sim.command_timed_out
    sim.time = 10.0
    assert sim.command_timed_out  # no fresh command anywhere (the finger still holds)
    assert sim.applied_effort[3] == 0.0


def test_an_effort_array_goes_into_the_drives_as_its_decoded_command_would():
    """``command_efforts`` (the per-message path of ``~/commands`` when every joint takes
    efforts) leaves the drives exactly as ``command(decode(...))`` does: clamping, the mask of
    clamped values, a joint's whole command replaced, NaN leaving a joint as it is; and while
    no joint is servoed the efforts over a span of steps (``efforts_over``, the compiled
    roll-out's table) are the per-step efforts, command timeouts included."""
    xml = ur_style_default_arm("effort")
    model = load_model(xml)
    layout = command_layout(model, read_ros2_control(xml))
    layout.allowed[:, :] = True
    gains = servo_gains(model, model.neutral_configuration(), layout.joints)
    order = list(reversed(layout.joints))  # a topic's order is not the layout's
    columns = np.array([layout.joints.index(n) for n in order])
    rng = np.random.default_rng(3)
    fast, decoded = (JointDrives(model, layout, gains, command_timeout=0.5) for _ in range(2))
    for drives in (fast, decoded):
        drives.hold(np.zeros(model.nq))
        command(drives, layout, 0.0, elbow_joint=("position", 0.2))
    for t in (0.1, 0.2, 0.3):
        efforts = rng.uniform(-300.0, 300.0, len(order))  # beyond the 150 and 28 N·m limits
        efforts[rng.random(len(order)) < 0.3] = np.nan
        clamped = fast.command_efforts(columns, efforts, t)
        cmd = layout.decode(order, effort=efforts)
        fields, k = np.nonzero(decoded.command(cmd, t))
        assert {order[i] for i in np.flatnonzero(clamped)} == \
            {layout.joints[cmd.index[j]] for j in k} != set() and set(fields) == {2}
        for field in ("active", "target", "stamp"):
            np.testing.assert_array_equal(getattr(fast, field), getattr(decoded, field))
        assert fast.depend_on_state == decoded.depend_on_state
    efforts = np.full(len(order), 20.0)
    fast.command_efforts(columns, efforts, 1.0)
    assert not fast.depend_on_state
    fast.command_efforts(columns[:2], np.array([500.0, -500.0]), 1.3)  # two fresher, clamped
    starts = np.arange(1.45, 1.85, 0.05)  # the older ones time out at 1.5, the fresher at 1.8
    table = fast.efforts_over(starts)
    q, v = np.zeros(model.nq), np.zeros(model.nv)
    for row, t in zip(table, starts):
        np.testing.assert_array_equal(row, fast.effort(q, v, t))
    np.testing.assert_array_equal(fast.efforts_over(np.array([1.35, 1.4])),
                                  fast.effort(q, v, 1.35))
