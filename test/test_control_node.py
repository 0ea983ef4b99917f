"""The control node as a real process: torques equal Pinocchio's for the same state.

A test process plays the robot driver (joint_states), the trajectory publisher and the effort
controller (listening to ~/effort_commands), all on loopback DDS with a random domain.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from pin_oracle import REAL_ROBOTS, rel_err, robots_dir
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParametersAtomically
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_harness import NodeProcess, Peer, answer_after, write_params
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics.model import load_model

UR5 = Path(robots_dir(), REAL_ROBOTS["ur5"][0])
PANDA = Path(robots_dir(), REAL_ROBOTS["panda"][0])


class Rig:
    def __init__(self, peer: Peer, node: NodeProcess):
        self.peer, self.node = peer, node
        self.commands: list[Float64MultiArray] = []
        self.diagnostics: list[DiagnosticArray] = []
        n = peer.node
        n.create_subscription(Float64MultiArray, "rb_dynamics/effort_commands",
                              self.commands.append, 50)
        n.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics.append, 10)
        self.states = n.create_publisher(JointState, "joint_states", 10)
        self.trajectory = n.create_publisher(JointTrajectory, "rb_dynamics/trajectory", 10)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        self.description = n.create_publisher(String, "/robot_description", latched)
        # atomically: with the plain service each parameter is judged on its own
        self.params = n.create_client(SetParametersAtomically,
                                      "rb_dynamics/set_parameters_atomically")

    def publish_matched(self, publisher, msg) -> None:
        """Publish once the node's subscription is matched (a message sent earlier is lost)."""
        assert self.peer.wait_for(lambda: publisher.get_subscription_count() > 0, 5.0)
        publisher.publish(msg)

    def send_state(self, names, q, v=None, stamp_ns: int = 0):
        msg = JointState(name=list(names), position=[float(x) for x in q])
        if v is not None:
            msg.velocity = [float(x) for x in v]
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        self.states.publish(msg)

    def command_after(self, names, q, v=None, timeout=5.0, stamp_ns: int = 0
                      ) -> np.ndarray | None:
        """Publish a state until commands answer it; the command answering it, or None."""
        answer = answer_after(self.peer, lambda: self.send_state(names, q, v, stamp_ns),
                              self.commands, timeout)
        return None if answer is None else np.array(answer.data)

    def set(self, **values):
        params = []
        for name, value in values.items():
            pv = ParameterValue()
            if isinstance(value, str):
                pv.type, pv.string_value = ParameterType.PARAMETER_STRING, value
            elif isinstance(value, bool):
                pv.type, pv.bool_value = ParameterType.PARAMETER_BOOL, value
            elif isinstance(value, float):
                pv.type, pv.double_value = ParameterType.PARAMETER_DOUBLE, value
            else:
                pv.type = ParameterType.PARAMETER_DOUBLE_ARRAY
                pv.double_array_value = [float(x) for x in value]
            params.append(ParameterMsg(name=name, value=pv))
        request = SetParametersAtomically.Request(parameters=params)
        return [self.peer.call(self.params, request).result]


@pytest.fixture()
def rig(tmp_path):
    params = write_params(tmp_path, "rb_dynamics", {"urdf_path": str(UR5), "kp": [100.0],
                                                    "kd": [20.0], "state_timeout": 0.5})
    node = NodeProcess("rb_dynamics.node", params)
    peer = Peer()
    yield Rig(peer, node)
    peer.close()
    assert node.stop() < 2.0, "the node did not shut down within 2 s"
    assert node.proc.returncode == 0, node.output()


def _pin(path: Path):
    pm = pin.buildModelFromUrdf(str(path), mimic=True)
    return pm, pm.createData()


def _pin_order(pm, names):
    return [pm.joints[pm.getJointId(n)].idx_v for n in names]


