# SPDX-License-Identifier: Apache-2.0
"""Constraints declared in a node's YAML, honoured by the topic-driven simulator, ~/simulate and
~/forward_dynamics: a four-bar linkage (a URDF tree plus one loop constraint) stays closed."""

from __future__ import annotations

import numpy as np
import pytest
from ros_harness import Session, control_node, refused_start, simulator
from sensor_msgs.msg import JointState
from test_constraints_pinocchio import four_bar_urdf

from rb_dynamics.dynamics import ConstraintSet, constrained_forward_dynamics
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import load_model
from rb_dynamics_interfaces.srv import ForwardDynamics, Simulate

GRAVITY = [0.0, -9.81, 0.0]  # the linkage moves in the xy plane
MODEL = load_model(four_bar_urdf(), gravity=GRAVITY)
NAMES = MODEL.joint_names
# crank at 60°, coupler and rocker solved so that the rocker's tip sits on its ground pivot
Q0 = [1.0471975511965976, -0.6512962022375605, -2.381830721082478]
LOOP = {"type": "loop_point", "link_a": "rocker", "point_a": [0.2, 0.0, 0.0],
        "link_b": "ground", "point_b": [0.2, 0.0, 0.0]}
CONSTRAINTS = {"names": ["loop"], "loop": LOOP}


def loop_violation(q) -> float:
    constraints = ConstraintSet.from_specs(MODEL, {"loop": LOOP})
    rows = constraints.constraints[0].rows(MODEL, np.asarray(q), np.zeros(3), 0.0,
                                           constraints.gains)
    return float(np.abs(rows.violation).max())


def test_the_initial_state_closes_the_loop():
    assert loop_violation(Q0) < 1e-12


@pytest.fixture()
def urdf_file(tmp_path):
    path = tmp_path / "four_bar.urdf"
    path.write_text(four_bar_urdf())
    return path


def test_simulator_keeps_the_loop_closed_for_10_s(tmp_path, urdf_file):
    sim = simulator(tmp_path, {
        "urdf_path": str(urdf_file), "gravity": GRAVITY, "initial_positions": Q0,
        "time_step": 0.002, "publish_rate": 100.0, "real_time_factor": 2.0,
        "publish_clock": True, "loop_constraints": CONSTRAINTS})
    states = sim.received(JointState, "joint_states")
    try:
        def sim_time() -> float:
            stamp = states[-1][1].header.stamp if states else None
            return stamp.sec + stamp.nanosec * 1e-9 if stamp else 0.0

        assert sim.wait_for(lambda: sim_time() >= 10.0, 60), sim.output()
        assert "constraints ['loop']" in sim.output()
        worst = max(loop_violation(s.position) for _, s in states)
        crank = [s.position[0] for _, s in states]
        print(f"\nsimulator four-bar, worst loop violation: {worst:.2e} m")
        assert worst <= 1e-6, worst
        assert np.ptp(crank) > 1.0  # it really swings
    finally:
        sim.close()


def test_simulator_refuses_a_constraint_on_an_unknown_link(tmp_path, urdf_file):
    output = refused_start("rb_dynamics.ros.simulator_node", tmp_path, {
        "urdf_path": str(urdf_file), "loop_constraints": {
            "names": ["loop"], "loop": {**LOOP, "link_b": "nowhere"}}})
    assert "loop_constraints.loop.link_b: unknown link 'nowhere'" in output


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The control node on the linkage, in the linkage's plane's gravity, with the loop."""
    directory = tmp_path_factory.mktemp("four_bar_host")
    urdf = directory / "four_bar.urdf"
    urdf.write_text(four_bar_urdf())
    session = control_node(directory, {"urdf_path": str(urdf), "gravity": GRAVITY,
                                       "loop_constraints": CONSTRAINTS})
    # the node's final kernels (compiled, where there is a compiler): the reference answers
    # until they are built
    assert session.wait_for_log("dynamics kernels: ", 120.0), session.output()
    yield session
    session.close()


def test_simulate_service_keeps_the_loop_closed_for_10_s(host):
    for integrator in ("semi_implicit_euler", "rk4"):
        answer = host.call(Simulate, "~/simulate", Simulate.Request(
            joint_names=NAMES, positions=Q0, duration=10.0, time_step=0.002,
            integrator=integrator, output_decimation=10), timeout=600)  # (the reference
        # algorithms answer while a busy machine still compiles the kernels: minutes)
        assert answer.success, answer.message
        positions = [p.positions for p in answer.trajectory.points]
        assert len(positions) == 501
        worst = max(loop_violation(q) for q in positions)
        print(f"\n~/simulate four-bar, worst loop violation: {worst:.2e} m")
        assert worst <= 1e-6 and answer.max_constraint_violation <= 1e-6, worst
        assert answer.max_constraint_violation == pytest.approx(worst, rel=1e-3, abs=1e-12)
        assert np.ptp([q[0] for q in positions]) > 1.0


def forward(session: Session, **fields) -> ForwardDynamics.Response:
    return session.call(ForwardDynamics, "~/forward_dynamics", ForwardDynamics.Request(**fields),
                        timeout=20)


def test_forward_dynamics_service_answers_the_constrained_acceleration(host):
    rng = np.random.default_rng(7)
    constraints = ConstraintSet.from_specs(MODEL, {"loop": LOOP})
    A = constraints.constraints[0].rows(MODEL, np.asarray(Q0), np.zeros(3), 0.0,
                                        constraints.gains).A
    order = [2, 0, 1]
    for _ in range(3):
        # a velocity the loop allows, and arbitrary efforts
        v = np.linalg.svd(A)[2][-1] * rng.uniform(-3, 3)
        tau = rng.uniform(-1, 1, 3)
        answer = forward(host, joint_names=[NAMES[k] for k in order],
                         positions=[Q0[k] for k in order], velocities=v[order].tolist(),
                         efforts=tau[order].tolist())
        assert answer.success, answer.message
        local = constrained_forward_dynamics(MODEL, Q0, v, tau, ConstraintSet.from_specs(
            MODEL, {"loop": LOOP}).constraints)
        np.testing.assert_allclose(answer.accelerations, local.qdd[order], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(answer.constraint_forces, local.constraint_force[order],
                                   rtol=1e-9, atol=1e-12)
        assert answer.constraint_violation < 1e-12
        free = D.aba(MODEL, Q0, v, tau)
        assert np.abs(local.qdd - free).max() > 1e-3  # the constraint really acts
    bad = forward(host, joint_names=NAMES, positions=Q0, velocities=[0.0, 0.0, float("nan")])
    assert not bad.success and "velocities[2]" in bad.message


def test_control_node_services_refuse_constraints_that_do_not_fit_the_model(tmp_path, urdf_file):
    node = control_node(tmp_path, {
        "urdf_path": str(urdf_file),
        "loop_constraints": {"names": ["loop"], "loop": {**LOOP, "link_a": "crankshaft"}}})
    try:
        answer = forward(node, joint_names=NAMES, positions=Q0)
        assert not answer.success
        assert "constraints.loop.link_a: unknown link 'crankshaft'" in answer.message
        answer = node.call(Simulate, "~/simulate", Simulate.Request(
            joint_names=NAMES, positions=Q0, duration=0.1))
        assert not answer.success and "crankshaft" in answer.message
        assert node.process.proc.poll() is None  # it keeps running
    finally:
        node.close()
    assert "~/forward_dynamics and ~/simulate will refuse" in node.output()
