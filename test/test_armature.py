# SPDX-License-Identifier: Apache-2.0
"""Armature (rotor inertia on M's diagonal) through the whole engine, against Pinocchio with
``model.armature`` set: the reference algorithms and the generated Python kernels on ur5,
panda (mimic finger), solo12 and talos (free-flyer roots; armature on their 1-DoF joints), the
C kernels on the two arms (the legged robots' C kernels take minutes to compile; the C code is
the Python kernels' lines), random states and random armature, ≤ 1e-9 relative.

What Pinocchio does with armature (pinocchio 4, checked here): rnea adds armature·q̈, crba adds
diag(armature), aba adds it to each joint's D = Sᵀ I^A S, computeKineticEnergy adds
½ Σ armature·q̇², and the centroidal momentum leaves it out. The payload terms and the
constrained dynamics take M from the same algorithms.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import (
    REAL_ROBOTS,
    Oracle,
    WorstErrors,
    load_case,
    oracle_models,
    random_state,
    rel_err,
)

from rb_dynamics.dynamics import (
    Baumgarte,
    FixedPoint,
    Payload,
    PayloadDynamics,
    PayloadEffort,
    constrained_forward_dynamics,
    kernel_cache,
    make_dynamics,
    payload_effort_reference,
    with_payload,
)
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import DynamicsOverlay, apply_overlay

TOL = 1e-9
N_STATES = 12
WORST = WorstErrors()
ROBOTS = [p for p in oracle_models() if p.id in REAL_ROBOTS]
needs_c = pytest.mark.skipif(kernel_cache._ckernels is None,
                             reason="needs the built extension dynamics.trampoline._ckernels")


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    WORST.report("armature against Pinocchio")


def with_random_armature(model, rng):
    """``model`` with armature 0.01–1 on each 1-DoF joint (an overlay, by name)."""
    overlay = DynamicsOverlay(joints={name: {"armature": float(rng.uniform(0.01, 1.0))}
                                      for name in model.actuated_joint_names})
    return apply_overlay(model, overlay)


@pytest.fixture(scope="module", params=ROBOTS)
def case(request, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RB_DYNAMICS_CACHE", str(tmp_path_factory.mktemp("kernels")))
        name, bare, xml = load_case(request.param)
        rng = np.random.default_rng(23)
        model = with_random_armature(bare, rng)
        assert model.armature.any() and not bare.armature.any()
        oracle = Oracle(model, xml)
        oracle.pm.armature[oracle.v_perm] = model.armature
        oracle.pd = oracle.pm.createData()
        implementations = {"reference": make_dynamics(model, "reference"),
                           "python": make_dynamics(model, "python")}
        if kernel_cache._ckernels is not None and not model.floating_base:
            implementations["c"] = make_dynamics(model, "c")
        states = [random_state(model, rng) for _ in range(N_STATES)]
        yield name, model, oracle, implementations, states


def test_every_implementation_matches_pinocchio_with_armature(case):
    name, model, oracle, implementations, states = case
    for q, v, a, tau in states:
        ref = oracle.references(q, v, a, tau)
        if not model.has_mimic:
            ref["aba (pin.aba)"] = oracle.aba(q, v, tau)
        for kind, dyn in implementations.items():
            ours = {"rnea": dyn.rnea(q, v, a), "gravity": dyn.gravity(q),
                    "nle": dyn.nonlinear_effects(q, v), "crba": dyn.crba(q),
                    "aba": dyn.aba(q, v, tau)}
            ours["aba (pin.aba)"] = ours["aba"]
            for key, expected in ref.items():
                WORST.record(name, f"{kind} {key}", rel_err(ours[key], expected), TOL)
        # the armature is there at all: M's diagonal exceeds the bare one by it
        WORST.record(name, "reference forward_dynamics_crba",
                     rel_err(D.forward_dynamics_crba(model, q, v, tau), ref["aba"]), TOL)


def test_batched_kernels_match_pinocchio_with_armature(case):
    name, model, oracle, implementations, states = case
    Q, V, A, TAU = (np.array(x) for x in zip(*states))
    for kind, dyn in implementations.items():
        tau, M, qdd = dyn.rnea(Q, V, A), dyn.crba(Q), dyn.aba(Q, V, TAU)
        for k, (q, v, a, t) in enumerate(states):
            ref = oracle.references(q, v, a, t)
            WORST.record(name, f"{kind} batched rnea", rel_err(tau[k], ref["rnea"]), TOL)
            WORST.record(name, f"{kind} batched crba", rel_err(M[k], ref["crba"]), TOL)
            WORST.record(name, f"{kind} batched aba", rel_err(qdd[k], ref["aba"]), TOL)


def test_energy_and_momentum_follow_pinocchio(case):
    name, model, oracle, _, states = case
    for q, v, _, _ in states:
        pm, pd, qp, vp = oracle.pinocchio_state(q, v)
        if oracle.full is not None:  # the mimic-free twin: its armature on the leaders
            continue
        energy = pin.computeKineticEnergy(pm, pd, qp, vp)
        WORST.record(name, "kinetic energy", rel_err(D.kinetic_energy(model, q, v), energy),
                     TOL)
        M = D.crba(model, q)
        WORST.record(name, "kinetic energy = ½ vᵀMv",
                     rel_err(D.kinetic_energy(model, q, v), 0.5 * v @ M @ v), TOL)
        h = pin.computeCentroidalMomentum(pm, pd, qp, vp)
        WORST.record(name, "centroidal momentum",
                     rel_err(D.centroidal_momentum(model, q, v),
                             np.r_[h.linear, h.angular]), TOL)


def test_payload_terms_on_a_model_with_armature():
    """A payload's share is the same with armature (it moves no rotor); the loaded model's
    M, τ and q̈ are the armature model's with the payload in its body."""
    name, bare, xml = load_case(ROBOTS[1].values[0])  # panda: the mimic finger too
    rng = np.random.default_rng(3)
    model = with_random_armature(bare, rng)
    payload = Payload("panda_hand", 1.3, [0.01, -0.02, 0.08], np.diag([4e-3, 5e-3, 2e-3]))
    loaded = PayloadDynamics(make_dynamics(model, "python"), payload)
    reference = with_payload(model, payload)
    term = PayloadEffort(model, payload)
    for _ in range(8):
        q, v, a, tau = random_state(model, rng)
        WORST.record(name, "payload effort (armature model)",
                     rel_err(term.effort(q, v, a), payload_effort_reference(model, q, v, a,
                                                                            payload)), TOL)
        WORST.record(name, "payload effort = bare model's",
                     rel_err(term.effort(q, v, a), PayloadEffort(bare, payload).effort(q, v, a)),
                     TOL)
        WORST.record(name, "payload crba", rel_err(loaded.crba(q), D.crba(reference, q)), TOL)
        WORST.record(name, "payload rnea", rel_err(loaded.rnea(q, v, a),
                                                   D.rnea(reference, q, v, a)), TOL)
        WORST.record(name, "payload aba", rel_err(loaded.aba(q, v, tau),
                                                  D.aba(reference, q, v, tau)), TOL)


