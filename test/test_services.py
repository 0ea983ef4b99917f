# SPDX-License-Identifier: Apache-2.0
"""The four dynamics services of
``rb_dynamics.ros.control_node.dynamics_services.DynamicsServices``, served by the control node
in its own process and called from this process over loopback DDS.

Numbers are checked against Pinocchio (names permuted, free-flyer blocks included) and the
roll-outs against ``rb_dynamics.simulation.step`` run here on the same model.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from geometry_msgs.msg import Vector3, Wrench
from pin_oracle import REAL_ROBOTS, Oracle, rel_err, robots_dir
from rcl_interfaces.srv import GetParameters
from ros_harness import Session, control_node
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics.dynamics import make_dynamics
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import JOINT_DIMENSIONS, Model, load_model
from rb_dynamics.simulation import joint_losses, step
from rb_dynamics_interfaces.srv import DynamicsTerms, ForwardDynamics, InverseDynamics, Simulate

PANDA = f"{robots_dir()}/{REAL_ROBOTS['panda'][0]}"
PANDA_XML = Path(PANDA).read_text()
MODEL = load_model(PANDA)
FLOATING = load_model(PANDA, floating_base=True)
NAMES = MODEL.joint_names
Q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8, 0.02])
SERVICES = {"forward_dynamics": ForwardDynamics, "inverse_dynamics": InverseDynamics,
            "dynamics_terms": DynamicsTerms, "simulate": Simulate}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    session = control_node(tmp_path_factory.mktemp("services"), {"urdf_path": PANDA})
    # the node's final kernels (compiled, where there is a compiler): the reference answers
    # until they are built
    assert session.wait_for_log("dynamics kernels: ", 120.0), session.output()
    yield session
    session.close()


@pytest.fixture(scope="module")
def floating_host(tmp_path_factory):
    """floating_base: services only (the node has no kernels of its own then: roll-outs
    compile theirs)."""
    session = control_node(tmp_path_factory.mktemp("services_floating"),
                           {"urdf_path": PANDA, "floating_base": True})
    yield session
    session.close()


def call(session: Session, service: str, request, timeout: float = 15.0):
    return session.call(SERVICES[service], f"~/{service}", request, timeout)


def blocks(model: Model, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Model q and v indices of the request's flat arrays (a joint's coordinates together)."""
    q_index, v_index = [], []
    for name in names:
        j = model.joint_names.index(name)
        nq, nv = JOINT_DIMENSIONS[model.joint_kinds[j]]
        q_index += range(model.joint_q_index[j], model.joint_q_index[j] + nq)
        v_index += range(model.joint_v_index[j], model.joint_v_index[j] + nv)
    return np.array(q_index), np.array(v_index)


def pinocchio_terms(oracle: Oracle, q: np.ndarray, v: np.ndarray):
    """M, C q̇, g in our model order, from Pinocchio."""
    ref = oracle.references(q, v)
    return ref["crba"], ref["nle"] - ref["gravity"], ref["gravity"]


@pytest.mark.parametrize("floating", [False, True], ids=["fixed", "free_flyer"])
def test_forward_inverse_and_terms_equal_pinocchio_with_names_permuted(
        host, floating_host, floating):
    running, model = (floating_host, FLOATING) if floating else (host, MODEL)
    oracle = Oracle(model, PANDA_XML)
    rng = np.random.default_rng(50 + floating)
    for _ in range(4):
        names = [model.joint_names[k] for k in rng.permutation(len(model.joint_names))]
        qi, vi = blocks(model, names)
        q = model.neutral_configuration()
        q[[model.joint_q_index[model.joint_names.index(n)] for n in NAMES]] = \
            rng.uniform(-0.5, 0.5, len(NAMES))
        if floating:
            q[:3] = rng.uniform(-1, 1, 3)
            quat = rng.normal(size=4)
            q[3:7] = quat / np.linalg.norm(quat)
        v, a, tau = (rng.uniform(-1, 1, model.nv) for _ in range(3))
        M, c, g = pinocchio_terms(oracle, q, v)
        n = len(vi)

        terms = call(running, "dynamics_terms", DynamicsTerms.Request(
            joint_names=names, positions=q[qi].tolist(), velocities=v[vi].tolist()))
        assert terms.success, terms.message
        assert terms.joint_names == names
        assert rel_err(np.reshape(terms.mass_matrix, (n, n)), M[np.ix_(vi, vi)]) < 1e-9
        assert rel_err(terms.coriolis, c[vi]) < 1e-9
        assert rel_err(terms.gravity, g[vi]) < 1e-9

        inverse = call(running, "inverse_dynamics", InverseDynamics.Request(
            joint_names=names, positions=q[qi].tolist(), velocities=v[vi].tolist(),
            accelerations=a[vi].tolist()))
        assert inverse.success, inverse.message
        assert rel_err(inverse.efforts, (M @ a + c + g)[vi]) < 1e-9
        assert rel_err(inverse.gravity, g[vi]) < 1e-9

        forward = call(running, "forward_dynamics", ForwardDynamics.Request(
            joint_names=names, positions=q[qi].tolist(), velocities=v[vi].tolist(),
            efforts=tau[vi].tolist()))
        assert forward.success, forward.message
        assert rel_err(forward.accelerations, np.linalg.solve(M, tau - c - g)[vi]) < 1e-8


