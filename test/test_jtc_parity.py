# SPDX-License-Identifier: Apache-2.0
"""The control node behaving like the trajectory controllers users run on real arms, across
processes: impedance mode (against Pinocchio's gravity, and its static stiffness on the
simulator), feed-forward efforts in trajectory points, ``interpolate_from_desired_state``,
soft limits in every reference mode, a continuous joint taking the short way, and the node's
defaults reaching a 0.02 rad goal tolerance on an arm with joint losses
(docs/trajectory_controller.md).

Each test fails on the node without these behaviours: impedance and the action's goals in
impedance mode did not exist (the node had no ``impedance.*`` parameters and refused goals
outside computed torque), a point with efforts was refused with INVALID_GOAL, the node had no
``soft_limits`` or ``interpolate_from_desired_state`` parameter (a parameter file naming one
is fine, but the commands did not depend on it), and ``friction_compensation`` defaulted to
false, with which the default goal below aborts short of its tolerance (and the continuous
joint's light wrist does not arrive).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from payload_rig import set_payload_request
from pin_oracle import REAL_ROBOTS, robots_dir
from ros_harness import Session, control_node
from test_trajectory_action import ClosedLoop, Recorder

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import load_model
from rb_dynamics.ros.control_node.trajectory_action import MISSING

pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
if MISSING is None:
    from control_msgs.action import FollowJointTrajectory
    from control_msgs.msg import JointTolerance
    from rclpy.action import ActionClient
    from trajectory_msgs.msg import JointTrajectoryPoint

    from rb_dynamics_interfaces.srv import SetPayload

ARM = load_model(DEFAULT_URDF)
JOINTS = ARM.actuated_joint_names
Q0 = np.array([0.3, -1.0, 1.2, -0.6, 0.4, 0.2])  # a bent pose, inside the limits


def pin_gravity(urdf: Path, q: np.ndarray) -> np.ndarray:
    model = pin.buildModelFromUrdf(str(urdf))
    return pin.computeGeneralizedGravity(model, model.createData(), q)


def inertia_scaled(frequency: float, ratio: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(K, D) of a loop at ``frequency`` (Hz) with damping ratio ``ratio`` on each joint's
    effective inertia 1 / (M⁻¹)_jj at q = 0 (Pinocchio's M). One K for every joint is unstable
    on this arm's 10⁻⁴ kg·m² wrist at any driver's rate."""
    model = pin.buildModelFromUrdf(str(DEFAULT_URDF))
    mass = pin.crba(model, model.createData(), np.zeros(model.nq))
    m = 1.0 / np.diag(np.linalg.inv(mass))
    omega = 2.0 * np.pi * frequency
    return m * omega**2, 2.0 * ratio * m * omega


def workspace_scaled(frequency: float) -> tuple[np.ndarray, np.ndarray]:
    """The node's impedance defaults: (K, D) of a critically damped loop at ``frequency`` (Hz)
    on each joint's smallest effective inertia (Pinocchio's M) over q = 0 and the poses the
    node draws within the limits (stability.workspace_inertia: a fixed seed)."""
    from rb_dynamics.control.stability import WORKSPACE_SAMPLES

    model = pin.buildModelFromUrdf(str(DEFAULT_URDF))
    data = model.createData()
    poses = np.random.default_rng(0).uniform(model.lowerPositionLimit,
                                             model.upperPositionLimit,
                                             (WORKSPACE_SAMPLES, model.nq))
    m = np.min([1.0 / np.diag(np.linalg.inv(pin.crba(model, data, q)))
                for q in [np.zeros(model.nq), *poses]], axis=0)
    omega = 2.0 * np.pi * frequency
    return m * omega**2, 2.0 * m * omega


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _point(t: float, q, effort=None) -> JointTrajectoryPoint:
    point = JointTrajectoryPoint(positions=[float(x) for x in q],
                                 velocities=[0.0] * len(q))
    if effort is not None:
        point.effort = [float(x) for x in effort]
    point.time_from_start.sec = int(t)
    point.time_from_start.nanosec = int(round((t - int(t)) * 1e9))
    return point