def test_constrained_dynamics_use_the_mass_matrix_with_armature():
    """Gauss's principle in the metric of M with armature: the constrained q̈ satisfies
    M q̈ = τ − h + Aᵀλ with Pinocchio's M and h (armature set) and the constraint's rows."""
    name, bare, xml = load_case(ROBOTS[0].values[0])  # ur5
    rng = np.random.default_rng(8)
    model = with_random_armature(bare, rng)
    oracle = Oracle(model, xml)
    oracle.pm.armature[oracle.v_perm] = model.armature
    oracle.pd = oracle.pm.createData()
    still = Baumgarte(0.0, 0.0)  # b = −J̇ q̇: the point's acceleration itself
    for _ in range(5):
        q, v, _, tau = random_state(model, rng)
        constraint = FixedPoint("wrist_3_link")  # held where it is
        result = constrained_forward_dynamics(model, q, v, tau, [constraint], gains=still)
        rows = constraint.rows(model, q, v, 0.0, still)
        M = oracle.mass_matrix(q)
        h = oracle.from_v(pin.nonLinearEffects(oracle.pm, oracle.pd, oracle.q(q), oracle.v(v)))
        residual = M @ result.qdd - (tau - h)  # = Aᵀλ: in the row space of A
        lam, *_ = np.linalg.lstsq(rows.A.T, residual, rcond=None)
        WORST.record(name, "constrained M q̈ = τ − h + Aᵀλ",
                     rel_err(rows.A.T @ lam, residual), TOL)
        WORST.record(name, "constrained A q̈ = b", rel_err(rows.A @ result.qdd, rows.b), TOL)


@needs_c
def test_zero_armature_kernels_carry_no_armature_term(tmp_path, monkeypatch):
    """Armature 0 writes no term at all (the kernels of a model without an overlay are the
    ones generated before armature existed); armature on one joint changes only what it
    touches: rnea and crba gain a constant times q̈ and on the diagonal, gravity and C v + g
    do not change."""
    from rb_dynamics.dynamics import generate_kernels
    from rb_dynamics.dynamics.codegen_ir import emit_python

    _, bare, _ = load_case(ROBOTS[0].values[0])
    zero = apply_overlay(bare, DynamicsOverlay(joints={"elbow_joint": {"armature": 0.0}}))
    one = apply_overlay(bare, DynamicsOverlay(joints={"elbow_joint": {"armature": 0.4375}}))
    src = {m: {k: emit_python(ir) for k, ir in generate_kernels(model).items()}
           for m, model in (("bare", bare), ("zero", zero), ("one", one))}
    assert src["zero"] == src["bare"]
    for kernel in ("gravity", "nle"):
        assert src["one"][kernel] == src["bare"][kernel]
    for kernel in ("rnea", "crba", "aba"):
        assert "0.4375" in src["one"][kernel] and "0.4375" not in src["bare"][kernel]