def test_forward_dynamics_with_a_wrench_and_a_scaled_quaternion(host, floating_host):
    """A link wrench as the reference computes it; a non-unit quaternion is normalised."""
    rng = np.random.default_rng(7)
    q, v, tau = Q0.copy(), rng.uniform(-1, 1, 8), rng.uniform(-5, 5, 8)
    names = NAMES[::-1]
    wrench = Wrench(force=Vector3(x=1.0, y=-2.0, z=3.0), torque=Vector3(x=0.1, y=0.2, z=-0.3))
    answer = call(host, "forward_dynamics", ForwardDynamics.Request(
        joint_names=names, positions=q[::-1].tolist(), velocities=v[::-1].tolist(),
        efforts=tau[::-1].tolist(), wrench_links=["panda_link5"], wrenches=[wrench]))
    assert answer.success, answer.message
    ref = D.aba(MODEL, q, v, tau, {"panda_link5": np.array([1.0, -2.0, 3.0, 0.1, 0.2, -0.3])})
    assert rel_err(answer.accelerations, ref[::-1]) < 1e-12

    qf = FLOATING.neutral_configuration()
    qf[3:7] = [0.1, 0.2, 0.3, 0.9]
    qf[3:7] /= np.linalg.norm(qf[3:7])
    qf[7:] = Q0
    unit = call(floating_host, "dynamics_terms", DynamicsTerms.Request(
        joint_names=FLOATING.joint_names, positions=qf.tolist()))
    scaled = qf.copy()
    scaled[3:7] *= 3.0
    loose = call(floating_host, "dynamics_terms", DynamicsTerms.Request(
        joint_names=FLOATING.joint_names, positions=scaled.tolist()))
    assert unit.success and loose.success, (unit.message, loose.message)
    assert rel_err(loose.mass_matrix, unit.mass_matrix) < 1e-14
    assert rel_err(loose.gravity, unit.gravity) < 1e-14


def _request(**fields) -> Simulate.Request:
    request = Simulate.Request(joint_names=NAMES[::-1], positions=Q0[::-1].tolist(),
                               duration=0.2, time_step=0.001)
    for key, value in fields.items():
        setattr(request, key, value)
    return request


def _roll_out_here(model, q, v, efforts, dt, steps, method, losses=False):
    """States and efforts at every step (and the end), stepped in this process."""
    fast = make_dynamics(model)
    states = [(q, v)]
    for k in range(steps):
        s = step(fast, q, v, efforts(k * dt), dt, method, losses=losses, limits=losses)
        q, v = s.q, s.v
        states.append((q, v))
    return states


def _seconds(point) -> float:
    return point.time_from_start.sec + point.time_from_start.nanosec * 1e-9