class Single:
    """One control node on the wall clock, a peer sending its states and goals."""

    def __init__(self, tmp: Path, params: dict) -> None:
        # states come by hand, far apart (a goal's answer between two may take seconds on a
        # loaded machine): with a shorter state_timeout they would go stale between two, which
        # drops the reference (the node then holds the measured position); 10 s is the bound
        self.node = control_node(tmp, {"urdf_path": str(DEFAULT_URDF), "state_timeout": 10.0,
                                       **params})
        self.client = ActionClient(self.node.peer.node, FollowJointTrajectory,
                                   f"/{self.node.name}/follow_joint_trajectory")
        assert self.node.wait_for(self.client.server_is_ready, 30.0), self.node.output()

    def command(self, q, v=None) -> np.ndarray:
        answer = self.node.command_after(JOINTS, q, np.zeros(6) if v is None else v)
        assert answer is not None, self.node.output()
        return answer

    def send_goal(self, points) -> None:
        goal = FollowJointTrajectory.Goal()
        goal.trajectory.joint_names = list(JOINTS)
        goal.trajectory.points = points
        future = self.client.send_goal_async(goal)
        assert self.node.wait_for(future.done, 10.0), self.node.output()
        assert future.result().accepted
        self.handle = future.result()

    def close(self) -> None:
        self.node.close()


@pytest.fixture
def single(tmp_path):
    made: list[Single] = []

    def make(**params) -> Single:
        made.append(Single(tmp_path, params))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_impedance_is_gravity_plus_spring_and_damper(single):
    """τ = g(q) + K (q_d − q) + D (q̇_d − q̇), per-joint K and D, Pinocchio's g: holding the
    first state's position, a second state is pulled back to it. Given gains, then the
    defaults: each joint's spring and damper critically damped at impedance.frequency (2 Hz)
    on its own smallest effective inertia over the workspace."""
    q = Q0 + np.array([0.01, -0.02, 0.015, 0.03, -0.01, 0.02])
    v = np.array([0.1, -0.05, 0.02, 0.2, -0.1, 0.05])
    # given: stable at the 20–50 ms between states sent by hand (checked after the first few)
    given = inertia_scaled(0.5, 0.7)
    for params, (stiffness, damping) in (
            ({"impedance.stiffness": given[0].tolist(),
              "impedance.damping": given[1].tolist()}, given),
            ({}, workspace_scaled(2.0))):
        rig = single(mode="impedance", friction_compensation=False, soft_limits=False,
                     **params)
        rig.command(Q0)  # the reference: hold here
        tau = rig.command(q, v)
        expected = pin_gravity(DEFAULT_URDF, q) + stiffness * (Q0 - q) - damping * v
        assert rel(tau, expected) < 1e-9, (tau, expected)
    # a gain refused names the parameter and its entry
    result = rig.node.set_parameters(**{"impedance.damping": [1.0, -2.0, 1.0, 1.0, 1.0, 1.0]})
    assert not result.successful and "impedance.damping[1] = -2.0" in result.reason, result


def test_efforts_in_points_are_fed_forward_in_each_reference_mode(single):
    """A goal whose points carry efforts: after its end the command is the law's plus the
    last point's effort (the state at the goal, at rest: the law gives g(q))."""
    effort = np.array([1.5, -2.0, 0.5, 0.25, -0.3, 0.1])
    for mode in ("computed_torque", "impedance"):
        rig = single(mode=mode, friction_compensation=False, soft_limits=False)
        rig.command(Q0)
        rig.send_goal([_point(0.05, Q0, effort), _point(0.1, Q0, effort)])
        rig.node.wait_for(lambda: False, 0.3)  # past the goal's end
        tau = rig.command(Q0)
        expected = pin_gravity(DEFAULT_URDF, Q0) + effort
        assert rel(tau, expected) < 1e-9, (mode, tau, expected)


