"""~/dynamics_terms and ~/simulate of the control node, called from another process."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, rel_err, robots_dir
from ros_harness import NodeProcess, Peer, write_params
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics import dynamics as D
from rb_dynamics.codegen import compile_dynamics
from rb_dynamics.model import load_model
from rb_dynamics.simulation import step
from rb_dynamics_interfaces.srv import DynamicsTerms, Simulate

PANDA = f"{robots_dir()}/{REAL_ROBOTS['panda'][0]}"
MODEL = load_model(PANDA)
NAMES = MODEL.joint_names


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    params = write_params(tmp_path_factory.mktemp("services"), "rb_dynamics_services",
                          {"urdf_path": PANDA})
    process = NodeProcess("rb_dynamics.node", params, "-r", "__node:=rb_dynamics_services")
    peer = Peer("services_peer")
    terms = peer.node.create_client(DynamicsTerms, "rb_dynamics_services/dynamics_terms")
    simulate = peer.node.create_client(Simulate, "rb_dynamics_services/simulate")
    yield process, peer, terms, simulate
    peer.close()
    assert process.stop() < 2.0
    assert process.proc.returncode == 0, process.output()


def test_dynamics_terms_equal_pinocchio(node):
    _, peer, terms, _ = node
    pm = pin.buildModelFromUrdf(PANDA, mimic=True)
    pd = pm.createData()
    rng = np.random.default_rng(50)
    order = rng.permutation(len(NAMES))
    names = [NAMES[k] for k in order]
    for _ in range(5):
        q, v = rng.uniform(-1, 1, 8) * 0.5, rng.uniform(-1, 1, 8)
        answer = peer.call(terms, DynamicsTerms.Request(
            joint_names=names, positions=q[order].tolist(), velocities=v[order].tolist()))
        assert answer.success, answer.message
        assert answer.joint_names == names
        M = pin.crba(pm, pd, q)
        M = np.triu(M) + np.triu(M, 1).T
        g = pin.computeGeneralizedGravity(pm, pd, q)
        c = pin.nonLinearEffects(pm, pd, q, v) - g
        n = len(names)
        assert rel_err(np.array(answer.mass_matrix).reshape(n, n), M[np.ix_(order, order)]) < 1e-9
        assert rel_err(answer.gravity, g[order]) < 1e-9
        assert rel_err(answer.coriolis, c[order]) < 1e-9


def _request(**fields) -> Simulate.Request:
    q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8, 0.02])
    request = Simulate.Request(joint_names=NAMES[::-1], positions=q0[::-1].tolist(),
                               duration=0.2, time_step=0.001)
    for key, value in fields.items():
        setattr(request, key, value)
    return request


def test_simulate_matches_stepping_in_process(node):
    _, peer, _, simulate = node
    answer = peer.call(simulate, _request(torque_mode="constant", integrator="rk4",
                                          output_decimation=10))
    assert answer.success, answer.message
    assert answer.steps == 200 and len(answer.trajectory.points) == 20
    fast = compile_dynamics(MODEL)
    q, v = np.array(_request().positions[::-1]), np.zeros(8)
    for _ in range(200):
        s = step(MODEL, q, v, np.zeros(8), 0.001, "rk4",
                 forward_dynamics=lambda m, qs, vs, t, *a: fast.aba(qs, vs, t),
                 losses=False, limits=False)
        q, v = s.q, s.v
    last = answer.trajectory.points[-1]  # t = 0.19 s
    assert last.time_from_start.nanosec == 190_000_000
    assert abs(answer.energy_drift) < 1e-6
    # the answer is ordered like the request (reversed)
    q_check, v_check = np.array(_request().positions[::-1]), np.zeros(8)
    for _ in range(190):
        s = step(MODEL, q_check, v_check, np.zeros(8), 0.001, "rk4",
                 forward_dynamics=lambda m, qs, vs, t, *a: fast.aba(qs, vs, t),
                 losses=False, limits=False)
        q_check, v_check = s.q, s.v
    np.testing.assert_allclose(last.positions, q_check[::-1], rtol=1e-12, atol=1e-12)


def test_simulate_with_gravity_compensation_holds_and_computed_torque_tracks(node):
    _, peer, _, simulate = node
    held = peer.call(simulate, _request(torque_mode="gravity_compensation", duration=0.5))
    assert held.success, held.message
    start = np.array(held.trajectory.points[0].positions)
    assert np.abs(np.array(held.trajectory.points[-1].positions) - start).max() < 1e-9
    goal = np.array([0.3, -0.2, 0.1, -1.8, 0.1, 1.8, 0.6, 0.02])
    reference = JointTrajectory(joint_names=NAMES, points=[JointTrajectoryPoint(
        positions=goal.tolist(), velocities=[0.0] * 8, accelerations=[0.0] * 8)])
    reference.points[0].time_from_start.nanosec = 500_000_000
    tracked = peer.call(simulate, _request(torque_mode="computed_torque", duration=1.5,
                                           reference=reference, kp=[400.0], kd=[40.0]))
    assert tracked.success, tracked.message
    final = np.array(tracked.trajectory.points[-1].positions)[::-1]
    assert np.abs(final - goal).max() < 1e-3


@pytest.mark.parametrize("fields, words", [
    ({"joint_names": ["nope"] + NAMES[1:]}, "nope"),
    ({"positions": [0.0] * 7}, "positions"),
    ({"positions": [float("nan")] * 8}, "positions"),
    ({"time_step": -0.001}, "time_step"),
    ({"duration": 1e4}, "at most 200000"),
    ({"duration": 30.0}, "output points"),
    ({"integrator": "leapfrog"}, "integrator"),
    ({"torque_mode": "magic"}, "torque_mode"),
    ({"torque_mode": "constant", "efforts": [1.0] * 3}, "efforts"),
    ({"torque_mode": "series", "efforts": [1.0] * 8, "effort_times": [0.0, 0.1]}, "series"),
    ({"torque_mode": "computed_torque"}, "reference"),
])
def test_simulate_refuses_bad_requests_naming_the_field(node, fields, words):
    _, peer, _, simulate = node
    answer = peer.call(simulate, _request(**fields))
    assert not answer.success and words in answer.message, answer.message


def test_dynamics_terms_refuses_unknown_joints(node):
    _, peer, terms, _ = node
    answer = peer.call(terms, DynamicsTerms.Request(joint_names=["x"], positions=[0.0]))
    assert not answer.success and "x" in answer.message
    assert D.gravity(MODEL, np.zeros(8)).shape == (8,)
