# SPDX-License-Identifier: Apache-2.0
"""The simulator's friction step (``simulation.friction_step``): viscous damping and Coulomb
friction implicit in the velocity, Coulomb friction set-valued (``friction_law`` "stick_slip":
a light joint slips, stops and sticks as the sign law says) or smooth ("smooth", the default:
tanh(q̇/ε), the controller's and the observer's law).

- stick_slip: a single joint (inertia I, Coulomb Fc, viscous b, no other force) started at v0
  stops at t* = (I/b)·ln(1 + b·v0/Fc) (Fc only: I·v0/Fc), within one step (plus implicit
  Euler's first-order error b·dt/(2I) relative, on the slow viscous stops), without a sign
  flip, and stays stopped; at 1 ms and 0.25 ms, in ``simulation.step`` and in the compiled
  roll-out;
- smooth: the same joint's speed falls monotonically, without a sign flip, and reaches
  δ = 0.01 rad/s no earlier than the law's exact solution, t(δ) = ∫_δ^v0 I dv / (b·v +
  Fc·tanh(v/ε)), and at most a few steps later;
- with either law, the bundled arm's wrist_3 and the xArm7's joint 7 (1.4e-4 kg·m², damping
  2, friction 1) started at 0.2–0.5 rad/s under gravity compensation come to rest and stay
  there (the smooth law linearised about q̇ cycles between about ±0.64 rad/s every 1 ms step);
- a joint at rest holds any effort below its breakaway c(0) = coulomb + stribeck and moves
  under a larger one with (τ − c)/I (stick_slip);
- on the coupled arm, the step's friction impulses satisfy the stick–slip conditions, or the
  smooth law at the end of the step;
- across processes: a FollowJointTrajectory goal moving the bundled arm's wrist_3, every
  parameter at its default but the mode, ends SUCCEEDED in lock-step with stick_slip (the
  controller's friction compensation, the same law at nearly the same velocity, cancels the
  simulator's Coulomb term during the goal, whatever the law); with the default law, the same
  goal cancelled at speed leaves the wrist to its own friction, and it settles.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pin_oracle import robots_dir
from scipy.integrate import quad

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import coulomb_bound, kernel_cache, make_dynamics
from rb_dynamics.model import COULOMB_SMOOTHING, DynamicsOverlay, apply_overlay, load_model
from rb_dynamics.simulation import (
    Simulator,
    compiled_steps,
    implicit_friction_velocity,
    step,
    stick_slip_velocity,
)

XARM7 = Path(robots_dir(), "xarm_description/urdf/xarm7.urdf")
KINDS = ["reference"] + (["c"] if kernel_cache._ckernels is not None else [])


def one_joint(directory: Path, inertia: float, coulomb: float, viscous: float) -> Path:
    """A link turning about the vertical (no gravity torque) with ``inertia`` about its axis."""
    path = directory / f"one_joint_{inertia}_{coulomb}_{viscous}.urdf"
    path.write_text(f"""<robot name="one_joint">
  <link name="base"/>
  <link name="rotor">
    <inertial><origin xyz="0 0 0"/><mass value="1.0"/>
      <inertia ixx="{inertia}" iyy="{inertia}" izz="{inertia}" ixy="0" ixz="0" iyz="0"/>
    </inertial>
  </link>
  <joint name="spin" type="revolute">
    <parent link="base"/><child link="rotor"/><axis xyz="0 0 1"/>
    <limit lower="-1000" upper="1000" effort="100" velocity="100"/>
    <dynamics damping="{viscous}" friction="{coulomb}"/>
  </joint>
