# SPDX-License-Identifier: Apache-2.0
"""The Cartesian impedance law (rb_dynamics.control.cartesian), without ROS: the command against
the formula on Pinocchio's g, C, J, M and Λ, and the closed loop in the package's simulator at
1 kHz (static deflection, step response, null-space motion, a singular pose, a target out of
reach)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
import scipy.linalg
import scipy.optimize
from pin_oracle import REAL_ROBOTS, Oracle, random_state, robots_dir

from rb_dynamics.control import (
    CartesianGains,
    CartesianImpedance,
    ControllerError,
    JointController,
    critical_damping,
    pose_error,
    step_toward,
)
from rb_dynamics.dynamics import default_payload_link, make_dynamics
from rb_dynamics.model import load_model, rotation_exp
from rb_dynamics.simulation import Simulator

PERIOD = 1e-3


def _robot(name: str):
    path = Path(robots_dir(), REAL_ROBOTS[name][0])
    return load_model(path), str(path)


@pytest.fixture(scope="module")
def ur5():
    model, _ = _robot("ur5")
    return make_dynamics(model)


@pytest.fixture(scope="module")
def panda():
    model, _ = _robot("panda")
    return make_dynamics(model)


def _pinocchio_command(path, model, link, q, v, target, k_t, k_r, frame, ratio, posture,
                       posture_k, threshold):
    """The law's formula written out on Pinocchio's terms (module docstring of
    rb_dynamics.control.cartesian), in our joint order."""
    oracle = Oracle(model, Path(path).read_text())
    pm, pd = oracle.pm, oracle.pd
    q_pin, v_pin = oracle.q(q), oracle.v(v)
    g = oracle.from_v(pin.computeGeneralizedGravity(pm, pd, q_pin))
    # C q̇ as Pinocchio's nonlinear effects less g (its Coriolis matrix ignores mimic joints,
    # the Panda's second finger)
    C_v = oracle.from_v(pin.nonLinearEffects(pm, pd, q_pin, v_pin)) - g
    M = pin.crba(pm, pd, q_pin)
    M = oracle.matrix(np.triu(M) + np.triu(M, 1).T)
    pin.framesForwardKinematics(pm, pd, q_pin)
    fid = pm.getFrameId(link)
    pin.computeJointJacobians(pm, pd, q_pin)
    J = oracle.cols(pin.getFrameJacobian(pm, pd, fid, pin.LOCAL_WORLD_ALIGNED))
    placement = pd.oMf[fid]
    p, R = placement.translation, placement.rotation
    U, sigma, Vt = np.linalg.svd(J, full_matrices=False)
    if sigma[-1] < threshold:
        J_lambda = U @ np.diag(np.sqrt(sigma**2 + threshold**2 - sigma[-1] ** 2)) @ Vt
    else:
        J_lambda = J
    Lambda = np.linalg.inv(J_lambda @ np.linalg.inv(M) @ J_lambda.T)
    Rf = target[:3, :3] if frame == "target" else np.eye(3)
    K = scipy.linalg.block_diag(Rf @ np.diag(k_t) @ Rf.T, Rf @ np.diag(k_r) @ Rf.T)
    S = np.real(scipy.linalg.sqrtm(Lambda))
    Sinv = np.linalg.inv(S)
    D = 2.0 * ratio * S @ np.real(scipy.linalg.sqrtm(Sinv @ K @ Sinv)) @ S
    e = np.concatenate([target[:3, 3] - p, pin.log3(target[:3, :3] @ R.T)])
    F = K @ e - D @ (J @ v)
    J_bar = np.linalg.inv(M) @ J_lambda.T @ Lambda
    N = np.eye(model.nv) - J_lambda.T @ J_bar.T
    m_eff = 1.0 / np.diag(np.linalg.inv(M))
    tau0 = posture_k * (posture - q) - 2.0 * ratio * np.sqrt(posture_k * m_eff) * v
    return g + C_v + J.T @ F + N @ tau0


@pytest.mark.parametrize("name", ["panda", "ur5"])
@pytest.mark.parametrize("frame", ["base", "target"])
def test_command_equals_the_formula_on_pinocchio_terms(name, frame):
    model, path = _robot(name)
    dyn = make_dynamics(model)
    link = default_payload_link(model)
    rng = np.random.default_rng(38)
    worst, damped_seen = 0.0, 0
    for trial in range(40):
        q, v, _, _ = random_state(model, rng)
        k_t, k_r = rng.uniform(50, 2000, 3), rng.uniform(5, 200, 3)
        ratio = rng.uniform(0.5, 1.5)
        posture = random_state(model, rng)[0]
        posture_k = rng.uniform(0, 20, model.nv)
        threshold = 0.05 if trial % 4 == 0 else 1e-4  # every fourth state: damped or near it
        law = CartesianImpedance(dyn, link, CartesianGains(k_t, k_r, frame, None, ratio,
                                                           posture_k), posture, threshold)
        offset = np.eye(4)
        offset[:3, :3] = rotation_exp(rng.uniform(-0.5, 0.5, 3))
        offset[:3, 3] = rng.uniform(-0.2, 0.2, 3)
        target = law.pose(q) @ offset
        law.reset_target(target)
        tau, state = law.effort(q, v)
        damped_seen += state.damped
        expected = _pinocchio_command(path, model, link, q, v, target, k_t, k_r, frame, ratio,
                                      posture, posture_k, threshold)
        err = np.linalg.norm(tau - expected) / np.linalg.norm(expected)
        worst = max(worst, err)
    print(f"\n{name} ({frame} frame): worst relative error {worst:.2e}, "
          f"{damped_seen} damped states")
    assert worst <= 1e-9
    assert damped_seen > 0


def test_bad_settings_are_refused_by_name(ur5):
    link = default_payload_link(ur5.model)
    with pytest.raises(ControllerError, match="cartesian.translational_stiffness"):
        CartesianGains(translational_stiffness=[100, -1, 100])
    with pytest.raises(ControllerError, match="cartesian.frame"):
        CartesianGains(frame="tool")
    with pytest.raises(ControllerError, match="cartesian.link 'nowhere'"):
        CartesianImpedance(ur5, "nowhere")
    with pytest.raises(ControllerError, match="cartesian.posture_stiffness needs 1 or 6"):
        CartesianImpedance(ur5, link, CartesianGains(posture_stiffness=[1, 2]))
    with pytest.raises(ControllerError, match="cartesian.singular_value_threshold"):
        CartesianImpedance(ur5, link, singular_value_threshold=0.0)
    law = CartesianImpedance(ur5, link)
    with pytest.raises(ControllerError, match="no target yet"):
        law.effort(np.zeros(6), np.zeros(6))
    with pytest.raises(ControllerError, match="rigid transform"):
        law.set_target(np.diag([2.0, 1.0, 1.0, 1.0]))


def test_target_moves_at_the_rate_limits():
    start, goal = np.eye(4), np.eye(4)
    goal[:3, 3] = [0.3, 0.4, 0.0]  # 0.5 m away
    goal[:3, :3] = rotation_exp([0.0, 0.0, 1.0])  # 1 rad away
    step = step_toward(start, goal, 0.1, 0.05)
    error = pose_error(start, step)
    assert np.linalg.norm(error[:3]) == pytest.approx(0.1)
    assert np.linalg.norm(error[3:]) == pytest.approx(0.05)
    assert np.allclose(error[:3] / 0.1, [0.6, 0.8, 0.0])
    assert np.allclose(step_toward(start, goal, 1.0, 2.0), goal)


def test_critical_damping_damps_every_mode_critically():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(6, 6))
    Lambda = A @ A.T + 0.1 * np.eye(6)
    K = np.diag(rng.uniform(10, 1000, 6))
    D = critical_damping(Lambda, K)
    # the eigenvalues of [[0, I], [−Λ⁻¹K, −Λ⁻¹D]] come in real double pairs −ω
    system = np.block([[np.zeros((6, 6)), np.eye(6)],
                       [-np.linalg.solve(Lambda, K), -np.linalg.solve(Lambda, D)]])
    eig = np.linalg.eigvals(system)
    assert np.abs(eig.imag).max() < 1e-3 * np.abs(eig).max()


# ----------------------------------------------------------------------------- closed loop

UR5_HOME = np.array([0.0, -1.2, 1.5, -1.9, -1.57, 0.0])
PANDA_HOME = np.array([0.0, -0.4, 0.0, -2.2, 0.0, 1.8, 0.8, 0.02])


class Loop:
    """The law and the package's simulator in closed loop at 1 kHz: the law computes from
    the state each step, its command clamped to the URDF effort limits as the node does; a
    push ``wrench`` = [force; torque] (N, N·m) in base axes at the link, kept in base axes."""

    def __init__(self, law: CartesianImpedance, q0: np.ndarray):
        self.law = law
        self.sim = Simulator(law.dynamics, PERIOD, q0=q0)
        self.wrench = None
        self.law.hold(q0)
        self.states, self.commands = [], []

    def run(self, seconds: float) -> None:
        sim, law, limit = self.sim, self.law, self.law.model.effort_limit
        for _ in range(round(seconds / PERIOD)):
            tau, state = law.effort(sim.q, sim.v, PERIOD)
            self.states.append(state)
            self.commands.append(tau)
            sim.set_command(np.clip(tau, -limit, limit))
            if self.wrench is not None:
                R = state.pose[:3, :3]
                sim.set_external_wrench(law.link, np.concatenate(
                    [R.T @ self.wrench[:3], R.T @ self.wrench[3:]]))
            sim.advance(PERIOD)

    def positions(self) -> np.ndarray:
        return np.array([s.pose[:3, 3] for s in self.states])


def test_a_constant_wrench_deflects_the_link_by_f_over_k(ur5):
    k_t, k_r = np.array([800.0, 1200.0, 1500.0]), np.array([40.0, 60.0, 80.0])
    law = CartesianImpedance(ur5, default_payload_link(ur5.model), CartesianGains(k_t, k_r))
    loop = Loop(law, UR5_HOME)
    push = np.array([10.0, -12.0, 15.0, 0.4, -0.6, 0.8])
    loop.wrench = push
    loop.run(3.0)
    final = loop.states[-1]
    deflection = -final.error  # from the target to the link
    expected = push / np.concatenate([k_t, k_r])
    ratio = deflection / expected
    print(f"\ndeflection / (F/K) per axis x y z rx ry rz: {np.array2string(ratio, precision=4)}")
    assert np.linalg.norm(final.velocity) < 1e-4
    assert np.all(np.abs(ratio - 1.0) <= 0.02), ratio


def test_a_target_step_settles_critically_damped(ur5):
    law = CartesianImpedance(ur5, default_payload_link(ur5.model),
                             CartesianGains(np.full(3, 1000.0), np.full(3, 50.0)),
                             max_linear_rate=np.inf, max_angular_rate=np.inf)
    loop = Loop(law, UR5_HOME)
    start = law.target.copy()
    target = start.copy()
    target[:3, 3] += [0.05, 0.0, 0.0]
    law.set_target(target)
    loop.run(2.0)
    travel = loop.positions()[:, 0] - start[0, 3]
    overshoot = travel.max() / 0.05 - 1.0
    settled = np.argmax(np.abs(travel - 0.05) < 0.05 * 0.02)  # within 2 %
    print(f"\nstep 5 cm: overshoot {overshoot * 100:.2f} %, 2 % settling {settled} ms, "
          f"final error {np.linalg.norm(loop.states[-1].error[:3]) * 1e3:.3f} mm")
    assert overshoot <= 0.05
    assert np.linalg.norm(loop.states[-1].error[:3]) < 1e-4


def test_null_space_motion_toward_the_posture_leaves_the_link_in_place(panda):
    # a posture 0.3 rad away along the arm's self-motion at the start
    link = default_payload_link(panda.model)
    J = CartesianImpedance(panda, link).operational_terms(PANDA_HOME)[0]
    self_motion = np.linalg.svd(J[:, :7])[2][-1]
    posture = PANDA_HOME.copy()
    posture[:7] += 0.3 * self_motion / np.abs(self_motion).max()
    law = CartesianImpedance(panda, link, CartesianGains(np.full(3, 1500.0), np.full(3, 80.0),
                                                         posture_stiffness=20.0),
                             posture=posture)
    loop = Loop(law, PANDA_HOME)
    loop.run(2.0)
    errors = np.array([s.error for s in loop.states])
    moved = np.abs(loop.sim.q - PANDA_HOME)
    print(f"\nnull-space motion: joints moved {np.array2string(moved, precision=3)} rad; link "
          f"moved at most {np.linalg.norm(errors[:, :3], axis=1).max() * 1e3:.3f} mm, "
          f"{np.linalg.norm(errors[:, 3:], axis=1).max():.5f} rad")
    assert moved[:7].max() > 0.15  # the arm did move toward the posture
    assert np.linalg.norm(errors[:, :3], axis=1).max() <= 1e-3
    assert np.linalg.norm(errors[:, 3:], axis=1).max() <= 0.01


def test_through_a_singular_pose_the_efforts_stay_bounded(ur5):
    link = default_payload_link(ur5.model)
    law = CartesianImpedance(ur5, link, CartesianGains(np.full(3, 1000.0), np.full(3, 50.0)),
                             max_linear_rate=0.1, max_angular_rate=0.3)
    start, through = UR5_HOME.copy(), UR5_HOME.copy()
    start[4], through[4] = 0.3, -0.3  # wrist_2 crosses 0: wrist_1 and wrist_3 aligned
    loop = Loop(law, start)
    law.set_target(law.pose(through))
    loop.run(4.0)
    commands = np.array(loop.commands)
    smallest = min(s.singular_value for s in loop.states)
    peak = np.abs(commands).max(axis=0) / ur5.model.effort_limit
    print(f"\nsingular pose: smallest singular value {smallest:.2e}, damped in "
          f"{sum(s.damped for s in loop.states)} steps, peak |τ| / limit "
          f"{np.array2string(peak, precision=3)}, final error "
          f"{np.linalg.norm(loop.states[-1].error):.2e}")
    assert smallest < law.threshold
    assert np.isfinite(commands).all()
    assert peak.max() <= 1.0


def test_a_target_out_of_reach_is_held_at_the_nearest_pose_without_windup(ur5):
    link = default_payload_link(ur5.model)
    # position only (no rotational spring): the nearest reachable pose is the nearest point
    gains = CartesianGains(np.full(3, 1000.0), np.zeros(3),
                           damping=np.array([150.0, 150.0, 150.0, 2.0, 2.0, 2.0]))
    law = CartesianImpedance(ur5, link, gains, max_linear_rate=1.0)
    loop = Loop(law, UR5_HOME)
    start = law.target.copy()
    far = start.copy()
    far[:3, 3] = [1.6, 0.3, 0.5]  # the UR5 reaches about 0.95 m from its shoulder
    law.set_target(far)
    loop.run(3.0)
    held = loop.states[-1].pose[:3, 3]
    gap = np.linalg.norm(held - far[:3, 3])

    def distance(q):
        return np.linalg.norm(law.pose(q)[:3, 3] - far[:3, 3])

    bounds = list(zip(ur5.model.position_lower, ur5.model.position_upper))
    nearest = min(scipy.optimize.minimize(distance, q0, bounds=bounds, method="L-BFGS-B").fun
                  for q0 in (UR5_HOME, loop.sim.q))
    commands = np.array(loop.commands)
    print(f"\nout of reach: held {gap * 1e3:.2f} mm from the target, nearest reachable "
          f"{nearest * 1e3:.2f} mm; speed {np.linalg.norm(loop.states[-1].velocity):.1e}")
    assert np.isfinite(commands).all()
    assert gap <= nearest + 1e-3
    assert np.linalg.norm(loop.states[-1].velocity[:3]) < 1e-3  # held, not creeping
    # back within reach: no windup to unwind, the link returns as from a plain step
    law.set_target(start)
    back = len(loop.states)
    loop.run(3.0)
    returned = np.array([np.linalg.norm(s.error[:3]) for s in loop.states[back:]])
    print(f"back in reach: {returned[-1] * 1e3:.3f} mm from the start pose after 3 s")
    assert returned[-1] < 1e-3


def test_gains_the_sampled_loop_cannot_take_are_named(ur5):
    law = CartesianImpedance(ur5, default_payload_link(ur5.model))
    assert law.gain_problem(UR5_HOME, PERIOD) is None  # the defaults, at 1 kHz
    stiff = CartesianGains(np.full(3, 500.0), [30.0, 30.0, 3.0e5])
    text = law.gain_problem(UR5_HOME, PERIOD, stiff)
    assert text is not None and "cartesian stiffness 300000 on axis rz (base frame, " \
        "cartesian.rotational_stiffness) makes the sampled loop unstable" in text, text
    assert law.gain_problem(UR5_HOME, 1e-4, stiff) is None  # a 10 kHz loop takes them


def test_hand_guiding_leaves_the_tool_where_the_hand_leaves_it(ur5):
    """Stiffness 0: gravity and the arm's dynamics compensated, the tool free; a hand (the
    simulator's external wrench) moves it, and it stays where it is left."""
    law = CartesianImpedance(ur5, default_payload_link(ur5.model),
                             CartesianGains(np.zeros(3), np.zeros(3),
                                            damping=np.array([40.0, 40.0, 40.0, 0.5, 0.5, 0.5])))
    loop = Loop(law, UR5_HOME)
    start = law.pose(UR5_HOME)[:3, 3]
    loop.run(0.5)
    still = np.linalg.norm(loop.positions()[-1] - start)
    loop.wrench = np.array([5.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # the hand, along base x
    loop.run(0.5)
    loop.wrench = None
    loop.sim.set_external_wrench(None)
    loop.run(1.5)
    left = loop.positions()[-1]
    loop.run(0.5)
    moved, after = left - start, np.linalg.norm(loop.positions()[-1] - left)
    print(f"\nhand guiding: {still * 1e3:.4f} mm before the push; moved "
          f"{np.array2string(moved * 1e3, precision=1)} mm; then {after * 1e3:.4f} mm in 0.5 s")
    assert still < 1e-4  # gravity compensated: the free tool does not sag
    assert moved[0] > 0.02 and abs(moved[0]) > 3 * np.abs(moved[1:]).max()
    assert after < 1e-3  # left where the hand left it: no spring pulls it back


def test_a_target_asked_after_a_hold_was_is_kept_one_asked_before_is_dropped(ur5):
    """A hold (a collision's reset, an activation, a mode switch) takes the link's pose at the
    next state. A target asked between the hold's request and that state is the user's latest
    word: it stays (the code this was written against dropped it, so a target sent right after
    ~/reset_collision was lost). A target asked before the hold is dropped: the hold stops the
    motion toward it."""
    model = ur5.model
    controller = JointController(model, dynamics=ur5)
    controller.set_mode("cartesian_impedance")
    law = CartesianImpedance(ur5, default_payload_link(model))
    controller.set_cartesian(law)
    v = np.zeros(model.nv)
    assert controller.update_state(model.actuated_joint_names, UR5_HOME, v, 0.0)
    controller.effort(UR5_HOME, v, 0.0)  # holds where the link is
    start = law.target.copy()
    goal = start.copy()
    goal[:3, 3] += [0.0, 0.03, 0.0]

    controller.hold_anew()  # requested now, taken at the next state
    law.set_target(goal)  # asked after the request
    controller.effort(UR5_HOME, v, 0.001)
    assert np.allclose(law.goal, goal, atol=1e-12)  # kept: the target moves to it from here
    assert np.allclose(law.target, start)

    law.set_target(goal)  # asked before the next request
    controller.hold_anew()
    controller.effort(UR5_HOME, v, 0.002)
    assert np.allclose(law.goal, start)  # dropped: the link is held where it is