@pytest.mark.parametrize("interpolate", [False, True])
def test_a_new_trajectory_starts_from_the_measured_or_the_desired_state(single, interpolate):
    """Impedance holding Q0 while the arm is measured at Q0 + δ; a slow goal starts: from the
    measured state (default) the spring is slack at once, from the desired state
    (``interpolate_from_desired_state``) it still pulls by −K δ."""
    k = workspace_scaled(2.0)[0]  # the defaults
    rig = single(mode="impedance", friction_compensation=False, soft_limits=False,
                 interpolate_from_desired_state=interpolate)
    rig.command(Q0)
    delta = np.array([0.02, -0.03, 0.01, 0.04, -0.02, 0.03])
    q = Q0 + delta
    before = rig.command(q) - pin_gravity(DEFAULT_URDF, q)
    np.testing.assert_allclose(before, -k * delta, rtol=1e-9)
    rig.send_goal([_point(200.0, Q0 + 0.5)])  # slow: < 1e-4 rad in 5 s (a loaded machine)
    rig.node.wait_for(lambda: False, 0.1)
    spring = rig.command(q) - pin_gravity(DEFAULT_URDF, q)
    if interpolate:
        assert np.all(np.abs(spring + k * delta) <= 0.05 * k * 0.02), \
            (spring, -k * delta, rig.node.output()[-3000:])
    else:
        assert np.all(np.abs(spring) < 0.05 * k * 0.02), (spring, k, rig.node.output()[-3000:])


# ----------------------------------------------------------------------------- closed loop


def lossy_panda(directory: Path) -> Path:
    """panda with <dynamics damping="1.0" friction="1.0"/> on its seven arm joints and its
    fingers fixed (a 7-joint arm)."""
    text = Path(robots_dir(), REAL_ROBOTS["panda"][0]).read_text()
    text = re.sub(r'<dynamics D="1"[^>]*/>', '<dynamics damping="1.0" friction="1.0"/>', text)
    text = text.replace('type="prismatic"', 'type="fixed"')
    path = directory / "lossy_panda.urdf"
    path.write_text(text)
    return path


def edited_arm(directory: Path, name: str, edit) -> Path:
    path = directory / f"{name}.urdf"
    path.write_text(edit(DEFAULT_URDF.read_text()))
    return path


class Rig(ClosedLoop):
    """ClosedLoop on any URDF, with the control node's parameters as given (else its
    defaults) and the simulator's initial positions."""

    def __init__(self, urdf: Path, tmp: Path, node_params: dict, q0: np.ndarray | None = None,
                 sim_params: dict | None = None):
        self.model = load_model(urdf)
        self.joints = self.model.actuated_joint_names
        self.q_index = [self.model.joint_q_index[self.model.joint_index(n)]
                        for n in self.joints]
        from rb_dynamics.demo.main_job import initial_configuration

        q0 = initial_configuration(self.model)[self.q_index] if q0 is None else q0
        self.sim = Session("rb_dynamics.ros.simulator_node", tmp, {
            "urdf_path": str(urdf), "initial_positions": [float(x) for x in q0],
            "publish_rate": 1000.0, "time_step": 0.001, "publish_clock": True,
            "command_timeout": 0.2, "start_paused": True, "lockstep": True,
            "lockstep_timeout": 60.0, **(sim_params or {})})
        self.node = Session("rb_dynamics.ros.control_node", tmp, {
            "urdf_path": str(urdf), "use_sim_time": True, **node_params},
            "-r", "~/effort_commands:=/rb_simulator/commands", peer=self.sim.peer)
        self.peer = self.sim.peer
        try:
            self._connect()
        except BaseException:
            self.close(check=False)
            raise


