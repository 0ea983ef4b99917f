# SPDX-License-Identifier: Apache-2.0
"""ros2_control's soft joint limits on an effort interface, without ROS: the URDF's
``<safety_controller>`` in the model, ``soft_limit_effort_bounds`` against a line-by-line
transcription of joint_limits' ``JointSoftLimiter::on_enforce`` (effort branch, the previous
command without a position) and ``compute_effort_limits``, and a simulated arm driven toward
its limit that stops at the soft limit."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from pin_oracle import REAL_ROBOTS, robots_dir

from rb_dynamics.control import (
    EffortLimiter,
    JointController,
    TrajectoryPoint,
    bound_effort,
    soft_limit_effort_bounds,
)
from rb_dynamics.dynamics import make_dynamics
from rb_dynamics.model import URDFError, load_model
from rb_dynamics.simulation import Simulator

SOFT_LOWER, SOFT_UPPER, HARD = -1.0, 1.0, 1.5


def arm_urdf(safety: str = ('<safety_controller soft_lower_limit="-1.0" soft_upper_limit="1.0"'
                            ' k_position="10" k_velocity="20"/>'), axis: str = "0 1 0") -> str:
    """Two links swinging about ``axis`` (y: gravity pulls the first joint toward +q, z: no
    gravity torque); the first joint has soft limits ±1 rad inside its hard limits ±1.5 rad,
    the second none."""
    def link(name, mass):
        return (f'<link name="{name}"><inertial><origin xyz="0.25 0 0"/><mass value="{mass}"/>'
                '<inertia ixx="0.01" iyy="0.05" izz="0.05" ixy="0" ixz="0" iyz="0"/>'
                '</inertial></link>')
    return f"""<robot name="soft_arm"><link name="base"/>{link("l1", 2.0)}{link("l2", 1.0)}
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/><axis xyz="{axis}"/>
    <limit lower="-{HARD}" upper="{HARD}" effort="40" velocity="2"/>{safety}</joint>
  <joint name="j2" type="revolute"><parent link="l1"/><child link="l2"/><axis xyz="{axis}"/>
    <origin xyz="0.5 0 0"/><limit lower="-2" upper="2" effort="20" velocity="3"/></joint>
</robot>"""


def test_safety_controller_is_read_as_urdfdom_reads_it():
    model = load_model(arm_urdf())
    np.testing.assert_array_equal(model.soft_lower, [-1.0, np.nan])
    np.testing.assert_array_equal(model.soft_upper, [1.0, np.nan])
    np.testing.assert_array_equal(model.k_position, [10.0, np.nan])
    np.testing.assert_array_equal(model.k_velocity, [20.0, np.nan])
    defaults = load_model(arm_urdf('<safety_controller k_velocity="3"/>'))
    np.testing.assert_array_equal(defaults.soft_lower[:1], [0.0])
    np.testing.assert_array_equal(defaults.k_position[:1], [0.0])
    with pytest.raises(URDFError, match=r"j1.*<safety_controller k_velocity>: missing"):
        load_model(arm_urdf('<safety_controller k_position="3"/>'))
    with pytest.raises(URDFError, match="soft_upper_limit"):
        load_model(arm_urdf('<safety_controller soft_upper_limit="x" k_velocity="1"/>'))
    panda = load_model(Path(robots_dir(), REAL_ROBOTS["panda"][0]))
    assert panda.k_velocity[0] == 40.0 and panda.k_position[0] == 100.0
    assert panda.soft_upper[3] == pytest.approx(-0.0698)


# ----------------------------------------------------------------------------- the formula


def clamp(x, lo, hi):  # libstdc++'s std::clamp
    return lo if x < lo else hi if hi < x else x


def upstream_effort(desired, pos, vel, lim):
    """joint_limits' JointSoftLimiter::on_enforce for a joint with an effort command only
    (prev_command_ never holds a position: the actual position stands in), transcribed; ``lim``
    holds the URDF's numbers (joint_limits_urdf.hpp: every limit present when <limit> is)."""
    has_position_limits = math.isfinite(lim["min_position"])
    soft_min, soft_max = lim["soft_lower"], lim["soft_upper"]
    k_position, k_velocity = lim["k_position"], lim["k_velocity"]
    has_soft_position = (math.isfinite(soft_min) and math.isfinite(soft_max)
                         and soft_max - soft_min > 1e-10)
    has_soft = has_soft_position and math.isfinite(k_position) and abs(k_position) > 1e-10
    act_position = prev_command_position = pos
    soft_min_vel, soft_max_vel = -lim["max_velocity"], lim["max_velocity"]
    if has_position_limits and has_soft and math.isfinite(prev_command_position):
        soft_min_vel = clamp(-k_position * (prev_command_position - soft_min),
                             -lim["max_velocity"], lim["max_velocity"])
        soft_max_vel = clamp(-k_position * (prev_command_position - soft_max),
                             -lim["max_velocity"], lim["max_velocity"])
        if (act_position < lim["min_position"] - 0.002
                or act_position > lim["max_position"] + 0.002):
            soft_min_vel = soft_max_vel = 0.0
        elif act_position < soft_min or act_position > soft_max:
            reach = 1.0 * (math.pi / 180.0)
            soft_min_vel = math.copysign(reach, soft_min_vel)
            soft_max_vel = math.copysign(reach, soft_max_vel)
    # compute_effort_limits
    lower, upper = -lim["max_effort"], lim["max_effort"]
    if has_position_limits:
        if pos <= lim["min_position"] and vel <= 0.0:
            lower = 0.0
        elif pos >= lim["max_position"] and vel >= 0.0:
            upper = 0.0
    if vel < -lim["max_velocity"]:
        lower = 0.0
    elif vel > lim["max_velocity"]:
        upper = 0.0
    if lower > upper:
        lower, upper = upper, lower
    soft_min_eff, soft_max_eff = lower, upper
    if math.isfinite(k_velocity):
        soft_min_eff = clamp(-k_velocity * (vel - soft_min_vel), -lim["max_effort"],
                             lim["max_effort"])
        soft_max_eff = clamp(-k_velocity * (vel - soft_max_vel), -lim["max_effort"],
                             lim["max_effort"])
        soft_min_eff = max(soft_min_eff, lower)
        soft_max_eff = min(soft_max_eff, upper)
    limited = desired < soft_min_eff or desired > soft_max_eff
    return clamp(desired, soft_min_eff, soft_max_eff), limited


