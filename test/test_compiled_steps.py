# SPDX-License-Identifier: Apache-2.0
"""The compiled roll-out (``simulation.compiled_steps``, ``Kernels.rollout`` in _ckernels.c)
against the reference ``simulation.step``, and its use by ``Simulator`` and ``~/simulate``.

Models: panda (mimic finger, joint damping), ur5 (no losses), the bundled arm
(rb_dynamics/urdf/default_arm.urdf: damping and Coulomb friction on every joint, so semi-implicit
Euler takes the implicit-loss solve) and the bundled arm with armature and Stribeck friction
(a dynamics overlay: the dip of the friction law, whose negative slope stays explicit). Random
states, a third of the joints driven through a position limit, both integrators: every step
equals the reference's to ≤ 1e-12 relative.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest
from gil_probe import ticks_during
from pin_oracle import REAL_ROBOTS, rel_err, robots_dir
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics.dynamics import (
    KERNEL_METHODS,
    ConstraintSet,
    LiveDynamics,
    ReferenceDynamics,
    kernel_cache,
    make_dynamics,
)
from rb_dynamics.model import DynamicsOverlay, apply_overlay, load_model
from rb_dynamics.ros.control_node.dynamics_services import RollOut
from rb_dynamics.simulation import INTEGRATORS, Simulator, compiled_steps, step
from rb_dynamics_interfaces.srv import Simulate

pytestmark = pytest.mark.skipif(kernel_cache._ckernels is None,
                                reason="needs the built extension dynamics.trampoline._ckernels")

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-12
WORST: dict[tuple[str, str], float] = {}


def _load(name: str):
    if name == "default_arm":
        return load_model(ROOT / "rb_dynamics" / "urdf" / "default_arm.urdf")
    if name == "overlaid_arm":
        model = _load("default_arm")
        joints = {name: {"armature": 0.05 * (6 - k) / 6, "coulomb": 1.0 + k,
                         "stribeck": 2.0 - 0.2 * k, "stribeck_velocity": 0.3 + 0.1 * k}
                  for k, name in enumerate(model.actuated_joint_names)}
        return apply_overlay(model, DynamicsOverlay(joints=joints))
    return load_model(Path(robots_dir(), REAL_ROBOTS[name][0]))


@pytest.fixture(scope="module", params=["panda", "ur5", "default_arm", "overlaid_arm"])
def arm(request):
    model = _load(request.param)
    return request.param, model, make_dynamics(model, "c")


class StepOnly:
    """The same C kernels without the compiled roll-out: every step is ``simulation.step``."""

    def __init__(self, dyn):
        self.model, self.kind = dyn.model, dyn.kind
        for name in KERNEL_METHODS:
            setattr(self, name, getattr(dyn, name))


def _state(model, rng):
    """A random state with about a third of the joints 1e-4 from a limit, moving into it."""
    lo, hi = model.position_lower, model.position_upper
    q = rng.uniform(np.maximum(lo, -np.pi), np.minimum(hi, np.pi))
    v = rng.uniform(-2, 2, model.nv)
    for i in np.flatnonzero(rng.random(model.nv) < 1 / 3):
        upper = rng.random() < 0.5
        q[i] = hi[i] - 1e-4 if upper else lo[i] + 1e-4
        v[i] = 3.0 if upper else -3.0
    tau = rng.uniform(-1, 1, model.nv) * model.effort_limit
    return q, v, tau


def _compare(name: str, what: str, ours, ref) -> None:
    err = rel_err(ours, ref)
    WORST[(name, what)] = max(WORST.get((name, what), 0.0), err)
    assert err <= TOL, f"{name} {what}: {err:.2e}"


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if WORST:
        print("\ncompiled roll-out vs simulation.step, worst relative error:")
        for (name, what), err in sorted(WORST.items()):
            print(f"  {name:<12} {what:<32} {err:.1e}")


@pytest.mark.parametrize("method", INTEGRATORS)
@pytest.mark.parametrize("dt", [1e-3, 0.02])
def test_one_step_equals_the_reference_step(arm, method, dt):
    name, model, dyn = arm
    rng = np.random.default_rng(5)
    fast = compiled_steps(dyn, method)
    hits = 0
    for _ in range(60):
        q, v, tau = _state(model, rng)
        ref = step(dyn, q, v, tau, dt, method)
        trace = fast.run(q, v, tau, dt, 1)
        assert trace.steps == 1
        _compare(name, f"{method} q", trace.q[1], ref.q)
        _compare(name, f"{method} v", trace.v[1], ref.v)
        _compare(name, f"{method} a", trace.a[0], ref.a)
        assert np.array_equal(trace.limit_hit[0], ref.limit_hit)
        assert np.array_equal(trace.q[0], q) and np.array_equal(trace.tau[0], tau)
        hits += int(ref.limit_hit.any())
    assert hits >= 20  # the stops were exercised


@pytest.mark.parametrize("method", INTEGRATORS)
@pytest.mark.parametrize("losses, limits", [(False, True), (True, False), (False, False)])
def test_options_equal_the_reference(arm, method, losses, limits):
    name, model, dyn = arm
    rng = np.random.default_rng(9)
    fast = compiled_steps(dyn, method, losses=losses, limits=limits)
    for _ in range(20):
        q, v, tau = _state(model, rng)
        ref = step(dyn, q, v, tau, 1e-3, method, losses=losses, limits=limits)
        trace = fast.run(q, v, tau, 1e-3, 1)
        _compare(name, f"{method} losses={losses} limits={limits}",
                 np.r_[trace.q[1], trace.v[1], trace.a[0]], np.r_[ref.q, ref.v, ref.a])
        assert np.array_equal(trace.limit_hit[0], ref.limit_hit)


@pytest.mark.parametrize("method", INTEGRATORS)
def test_every_step_of_a_long_roll_out_is_the_reference_step(arm, method):
    """400 steps under efforts that change per step: each row follows from the previous one
    exactly as ``step`` does (so errors cannot accumulate unseen)."""
    name, model, dyn = arm
    rng = np.random.default_rng(11)
    q, v, _ = _state(model, rng)
    taus = rng.uniform(-0.5, 0.5, (400, model.nv)) * model.effort_limit
    trace = compiled_steps(dyn, method).run(q, v, taus, 2e-3, 400)
    assert trace.steps == 400 and np.array_equal(trace.tau, taus)
    assert trace.limit_hit.any()
    for k in range(400):
        ref = step(dyn, trace.q[k], trace.v[k], taus[k], 2e-3, method)
        _compare(name, f"{method} 400 steps",
                 np.r_[trace.q[k + 1], trace.v[k + 1], trace.a[k]], np.r_[ref.q, ref.v, ref.a])
        assert np.array_equal(trace.limit_hit[k], ref.limit_hit)


def test_a_law_is_called_before_each_step_with_its_state(arm):
    name, model, dyn = arm
    q0 = np.clip(np.zeros(model.nv), model.position_lower, model.position_upper)
    calls = []

    def pd(q, v):  # computed torque toward q0: depends on the state
        return dyn.rnea(q, v, 50.0 * (q0 - q) - 5.0 * v)

    def law(k, q, v):
        calls.append((k, q.copy(), v.copy()))
        return pd(q, v)

    trace = compiled_steps(dyn, "rk4").run(q0 + 0.05, np.zeros(model.nv), None, 1e-3, 50,
                                           law=law)
    assert [k for k, _, _ in calls] == list(range(50))
    for k, q, v in calls:
        assert np.array_equal(q, trace.q[k]) and np.array_equal(v, trace.v[k])
        np.testing.assert_array_equal(trace.tau[k], pd(q, v))
        ref = step(dyn, q, v, trace.tau[k], 1e-3, "rk4")
        _compare(name, "rk4 with a law", np.r_[trace.q[k + 1], trace.v[k + 1]], np.r_[ref.q, ref.v])


def test_a_law_that_raises_stops_the_roll_out_with_its_error(arm):
    _, model, dyn = arm

    def law(k, q, v):
        if k == 3:
            raise ValueError("law refused")
        return np.zeros(model.nv)

    with pytest.raises(ValueError, match="law refused"):
        compiled_steps(dyn, "semi_implicit_euler").run(np.zeros(model.nv), np.zeros(model.nv),
                                                       None, 1e-3, 10, law=law)
    with pytest.raises(ValueError, match="the law gave 2 efforts"):
        compiled_steps(dyn, "rk4").run(np.zeros(model.nv), np.zeros(model.nv), None, 1e-3, 5,
                                       law=lambda k, q, v: [0.0, 1.0])


def test_the_compiled_loop_stops_before_a_step_it_cannot_take(arm):
    """A non-finite input or result ends the trace before that step: the reference takes it
    (and raises or diverges as it always does)."""
    _, model, dyn = arm
    fast = compiled_steps(dyn, "semi_implicit_euler")
    taus = np.zeros((10, model.nv))
    taus[6, 0] = math.nan
    trace = fast.run(np.zeros(model.nv), np.zeros(model.nv), taus, 1e-3, 10)
    assert trace.steps == 6 and len(trace.q) == 7 and np.isfinite(trace.q).all()
    bad = np.zeros(model.nv)
    bad[0] = math.inf
    assert fast.run(bad, np.zeros(model.nv), np.zeros(model.nv), 1e-3, 5).steps == 0
    # efforts whose acceleration overflows: refused by the compiled loop, and the reference
    # raises or diverges on that step
    fast = compiled_steps(dyn, "semi_implicit_euler", losses=False, limits=False)
    huge = np.full(model.nv, 1e308)
    assert fast.run(np.zeros(model.nv), np.zeros(model.nv), huge, 1e-3, 5).steps == 0
    with np.errstate(all="ignore"):
        try:
            ref = step(dyn, np.zeros(model.nv), np.zeros(model.nv), huge, 1e-3,
                       "semi_implicit_euler", losses=False, limits=False)
            assert not (np.isfinite(ref.q).all() and np.isfinite(ref.v).all())
        except ValueError as exc:
            assert "not finite" in str(exc) or "NaN or inf" in str(exc)


def test_bad_arguments_are_refused_without_a_crash(arm):
    _, model, dyn = arm
    n = model.nv
    rollout = dyn.kernels.rollout
    Q, V, A, hit = np.zeros((3, n)), np.zeros((3, n)), np.zeros((2, n)), np.zeros((2, n), bool)
    tau = np.zeros(n)
    args = [Q, V, A, hit, tau, 1e-3, 0, None, None, None, None, None, None, None]
    assert rollout(*args) == 2
    for position, bad, words in [
        (0, np.zeros((2, n)), "Q must be"), (1, np.zeros((3, n), np.float32), "V must be"),
        (2, np.zeros(n), "A must be"), (3, np.zeros((2, n)), "hit must be"),
        (4, np.zeros(n + 1), "tau must be"), (5, -1.0, "dt must be"), (6, 3, "integrator"),
        (7, np.zeros(n + 2), "damping must be"), (10, None, "stribeck_velocity must be"),
        (11, np.zeros(n - 1), "lower must be"), (13, 3, "law must be callable"),
    ]:
        wrong = list(args)
        if position in (7, 10):  # one of the losses given: all four checked
            wrong[7:11] = [np.zeros(n)] * 4
        if position == 11:  # one of the stops given: both checked
            wrong[12] = np.zeros(n)
        wrong[position] = bad
        with pytest.raises((ValueError, TypeError), match=words):
            rollout(*wrong)
    read_only = np.zeros((3, n))
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="Q must be a C-contiguous writable"):
        rollout(read_only, *args[1:])
    with pytest.raises(TypeError, match="14 arguments"):
        rollout(*args[:5])


def test_only_fixed_base_one_dof_models_with_c_kernels_take_it():
    model = _load("panda")
    assert compiled_steps(ReferenceDynamics(model), "rk4") is None
    assert compiled_steps(make_dynamics(model, "python"), "rk4") is None
    dyn = make_dynamics(model, "c")
    assert compiled_steps(dyn, "rk4") is not None
    assert compiled_steps(dyn, "rk4", f_ext={"panda_link7": np.ones(6)}) is None
    assert compiled_steps(dyn, "rk4", constraints=ConstraintSet([])) is not None  # empty
    floating = load_model(Path(robots_dir(), REAL_ROBOTS["panda"][0]), floating_base=True)
    assert compiled_steps(make_dynamics(floating, "c"), "rk4") is None


def test_the_roll_out_releases_the_gil(arm):
    _, model, dyn = arm
    fast = compiled_steps(dyn, "rk4", limits=False)
    start, stop, inside = ticks_during(lambda: fast.run(
        np.zeros(model.nv), np.zeros(model.nv), np.zeros(model.nv), 1e-4, 100_000))
    # with the GIL held for the whole call the test's thread could not tick during it
    assert len(inside) > 100 and np.diff(inside).max() < 0.5 * (stop - start)


# ----------------------------------------------------------------------------- Simulator


@pytest.mark.parametrize("method", INTEGRATORS)
def test_simulator_takes_the_compiled_path_and_matches_the_reference(arm, method):
    """Same commands, a command timeout falling inside an advance: the same states (to
    rounding), the same times to the last bit, the same stops."""
    name, model, dyn = arm
    sims = [Simulator(d, 1e-3, method, command_timeout=0.0425) for d in (dyn, StepOnly(dyn))]
    rng = np.random.default_rng(3)
    for chunk in range(6):
        tau = rng.uniform(-0.3, 0.3, model.nv) * model.effort_limit
        for sim in sims:
            if chunk != 2:  # no command in chunk 2: the timeout falls during it
                sim.set_command(tau)
            assert sim.advance(0.025) == 25
        fast, ref = sims
        assert fast.time == ref.time
        _compare(name, f"Simulator {method}", np.r_[fast.q, fast.v, fast.a],
                 np.r_[ref.q, ref.v, ref.a])
        assert np.array_equal(fast.limit_hit, ref.limit_hit)
    assert sims[0].command_timed_out is False


class Damped(Simulator):
    """A simulator whose effort depends on the state (as the servo simulator's does)."""

    state_feedback = True

    def effort_at(self, t, q, v):
        return self.dynamics.rnea(q, v, -20.0 * v) + np.sin(t) * self.command


@pytest.mark.parametrize("method", INTEGRATORS)
def test_a_state_feedback_simulator_is_called_back_per_step(arm, method):
    name, model, dyn = arm
    sims = [Damped(d, 1e-3, method) for d in (dyn, StepOnly(dyn))]
    for sim in sims:
        sim.set_command(np.full(model.nv, 0.5))
        sim.v = np.full(model.nv, 0.3)
        assert sim.advance(0.2) == 200
    fast, ref = sims
    assert fast.time == ref.time
    ours, theirs = np.r_[fast.q, fast.v, fast.a], np.r_[ref.q, ref.v, ref.a]
    if name == "default_arm":
        # its wrist friction near q̇ = 0 amplifies a 1-ulp tanh difference ~10 % per step
        # over these 200 steps (every single step is checked above to 1e-12)
        assert rel_err(ours, theirs) <= 1e-6
    else:
        _compare(name, f"state feedback {method}", ours, theirs)
    np.testing.assert_array_equal(fast.applied_effort, fast.effort_at(fast.time, fast.q, fast.v))


def test_simulator_after_a_divergence_raises_as_the_reference(arm):
    _, model, dyn = arm
    results = []
    for d in (dyn, StepOnly(dyn)):
        sim = Simulator(d, 1e-3, "semi_implicit_euler")
        sim.command = np.full(model.nv, 1e306)  # past the clamp: what a broken model would do
        sim.command_time = 0.0
        with np.errstate(all="ignore"):
            try:
                sim.advance(0.005)
                results.append(("ok", np.isfinite(sim.q).all()))
            except ValueError as exc:
                results.append(("raised", str(exc)))
    assert results[0] == results[1]


def test_live_dynamics_simulator_switches_to_the_compiled_path():
    model = _load("default_arm")
    live = LiveDynamics(model, "c")
    assert live.wait(120)
    assert live.kernels is not None and compiled_steps(live, "rk4") is not None
    reference = LiveDynamics(model, "reference")
    assert reference.kernels is None and compiled_steps(reference, "rk4") is None


# ----------------------------------------------------------------------------- ~/simulate


def _request(**fields) -> Simulate.Request:
    model = _load("panda")
    defaults = dict(joint_names=model.joint_names,
                    positions=[0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8, 0.02], duration=0.4,
                    time_step=1e-3)
    return Simulate.Request(**{**defaults, **fields})


def _reference_point():
    point = JointTrajectoryPoint(positions=[0.3, -0.2, 0.1, -1.8, 0.1, 1.8, 0.6, 0.039],
                                 velocities=[0.0] * 8, accelerations=[0.0] * 8)
    point.time_from_start.nanosec = 300_000_000
    return JointTrajectory(joint_names=_load("panda").joint_names, points=[point])


def _roll_out(dyn, request) -> RollOut:
    roll_out = RollOut(dyn, request, lambda model: None)

    async def run() -> None:
        async for _ in roll_out.run(0.001):  # yields only: no event loop work between
            pass

    asyncio.run(run())
    return roll_out


@pytest.mark.parametrize("fields", [
    dict(torque_mode="constant", efforts=[1.0, -2.0, 0.5, 1.0, 0.0, 0.2, 0.1, 5.0],
         integrator="rk4", output_decimation=7),
    dict(torque_mode="series", effort_times=[0.0, 0.1, 0.25], efforts=list(np.linspace(
        -3, 3, 24)), include_losses=True, output_decimation=3),
    dict(torque_mode="gravity_compensation", include_losses=True),
    dict(torque_mode="computed_torque", kp=[400.0], kd=[40.0], integrator="rk4",
         reference=_reference_point()),
    dict(torque_mode="computed_torque", kp=[100.0], kd=[20.0], include_losses=True,
         reference=_reference_point(), output_decimation=250),
])
def test_simulate_compiled_equals_simulate_by_steps(fields):
    """~/simulate's roll-out in C (with the law called back per step) gives the points the
    step-by-step roll-out gives, chunk boundaries (250 steps) and decimation included."""
    model = _load("panda")
    dyn = make_dynamics(model, "c")
    fast, ref = _roll_out(dyn, _request(**fields)), _roll_out(StepOnly(dyn), _request(**fields))
    assert fast.fast is not None and ref.fast is None
    a, b = fast.trajectory.points, ref.trajectory.points
    assert len(a) == len(b) == -(-400 // max(fields.get("output_decimation", 1), 1)) + 1
    for p, r in zip(a, b):
        assert (p.time_from_start.sec, p.time_from_start.nanosec) == \
            (r.time_from_start.sec, r.time_from_start.nanosec)
        for field in ("positions", "velocities", "accelerations", "effort"):
            assert rel_err(getattr(p, field), getattr(r, field)) <= 1e-10, field
    response_a, response_b = Simulate.Response(), Simulate.Response()
    fast.fill(response_a)
    ref.fill(response_b)
    assert response_a.energy_drift == pytest.approx(response_b.energy_drift, abs=1e-10)


def test_simulate_diverging_reports_the_step_either_way():
    model = _load("panda")
    dyn = make_dynamics(model, "c")
    request = _request(torque_mode="constant", efforts=[1e306] * 8, duration=0.01)
    messages = []
    for d in (dyn, StepOnly(dyn)):
        with np.errstate(all="ignore"), pytest.raises(ValueError) as info:
            _roll_out(d, request)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
