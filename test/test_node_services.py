# SPDX-License-Identifier: Apache-2.0
"""The rb_dynamics node as a real process on loopback DDS, checked against the core in-process.

No mocks: the node runs under rclpy in its own process
(``python -m rb_dynamics.ros.control_node``), this test process calls its services and topics
through rb_dynamics_interfaces, and every number is compared with ``rb_dynamics.dynamics``
computed here on the same model.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from geometry_msgs.msg import Vector3, Wrench
from ros_harness import Session, control_node
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import aba, gravity, rnea
from rb_dynamics.model import load_model
from rb_dynamics_interfaces.srv import ForwardDynamics, InverseDynamics, Simulate

MODEL = load_model(str(DEFAULT_URDF))
JOINTS = list(MODEL.joint_names)
# the node publishes in this order (a parameter), unlike the model's tree order
COMMAND_JOINTS = JOINTS[::-1]
RNG = np.random.default_rng(20261122)


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    session = control_node(tmp_path_factory.mktemp("node"),
                           {"joints": COMMAND_JOINTS, "urdf_path": str(DEFAULT_URDF)})
    yield session
    session.close()


def inverse(session: Session, **fields) -> InverseDynamics.Response:
    return session.call(InverseDynamics, "~/inverse_dynamics", InverseDynamics.Request(**fields))


def forward(session: Session, **fields) -> ForwardDynamics.Response:
    return session.call(ForwardDynamics, "~/forward_dynamics", ForwardDynamics.Request(**fields))


def random_state():
    q = RNG.uniform(MODEL.position_lower.clip(-np.pi), MODEL.position_upper.clip(max=np.pi))
    return q, RNG.normal(size=MODEL.nv), RNG.normal(size=MODEL.nv)


def test_inverse_dynamics_matches_the_core_with_names_in_any_order(running):
    for _ in range(5):
        q, v, a = random_state()
        perm = RNG.permutation(MODEL.nv)
        names = [JOINTS[k] for k in perm]
        answer = inverse(running, joint_names=names, positions=q[perm].tolist(),
                         velocities=v[perm].tolist(), accelerations=a[perm].tolist())
        assert answer.success, answer.message
        assert list(answer.joint_names) == names
        np.testing.assert_allclose(answer.efforts, rnea(MODEL, q, v, a)[perm], atol=1e-9)
        np.testing.assert_allclose(answer.gravity, gravity(MODEL, q)[perm], atol=1e-9)


def test_empty_velocities_and_accelerations_mean_zero(running):
    q, _, _ = random_state()
    answer = inverse(running, joint_names=JOINTS, positions=q.tolist())
    assert answer.success, answer.message
    np.testing.assert_allclose(answer.efforts, gravity(MODEL, q), atol=1e-9)


def test_forward_then_inverse_round_trip_with_external_wrenches(running):
    for _ in range(3):
        q, v, tau = random_state()
        tau *= 10.0
        wrenches = {"wrist_3_link": RNG.normal(size=6), "tool0": RNG.normal(size=6)}
        answer = forward(running, joint_names=JOINTS, positions=q.tolist(),
                         velocities=v.tolist(), efforts=tau.tolist(), wrench_links=list(wrenches),
                         wrenches=[Wrench(force=Vector3(x=w[0], y=w[1], z=w[2]),
                                          torque=Vector3(x=w[3], y=w[4], z=w[5]))
                                   for w in wrenches.values()])
        assert answer.success, answer.message
        qdd = np.array(answer.accelerations)
        np.testing.assert_allclose(qdd, aba(MODEL, q, v, tau, wrenches), rtol=1e-9, atol=1e-9)
        # the same accelerations through inverse dynamics give back the efforts
        np.testing.assert_allclose(rnea(MODEL, q, v, qdd, wrenches), tau, atol=1e-7)

        # and without wrenches, through the node's own inverse dynamics service
        free = forward(running, joint_names=JOINTS, positions=q.tolist(),
                       velocities=v.tolist(), efforts=tau.tolist())
        back = inverse(running, joint_names=JOINTS, positions=q.tolist(), velocities=v.tolist(),
                       accelerations=list(free.accelerations))
        assert free.success and back.success, (free.message, back.message)
        np.testing.assert_allclose(back.efforts, tau, atol=1e-7)


@pytest.mark.parametrize(("request_fields", "field"), [
    ({"positions": [0.0] * 5}, "positions"),
    ({"velocities": [0.0] * 2}, "velocities"),
    ({"accelerations": [0.0, float("nan"), 0, 0, 0, 0]}, "accelerations[1]"),
    ({"joint_names": [*JOINTS[:5], "gripper_joint"]}, "unknown joints ['gripper_joint']"),
    ({"joint_names": [*JOINTS[:5], JOINTS[0]]}, "appears twice"),
])
def test_bad_inverse_requests_answer_false_naming_the_field(running, request_fields, field):
    fields = {"joint_names": JOINTS, "positions": [0.1] * 6, **request_fields}
    answer = inverse(running, **fields)
    assert not answer.success
    assert field in answer.message, answer.message


def test_bad_forward_requests_answer_false_naming_the_field(running):
    base = {"joint_names": JOINTS, "positions": [0.1] * 6}
    answer = forward(running, **base, wrench_links=["no_such_link"], wrenches=[Wrench()])
    assert not answer.success and "wrench_links[0]" in answer.message, answer.message
    answer = forward(running, **base, wrench_links=["tool0", "tool0"], wrenches=[Wrench()])
    assert not answer.success and "wrench_links" in answer.message, answer.message
    answer = forward(running, **base, efforts=[1.0])
    assert not answer.success and "efforts" in answer.message, answer.message
    assert running.process.proc.poll() is None, running.output()


def test_gravity_torques_published_for_joint_states_mapped_by_name(running):
    q, _, _ = random_state()
    perm = RNG.permutation(MODEL.nv)
    # extra names are ignored
    data = running.command_after(["finger_joint", *[JOINTS[k] for k in perm]],
                                 [0.7, *q[perm].tolist()])
    assert data is not None, running.output()
    expected = gravity(MODEL, q)[[JOINTS.index(n) for n in COMMAND_JOINTS]]
    np.testing.assert_allclose(data, expected, atol=1e-9)


def test_joint_states_missing_a_joint_publish_nothing(running):
    # the node was commanding: once no usable state came for state_timeout it sends its stop
    # command, once; after that, nothing answers these states
    running.command_after(JOINTS[:5], [0.0] * 5, timeout=0.5)
    assert running.command_after(JOINTS[:5], [0.0] * 5, timeout=1.0) is None
    assert "missing joints ['wrist_3_joint']" in running.output()


def test_gravity_is_clamped_to_the_urdf_effort_limits(tmp_path):
    weak = DEFAULT_URDF.read_text().replace('effort="150.0"', 'effort="5.0"')
    node = control_node(tmp_path, {"robot_description": weak})
    try:
        q = np.array([0.0, -0.3, 0.4, 0.0, 0.0, 0.0])  # arm stretched out: ~50 Nm at the shoulder
        data = node.command_after(JOINTS, q)
        assert data is not None, node.output()
        expected = np.clip(gravity(MODEL, q), -load_model(weak).effort_limit,
                           load_model(weak).effort_limit)
        assert abs(gravity(MODEL, q)[1]) > 5.0 and abs(data[1]) == pytest.approx(5.0)
        np.testing.assert_allclose(data, expected, atol=1e-9)
        assert "effort clamped to the limit on ['shoulder_lift_joint'" in node.output()
    finally:
        node.close()


def test_a_bad_urdf_is_reported_and_the_node_keeps_running(tmp_path):
    node = control_node(tmp_path, {"robot_description": "<robot name='x'><link/></robot>"})
    try:
        answer = inverse(node, joint_names=JOINTS[:1], positions=[0.0])
        assert not answer.success and "no robot description" in answer.message
        assert node.process.proc.poll() is None
        assert "cannot use the description from the robot_description parameter" in \
            node.output()
    finally:
        node.close()


@pytest.mark.alone  # against a baseline of this run: no other test beside it
def test_the_control_loop_keeps_answering_during_a_long_simulate_call(running):
    """The control loop runs on its own thread: a ~/simulate call lasting seconds on the
    services' thread does not hold back the efforts the arm is waiting for."""
    q, _, _ = random_state()
    commands = running.commands
    assert running.command_after(JOINTS, q) is not None, running.output()
    running.settle(commands)
    # the longest roll-out a request may ask (200,000 steps), with the law in every step:
    # seconds of work on the services' thread
    request = Simulate.Request(joint_names=JOINTS, positions=q.tolist(), duration=200.0,
                               time_step=0.001, integrator="rk4", output_decimation=1000,
                               torque_mode="computed_torque", kp=[100.0], kd=[20.0])
    goal = JointTrajectoryPoint(positions=[0.0] * len(JOINTS))
    goal.time_from_start.sec = 1
    request.reference = JointTrajectory(joint_names=JOINTS, points=[goal])
    stream = running.stream_states(JOINTS, q, 0.02)  # ~50 Hz, as a slow driver would
    # the baseline, in this run: the largest gap between answers with no service call busy
    quiet, until = len(commands), time.monotonic() + 3.0  # (150 gaps: one slow one is no rule)
    running.wait_for(lambda: time.monotonic() >= until, 10.0)
    baseline = float(np.diff([t for t, _ in commands[quiet:]]).max())
    before, sent_before = len(commands), stream.sent
    future = running.call_async(Simulate, "~/simulate", request)
    started = time.monotonic()
    running.wait_for(future.done, 60.0)
    busy = time.monotonic() - started
    stream.stop()
    sent = stream.sent - sent_before
    assert future.done() and future.result().success, running.output()
    running.settle(commands)  # answers to the last states still in flight
    arrivals = [t for t, _ in commands[before:]]
    # a machine many times faster than this one would make the call too short to tell
    assert busy > 0.3, f"simulate took only {busy:.2f} s"
    during = np.array([t for t in arrivals if t < started + busy])
    gaps = np.diff(np.concatenate([[started], during]))
    print(f"simulate busy {busy:.2f} s: {len(arrivals)} commands for {sent} states, "
          f"largest gap {1e3 * gaps.max():.1f} ms (quiet: {1e3 * baseline:.1f} ms)")
    # states queued behind a blocked loop would be superseded: a gap, and an answer missing for
    # every 20 ms blocked; a loaded machine may supersede one or two states however it runs
    assert len(arrivals) >= sent - max(2, sent // 20)
    # a blocked loop leaves a gap as long as the call (> 0.3 s); the quiet gap is at least the
    # stream's 20 ms period, so a few times it (or 0.1 s over it, on a machine whose two
    # cores the call, the loop and this process share) still tells the two apart
    bound = max(4.0 * baseline, baseline + 0.1)
    assert gaps.max() < bound, (gaps.max(), baseline)