def test_simulate_constant_rk4_matches_stepping_in_process(host):
    tau = np.linspace(-1.0, 1.0, 8)
    v0 = np.linspace(0.3, -0.3, 8)
    answer = call(host, "simulate", _request(
        torque_mode="constant", integrator="rk4", output_decimation=10,
        velocities=v0[::-1].tolist(), efforts=tau[::-1].tolist()))
    assert answer.success, answer.message
    assert answer.steps == 200
    points = answer.trajectory.points
    assert len(points) == 21 and answer.trajectory.joint_names == NAMES[::-1]
    assert [round(_seconds(p), 9) for p in points] == [round(0.01 * k, 9) for k in range(21)]
    states = _roll_out_here(MODEL, Q0, v0, lambda t: tau, 1e-3, 200, "rk4")
    fast = make_dynamics(MODEL)
    for k, point in enumerate(points):
        q, v = states[10 * k]
        np.testing.assert_allclose(point.positions, q[::-1], rtol=0, atol=1e-12)
        np.testing.assert_allclose(point.velocities, v[::-1], rtol=0, atol=1e-10)
        np.testing.assert_allclose(point.accelerations, fast.aba(q, v, tau)[::-1], atol=1e-8)
        np.testing.assert_allclose(point.effort, tau[::-1], rtol=0, atol=0)
    q, v = states[-1]
    e0 = D.kinetic_energy(MODEL, Q0, v0) + D.potential_energy(MODEL, Q0)
    e1 = D.kinetic_energy(MODEL, q, v) + D.potential_energy(MODEL, q)
    assert answer.energy_drift == pytest.approx((e1 - e0) / max(abs(e0), 1.0), abs=1e-12)


def test_simulate_torque_free_rk4_conserves_energy(host):
    answer = call(host, "simulate", _request(integrator="rk4", duration=0.5,
                                            output_decimation=100))
    assert answer.success, answer.message
    assert len(answer.trajectory.points) == 6
    assert abs(answer.energy_drift) < 1e-8


def test_simulate_series_with_losses_matches_stepping_in_process(host):
    times = np.array([0.0, 0.05, 0.12])
    rows = np.array([np.full(8, 2.0), np.linspace(-3, 3, 8), np.zeros(8)])
    order = np.arange(8)[::-1]
    answer = call(host, "simulate", _request(
        torque_mode="series", effort_times=times.tolist(),
        efforts=rows[:, order].ravel().tolist(), include_losses=True,
        integrator="semi_implicit_euler"))
    assert answer.success, answer.message

    def efforts(t):
        return rows[int(np.searchsorted(times, t + 1e-12, side="right")) - 1]

    states = _roll_out_here(MODEL, Q0, np.zeros(8), efforts, 1e-3, 200, "semi_implicit_euler",
                            losses=True)
    points = answer.trajectory.points
    assert len(points) == 201
    for k in (0, 49, 50, 51, 119, 120, 200):
        np.testing.assert_allclose(points[k].positions, states[k][0][::-1], atol=1e-12)
        np.testing.assert_allclose(points[k].velocities, states[k][1][::-1], atol=1e-10)
        np.testing.assert_allclose(points[k].effort, efforts(k * 1e-3)[::-1], atol=0)
    q, v = states[-1]
    fast = make_dynamics(MODEL)
    final = fast.aba(q, v, joint_losses(MODEL, v))  # zero efforts after 0.12 s
    np.testing.assert_allclose(points[-1].accelerations, final[::-1], atol=1e-8)


def test_simulate_gravity_compensation_holds_and_computed_torque_tracks(host):
    held = call(host, "simulate", _request(torque_mode="gravity_compensation", duration=0.5))
    assert held.success, held.message
    start = np.array(held.trajectory.points[0].positions)
    assert np.abs(np.array(held.trajectory.points[-1].positions) - start).max() < 1e-9
    np.testing.assert_allclose(held.trajectory.points[0].effort,
                               D.gravity(MODEL, Q0)[::-1], atol=1e-9)
    goal = np.array([0.3, -0.2, 0.1, -1.8, 0.1, 1.8, 0.6, 0.02])
    reference = JointTrajectory(joint_names=NAMES[2:] + NAMES[:2], points=[JointTrajectoryPoint(
        positions=np.r_[goal[2:], goal[:2]].tolist(), velocities=[0.0] * 8,
        accelerations=[0.0] * 8)])
    reference.points[0].time_from_start.nanosec = 500_000_000
    tracked = call(host, "simulate", _request(torque_mode="computed_torque", duration=1.5,
                                             reference=reference, kp=[400.0], kd=[40.0],
                                             integrator="rk4", output_decimation=50))
    assert tracked.success, tracked.message
    final = np.array(tracked.trajectory.points[-1].positions)[::-1]
    assert np.abs(final - goal).max() < 1e-3


