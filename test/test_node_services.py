"""The rb_dynamics node as a real process on loopback DDS, checked against the core in-process.

No mocks: the node runs under rclpy in its own process (``python -m rb_dynamics.node``), this
test process calls its services and topics through rb_dynamics_interfaces, and every number is
compared with ``rb_dynamics.dynamics`` computed here on the same model.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from geometry_msgs.msg import Vector3, Wrench
from ros_harness import NodeProcess, Peer, write_params
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import aba, gravity, rnea
from rb_dynamics.model import load_model
from rb_dynamics_interfaces.srv import ForwardDynamics, InverseDynamics, Simulate

MODEL = load_model(str(DEFAULT_URDF))
JOINTS = list(MODEL.joint_names)
# the node publishes in this order (a parameter), unlike the model's tree order
COMMAND_JOINTS = JOINTS[::-1]
RNG = np.random.default_rng(20261122)


class Running:
    """A node process and a test peer talking to it."""

    def __init__(self, node: NodeProcess, peer: Peer, name: str = "rb_dynamics"):
        self.node, self.peer = node, peer
        self.received: list[Float64MultiArray] = []
        peer.node.create_subscription(
            Float64MultiArray, f"{name}/effort_commands", self.received.append, 10)
        self.states = peer.node.create_publisher(JointState, "joint_states", 10)
        self.inverse = peer.node.create_client(InverseDynamics, f"{name}/inverse_dynamics")
        self.forward = peer.node.create_client(ForwardDynamics, f"{name}/forward_dynamics")

    def call(self, client, request):
        return self.peer.call(client, request, timeout=15.0)

    def gravity_for(self, msg: JointState, timeout: float = 10.0) -> list[float] | None:
        """Publish ``msg`` (again, until the node has seen it) and return the torques received."""
        self.peer.wait_for(lambda: self.states.get_subscription_count() > 0, 15.0)
        self.received.clear()
        for _ in range(int(timeout / 0.2)):
            self.states.publish(msg)
            if self.peer.wait_for(lambda: bool(self.received), 0.2):
                return list(self.received[-1].data)
        return None


def start(tmp_path, params: dict, name: str = "rb_dynamics") -> Running:
    """The node under its own name, so that nodes of different tests never answer each other."""
    node = NodeProcess("rb_dynamics.node", write_params(tmp_path, name, params),
                       "-r", f"__node:={name}")
    return Running(node, Peer(f"{name}_test_peer"), name)


def stop(running: Running) -> None:
    running.peer.close()
    seconds = running.node.stop()  # SIGINT, then SIGKILL after 5 s
    assert seconds < 3.0, f"the node took {seconds:.1f} s to stop\n{running.node.output()}"
    assert running.node.proc.returncode == 0, running.node.output()


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    r = start(tmp_path_factory.mktemp("node"),
              {"joints": COMMAND_JOINTS, "urdf_path": str(DEFAULT_URDF)})
    yield r
    stop(r)


def random_state():
    q = RNG.uniform(MODEL.position_lower.clip(-np.pi), MODEL.position_upper.clip(max=np.pi))
    return q, RNG.normal(size=MODEL.nv), RNG.normal(size=MODEL.nv)


def test_inverse_dynamics_matches_the_core_with_names_in_any_order(running):
    for _ in range(5):
        q, v, a = random_state()
        perm = RNG.permutation(MODEL.nv)
        names = [JOINTS[k] for k in perm]
        answer = running.call(running.inverse, InverseDynamics.Request(
            joint_names=names, positions=q[perm].tolist(), velocities=v[perm].tolist(),
            accelerations=a[perm].tolist()))
        assert answer.success, answer.message
        assert list(answer.joint_names) == names
        np.testing.assert_allclose(answer.efforts, rnea(MODEL, q, v, a)[perm], atol=1e-9)
        np.testing.assert_allclose(answer.gravity, gravity(MODEL, q)[perm], atol=1e-9)


def test_empty_velocities_and_accelerations_mean_zero(running):
    q, _, _ = random_state()
    answer = running.call(running.inverse, InverseDynamics.Request(
        joint_names=JOINTS, positions=q.tolist()))
    assert answer.success, answer.message
    np.testing.assert_allclose(answer.efforts, gravity(MODEL, q), atol=1e-9)


def test_forward_then_inverse_round_trip_with_external_wrenches(running):
    for _ in range(3):
        q, v, tau = random_state()
        tau *= 10.0
        wrenches = {"wrist_3_link": RNG.normal(size=6), "tool0": RNG.normal(size=6)}
        answer = running.call(running.forward, ForwardDynamics.Request(
            joint_names=JOINTS, positions=q.tolist(), velocities=v.tolist(),
            efforts=tau.tolist(), wrench_links=list(wrenches),
            wrenches=[Wrench(force=Vector3(x=w[0], y=w[1], z=w[2]),
                             torque=Vector3(x=w[3], y=w[4], z=w[5])) for w in wrenches.values()]))
        assert answer.success, answer.message
        qdd = np.array(answer.accelerations)
        np.testing.assert_allclose(qdd, aba(MODEL, q, v, tau, wrenches), rtol=1e-9, atol=1e-9)
        # the same accelerations through inverse dynamics give back the efforts
        np.testing.assert_allclose(rnea(MODEL, q, v, qdd, wrenches), tau, atol=1e-7)

        # and without wrenches, through the node's own inverse dynamics service
        free = running.call(running.forward, ForwardDynamics.Request(
            joint_names=JOINTS, positions=q.tolist(), velocities=v.tolist(),
            efforts=tau.tolist()))
        back = running.call(running.inverse, InverseDynamics.Request(
            joint_names=JOINTS, positions=q.tolist(), velocities=v.tolist(),
            accelerations=list(free.accelerations)))
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
    answer = running.call(running.inverse, InverseDynamics.Request(**fields))
    assert not answer.success
    assert field in answer.message, answer.message


def test_bad_forward_requests_answer_false_naming_the_field(running):
    base = {"joint_names": JOINTS, "positions": [0.1] * 6}
    answer = running.call(running.forward, ForwardDynamics.Request(
        **base, wrench_links=["no_such_link"], wrenches=[Wrench()]))
    assert not answer.success and "wrench_links[0]" in answer.message, answer.message
    answer = running.call(running.forward, ForwardDynamics.Request(
        **base, wrench_links=["tool0", "tool0"], wrenches=[Wrench()]))
    assert not answer.success and "wrench_links" in answer.message, answer.message
    answer = running.call(running.forward, ForwardDynamics.Request(**base, efforts=[1.0]))
    assert not answer.success and "efforts" in answer.message, answer.message
    assert running.node.proc.poll() is None, running.node.output()


def test_gravity_torques_published_for_joint_states_mapped_by_name(running):
    q, _, _ = random_state()
    perm = RNG.permutation(MODEL.nv)
    msg = JointState(name=["finger_joint", *[JOINTS[k] for k in perm]],  # extra names: ignored
                     position=[0.7, *q[perm].tolist()])
    data = running.gravity_for(msg)
    assert data is not None, running.node.output()
    expected = gravity(MODEL, q)[[JOINTS.index(n) for n in COMMAND_JOINTS]]
    np.testing.assert_allclose(data, expected, atol=1e-9)


def test_joint_states_missing_a_joint_publish_nothing(running):
    msg = JointState(name=JOINTS[:5], position=[0.0] * 5)
    assert running.gravity_for(msg, timeout=1.0) is None
    assert "missing joints ['wrist_3_joint']" in running.node.output()


def test_gravity_is_clamped_to_the_urdf_effort_limits(tmp_path):
    weak = DEFAULT_URDF.read_text().replace('effort="150.0"', 'effort="5.0"')
    r = start(tmp_path, {"robot_description": weak}, "rb_dynamics_weak")
    try:
        q = np.array([0.0, -0.3, 0.4, 0.0, 0.0, 0.0])  # arm stretched out: ~50 Nm at the shoulder
        data = r.gravity_for(JointState(name=JOINTS, position=q.tolist()))
        assert data is not None, r.node.output()
        expected = np.clip(gravity(MODEL, q), -load_model(weak).effort_limit,
                           load_model(weak).effort_limit)
        assert abs(gravity(MODEL, q)[1]) > 5.0 and abs(data[1]) == pytest.approx(5.0)
        np.testing.assert_allclose(data, expected, atol=1e-9)
        assert "effort clamped to the limit on ['shoulder_lift_joint'" in r.node.output()
    finally:
        stop(r)


def test_a_bad_urdf_is_reported_and_the_node_keeps_running(tmp_path):
    r = start(tmp_path, {"robot_description": "<robot name='x'><link/></robot>"},
              "rb_dynamics_bad")
    try:
        answer = r.call(r.inverse, InverseDynamics.Request(joint_names=JOINTS[:1],
                                                          positions=[0.0]))
        assert not answer.success and "no robot description" in answer.message
        assert r.node.proc.poll() is None
        assert "cannot use the description from the robot_description parameter" in \
            r.node.output()
    finally:
        stop(r)


def test_the_control_loop_keeps_answering_during_a_long_simulate_call(running):
    """The control loop runs on its own thread: a ~/simulate call lasting seconds on the
    services' thread does not hold back the efforts the arm is waiting for."""
    simulate = running.peer.node.create_client(Simulate, "rb_dynamics/simulate")
    assert simulate.wait_for_service(timeout_sec=15.0)
    running.peer.wait_for(lambda: False, 0.3)  # let the response writer match (harness note)
    q, _, _ = random_state()
    assert running.gravity_for(JointState(name=JOINTS, position=q.tolist())) is not None
    request = Simulate.Request(joint_names=JOINTS, positions=q.tolist(), duration=20.0,
                               time_step=0.001, integrator="rk4", output_decimation=1000)
    arrivals: list[float] = []
    running.peer.node.create_subscription(
        Float64MultiArray, "rb_dynamics/effort_commands",
        lambda _msg: arrivals.append(time.monotonic()), 100)
    started = time.monotonic()
    future = simulate.call_async(request)
    state = JointState(name=JOINTS, position=q.tolist())
    sent = 0
    while not future.done() and time.monotonic() - started < 60.0:
        running.states.publish(state)  # ~50 Hz, as a slow driver would
        sent += 1
        running.peer.wait_for(lambda: False, 0.005)
    busy = time.monotonic() - started
    assert future.done() and future.result().success, running.node.output()
    running.peer.wait_for(lambda: False, 0.2)  # answers to the last states still in flight
    # a machine many times faster than this one would make the call too short to tell
    assert busy > 0.3, f"simulate took only {busy:.2f} s"
    during = np.array([t for t in arrivals if t < started + busy])
    gaps = np.diff(np.concatenate([[started], during]))
    print(f"simulate busy {busy:.2f} s: {len(arrivals)} commands for {sent} states, "
          f"largest gap {1e3 * gaps.max():.1f} ms")
    # states queued behind a blocked loop would be superseded: fewer answers, and a gap
    assert len(arrivals) >= sent - 1 and gaps.max() < 0.1
