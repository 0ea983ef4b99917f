# SPDX-License-Identifier: Apache-2.0
"""The momentum terms [M q̇, Cᵀ q̇, g] (``dynamics.momentum``, the generated Python and C kernels,
the payload's share) against Pinocchio.

Cᵀ(q, q̇) q̇ against ``computeCoriolisMatrix(q, q̇)ᵀ q̇`` on ur5, panda (mimic finger), solo12
and talos (free-flyer roots) and the kitchen-sink URDF (continuous, prismatic, planar, floating,
mimic joints, tilted gravity), 30 random states each, relative error ≤ 1e-9 for the reference and
both kernels; p against Pinocchio's M (with an armature, reference and Python kernels) times q̇;
g against its gravity. A mimic
joint's model is compared as Gᵀ C_fullᵀ G q̇ of Pinocchio's model with the mimic joints free.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import Oracle, WorstErrors, load_case, oracle_models, random_state, rel_err

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import (
    Payload,
    PayloadDynamics,
    ReferenceDynamics,
    coriolis_transpose,
    default_payload_link,
    generalized_momentum,
    kernel_cache,
    make_dynamics,
    momentum_terms,
    with_payload,
)
from rb_dynamics.model import load_model

TOL = 1e-9
N_STATES = 30
WORST = WorstErrors()
HAVE_C = kernel_cache._ckernels is not None


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    WORST.report("momentum terms")


def _pinocchio_coriolis_transpose(oracle: Oracle, q, v) -> np.ndarray:
    """Pinocchio's C(q, q̇)ᵀ q̇ in our coordinates (Gᵀ C_fullᵀ G q̇ with mimic joints)."""
    pm, pd, qp, vp = oracle.pinocchio_state(q, v)
    C = pin.computeCoriolisMatrix(pm, pd, qp, vp)
    if oracle.full is None:
        return oracle.from_v(C.T @ vp)
    full, model = oracle.full.model, oracle.model
    ct_full = oracle.full.from_v(C.T @ vp)
    out = np.zeros(model.nv)
    for name, kind, vi in zip(full.joint_names, full.joint_kinds, full.joint_v_index):
        nv = {"free": 6, "planar": 3}.get(kind, 1)
        mult = 1.0
        if name in model.mimic_joints:
            name, mult, _ = model.mimic_joints[name]
        k = model.joint_v_index[model.joint_names.index(name)]
        out[k:k + nv] += mult * ct_full[vi:vi + nv]
    return out


@pytest.fixture(scope="module", params=oracle_models())
def case(request):
    """A model, states and Pinocchio's answers; the model has an armature (rotor inertia on
    M's diagonal) for the reference and Python kernels, none for the C kernels (the models
    test_c_kernels.py compiles: the session's kernel cache has them)."""
    name, model, xml = load_case(request.param)
    rng = np.random.default_rng(29)
    oracle = Oracle(model, xml)
    states = [random_state(model, rng)[:2] for _ in range(N_STATES)]
    truth = [(oracle.mass_matrix(q) @ v, _pinocchio_coriolis_transpose(oracle, q, v),
              oracle.references(q, v)["gravity"]) for q, v in states]
    armature = rng.uniform(0.0, 0.2, model.nv)
    oracle.pm.armature = oracle.v(armature)
    with_armature = dataclasses.replace(model, armature=armature)
    truth_armature = [(oracle.mass_matrix(q) @ v, ct, g) for (q, v), (_, ct, g)
                      in zip(states, truth)]
    return name, {"c": (model, truth)}, (with_armature, truth_armature), states


def _kinds() -> list:
    return ["reference", "python", pytest.param("c", marks=pytest.mark.skipif(
        not HAVE_C, reason="needs the built _ckernels extension"))]