def random_limits(rng, model):
    """The arm with random hard and soft limits; some joints without <safety_controller>,
    some with k_position 0, some with soft limits outside the hard ones."""
    n = model.nv
    lower = rng.uniform(-3, -0.5, n)
    upper = rng.uniform(0.5, 3, n)
    soft_lower = lower + rng.uniform(-0.2, 0.5, n)
    soft_upper = upper - rng.uniform(-0.2, 0.5, n)
    k_position = rng.choice([0.0, 1.0, 20.0, 100.0], n)
    k_velocity = rng.choice([0.0, 5.0, 40.0], n)
    none = rng.random(n) < 0.3
    for array in (soft_lower, soft_upper, k_position, k_velocity):
        array[none] = np.nan
    return dataclasses.replace(
        model, position_lower=lower, position_upper=upper,
        velocity_limit=rng.uniform(0.5, 3, n), effort_limit=rng.uniform(5, 100, n),
        soft_lower=soft_lower, soft_upper=soft_upper, k_position=k_position,
        k_velocity=k_velocity)


def test_bounds_equal_the_upstream_limiter_on_random_states():
    base = load_model(arm_urdf())
    rng = np.random.default_rng(7)
    count = limited_count = 0
    for _ in range(300):
        model = random_limits(rng, base)
        # positions around and past both limits, some exactly at them
        q = rng.uniform(model.position_lower - 0.3, model.position_upper + 0.3)
        at = rng.random(model.nv) < 0.1
        q[at] = np.where(rng.random(at.sum()) < 0.5, model.position_lower[at],
                         model.position_upper[at])
        v = rng.uniform(-1.3, 1.3, model.nv) * model.velocity_limit
        tau = rng.uniform(-1.2, 1.2, model.nv) * model.effort_limit
        lower, upper = soft_limit_effort_bounds(model, q, v)
        bounded, limited = bound_effort(tau, lower, upper)
        enforced, enforced_limited = EffortLimiter(model).enforce(tau, q, v)
        np.testing.assert_array_equal(enforced, bounded)
        np.testing.assert_array_equal(enforced_limited, limited)
        for j in range(model.nv):
            lim = {"min_position": model.position_lower[j],
                   "max_position": model.position_upper[j],
                   "max_velocity": model.velocity_limit[j], "max_effort": model.effort_limit[j],
                   "soft_lower": model.soft_lower[j], "soft_upper": model.soft_upper[j],
                   "k_position": model.k_position[j], "k_velocity": model.k_velocity[j]}
            expected, expected_limited = upstream_effort(tau[j], q[j], v[j], lim)
            assert bounded[j] == pytest.approx(expected, rel=1e-12, abs=1e-12), (j, lim, q, v)
            assert limited[j] == expected_limited
            count += 1
            limited_count += expected_limited
    assert limited_count > count / 10  # the cases are not all trivial


def test_without_safety_controller_only_the_hard_limits_bound():
    model = load_model(arm_urdf(""))
    lower, upper = soft_limit_effort_bounds(model, np.zeros(2), np.zeros(2))
    np.testing.assert_array_equal(upper, model.effort_limit)
    np.testing.assert_array_equal(lower, -model.effort_limit)
    lower, upper = soft_limit_effort_bounds(model, [HARD, 0.0], [0.1, 5.0])  # at the limit;
    assert (upper[0], upper[1]) == (0.0, 0.0)  # past the velocity limit
    assert (lower[0], lower[1]) == (-40.0, -20.0)