</robot>""")
    return path


def stop_time(inertia: float, coulomb: float, viscous: float, v0: float) -> float:
    if viscous == 0.0:
        return inertia * v0 / coulomb
    return inertia / viscous * math.log(1.0 + viscous * v0 / coulomb)


def smooth_time(inertia: float, coulomb: float, viscous: float, v0: float, speed: float
                ) -> float:
    """When a single joint started at v0 > speed under the smooth law, I·q̈ = −(b·q̇ +
    Fc·tanh(q̇/ε)), slows to ``speed``: the integral of I / (b·v + Fc·tanh(v/ε)) over
    [speed, v0] (separation of variables)."""
    time, _ = quad(lambda w: inertia / (viscous * w + coulomb * math.tanh(w / COULOMB_SMOOTHING)),
                   speed, v0, limit=200, epsabs=0.0, epsrel=1e-12)
    return time


def velocities(dyn, v0: np.ndarray, dt: float, steps: int, tau=None, compiled: bool = False,
               law: str = "stick_slip"):
    """The velocities of ``steps`` semi-implicit Euler steps from the neutral pose at v0."""
    model = dyn.model
    q, v = model.neutral_configuration(), np.asarray(v0, dtype=float)
    tau = np.zeros(model.nv) if tau is None else tau
    if compiled:
        trace = compiled_steps(dyn, "semi_implicit_euler", friction_law=law).run(
            q, v, tau, dt, steps)
        assert trace.steps == steps
        return trace.v
    out = [v]
    for _ in range(steps):
        result = step(dyn, q, v, tau, dt, "semi_implicit_euler", friction_law=law)
        q, v = result.q, result.v
        out.append(v)
    return np.array(out)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", [1e-3, 2.5e-4])
@pytest.mark.parametrize("inertia, coulomb, viscous, v0", [
    (1.4e-4, 1.0, 2.0, 0.2),  # the xArm7's joint 7: stops well within the first step
    (1.4e-4, 1.0, 0.0, 3.0),  # Coulomb only: 0.42 ms
    (0.05, 0.3, 0.1, 2.0),  # a slow stop: 0.26 s
    (0.02, 0.5, 0.0, 4.0),  # Coulomb only: 0.16 s
    (0.01, 0.2, 0.5, -1.5),  # backwards: 31 ms
])
def test_a_joint_stops_at_the_analytic_time_and_stays_stopped(tmp_path, kind, dt, inertia,
                                                              coulomb, viscous, v0):
    model = load_model(one_joint(tmp_path, inertia, coulomb, viscous))
    dyn = make_dynamics(model, kind)
    expected = stop_time(inertia, coulomb, viscous, abs(v0))
    steps = int(expected / dt) + 200
    v = velocities(dyn, [v0], dt, steps, compiled=kind == "c")[:, 0]
    stopped = np.flatnonzero(v == 0.0)
    assert stopped.size, f"never stopped: last {v[-3:]}"
    first = int(stopped[0])
    # within one step of t*, plus implicit Euler's first-order error in the viscous decay
    # (relative b·dt/(2I); bounded here by twice that)
    assert abs(first * dt - expected) <= dt * (1 + 1e-9) + expected * viscous * dt / inertia, \
        (first * dt, expected)
    assert np.all(v[first:] == 0.0), "moved again after stopping"
    assert np.all(np.sign(v[:first]) == np.sign(v0)), "the velocity changed sign"
    assert np.all(np.abs(v[1:]) <= np.abs(v[:-1])), "the speed grew"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", [1e-3, 2.5e-4])
@pytest.mark.parametrize("inertia, coulomb, viscous, v0", [
    (1.4e-4, 1.0, 2.0, 0.2),  # the xArm7's joint 7
    (1.32e-4, 0.2, 0.05, 0.94),  # the bundled arm's wrist_3 at a goal's peak speed
    (1.4e-4, 1.0, 0.0, 3.0),
    (0.05, 0.3, 0.1, 2.0),  # a slow stop: 0.28 s
    (0.02, 0.5, 0.0, 4.0),
    (0.01, 0.2, 0.5, -1.5),  # backwards
])
def test_the_default_smooth_step_slows_a_joint_as_the_law_does(tmp_path, kind, dt, inertia,
                                                               coulomb, viscous, v0):
    """The default law, smooth, implicit: the speed falls monotonically without a sign flip and
    reaches δ = 0.01 rad/s (stopped_velocity_tolerance) at k·dt with t(δ) ≤ k·dt (implicit
    Euler on a monotone law is never faster than the law: F(w) = w + dt·f(w)/I is increasing,
    F(v⁺) = v ≥ F(v(t + dt))) and k·dt ≤ t(δ) + dt·(1 + ln(ε/δ)) + t(δ)·b·dt/I (one step to
    cross δ; below ε the law is nearly linear and implicit Euler lags it by at most dt/2 per
    e-fold, ln(ε/δ) of them, doubled for tanh's curvature; the viscous decay's first-order
    error)."""
    model = load_model(one_joint(tmp_path, inertia, coulomb, viscous))
    dyn = make_dynamics(model, kind)
    speed = 0.01
    expected = smooth_time(inertia, coulomb, viscous, abs(v0), speed)
    steps = int(expected / dt) + 200
    v = velocities(dyn, [v0], dt, steps, compiled=kind == "c", law="smooth")[:, 0]
    first = int(np.flatnonzero(np.abs(v) <= speed)[0])
    late = dt * (1 + math.log(COULOMB_SMOOTHING / speed)) + expected * viscous * dt / inertia
    assert expected <= first * dt <= expected + late, (first * dt, expected, late)
    assert np.all(np.abs(v[first:]) <= speed), "sped up again"
    assert np.all(np.sign(v[v != 0.0]) == np.sign(v0)), "the velocity changed sign"
    assert np.all(np.abs(v[1:]) <= np.abs(v[:-1])), "the speed grew"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("law", ["smooth", "stick_slip"])
@pytest.mark.parametrize("dt", [1e-3, 2.5e-4])
@pytest.mark.parametrize("robot, joint, v0", [
    ("default_arm", "wrist_3_joint", 0.2), ("default_arm", "wrist_3_joint", 0.5),
    ("xarm7", "joint7", 0.2), ("xarm7", "joint7", 0.5)])
def test_a_light_wrist_under_gravity_compensation_comes_to_rest(kind, law, dt, robot, joint,
                                                                 v0):
    """Started at v0 under gravity compensation, the wrist is at rest after 0.1 s (stick_slip:
    exactly; smooth: within 1e-6 rad/s, the law has no stiction) and never flips."""
    model = load_model(DEFAULT_URDF if robot == "default_arm" else XARM7)
    dyn = make_dynamics(model, kind)
    i = model.actuated_joint_names.index(joint)
    start = np.zeros(model.nv)
    start[i] = v0
    sim = Simulator(dyn, dt=dt, v0=start, friction_law=law)
    trace = []
    for _ in range(round(0.2 / dt)):
        sim.set_command(dyn.gravity(sim.q))
        sim.advance(dt)
        trace.append(sim.v[i])
    trace = np.array(trace)
    settled = trace[len(trace) // 2:]
    at_rest = 1e-9 if law == "stick_slip" else 1e-6
    assert np.abs(settled).max() <= at_rest, f"{joint}: |v| up to {np.abs(settled).max():.3g}"
    assert np.all(np.sign(trace[trace != 0.0]) == np.sign(v0)), "the velocity flipped"


@pytest.mark.parametrize("kind", KINDS)
def test_a_joint_at_rest_holds_below_its_breakaway_and_slips_above(tmp_path, kind):
    model = apply_overlay(load_model(one_joint(tmp_path, 0.01, 0.5, 0.2)), DynamicsOverlay(
        joints={"spin": {"coulomb": 0.5, "viscous": 0.2, "stribeck": 0.3,
                         "stribeck_velocity": 0.05}}))
    dyn = make_dynamics(model, kind)
    breakaway = float(coulomb_bound(model, np.zeros(1))[0])
    assert breakaway == 0.8
    held = velocities(dyn, [0.0], 1e-3, 200, np.array([0.79]), compiled=kind == "c")
    assert np.all(held == 0.0)
    moving = velocities(dyn, [0.0], 1e-3, 1, np.array([0.9]), compiled=kind == "c")
    # one step from rest: (I + dt·b)·v⁺ = dt·(τ − c(0))
    assert moving[1, 0] == pytest.approx(1e-3 * (0.9 - 0.8) / (0.01 + 1e-3 * 0.2), rel=1e-9)


def _step_without_coulomb(dyn, q, v, tau, dt):
    """The semi-implicit step's matrix A = M + dt·D, the velocity without Coulomb friction and
    dt times the Coulomb bound: what both friction laws' end-of-step velocity is solved from."""
    model = dyn.model
    A = dyn.crba(q) + dt * np.diag(model.damping)
    v_free = v + dt * np.linalg.solve(A, tau - model.damping * v - dyn.nonlinear_effects(q, v))
    return A, v_free, dt * coulomb_bound(model, v)