def test_simulate_free_flyer_falls_freely(floating_host):
    """A free-flying arm in gravity: its base falls g t²/2 (the centre of mass does exactly)."""
    q = FLOATING.neutral_configuration()
    q[7:] = Q0
    answer = call(floating_host, "simulate", Simulate.Request(
        joint_names=FLOATING.joint_names, positions=q.tolist(), duration=0.1,
        integrator="rk4", output_decimation=100))
    assert answer.success, answer.message
    end = np.array(answer.trajectory.points[-1].positions)
    com0, com1 = D.center_of_mass(FLOATING, q), D.center_of_mass(FLOATING, end)
    np.testing.assert_allclose(com1 - com0, [0, 0, -0.5 * 9.81 * 0.1**2], atol=1e-9)
    assert abs(np.linalg.norm(end[3:7]) - 1.0) < 1e-12
    assert abs(answer.energy_drift) < 1e-8


def test_a_long_roll_out_leaves_the_node_responsive_and_the_size_bound_is_close(host):
    """A 200 s roll-out (seconds of work): the node's parameter service, the cheap dynamics
    services and its 1 Hz diagnostics timer keep running while it is under way (the roll-out
    hands the executor back every few ms). 5 s at 1 ms keeps every point (5001)."""
    host.statuses()  # subscribed from here on
    get = GetParameters.Request(names=["mode"])
    assert host.call(GetParameters, "~/get_parameters", get).values  # (discovery done)
    terms = DynamicsTerms.Request(joint_names=NAMES, positions=Q0.tolist())
    assert call(host, "dynamics_terms", terms).success
    # the longest roll-out allowed (200,000 steps), the law in every step: seconds of work
    # even compiled
    goal = JointTrajectoryPoint(positions=Q0.tolist())
    goal.time_from_start.sec = 1
    future = host.call_async(Simulate, "~/simulate", _request(
        torque_mode="computed_torque", duration=200.0, integrator="rk4",
        output_decimation=200, kp=[100.0], kd=[20.0],
        reference=JointTrajectory(joint_names=NAMES, points=[goal])))
    started = time.monotonic()
    done: list[float] = []
    future.add_done_callback(lambda _f: done.append(time.monotonic()))
    latencies, answered = [], 0
    while not future.done() and time.monotonic() - started < 60.0:
        began = time.monotonic()
        values = host.call(GetParameters, "~/get_parameters", get).values
        both = values[0].string_value == "gravity_compensation" and \
            call(host, "dynamics_terms", terms).success
        if not future.done():
            latencies.append(time.monotonic() - began)
            answered += both
    assert host.wait_for(future.done, 60.0)
    answer = future.result()
    assert answer.success, answer.message
    assert answer.steps == 200_000 and len(answer.trajectory.points) == 1001
    busy = done[0] - started
    during = [t for t, _ in host.statuses() if started < t < done[0]]
    print(f"\n200 s roll-out busy {busy:.2f} s: {answered} parameter + terms answers meanwhile "
          f"(largest round trip {1e3 * max(latencies, default=0):.0f} ms), "
          f"{len(during)} diagnostics")
    # a blocked executor answers at most what came before the roll-out, and nothing meanwhile;
    # no answer waits for a large part of the roll-out
    assert answered >= 5 and max(latencies) < max(0.5, 0.5 * busy), (answered, latencies)
    if busy > 2.0:  # the roll-out takes ~2.5 s here; a much faster machine makes it too short
        assert during, "no diagnostics while the roll-out ran"
    answer = call(host, "simulate", _request(torque_mode="gravity_compensation", duration=5.0))
    assert answer.success, answer.message
    assert answer.steps == 5000 and len(answer.trajectory.points) == 5001
    # exactly at the bounds: 200000 steps kept every 10 → 20001 points, one too many
    answer = call(host, "simulate", _request(duration=200.0, output_decimation=10))
    assert not answer.success and "output_decimation" in answer.message
    assert "20001" in answer.message and "20000" in answer.message


