# SPDX-License-Identifier: Apache-2.0
"""Constrained dynamics: the [Z23] robots (UK vs extended Rosenberg), and engine constraints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from constrained_robots import (
    OMNI_Q0,
    OMNI_V0,
    SPACE,
    SPACE_Q0,
    SPACE_V0,
    omni_robot_terms,
    omni_velocity_violation,
    space_robot_momentum,
    space_robot_terms,
    space_robot_urdf,
)
from pin_oracle import REAL_ROBOTS, robots_dir
from scipy.integrate import solve_ivp

from rb_dynamics.dynamics import (
    Baumgarte,
    ConstraintSet,
    FixedPoint,
    FrameWeld,
    JointCoupling,
    LoopClosurePoint,
    ReferenceDynamics,
    UserConstraint,
    constrained_forward_dynamics,
    rosenberg,
    udwadia_kalaba,
)
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import load_model
from rb_dynamics.simulation import step


def _simulate(terms, q0, v0, solver, duration=60.0):
    n = len(q0)

    def rhs(_t, x):
        M, F, A, b = terms(x[:n], x[n:])
        return np.concatenate([x[n:], solver(M, F, A, b)[0]])

    sol = solve_ivp(rhs, (0, duration), np.concatenate([q0, v0]), method="DOP853",
                    rtol=1e-12, atol=1e-12, t_eval=np.linspace(0, duration, 601))
    assert sol.success
    return sol.y[:n], sol.y[n:]


def test_space_robot_methods_agree_and_momentum_is_kept_for_60_s():
    q_uk, v_uk = _simulate(space_robot_terms, SPACE_Q0, SPACE_V0, udwadia_kalaba)
    q_r, v_r = _simulate(space_robot_terms, SPACE_Q0, SPACE_V0, rosenberg)
    assert np.abs(q_uk - q_r).max() <= 1e-8
    assert np.abs(v_uk - v_r).max() <= 1e-8
    h0 = space_robot_momentum(SPACE_Q0, SPACE_V0)
    drift = max(abs(space_robot_momentum(q, v) - h0) for q, v in zip(q_uk.T, v_uk.T))
    assert drift / abs(h0) <= 1e-9
    assert np.ptp(q_uk[1]) > 1.0  # the arms really move


def test_omni_robot_methods_agree_for_60_s():
    # the paper's initial rates are rounded to 4 digits: project them onto the constraints
    M, _, A, _ = omni_robot_terms(OMNI_Q0, OMNI_V0)
    Minv_At = np.linalg.solve(M, A.T)
    v0 = OMNI_V0 - Minv_At @ np.linalg.solve(A @ Minv_At, A @ OMNI_V0)
    assert np.abs(omni_velocity_violation(OMNI_Q0, v0)).max() < 1e-12
    q_uk, v_uk = _simulate(omni_robot_terms, OMNI_Q0, v0, udwadia_kalaba)
    q_r, v_r = _simulate(omni_robot_terms, OMNI_Q0, v0, rosenberg)
    assert np.abs(q_uk[3:5] - q_r[3:5]).max() <= 1e-7
    assert np.abs(v_uk - v_r).max() <= 1e-7
    assert max(np.abs(omni_velocity_violation(q, v)).max() for q, v in zip(q_uk.T, v_uk.T)) < 1e-8


def test_space_robot_urdf_reproduces_the_papers_equations():
    """Our engine on the URDF gives the paper's M (eq. 43) and its momentum-constraint b (44).

    The θ row of M q̈ + C q̇ = 0 is the momentum constraint, so −(C q̇)_θ must equal the
    paper's b. On the arm rows the Lagrangian of this M gives −(C q̇)_ψ = −m2 r L θ̇² sin ψ;
    the paper's F adds ψ̇ θ̇ m2 r L sin ψ, which no Lagrangian with this M produces (a slip in
    eq. 43, like [C05]'s). The solver checks above use the paper's F as printed.
    """
    model = load_model(space_robot_urdf(), gravity=(0, 0, 0))
    m2, r, L = SPACE["m2"], SPACE["r"], SPACE["L"]
    rng = np.random.default_rng(30)
    for _ in range(50):
        q, v = rng.uniform(-np.pi, np.pi, 3), rng.uniform(-1, 1, 3)
        M, F, A, b = space_robot_terms(q, v)
        np.testing.assert_allclose(D.crba(model, q), M, rtol=1e-12, atol=1e-9)
        bias = D.nonlinear_effects(model, q, v)
        np.testing.assert_allclose(-bias[0], b[0], rtol=1e-10, atol=1e-9)
        lagrangian_F = -m2 * r * L * v[0] ** 2 * np.sin(q[1:])
        np.testing.assert_allclose(-bias[1:], lagrangian_F, rtol=1e-10, atol=1e-9)


def test_free_floating_space_robot_keeps_its_angular_momentum():
    model = load_model(space_robot_urdf(floating=True), floating_base=True, gravity=(0, 0, 0))
    q = model.neutral_configuration()
    q[model.joint_q_index[model.joint_index("psi1")]] = SPACE_Q0[1]
    q[model.joint_q_index[model.joint_index("psi2")]] = SPACE_Q0[2]
    v = np.zeros(model.nv)
    v[5] = SPACE_V0[0]
    v[6:] = SPACE_V0[1:]
    h0 = D.centroidal_momentum(model, q, v)
    torque = np.zeros(model.nv)
    for k in range(500):
        torque[6:] = 200.0 * np.sin(0.05 * k)  # the arms are driven; the body must counter-rotate
        s = step(ReferenceDynamics(model), q, v, torque, 0.01, "rk4", losses=False,
                 limits=False)
        q, v = s.q, s.v
    h = D.centroidal_momentum(model, q, v)
    assert np.abs(h - h0).max() <= 1e-9 * np.abs(h0).max()


@pytest.fixture(scope="module")
def ur5():
    return load_model(Path(robots_dir(), REAL_ROBOTS["ur5"][0]))


def test_fixed_point_constraint_holds_the_tool(ur5):
    q, v = np.array([0.3, -1.2, 1.4, -0.6, 1.1, 0.2]), np.zeros(6)
    tip = ConstraintSet([FixedPoint("wrist_3_link", (0.0, 0.1, 0.0))], method="rosenberg",
                        projection=False)
    for _ in range(100):
        s = step(ReferenceDynamics(ur5), q, v, np.zeros(6), 5e-3, "rk4", losses=False,
                 constraints=tip)
        q, v = s.q, s.v
    assert tip.violation(ur5, q, v) < 1e-6
    assert np.abs(q - [0.3, -1.2, 1.4, -0.6, 1.1, 0.2]).max() > 1e-2  # the rest of the arm moved


def test_methods_agree_on_engine_constraints_and_uk_handles_redundancy(ur5):
    rng = np.random.default_rng(31)
    q, v, tau = rng.uniform(-1, 1, 6), rng.uniform(-1, 1, 6), rng.uniform(-5, 5, 6)
    constraints = [FixedPoint("wrist_3_link", (0, 0.05, 0)),
                   JointCoupling("wrist_1_joint", "wrist_2_joint", 2.0, 0.1)]
    uk = constrained_forward_dynamics(ur5, q, v, tau, constraints)
    ros = constrained_forward_dynamics(ur5, q, v, tau, constraints, method="rosenberg")
    np.testing.assert_allclose(uk.qdd, ros.qdd, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(uk.constraint_force, ros.constraint_force, rtol=1e-8, atol=1e-8)
    assert uk.residual < 1e-9
    # the same rows twice: UK copes, Rosenberg refuses clearly
    doubled = constraints + [JointCoupling("wrist_1_joint", "wrist_2_joint", 2.0, 0.1)]
    np.testing.assert_allclose(constrained_forward_dynamics(ur5, q, v, tau, doubled).qdd,
                               uk.qdd, rtol=1e-8, atol=1e-8)
    with pytest.raises(ValueError, match="not independent"):
        constrained_forward_dynamics(ur5, q, v, tau, doubled, method="rosenberg")


def test_constraint_forces_do_no_work_and_weld_and_loop_hold(ur5):
    rng = np.random.default_rng(32)
    q = rng.uniform(-1, 1, 6)
    v = rng.uniform(-1, 1, 6)
    loop = LoopClosurePoint("wrist_3_link", "forearm_link", (0, 0, 0), (0.1, 0, 0))
    weld = FrameWeld("wrist_3_link", "upper_arm_link")
    r = constrained_forward_dynamics(ur5, q, v, np.zeros(6), [loop], gains=Baumgarte(0.0, 0.0))
    # ideal constraints: F_c lies in the row space of A, so F_c · v_admissible = 0
    rows = loop.rows(ur5, q, v, 0.0, Baumgarte())
    null = np.linalg.svd(rows.A)[2][np.linalg.matrix_rank(rows.A):]
    assert null.shape[0] == 3
    assert np.abs(null @ r.constraint_force).max() < 1e-8 * np.abs(r.constraint_force).max()
    # a weld across four joints: six rows of rank four. At a velocity the weld allows, the rows
    # are consistent; at any other, no acceleration meets them and that is an error
    A = weld.rows(ur5, q, v, 0.0, Baumgarte()).A
    assert np.linalg.matrix_rank(A) == 4
    v_allowed = v - np.linalg.pinv(A) @ (A @ v)
    welded = constrained_forward_dynamics(ur5, q, v_allowed, np.zeros(6), [weld])
    assert welded.residual < 1e-8
    assert np.abs(weld.rows(ur5, q, v_allowed, 0.0, Baumgarte()).violation).max() < 1e-12
    with pytest.raises(ValueError, match="inconsistent"):
        constrained_forward_dynamics(ur5, q, v, np.zeros(6), [weld])
    user = UserConstraint(lambda model, q, v, t: (np.eye(1, 6), [0.0]))
    assert constrained_forward_dynamics(ur5, q, v, np.zeros(6), [user]).qdd[0] == pytest.approx(
        0.0, abs=1e-12)


def test_bad_solver_inputs():
    with pytest.raises(ValueError, match="shapes do not fit"):
        udwadia_kalaba(np.eye(2), np.zeros(2), np.zeros((1, 3)), np.zeros(1))
    with pytest.raises(ValueError, match="NaN or inf"):
        rosenberg(np.eye(2), np.array([np.nan, 0]), np.ones((1, 2)), np.zeros(1))


@pytest.mark.parametrize(("spec", "message"), [
    ({"type": "hinge"}, r"constraints.c.type: 'hinge' is not one of"),
    ({"type": "fixed_point"}, r"constraints.c.link: required"),
    ({"type": "fixed_point", "link": "tool"}, r"constraints.c.link: unknown link 'tool'"),
    ({"type": "loop_point", "link_a": "wrist_3_link", "link_b": "base_link",
      "point_a": [0, 1]}, r"constraints.c.point_a: needs 3 finite numbers"),
    ({"type": "loop_point", "link_a": "wrist_3_link", "link_b": "base_link",
      "point_b": [0, float("nan"), 0]}, r"constraints.c.point_b: needs 3 finite"),
    ({"type": "weld", "link_a": "wrist_3_link", "link_b": "base_link", "point": [0, 0, 0]},
     r"constraints.c: \['point'\] do not apply to a weld"),
    ({"type": "joint_coupling", "follower": "elbow_joint", "leader": "gripper"},
     r"constraints.c.leader: unknown joint 'gripper'"),
    ({"type": "joint_coupling", "follower": "elbow_joint", "leader": "wrist_1_joint",
      "ratio": float("inf")}, r"constraints.c.ratio: must be finite"),
])
def test_declared_constraints_are_checked_against_the_model(ur5, spec, message):
    with pytest.raises(ValueError, match=message):
        ConstraintSet.from_specs(ur5, {"c": spec})


def test_declared_constraints_build_the_engine_constraints(ur5):
    built = ConstraintSet.from_specs(ur5, {
        "tool": {"type": "fixed_point", "link": "wrist_3_link", "point": [0, 0.1, 0]},
        "gear": {"type": "joint_coupling", "follower": "wrist_2_joint",
                 "leader": "wrist_1_joint", "ratio": -2.0, "offset": 0.1}},
        method="rosenberg", gains=Baumgarte(5.0, 6.0))
    assert built.names == ["tool", "gear"] and built.method == "rosenberg"
    assert built.constraints == [FixedPoint("wrist_3_link", (0.0, 0.1, 0.0)),
                                 JointCoupling("wrist_2_joint", "wrist_1_joint", -2.0, 0.1)]
    with pytest.raises(ValueError, match="constraints.solver"):
        ConstraintSet.from_specs(ur5, {}, method="lagrange")
    # fresh() forgets the targets taken at a first evaluation
    q = np.full(6, 0.3)
    built.solve(ur5, q, np.zeros(6), D.crba(ur5, q), -D.gravity(ur5, q))
    assert built.constraints[0].target is not None
    assert built.fresh().constraints[0].target is None


def test_inconsistent_and_non_finite_constraints_are_errors(ur5):
    q, v = np.full(6, 0.3), np.zeros(6)
    # the same point held at two different places: no acceleration meets both
    here = D.link_pose(ur5, q, "wrist_3_link")[:3, 3]
    clash = [FixedPoint("wrist_3_link", target=here), FixedPoint("wrist_3_link",
                                                                 target=here + 0.01)]
    with pytest.raises(ValueError, match="inconsistent"):
        constrained_forward_dynamics(ur5, q, v, np.zeros(6), clash)
    with pytest.raises(ValueError, match="NaN or inf"):
        constrained_forward_dynamics(ur5, q, v, np.zeros(6), [UserConstraint(
            lambda model, q, v, t: (np.eye(1, 6), [np.nan]))])
    with pytest.raises(ValueError, match="unknown link 'tool'"):
        constrained_forward_dynamics(ur5, q, v, np.zeros(6), [FixedPoint("tool")])
    with pytest.raises(ValueError, match="unknown joint 'gripper'"):
        constrained_forward_dynamics(ur5, q, v, np.zeros(6), [JointCoupling("gripper",
                                                                            "elbow_joint")])