def test_the_coupled_arms_friction_impulses_are_stick_slip():
    """On random states of the bundled arm with larger friction (some joints stick, some slip):
    p = A (v_free − v⁺) is within the bounds, and at them against the motion where v⁺ ≠ 0."""
    model = load_model(DEFAULT_URDF)
    model.friction = model.friction * 20.0
    dyn = make_dynamics(model, "reference")
    rng = np.random.default_rng(3)
    stuck = slipping = 0
    for _ in range(200):
        q = rng.uniform(-2, 2, model.nq)
        v = rng.normal(0.0, 0.05, model.nv)
        tau = dyn.gravity(q) + rng.normal(0.0, 5.0, model.nv)
        dt = 1e-3
        A, v_free, bound = _step_without_coulomb(dyn, q, v, tau, dt)
        v_next = stick_slip_velocity(A, v_free, bound)
        assert np.array_equal(v_next, step(dyn, q, v, tau, dt, "semi_implicit_euler",
                                           limits=False, friction_law="stick_slip").v)
        p = A @ (v_free - v_next)
        moving = v_next != 0.0
        np.testing.assert_allclose(p[moving], bound[moving] * np.sign(v_next[moving]),
                                   rtol=1e-6, atol=1e-12)
        assert np.all(np.abs(p[~moving]) <= bound[~moving] * (1 + 1e-6) + 1e-12)
        stuck, slipping = stuck + int((~moving).sum()), slipping + int(moving.sum())
    assert stuck > 100 and slipping > 100  # both cases exercised