BAD_SIMULATE = [
    ({"joint_names": ["nope"] + NAMES[::-1][1:]}, "nope"),
    ({"joint_names": NAMES[::-1][:-1] + [NAMES[1]]}, "appears twice"),
    ({"positions": [0.0] * 7}, "positions"),
    ({"positions": [float("nan")] * 8}, "positions[0]"),
    ({"velocities": [0.0] * 9}, "velocities"),
    ({"velocities": [float("inf")] * 8}, "velocities[0]"),
    ({"time_step": -0.001}, "time_step"),
    ({"time_step": float("nan")}, "time_step"),
    ({"duration": 0.0}, "duration"),
    ({"duration": float("inf")}, "duration"),
    ({"duration": 1e-5}, "duration"),
    ({"duration": 1e4}, "at most 200000"),
    ({"duration": 100.0, "time_step": 1e-4}, "duration/time_step"),
    ({"duration": 30.0}, "output_decimation"),
    ({"integrator": "leapfrog"}, "integrator"),
    ({"torque_mode": "magic"}, "torque_mode"),
    ({"torque_mode": "constant", "efforts": [1.0] * 3}, "efforts"),
    ({"torque_mode": "constant", "efforts": [float("nan")] * 8}, "efforts[0]"),
    ({"torque_mode": "series", "efforts": [1.0] * 8, "effort_times": [0.0, 0.1]}, "efforts"),
    ({"torque_mode": "series", "efforts": [1.0] * 8}, "effort_times"),
    ({"torque_mode": "series", "efforts": [1.0] * 16, "effort_times": [0.1, 0.1]},
     "effort_times"),
    ({"torque_mode": "computed_torque"}, "reference"),
    ({"torque_mode": "gravity_compensation", "kp": [1.0, 2.0]}, "kp"),
    ({"torque_mode": "gravity_compensation", "kd": [-1.0]}, "kd"),
    ({"torque_mode": "computed_torque", "reference": JointTrajectory(
        joint_names=["elbow"], points=[JointTrajectoryPoint(positions=[0.0])])}, "reference"),
]


@pytest.mark.parametrize("fields, words", BAD_SIMULATE,
                         ids=[f"{sorted(f)[0]}-{k}" for k, (f, _) in enumerate(BAD_SIMULATE)])
def test_simulate_refuses_bad_requests_naming_the_field(host, fields, words):
    answer = call(host, "simulate", _request(**fields))
    assert not answer.success and words in answer.message, answer.message
    assert answer.steps == 0 and not answer.trajectory.points


def _state_request(service: str, **fields):
    srv = SERVICES[service]
    request = srv.Request(joint_names=NAMES[::-1], positions=Q0[::-1].tolist())
    for key, value in fields.items():
        setattr(request, key, value)
    return request


BAD_STATE = [
    ({"joint_names": ["x"], "positions": [0.0]}, "x"),
    ({"joint_names": NAMES[:-1], "positions": Q0[:-1].tolist()}, NAMES[-1]),
    ({"positions": Q0[:3].tolist()}, "positions"),
    ({"positions": [float("nan")] + Q0[1:].tolist()}, "positions[0]"),
    ({"velocities": [1.0]}, "velocities"),
]


@pytest.mark.parametrize("service", ["forward_dynamics", "inverse_dynamics", "dynamics_terms"])
@pytest.mark.parametrize("fields, words", BAD_STATE)
def test_state_services_refuse_bad_requests_naming_the_field(host, service, fields, words):
    answer = call(host, service, _state_request(service, **fields))
    assert not answer.success and words in answer.message, answer.message


@pytest.mark.parametrize("service, fields, words", [
    ("forward_dynamics", {"efforts": [1.0, float("inf")] + [0.0] * 6}, "efforts[1]"),
    ("forward_dynamics", {"wrench_links": ["nowhere"], "wrenches": [Wrench()]}, "wrench_links"),
    ("forward_dynamics", {"wrench_links": ["panda_link3"]}, "wrench"),
    ("inverse_dynamics", {"accelerations": [0.0] * 2}, "accelerations"),
])
def test_service_specific_fields_are_checked(host, service, fields, words):
    answer = call(host, service, _state_request(service, **fields))
    assert not answer.success and words in answer.message, answer.message


@pytest.mark.parametrize("service", list(SERVICES))
def test_a_zero_quaternion_is_refused_by_every_service(floating_host, service):
    q = FLOATING.neutral_configuration()
    q[3:7] = 0.0
    request = SERVICES[service].Request(joint_names=FLOATING.joint_names, positions=q.tolist())
    if service == "simulate":
        request.duration = 0.01
    answer = call(floating_host, service, request)
    assert not answer.success, service
    assert "positions" in answer.message and "quaternion" in answer.message
    assert "root_joint" in answer.message
    # and a free-flyer's positions need all 7 entries
    request.positions = q[1:].tolist()
    answer = call(floating_host, service, request)
    assert not answer.success and "free-flyer takes 7 positions" in answer.message