@pytest.mark.parametrize("kind", _kinds())
def test_momentum_terms_match_pinocchio(case, kind):
    name, without, with_armature, states = case
    model, truth = without.get(kind, with_armature)
    dyn = make_dynamics(model, kind)
    assert dyn.kind == kind
    for (q, v), (p, ct, g) in zip(states, truth):
        terms = dyn.momentum_terms(q, v)
        assert terms.shape == (3, model.nv)
        WORST.record(name, f"M v ({kind})", rel_err(terms[0], p), TOL)
        WORST.record(name, f"C^T v ({kind})", rel_err(terms[1], ct), TOL)
        WORST.record(name, f"g ({kind})", rel_err(terms[2], g), TOL)
        WORST.record(name, f"coriolis_transpose ({kind})",
                     rel_err(dyn.coriolis_transpose(q, v), ct), TOL)
    # a batch gives the same rows, state by state
    Q, V = np.array([s[0] for s in states]), np.array([s[1] for s in states])
    batch = dyn.momentum_terms(Q, V)
    assert batch.shape == (N_STATES, 3, model.nv)
    for row, (p, ct, g) in zip(batch, truth):
        WORST.record(name, f"batch ({kind})", rel_err(row, np.stack([p, ct, g])), TOL)
    assert dyn.coriolis_transpose(Q, V).shape == (N_STATES, model.nv)


def test_reference_functions_agree(case):
    name, _, (model, _), states = case
    q, v = states[0]
    terms = momentum_terms(model, q, v)
    np.testing.assert_array_equal(coriolis_transpose(model, q, v), terms[1])
    np.testing.assert_array_equal(generalized_momentum(model, q, v), terms[0])


@pytest.mark.parametrize("kind", ["reference", "python"])
def test_bad_input_is_refused_with_the_reason(kind):
    model = load_model(DEFAULT_URDF)
    dyn = make_dynamics(model, kind)
    with pytest.raises(ValueError, match="v must have length 6"):
        dyn.momentum_terms(np.zeros(6), np.zeros(5))
    with pytest.raises(ValueError, match="q contains NaN or inf"):
        dyn.momentum_terms(np.full(6, np.nan), np.zeros(6))


@pytest.mark.skipif(not HAVE_C, reason="needs the built _ckernels extension")
def test_c_kernel_bit_identical_to_python_and_refuses_bad_input():
    model = load_model(DEFAULT_URDF)
    c, py = make_dynamics(model, "c"), make_dynamics(model, "python")
    rng = np.random.default_rng(3)
    q, v = rng.uniform(-2, 2, 6), rng.uniform(-2, 2, 6)
    np.testing.assert_array_equal(c.momentum_terms(q, v), py.momentum_terms(q, v))
    with pytest.raises(ValueError, match="v must have length 6"):
        c.momentum_terms(q, np.zeros(5))
    with pytest.raises(ValueError, match="v contains NaN or inf"):
        c.momentum_terms(q, np.full(6, np.inf))
    with pytest.raises(ValueError, match="the momentum terms is undefined|not finite"):
        c.momentum_terms(q, np.full(6, 1e300))


@pytest.mark.parametrize("robot", ["panda", "default_arm"])
def test_payload_share_matches_the_model_that_carries_it(robot):
    """PayloadDynamics (the fast one-pass chain) against the reference on the loaded model."""
    from pin_oracle import REAL_ROBOTS, robots_dir

    path = DEFAULT_URDF if robot == "default_arm" else f"{robots_dir()}/{REAL_ROBOTS[robot][0]}"
    model = load_model(path)
    payload = Payload(default_payload_link(model), 1.7,
                      np.array([0.02, -0.03, 0.08]), np.diag([0.01, 0.02, 0.015]))
    loaded = PayloadDynamics(make_dynamics(model, "python"), payload)
    reference = ReferenceDynamics(with_payload(model, payload))
    rng = np.random.default_rng(5)
    for _ in range(20):
        q, v = random_state(model, rng)[:2]
        assert rel_err(loaded.momentum_terms(q, v), reference.momentum_terms(q, v)) < 1e-12
    Q, V = rng.uniform(-1, 1, (7, model.nq)), rng.uniform(-1, 1, (7, model.nv))
    assert rel_err(loaded.momentum_terms(Q, V), reference.momentum_terms(Q, V)) < 1e-12
    empty = PayloadDynamics(make_dynamics(model, "python"), Payload.none(payload.link))
    np.testing.assert_allclose(empty.momentum_terms(q, v),
                               ReferenceDynamics(model).momentum_terms(q, v), atol=1e-12)
