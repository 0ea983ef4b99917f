# SPDX-License-Identifier: Apache-2.0
"""The simulator's stick–slip friction step (``simulation.friction_step``, ``friction_law``
"stick_slip"): viscous damping implicit, Coulomb friction set-valued, so that a light joint
slips, stops and sticks as the sign law says.

- a single joint (inertia I, Coulomb Fc, viscous b, no other force) started at v0 stops at
  t* = (I/b)·ln(1 + b·v0/Fc) (Fc only: I·v0/Fc), within one step (plus implicit Euler's
  first-order error b·dt/(2I) relative, on the slow viscous stops), without a sign flip, and stays
  stopped; at 1 ms and 0.25 ms, in ``simulation.step`` and in the compiled roll-out;
- the bundled arm's wrist_3 and the xArm7's joint 7 (1.4e-4 kg·m², damping 2, friction 1)
  started at 0.2–0.5 rad/s under gravity compensation come to rest and stay there (the
  linearised tanh law cycled between about ±0.64 rad/s every 1 ms step);
- a joint at rest holds any effort below its breakaway c(0) = coulomb + stribeck and moves
  under a larger one with (τ − c)/I;
- on the coupled arm, the step's friction impulses satisfy the stick–slip conditions;
- across processes: a FollowJointTrajectory goal moving the bundled arm's wrist_3, every
  parameter at its default but the mode, ends SUCCEEDED in lock-step (this one also ends with
  the linearised tanh step: the controller's friction compensation, the same law at nearly the
  same velocity, cancels the simulator's explicit Coulomb term during the goal).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pin_oracle import robots_dir

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import coulomb_bound, kernel_cache, make_dynamics
from rb_dynamics.model import DynamicsOverlay, apply_overlay, load_model
from rb_dynamics.simulation import Simulator, compiled_steps, step, stick_slip_velocity

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


def velocities(dyn, v0: np.ndarray, dt: float, steps: int, tau=None, compiled: bool = False):
    """The velocities of ``steps`` semi-implicit Euler steps from the neutral pose at v0."""
    model = dyn.model
    q, v = model.neutral_configuration(), np.asarray(v0, dtype=float)
    tau = np.zeros(model.nv) if tau is None else tau
    if compiled:
        trace = compiled_steps(dyn, "semi_implicit_euler", friction_law="stick_slip").run(
            q, v, tau, dt, steps)
        assert trace.steps == steps
        return trace.v
    out = [v]
    for _ in range(steps):
        result = step(dyn, q, v, tau, dt, "semi_implicit_euler", friction_law="stick_slip")
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
@pytest.mark.parametrize("robot, joint, v0", [
    ("default_arm", "wrist_3_joint", 0.2), ("default_arm", "wrist_3_joint", 0.5),
    ("xarm7", "joint7", 0.2), ("xarm7", "joint7", 0.5)])
def test_a_light_wrist_under_gravity_compensation_comes_to_rest(kind, dt, robot, joint, v0):
    model = load_model(DEFAULT_URDF if robot == "default_arm" else XARM7)
    dyn = make_dynamics(model, kind)
    i = model.actuated_joint_names.index(joint)
    start = np.zeros(model.nv)
    start[i] = v0
    sim = Simulator(dyn, dt=dt, v0=start, friction_law="stick_slip")
    trace = []
    for _ in range(round(0.2 / dt)):
        sim.set_command(dyn.gravity(sim.q))
        sim.advance(dt)
        trace.append(sim.v[i])
    trace = np.array(trace)
    settled = trace[len(trace) // 2:]
    assert np.abs(settled).max() <= 1e-9, f"{joint}: |v| up to {np.abs(settled).max():.3g}"
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
        A = dyn.crba(q) + dt * np.diag(model.damping)
        v_free = v + dt * np.linalg.solve(A, tau - model.damping * v
                                          - dyn.nonlinear_effects(q, v))
        bound = dt * coulomb_bound(model, v)
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


@pytest.mark.skipif(kernel_cache._ckernels is None, reason="needs the built C extension")
@pytest.mark.parametrize("law", ["smooth", "stick_slip"])
@pytest.mark.parametrize("robot", ["default_arm", "xarm7"])
def test_both_friction_laws_are_the_same_step_compiled_and_in_python(robot, law):
    """Each ``friction_law`` in the compiled roll-out equals ``simulation.step`` (≤ 1e-12); the
    default, smooth, differs from the stick–slip step on a moving light wrist."""
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
    assert sticky.v[-1] == 0.0 and smooth.v[-1] < -0.1  # the linearised law overshoots
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