def test_the_defaults_reach_a_tight_goal_on_an_arm_with_joint_losses(tmp_path):
    """Every parameter at its default but mode: a 2-point goal with 0.02 rad goal tolerance
    on panda with damping and friction 1.0 on each joint succeeds (friction compensation on by
    default)."""
    rig = Rig(lossy_panda(tmp_path), tmp_path, {"mode": "computed_torque"})
    try:
        q0 = rig.q()
        q1 = q0 + np.array([0.3, -0.2, 0.25, 0.3, -0.3, 0.3, 0.4])
        goal = FollowJointTrajectory.Goal()
        goal.trajectory.joint_names = list(rig.joints)
        goal.trajectory.points = [_point(1.0, (q0 + q1) / 2), _point(2.0, q1)]
        goal.trajectory.points[0].velocities = []  # JTC: velocities from the spline
        goal.goal_tolerance = [JointTolerance(name=n, position=0.02) for n in rig.joints]
        goal.goal_time_tolerance.sec = 1
        status, code, text = rig.run(goal, timeout=120.0)
        assert status == "SUCCEEDED", (status, code, text, rig.q() - q1, rig.output())
        print(f"defaults, lossy panda: final error {np.abs(rig.q() - q1).max():.4f} rad")
    finally:
        rig.close()


def test_impedance_static_stiffness_under_a_payload_only_the_simulator_knows(tmp_path):
    """Impedance holding a pose; the simulator gets a 2 kg payload the controller does not
    know: at rest K (q_d − q) = Δg(q), the payload's gravity at the measured pose, per joint
    within 1 % (Δg from Pinocchio with the payload on tool0). K and D per joint: 40 rad/s,
    critically damped, on the arm's inertia; the simulator without joint losses, so
    that the arm settles fast (at rest they are zero anyway)."""
    pin_model = pin.buildModelFromUrdf(str(DEFAULT_URDF))
    # the arm's own (the payload only makes the loop slower): a light wrist must not get a
    # damping its inertia cannot take in a time step
    inertia_diagonal = np.diag(pin.crba(pin_model, pin_model.createData(), Q0))
    stiffness = inertia_diagonal * 40.0**2
    damping = 2.0 * np.sqrt(stiffness * inertia_diagonal)
    rig = Rig(DEFAULT_URDF, tmp_path, {"mode": "impedance",
                                       "impedance.stiffness": stiffness.tolist(),
                                       "impedance.damping": damping.tolist()}, Q0,
              {"damping": [0.0] * 6, "friction": [0.0] * 6})
    try:
        rig.wait_sim(0.5)
        held = rig.q()
        client = rig.peer.node.create_client(SetPayload, "/rb_simulator/set_payload")
        com = [0.0, 0.0, 0.05]
        assert rig.peer.call(client, set_payload_request("tool0", 2.0, com)).success
        rig.wait_sim(3.0)
        q = rig.q()
        deflection = held - q
        model = pin.buildModelFromUrdf(str(DEFAULT_URDF))
        frame = model.frames[model.getFrameId("tool0")]
        loaded = pin.buildModelFromUrdf(str(DEFAULT_URDF))
        inertia = pin.Inertia(2.0, np.array(com), np.zeros((3, 3)))
        loaded.appendBodyToJoint(frame.parentJoint, inertia, frame.placement)
        delta_g = (pin.computeGeneralizedGravity(loaded, loaded.createData(), q)
                   - pin.computeGeneralizedGravity(model, model.createData(), q))
        expected = delta_g / stiffness
        loaded_joints = np.abs(expected) > 1e-3  # the joints the payload loads
        assert loaded_joints.sum() >= 3, expected
        error = np.abs(deflection - expected)[loaded_joints] / np.abs(expected[loaded_joints])
        print("impedance deflection (rad):", deflection, "Δg/K:", expected,
              "relative error:", error)
        assert np.all(error < 0.01), (deflection, expected)
    finally:
        rig.close()