@pytest.mark.parametrize("kind", KINDS)
def test_the_coupled_arms_smooth_friction_acts_at_the_end_of_the_step(kind):
    """The default law on random states of the bundled arm with larger friction: the step's
    velocity solves A (v⁺ − v_free) + dt·c(q̇)·tanh(v⁺/ε) = 0, implicit Euler in the velocity,
    to rounding (Newton's method on the whole system; coordinate descent stopped after its 100
    sweeps up to 1e-8 short on the arm's worst-conditioned states), in ``simulation.step`` and
    in the compiled roll-out."""
    model = load_model(DEFAULT_URDF)
    model.friction = model.friction * 20.0
    dyn = make_dynamics(model, kind)
    fast = compiled_steps(dyn, "semi_implicit_euler", limits=False, friction_law="smooth")
    rng = np.random.default_rng(5)
    worst = 0.0
    for _ in range(200):
        q = rng.uniform(-2, 2, model.nq)
        v = rng.normal(0.0, 0.5, model.nv)
        tau = dyn.gravity(q) + rng.normal(0.0, 5.0, model.nv)
        dt = 1e-3
        A, v_free, bound = _step_without_coulomb(dyn, q, v, tau, dt)
        v_next = implicit_friction_velocity(A, v_free, bound, COULOMB_SMOOTHING)
        taken = step(dyn, q, v, tau, dt, "semi_implicit_euler", limits=False).v
        if fast is not None:
            taken = fast.run(q, v, tau, dt, 1).v[1]
        for solved in (v_next, taken):
            residual = A @ (solved - v_free) + bound * np.tanh(solved / COULOMB_SMOOTHING)
            # in velocity: the step that would remove the residual, against the velocity
            error = np.abs(np.linalg.solve(A, residual)).max() / (1.0 + np.abs(v_free).max())
            worst = max(worst, error)
    assert worst <= 1e-13, worst