def test_gravity_torques_equal_pinocchio_for_permuted_names(rig):
    model = load_model(UR5)
    pm, pd = _pin(UR5)
    joints = model.actuated_joint_names
    rng = np.random.default_rng(40)
    for _ in range(5):
        q = rng.uniform(-1.5, 1.5, 6)
        order = rng.permutation(6)
        names = ["some_other_joint"] + [joints[k] for k in order]
        tau = rig.command_after(names, [0.3, *q[order]])
        assert tau is not None, rig.node.output()
        ref = pin.computeGeneralizedGravity(pm, pd, q)[_pin_order(pm, joints)]
        assert rel_err(tau, ref) <= 1e-9


def test_computed_torque_equals_pinocchio_rnea_and_gains_are_validated(rig):
    model = load_model(UR5)
    pm, pd = _pin(UR5)
    joints = model.actuated_joint_names
    assert rig.command_after(joints, np.zeros(6)) is not None, rig.node.output()
    assert rig.set(mode="computed_torque")[0].successful
    # a bad gain is refused with a reason, and nothing changes
    result = rig.set(kp=[-1.0] * 6, kd=[1.0] * 6)[0]
    assert not result.successful and "kp" in result.reason
    assert not rig.set(mode="impedance")[0].successful
    assert rig.set(kp=[50.0, 60, 70, 80, 90, 100])[0].successful
    kp, kd = np.array([50.0, 60, 70, 80, 90, 100]), np.full(6, 20.0)
    q_goal = np.array([0.2, -1.0, 1.1, -0.3, 0.4, 0.5])
    point = JointTrajectoryPoint(positions=[float(x) for x in q_goal[::-1]])
    rig.publish_matched(rig.trajectory,
                        JointTrajectory(joint_names=joints[::-1], points=[point]))
    rig.peer.wait_for(lambda: False, 0.3)
    q = np.array([0.1, -1.2, 1.0, -0.5, 0.3, 0.2])
    v = np.array([0.1, -0.2, 0.3, 0.0, 0.1, -0.1])
    tau = rig.command_after(joints, q, v)
    a_cmd = kp * (q_goal - q) - kd * v  # a set-point: q̇_d = q̈_d = 0
    ref = pin.rnea(pm, pd, q, v, a_cmd)[_pin_order(pm, joints)]
    ref = np.clip(ref, -model.effort_limit, model.effort_limit)
    assert rel_err(tau, ref) <= 1e-9, (tau, ref, rig.node.output())


def test_a_state_stamped_before_the_set_point_arrived_is_answered_toward_it(rig):
    """The reference is sampled at the state's stamp: one from before the set-point came is
    sampled at the set-point's start (this once raised inside the control loop)."""
    model = load_model(UR5)
    pm, pd = _pin(UR5)
    joints = model.actuated_joint_names
    assert rig.command_after(joints, np.zeros(6)) is not None, rig.node.output()
    assert rig.set(mode="computed_torque")[0].successful
    q_goal = np.array([0.2, -1.0, 1.1, -0.3, 0.4, 0.5])
    stamp_ns = rig.peer.node.get_clock().now().nanoseconds  # measured before the set-point
    rig.publish_matched(rig.trajectory, JointTrajectory(
        joint_names=joints, points=[JointTrajectoryPoint(positions=q_goal.tolist())]))
    rig.peer.wait_for(lambda: False, 0.3)
    q = np.array([0.1, -1.2, 1.0, -0.5, 0.3, 0.2])
    tau = rig.command_after(joints, q, np.zeros(6), stamp_ns=stamp_ns)
    assert tau is not None, rig.node.output()
    ref = pin.rnea(pm, pd, q, np.zeros(6), 100.0 * (q_goal - q))[_pin_order(pm, joints)]
    ref = np.clip(ref, -model.effort_limit, model.effort_limit)
    assert rel_err(tau, ref) <= 1e-9, (tau, ref, rig.node.output())
    assert rig.node.proc.poll() is None