def safety_arm(directory: Path) -> Path:
    """The bundled arm with a <safety_controller> on the shoulder pan joint (a vertical
    axis: gravity does not push it past the limit): hard range ±1.5, soft ±1.0 rad."""
    def edit(text: str) -> str:
        block = ('<joint name="shoulder_pan_joint" type="revolute">')
        head, tail = text.split(block)
        body, rest = tail.split("</joint>", 1)
        body = re.sub(r'lower="[^"]*" upper="[^"]*"', 'lower="-1.5" upper="1.5"', body)
        body += ('  <safety_controller soft_lower_limit="-1.0" soft_upper_limit="1.0" '
                 'k_position="10.0" k_velocity="50.0"/>\n  ')
        return head + block + body + "</joint>" + rest
    return edited_arm(directory, "safety_arm", edit)


@pytest.mark.parametrize("mode", ["computed_torque", "impedance"])
def test_soft_limits_stop_a_joint_driven_past_them(tmp_path, mode):
    """A goal taking the shoulder pan joint from 0.3 to 1.4 rad (past its soft upper limit
    1.0, inside the hard one 1.5): it stops inside the soft limit, so the goal, with a 0.05 rad
    goal tolerance, aborts naming the joint. Without soft limits it would reach 1.4."""
    urdf = safety_arm(tmp_path)
    rig = Rig(urdf, tmp_path, {"mode": mode}, Q0)
    try:
        joint = rig.joints.index("shoulder_pan_joint")
        q1 = rig.q()
        q1[joint] = 1.4
        with Recorder(rig) as record:
            goal = rig.goal(q1, duration=1.0)
            goal.goal_time_tolerance.sec = 2
            goal.goal_tolerance = [JointTolerance(name="shoulder_pan_joint", position=0.05)]
            status, code, text = rig.run(goal, timeout=120.0)
            path = [m.position[list(m.name).index("shoulder_pan_joint")]
                    for m in record.states]
        peak = max(path)
        print(f"{mode}: shoulder_pan peak {peak:.5f} rad, final {path[-1]:.5f} rad (soft "
              "limit 1.0)")
        violated = FollowJointTrajectory.Result.GOAL_TOLERANCE_VIOLATED
        assert status == "ABORTED" and code == violated and "shoulder_pan_joint" in text, \
            (status, code, text)
        # where it stops: inside; on the way it may pass the soft limit by the few mm the
        # k_position spring lets through while braking (as with ros2_control's limiter)
        assert 0.8 < path[-1] <= 1.0 and peak < 1.01, (peak, path[-1])
    finally:
        rig.close()


def continuous_arm(directory: Path) -> Path:
    """The bundled arm with wrist_3_joint continuous."""
    def edit(text: str) -> str:
        head, tail = text.split('<joint name="wrist_3_joint" type="revolute">')
        tail = tail.replace('lower="-6.283185" upper="6.283185" ', "", 1)
        return head + '<joint name="wrist_3_joint" type="continuous">' + tail
    return edited_arm(directory, "continuous_arm", edit)


def test_a_continuous_joint_takes_the_short_way(tmp_path):
    """wrist_3 (continuous) from 3.0 to −3.0 rad: the goal succeeds inside a 0.01 rad goal
    tolerance, sweeping 2π − 6 ≈ 0.28 rad through ±π, not 6 rad. (The controller shifted the
    start by whole turns before this work; on that node the test fails because its light
    wrist, without friction compensation, does not arrive.)"""
    urdf = continuous_arm(tmp_path)
    start = Q0.copy()
    start[5] = 3.0
    rig = Rig(urdf, tmp_path, {"mode": "computed_torque", "kp": [400.0], "kd": [40.0]}, start)
    try:
        wrist = rig.joints.index("wrist_3_joint")
        q1 = rig.q()
        q1[wrist] = -3.0
        with Recorder(rig) as record:
            goal = FollowJointTrajectory.Goal()
            goal.trajectory.joint_names = list(rig.joints)
            goal.trajectory.points = [_point(1.0, q1)]  # JTC: the start wraps, not the points
            goal.goal_tolerance = [JointTolerance(name="wrist_3_joint", position=0.01)]
            goal.goal_time_tolerance.sec = 2
            status, code, text = rig.run(goal, timeout=120.0)
            path = np.unwrap([m.position[list(m.name).index("wrist_3_joint")]
                              for m in record.states])
        sweep = path.max() - path.min()
        print(f"continuous joint 3.0 → −3.0 rad: swept {sweep:.4f} rad "
              f"(short way {2 * np.pi - 6:.4f})")
        assert status == "SUCCEEDED", (status, code, text)
        assert abs(sweep - (2 * np.pi - 6.0)) < 0.02, sweep
    finally:
        rig.close()