@pytest.mark.skipif(kernel_cache._ckernels is None, reason="needs the built C extension")
@pytest.mark.parametrize("law", ["smooth", "stick_slip"])
@pytest.mark.parametrize("robot", ["default_arm", "xarm7"])
def test_both_friction_laws_are_the_same_step_compiled_and_in_python(robot, law):
    """Each ``friction_law`` in the compiled roll-out equals ``simulation.step`` (≤ 1e-12); the
    default, smooth, differs from the stick–slip step on a moving light wrist: it slows the
    wrist without stopping it, and neither reverses it."""
    model = load_model(DEFAULT_URDF if robot == "default_arm" else XARM7)
    dyn = make_dynamics(model, "c")
    rng = np.random.default_rng(8)
    fast = compiled_steps(dyn, "semi_implicit_euler", friction_law=law)
    for _ in range(30):
        q = rng.uniform(-2, 2, model.nq)
        v = rng.normal(0.0, 0.5, model.nv)
        tau = dyn.gravity(q) + rng.normal(0.0, 2.0, model.nv)
        ref = step(dyn, q, v, tau, 1e-3, "semi_implicit_euler", friction_law=law)
        trace = fast.run(q, v, tau, 1e-3, 1)
        np.testing.assert_allclose(trace.v[1], ref.v, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(trace.q[1], ref.q, rtol=1e-12, atol=1e-12)
    v = np.zeros(model.nv)
    v[-1] = 0.2
    q = model.neutral_configuration()
    smooth = step(dyn, q, v, dyn.gravity(q), 1e-3, "semi_implicit_euler")
    sticky = step(dyn, q, v, dyn.gravity(q), 1e-3, "semi_implicit_euler",
                  friction_law="stick_slip")
    assert sticky.v[-1] == 0.0 and 0.0 < smooth.v[-1] < 0.2
    with pytest.raises(ValueError, match="friction_law must be one of"):
        step(dyn, q, v, v, 1e-3, "semi_implicit_euler", friction_law="viscous")


# ---------------------------------------------------------------- across processes

def test_a_goal_moving_the_light_wrist_ends_in_lock_step(tmp_path):
    """The bundled arm in lock-step with stick–slip friction, the control node at its defaults
    in computed torque: a goal turning wrist_3 by 0.5 rad in 1 s ends SUCCEEDED within 3
    simulated seconds of its end (the wrist stops: stopped_velocity_tolerance 0.01 is met)."""
    from test_jtc_parity import MISSING, Rig

    if MISSING is not None:
        pytest.skip(str(MISSING))
    rig = Rig(DEFAULT_URDF, tmp_path, {"mode": "computed_torque"},
              sim_params={"friction_law": "stick_slip"})
    try:
        q1 = rig.q()
        q1[rig.joints.index("wrist_3_joint")] += 0.5
        handle = rig.send(rig.goal(q1, duration=1.0))
        assert handle.accepted
        future = handle.get_result_async()
        ends = rig.sim_time() + 1.0 + 3.0
        assert rig.peer.wait_for(lambda: future.done() or rig.sim_time() > ends, 300.0), \
            rig.output()
        assert future.done(), (f"the goal did not end within 3 s of its end; wrist_3 at "
                               f"{rig.states[-1].velocity[5]:+.3f} rad/s")
        answer = future.result()
        assert answer.status == 4, (answer.status, answer.result.error_string)  # SUCCEEDED
        assert np.abs(rig.q() - q1).max() < 0.05
    finally:
        rig.close()


def test_a_light_wrist_cancelled_at_speed_settles_with_the_default_friction_law(tmp_path):
    """The bundled arm in lock-step, both nodes at their defaults but the mode (computed
    torque): a goal turning wrist_3 by 1 rad in 2 s is cancelled near its peak speed (the
    controller then holds the measured position, at rest, so its friction compensation is 0
    while the wrist still moves). From the cancel on the wrist's own friction stops it: the
    free joint's stop time t* = (I/b)·ln(1 + b·v0/Fc) (under a millisecond) plus one state for
    the holding command and a few steps of the smooth law's tail later, and for the rest of
    the hold, joint_states' wrist_3 velocity stays within stopped_velocity_tolerance 0.01
    rad/s (a step with the tanh law linearised about q̇ cycles between ±0.65 rad/s there, for
    ever)."""
    from test_jtc_parity import MISSING, Rig
    from test_trajectory_action import Recorder

    if MISSING is not None:
        pytest.skip(str(MISSING))
    model = load_model(DEFAULT_URDF)
    joint = model.actuated_joint_names.index("wrist_3_joint")
    rig = Rig(DEFAULT_URDF, tmp_path, {"mode": "computed_torque"})
    try:
        q1 = rig.q()
        q1[joint] += 1.0
        handle = rig.send(rig.goal(q1, duration=2.0))
        assert handle.accepted
        with Recorder(rig) as record:
            # near the peak speed, 0.94 rad/s at 1 s: at least 0.3 rad/s from 0.35 to 1.65 s
            rig.wait_sim(0.9)
            cancel = handle.cancel_goal_async()
            assert rig.peer.wait_for(cancel.done, 30.0), rig.output()
            assert rig.result(handle)[0] == "CANCELED"
            cancelled = rig.sim_time()  # the hold was set at or before this
            rig.wait_sim(0.5)
        stamps = np.array([s.header.stamp.sec + s.header.stamp.nanosec * 1e-9
                           for s in record.states])
        wrist = np.array([s.velocity[s.name.index("wrist_3_joint")] for s in record.states])
        v0 = float(np.abs(wrist[stamps <= cancelled]).max())  # the speed at the hold, at most
        assert v0 >= 0.2, f"the wrist never moved fast before the cancel: {v0:.3f} rad/s"
        q = model.neutral_configuration()
        q[rig.q_index] = rig.q()
        inertia = float(make_dynamics(model, "reference").crba(q)[joint, joint])
        t_star = stop_time(inertia, float(model.friction[joint]), float(model.damping[joint]),
                           v0)
        settled_from = cancelled + t_star + 0.01  # one state for the hold, the smooth tail
        settled = wrist[stamps >= settled_from]
        assert settled.size > 300, (settled.size, stamps[-1] - cancelled)
        assert np.abs(settled).max() <= 0.01, (
            f"wrist_3 still moving {np.abs(settled).max():.3f} rad/s after the cancel "
            f"(t* = {t_star * 1e3:.2f} ms): last {np.round(settled[-4:], 3)}")
    finally:
        rig.close()