def test_bad_states_publish_nothing_and_are_reported(rig):
    joints = load_model(UR5).actuated_joint_names
    assert rig.command_after(joints, np.zeros(6)) is not None, rig.node.output()
    rig.peer.wait_for(lambda: False, 0.3)  # answers to states still in flight
    count = len(rig.commands)
    # one at a time: of states queued together, the node handles only the newest
    for names, positions in ((joints[:5], np.zeros(5)), (joints, [0.0] * 5 + [float("nan")]),
                             (joints, np.zeros(5))):
        rig.send_state(names, positions)
        rig.peer.wait_for(lambda: False, 0.3)
    assert len(rig.commands) == count
    assert all(np.all(np.isfinite(c.data)) for c in rig.commands)
    log = rig.node.output()
    assert "missing joints" in log and "NaN" in log and "6 names but 5 positions" in log


def test_hostile_states_and_trajectories_never_move_the_command(rig):
    """Duplicated names, inf, wrong lengths, negative stamps, out-of-order or non-finite
    trajectory points: nothing is published for a bad state, a bad trajectory leaves the
    reference as it was, and every command that does go out is finite and within the limits."""
    model = load_model(UR5)
    pm, pd = _pin(UR5)
    joints = model.actuated_joint_names
    assert rig.command_after(joints, np.zeros(6)) is not None, rig.node.output()
    assert rig.set(mode="computed_torque")[0].successful
    nan = float("nan")
    assert not rig.set(kp=[nan] * 6)[0].successful  # NaN gains are refused too
    q_goal = np.array([0.2, -1.0, 1.1, -0.3, 0.4, 0.5])
    rig.publish_matched(rig.trajectory, JointTrajectory(
        joint_names=joints, points=[JointTrajectoryPoint(positions=q_goal.tolist())]))
    rig.peer.wait_for(lambda: False, 0.3)

    def point(positions, seconds):
        p = JointTrajectoryPoint(positions=[float(x) for x in positions])
        p.time_from_start.sec = seconds
        return p

    hostile = [
        JointTrajectory(joint_names=joints, points=[point(np.zeros(6), 2), point(np.ones(6), 1)]),
        JointTrajectory(joint_names=joints, points=[point([nan] * 6, 1)]),
        JointTrajectory(joint_names=joints, points=[point(np.zeros(6), -1)]),
        JointTrajectory(joint_names=joints[:5] + joints[:1], points=[point(np.zeros(6), 1)]),
        JointTrajectory(joint_names=joints, points=[point(np.zeros(5), 1)]),
    ]
    negative = JointTrajectory(joint_names=joints, points=[point(np.zeros(6), 1)])
    negative.header.stamp.sec = -5
    for msg in hostile + [negative]:
        rig.trajectory.publish(msg)
    rig.peer.wait_for(lambda: False, 0.3)
    count = len(rig.commands)
    bad_states = [
        JointState(name=joints[:5] + joints[:1], position=[0.0] * 6),
        JointState(name=list(joints), position=[0.0] * 6, velocity=[0.0] * 5 + [float("inf")]),
        JointState(name=list(joints), position=[0.0] * 6, velocity=[0.0] * 4),
    ]
    stamped = JointState(name=list(joints), position=[0.0] * 6)
    stamped.header.stamp.sec = -3
    for msg in bad_states + [stamped]:  # one at a time: of a queue only the newest is handled
        rig.states.publish(msg)
        rig.peer.wait_for(lambda: False, 0.3)
    assert len(rig.commands) == count, "a command was published for a bad state"

    # the set-point still stands: the command is computed torque toward q_goal
    q = np.array([0.1, -1.2, 1.0, -0.5, 0.3, 0.2])
    tau = rig.command_after(joints, q, np.zeros(6))
    ref = pin.rnea(pm, pd, q, np.zeros(6), 100.0 * (q_goal - q))[_pin_order(pm, joints)]
    ref = np.clip(ref, -model.effort_limit, model.effort_limit)
    assert rel_err(tau, ref) <= 1e-9, (tau, ref, rig.node.output())
    # huge but finite positions: a command goes out, clamped
    tau = rig.command_after(joints, np.full(6, 1e12))
    assert tau is not None and np.all(np.abs(tau) <= model.effort_limit), rig.node.output()
    for command in rig.commands:
        assert np.all(np.isfinite(command.data))
        assert np.all(np.abs(command.data) <= model.effort_limit + 1e-12)
    log = rig.node.output()
    # (trajectory warnings share one throttle: the first refusal is the one logged)
    for words in ("repeated joint names", "NaN or inf in positions", "6 names but 4 velocities",
                  "negative stamp -3", "is not after", "kp must be finite"):
        assert words in log, (words, log)
    assert rig.node.proc.poll() is None