def test_soft_limits_bound_gravity_compensation_too(single, tmp_path):
    """Gravity compensation commands no motion, so the arm is measured past the soft limit
    moving on (shoulder pan at 1.2 rad, 0.5 rad/s; no gravity on a vertical axis): the
    command is the limiter's bound, −k_velocity (q̇ + 1°/s), pushing it back; 0 without soft
    limits."""
    urdf = safety_arm(tmp_path)
    q, v = Q0.copy(), np.zeros(6)
    q[0], v[0] = 1.2, 0.5
    for on, expected in ((True, -50.0 * (0.5 + np.pi / 180.0)), (False, 0.0)):
        rig = single(urdf_path=str(urdf), friction_compensation=False, soft_limits=on)
        rig.node.statuses()  # subscribed from here on
        tau = rig.command(q, v)
        assert abs(tau[0] - expected) < 1e-9, (on, tau)
        if on:  # /diagnostics says so, and names the joint the bound acted on
            check_soft_limits_said(rig.node)


def check_soft_limits_said(node: Session) -> None:
    assert node.wait_for(lambda: "shoulder_pan_joint" in said(node).get(
        "clamped joints", ""), 5.0), said(node)
    assert said(node)["soft limits"].startswith("on (shoulder_pan_joint"), said(node)


def said(node: Session) -> dict[str, str]:
    """The key/values of the node's statuses on /diagnostics so far, the latest winning."""
    return {kv.key: kv.value for _, status in node.statuses() for kv in status.values}


def test_the_integral_term_is_bounded_by_i_clamp(single):
    """Impedance (its defaults) with ki > 0: a constant error of 0.1 rad integrates until the
    term reaches −i_clamp, per joint; a bad i_clamp is refused by name. ki a tenth of the
    continuous-time bound K D / m on each joint's inertia (the larger of the two it is checked
    on: at q = 0 before a state, at Q0 after), i_clamp reached within 0.05 s."""
    stiffness, damping = workspace_scaled(2.0)  # the defaults
    model = pin.buildModelFromUrdf(str(DEFAULT_URDF))
    data = model.createData()
    inertia = np.max([1.0 / np.diag(np.linalg.inv(pin.crba(model, data, q)))
                      for q in (np.zeros(model.nq), Q0)], axis=0)
    ki = 0.1 * stiffness * damping / inertia
    i_clamp = ki * 0.1 * 0.05
    rig = single(mode="impedance", ki=ki.tolist(), i_clamp=i_clamp.tolist(),
                 friction_compensation=False, soft_limits=False)
    rig.command(Q0)
    q = Q0 + 0.1
    stream = rig.node.stream_states(JOINTS, q)  # 100 · 0.1 rad/s: the clamp within 0.05 s
    try:
        rig.node.wait_for(lambda: False, 0.5)
    finally:
        stream.stop()
    term = rig.command(q) - pin_gravity(DEFAULT_URDF, q) - stiffness * (Q0 - q)
    np.testing.assert_allclose(term, -i_clamp, rtol=1e-9, atol=1e-9 * stiffness.max())
    result = rig.node.set_parameters(i_clamp=[-1.0])
    assert not result.successful and "i_clamp[0] = -1.0" in result.reason, result