# ----------------------------------------------------------------------------- in simulation


def run(mode: str, soft_limits: bool, axis: str, v0=(0.0, 0.0), seconds=3.0):
    """The arm under a JointController at 1 kHz, the first joint sent (or moving) toward 1.4
    rad, past its soft limit 1.0 and inside its hard limit 1.5: (the largest q1 reached, the
    final q1, the final |q̇1|, the final gravity torque on joint 1)."""
    model = load_model(arm_urdf(axis=axis))
    dyn = make_dynamics(model)
    sim = Simulator(dyn, dt=1e-3, v0=np.array(v0))
    ctrl = JointController(model, mode=mode, kp=100.0, kd=20.0, stiffness=200.0,
                           damping=20.0, soft_limits=soft_limits, max_state_age=1.0)
    ctrl.update_state(model.joint_names, sim.q, sim.v, 0.0)
    if mode != "gravity_compensation":
        ctrl.set_trajectory(["j1"], [TrajectoryPoint(0.5, [1.4])], 0.0)
    highest = -math.inf
    for _ in range(int(seconds * 1000)):
        ctrl.update_state(model.joint_names, sim.q, sim.v, sim.time)
        sim.set_command(ctrl.compute(sim.time).effort)
        sim.advance(1e-3)
        highest = max(highest, sim.q[0])
    return highest, sim.q[0], abs(sim.v[0]), dyn.gravity(sim.q)[0]


MODES = ["gravity_compensation", "computed_torque", "impedance"]


def start_velocity(mode):  # gravity compensation does not drive: the joint starts moving
    return (1.5, 0.0) if mode == "gravity_compensation" else (0.0, 0.0)


@pytest.mark.parametrize("mode", MODES)
def test_a_joint_driven_toward_its_limit_stops_at_the_soft_limit(mode):
    """No gravity torque on the joint: the bound −k_velocity (q̇ + k_position (q − soft_upper))
    turns the drive into a spring and damper at the soft limit. The effort limit lets the
    joint overshoot by about a centimetre-radian before it is brought back (at most 1°/s past
    the limit); a drive toward the far target then rests at the limit, gravity compensation
    (no spring) leaves the joint drifting back inside at no more than 1°/s."""
    highest, final, speed, _ = run(mode, True, "0 0 1", start_velocity(mode))
    print(f"\n{mode}: soft limit {SOFT_UPPER} rad, hard {HARD}: highest q1 {highest:.5f} "
          f"(soft limit − highest {SOFT_UPPER - highest:+.2e} rad), final {final:.5f}, "
          f"|q̇1| {speed:.1e}")
    assert highest <= SOFT_UPPER + 0.02 and SOFT_UPPER - 0.02 <= final <= SOFT_UPPER + 1e-3
    assert speed <= (math.pi / 180 if mode == "gravity_compensation" else 1e-3)
    free_highest, *_ = run(mode, False, "0 0 1", start_velocity(mode))
    assert free_highest > SOFT_UPPER + 0.2  # without the soft limits the joint goes past


@pytest.mark.parametrize("mode", MODES)
def test_gravity_pulling_past_the_soft_limit_drags_the_joint_at_the_damped_speed(mode):
    """As upstream: past a soft limit the bound pins the effort to −k_velocity (q̇ + 1°/s), so
    a gravity torque g that pulls outward drags the joint at |q̇| ≈ |g| / k_velocity − 1°/s;
    it stays inside the hard limit."""
    highest, final, speed, gravity = run(mode, True, "0 1 0", start_velocity(mode))
    creep = abs(gravity) / 20.0 - math.pi / 180
    print(f"\n{mode} under gravity: highest q1 {highest:.4f} (past the soft limit by "
          f"{highest - SOFT_UPPER:+.4f} rad), |q̇1| {speed:.3e}, |g1|/k_velocity − 1°/s "
          f"{creep:.3e}")
    assert highest < HARD and speed == pytest.approx(creep, rel=0.05)


def test_the_controller_reports_the_joints_its_soft_limits_bound():
    model = load_model(arm_urdf(axis="0 0 1"))
    ctrl = JointController(model, mode="computed_torque", kp=100.0, soft_limits=True)
    assert ctrl.soft_limits
    ctrl.update_state(model.joint_names, [SOFT_UPPER + 0.1, 0.0], [0.5, 0.0], 0.0)
    ctrl.set_trajectory(["j1"], [TrajectoryPoint(1.0, [1.4])], 0.0)
    out = ctrl.compute(0.0)
    upper = soft_limit_effort_bounds(model, ctrl.q, ctrl.v)[1]
    assert out.clamped == ["j1"] and out.effort[0] == upper[0] < 0
    ctrl.configure(soft_limits=False)
    assert not ctrl.soft_limits and ctrl.compute(0.0).clamped == []