def test_stale_state_is_reported_on_diagnostics(rig):
    joints = load_model(UR5).actuated_joint_names
    assert rig.command_after(joints, np.zeros(6)) is not None, rig.node.output()

    def stale():
        return any(s.level == s.ERROR and "stale" in s.message
                   for d in rig.diagnostics for s in d.status)

    assert rig.peer.wait_for(stale, 4.0), [s.message for d in rig.diagnostics for s in d.status]


def test_diagnostics_account_for_every_state_and_report_its_age(rig):
    joints = load_model(UR5).actuated_joint_names
    assert rig.command_after(joints, np.zeros(6)) is not None, rig.node.output()
    clock = rig.peer.node.get_clock()
    for _ in range(50):  # stamped, so that the node can tell how old each answered state is
        msg = JointState(name=list(joints), position=[0.0] * 6)
        msg.header.stamp = clock.now().to_msg()
        rig.states.publish(msg)
        rig.peer.wait_for(lambda: False, 0.005)
    sent_stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec

    def report():
        for d in reversed(rig.diagnostics):
            for status in d.status:
                values = {kv.key: kv.value for kv in status.values}
                if int(values.get("newest state stamp (ns)", "0")) == sent_stamp:
                    return values
        return None

    assert rig.peer.wait_for(lambda: report() is not None, 4.0), rig.node.output()
    values = report()
    received = int(values["states received (total)"])
    assert received >= 51
    assert received == int(values["commands (total)"]) + int(values["states superseded (total)"])
    aged = [d for d in rig.diagnostics for s in d.status
            if any(kv.key == "state age at command p99 (ms)" for kv in s.values)]
    assert aged, "no state age reported for stamped states"
    ages = {kv.key: float(kv.value) for kv in aged[-1].status[0].values if "age" in kv.key}
    assert 0.0 < ages["state age at command mean (ms)"] <= ages["state age at command max (ms)"]
    assert ages["state age at command max (ms)"] < 1000.0


def test_commands_are_clamped_to_the_scaled_limit(rig):
    model = load_model(UR5)
    joints = model.actuated_joint_names
    assert rig.set(effort_scale=0.01)[0].successful
    q = np.zeros(6)  # arm stretched out horizontally: large gravity torque
    tau = rig.command_after(joints, q)
    assert tau is not None
    assert np.all(np.abs(tau) <= 0.01 * model.effort_limit + 1e-12)
    assert np.any(np.abs(tau) == 0.01 * model.effort_limit)
    assert not rig.set(effort_scale=2.0)[0].successful


def test_a_new_description_is_swapped_in_and_a_bad_one_refused(rig):
    panda = load_model(PANDA)
    pm, pd = _pin(PANDA)
    rig.publish_matched(rig.description, String(data=PANDA.read_text()))
    q = np.array([0.1, -0.4, 0.2, -2.0, 0.1, 1.5, 0.7, 0.02])
    tau = None
    for _ in range(30):
        tau = rig.command_after(panda.joint_names, q, timeout=0.3)
        if tau is not None and len(tau) == 8:
            break
    assert tau is not None and len(tau) == 8, rig.node.output()
    ref = np.clip(pin.computeGeneralizedGravity(pm, pd, q)[_pin_order(pm, panda.joint_names)],
                  -panda.effort_limit, panda.effort_limit)
    assert rel_err(tau, ref) <= 1e-9
    rig.description.publish(String(data="<robot name='broken'><link name='a'>"))
    rig.peer.wait_for(lambda: False, 0.5)
    assert len(rig.command_after(panda.joint_names, q)) == 8  # still panda
    assert "cannot use the description" in rig.node.output()
