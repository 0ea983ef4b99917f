# SPDX-License-Identifier: Apache-2.0
"""Every dynamics quantity against Pinocchio on real robots and on the kitchen-sink URDF.

For each model, 100 random states; relative error ≤ 1e-9 for τ, g, C v + g, M, q̈, centres
of mass, energies, momentum, link placements and Jacobians. The worst error per quantity and
model is recorded in ``ACCURACY`` and printed at the end of the session (see conftest.py).
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import Oracle, WorstErrors, load_case, oracle_models, random_state, rel_err

from rb_dynamics.dynamics import reference as D

TOL = 1e-9
N_STATES = 100
ACCURACY = WorstErrors()


def _record(robot: str, quantity: str, err: float) -> None:
    ACCURACY.record(robot, quantity, err, TOL)


@pytest.fixture(scope="module", params=oracle_models())
def case(request):
    name, model, xml = load_case(request.param)
    return name, model, Oracle(model, xml)


def _link_names(model, rng, count=4):
    names = [n for n, f in model.frames.items() if f.body >= 0]
    return list(rng.choice(names, size=min(count, len(names)), replace=False))


def test_total_mass(case):
    name, model, oracle = case
    _record(name, "mass", rel_err(model.total_mass, pin.computeTotalMass(oracle.pm)))


def test_inverse_dynamics_gravity_and_bias(case):
    name, model, oracle = case
    rng = np.random.default_rng(1)
    for _ in range(N_STATES):
        q, v, a, _ = random_state(model, rng)
        ref = oracle.references(q, v, a)
        _record(name, "rnea", rel_err(D.rnea(model, q, v, a), ref["rnea"]))
        _record(name, "gravity", rel_err(D.gravity(model, q), ref["gravity"]))
        _record(name, "nle", rel_err(D.nonlinear_effects(model, q, v), ref["nle"]))


def test_rnea_with_external_wrenches(case):
    name, model, oracle = case
    rng = np.random.default_rng(2)
    for _ in range(N_STATES):
        q, v, a, _ = random_state(model, rng)
        f_ext = {link: rng.uniform(-20, 20, 6) for link in _link_names(model, rng)}
        ref = pin.rnea(
            oracle.pm, oracle.pd, oracle.q(q), oracle.v(v), oracle.v(a), oracle.fext(f_ext)
        )
        _record(name, "rnea_fext", rel_err(D.rnea(model, q, v, a, f_ext), oracle.from_v(ref)))


def test_mass_matrix(case):
    name, model, oracle = case
    rng = np.random.default_rng(3)
    for _ in range(N_STATES):
        q = random_state(model, rng)[0]
        _record(name, "crba", rel_err(D.crba(model, q), oracle.mass_matrix(q)))


def test_forward_dynamics(case):
    name, model, oracle = case
    rng = np.random.default_rng(4)
    for _ in range(N_STATES):
        q, v, _, tau = random_state(model, rng)
        f_ext = {link: rng.uniform(-20, 20, 6) for link in _link_names(model, rng, 2)}
        # Pinocchio's ABA has no mimic joints: its reference is M⁻¹(τ − b) from its own terms.
        ref = oracle.forward_dynamics(q, v, tau, f_ext)
        _record(name, "aba", rel_err(D.aba(model, q, v, tau, f_ext), ref))
        _record(name, "fd_crba", rel_err(D.forward_dynamics_crba(model, q, v, tau, f_ext), ref))
        if not model.has_mimic:
            _record(name, "aba_pin", rel_err(D.aba(model, q, v, tau, f_ext),
                                             oracle.aba(q, v, tau, f_ext)))


def test_centers_of_mass(case):
    name, model, oracle = case
    rng = np.random.default_rng(5)
    pm, pd = oracle.pm, oracle.pd
    for _ in range(N_STATES):
        q = random_state(model, rng)[0]
        com_ref = pin.centerOfMass(pm, pd, oracle.q(q), True)
        _record(name, "com", rel_err(D.center_of_mass(model, q), com_ref))
        subtree_com, subtree_mass = D.subtree_centers_of_mass(model, q)
        for body, joint_name in enumerate(model.body_joint_names):
            jid = pm.getJointId(joint_name)
            if subtree_mass[body] > 0:  # Pinocchio gives subtree COMs in the joint frame
                _record(
                    name, "subtree_com", rel_err(subtree_com[body], pd.oMi[jid].act(pd.com[jid]))
                )
            _record(name, "subtree_mass", rel_err(subtree_mass[body], pd.mass[jid]))


def test_energies_and_momentum(case):
    name, model, oracle = case
    rng = np.random.default_rng(6)
    for _ in range(N_STATES):
        q, v, _, _ = random_state(model, rng)
        pm, pd, qp, vp = oracle.pinocchio_state(q, v)
        _record(
            name,
            "kinetic",
            rel_err(D.kinetic_energy(model, q, v), pin.computeKineticEnergy(pm, pd, qp, vp)),
        )
        _record(
            name,
            "potential",
            rel_err(D.potential_energy(model, q), pin.computePotentialEnergy(pm, pd, qp)),
        )
        hg = pin.computeCentroidalMomentum(pm, pd, qp, vp)
        _record(
            name,
            "momentum",
            rel_err(D.centroidal_momentum(model, q, v), np.concatenate([hg.linear, hg.angular])),
        )


def test_placements_and_jacobians(case):
    name, model, oracle = case
    rng = np.random.default_rng(7)
    pm, pd = oracle.pm, oracle.pd
    frames = {
        "local": pin.LOCAL,
        "world": pin.WORLD,
        "local_world_aligned": pin.LOCAL_WORLD_ALIGNED,
    }
    for _ in range(N_STATES // 4):
        q = random_state(model, rng)[0]
        qp = oracle.q(q)
        pin.computeJointJacobians(pm, pd, qp)
        pin.framesForwardKinematics(pm, pd, qp)
        for link in _link_names(model, rng, 6):
            fid = pm.getFrameId(link, pin.BODY)
            _record(
                name, "placement", rel_err(D.link_pose(model, q, link), pd.oMf[fid].homogeneous)
            )
            for frame, ref_frame in frames.items():
                J_ref = oracle.cols(pin.getFrameJacobian(pm, pd, fid, ref_frame))
                _record(
                    name,
                    f"jacobian_{frame}",
                    rel_err(D.link_jacobian(model, q, link, frame), J_ref),
                )
