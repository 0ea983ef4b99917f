# SPDX-License-Identifier: Apache-2.0
"""PayloadDynamics (the bare robot's kernels plus the payload's terms) against Pinocchio with the
same payload: every Dynamics method, one state and batches, external wrenches, and its
refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, Oracle, random_state, rel_err, robots_dir

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import (
    Payload,
    PayloadDynamics,
    ReferenceDynamics,
    default_payload_link,
    make_dynamics,
)
from rb_dynamics.model import load_model

TOL = 1e-9


def pin_oracle(xml: str, model, payload: Payload | None = None) -> Oracle:
    """Pinocchio's model of the URDF, carrying ``payload`` on its link's joint."""
    oracle = Oracle(model, xml)
    if payload is not None:
        pm = oracle.pm
        frame = pm.frames[pm.getFrameId(payload.link, pin.BODY)]
        inertia = pin.Inertia(payload.mass, np.array(payload.com), np.array(payload.inertia))
        pm.inertias[frame.parentJoint] = (pm.inertias[frame.parentJoint]
                                          + frame.placement.act(inertia))
        oracle.pd = pm.createData()
    return oracle



def _xml(name: str) -> str:
    if name == "default_arm":
        return DEFAULT_URDF.read_text()
    return Path(robots_dir(), REAL_ROBOTS[name][0]).read_text()


@pytest.mark.parametrize("name", ["ur5", "panda", "default_arm"])
def test_payload_dynamics_match_pinocchio(name):
    xml = _xml(name)
    model = load_model(xml)
    rng = np.random.default_rng(193)
    R = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    payload = Payload(default_payload_link(model), 2.2, [0.03, -0.02, 0.07],
                      R @ np.diag([8e-3, 6e-3, 3e-3]) @ R.T)
    oracle = pin_oracle(xml, model, payload)
    pm, pd = oracle.pm, oracle.pd
    wrench = {payload.link: np.array([3.0, -2.0, 5.0, 0.2, 0.1, -0.3])}
    # the generated (Python) kernels and the reference as bases: the C kernels give the same
    # results as these (test_c_kernels.py), and compiling them here would cost minutes
    for base in (make_dynamics(model, "python"), ReferenceDynamics(model)):
        dyn = PayloadDynamics(base, payload)
        assert dyn.kind.endswith("+ payload") and dyn.model.nv == model.nv
        qs, vs, as_, taus = [], [], [], []
        for _ in range(10):
            q, v, a, tau = random_state(model, rng)
            qp, vp, ap = oracle.q(q), oracle.v(v), oracle.v(a)
            assert rel_err(dyn.rnea(q, v, a), oracle.from_v(pin.rnea(pm, pd, qp, vp, ap))) <= TOL
            assert rel_err(dyn.gravity(q), oracle.from_v(
                pin.computeGeneralizedGravity(pm, pd, qp))) <= TOL
            assert rel_err(dyn.nonlinear_effects(q, v), oracle.from_v(
                pin.nonLinearEffects(pm, pd, qp, vp))) <= TOL
            M = pin.crba(pm, pd, qp)
            M = oracle.matrix(np.triu(M) + np.triu(M, 1).T)
            assert rel_err(dyn.crba(q), M) <= TOL
            forces = oracle.fext(wrench)
            assert rel_err(dyn.rnea(q, v, a, wrench), oracle.from_v(
                pin.rnea(pm, pd, qp, vp, ap, forces))) <= TOL
            qdd = np.linalg.solve(M, tau - oracle.from_v(pin.nonLinearEffects(pm, pd, qp, vp)))
            assert rel_err(dyn.aba(q, v, tau), qdd) <= TOL
            qdd = np.linalg.solve(M, tau - oracle.from_v(pin.rnea(pm, pd, qp, vp, 0 * vp,
                                                                  forces)))
            assert rel_err(dyn.aba(q, v, tau, wrench), qdd) <= TOL
            qs.append(q), vs.append(v), as_.append(a), taus.append(tau)
        q, v, a, tau = map(np.array, (qs, vs, as_, taus))
        for k, (tau_k, M_k, qdd_k) in enumerate(zip(dyn.rnea(q, v, a), dyn.crba(q),
                                                     dyn.aba(q, v, tau))):
            assert rel_err(tau_k, dyn.rnea(q[k], v[k], a[k])) <= 1e-12
            assert rel_err(M_k, dyn.crba(q[k])) <= 1e-12
            assert rel_err(qdd_k, dyn.aba(q[k], v[k], tau[k])) <= 1e-12


def test_payload_dynamics_refusals():
    model = load_model(DEFAULT_URDF)
    dyn = PayloadDynamics(ReferenceDynamics(model), Payload("tool0", 1.0, [0, 0, 0.1]))
    q = np.zeros(6)
    with pytest.raises(ValueError, match="q contains NaN"):
        dyn.rnea([np.nan] * 6, q, q)
    with pytest.raises(ValueError, match="tau must have length 6"):
        dyn.aba(q, q, [1.0, 2.0])
    with pytest.raises(ValueError, match="v contains NaN"):
        dyn.aba(q, [np.inf] * 6, q)
    with pytest.raises(ValueError, match="unknown payload link"):
        PayloadDynamics(ReferenceDynamics(model), Payload("gripper", 1.0))
