# SPDX-License-Identifier: Apache-2.0
"""Generated Python kernels (rb_dynamics.dynamics.codegen) against the reference dynamics and
Pinocchio.

For ur5, panda (mimic finger), solo12 and talos (free-flyer roots) and the kitchen-sink URDF
(continuous, prismatic, planar, floating, mimic, fixed joints, tilted gravity): 100 random
states each, single-state and batched paths, relative error ≤ 1e-9 for τ, g, C v + g, M and q̈.
Worst errors are collected in ``WORST`` and printed at the end of the module (``pytest -s``).
The C kernels are held to the Python ones in test_c_kernels.py.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import Oracle, WorstErrors, load_case, oracle_models, random_state, rel_err
from urdf_samples import kitchen_sink_urdf

from rb_dynamics.dynamics import FastDynamics, make_dynamics
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import load_model

TOL = 1e-9
N_STATES = 100
WORST = WorstErrors()


def _record(robot: str, quantity: str, err: float) -> None:
    WORST.record(robot, quantity, err, TOL)


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    WORST.report("fast kernels")


@pytest.fixture(scope="module", params=oracle_models())
def case(request):
    name, model, xml = load_case(request.param)
    oracle = Oracle(model, xml)
    rng = np.random.default_rng(11)
    states = [random_state(model, rng) for _ in range(N_STATES)]
    return name, model, oracle, make_dynamics(model, kernels="python"), states


def _pin_references(oracle: Oracle, q, v, a, tau) -> dict[str, np.ndarray]:
    ref = oracle.references(q, v, a, tau)
    if not oracle.model.has_mimic:
        ref["aba_pin"] = oracle.aba(q, v, tau)
    return ref


def _ours(fast: FastDynamics, q, v, a, tau) -> dict[str, np.ndarray]:
    out = {
        "rnea": fast.rnea(q, v, a),
        "gravity": fast.gravity(q),
        "nle": fast.nonlinear_effects(q, v),
        "crba": fast.crba(q),
        "aba": fast.aba(q, v, tau),
    }
    out["aba_pin"] = out["aba"]
    return out


def _reference(model, q, v, a, tau) -> dict[str, np.ndarray]:
    return {
        "rnea": D.rnea(model, q, v, a),
        "gravity": D.gravity(model, q),
        "nle": D.nonlinear_effects(model, q, v),
        "crba": D.crba(model, q),
        "aba": D.aba(model, q, v, tau),
    }


def test_single_state_against_pinocchio_and_reference(case):
    name, model, oracle, fast, states = case
    for q, v, a, tau in states:
        ours = _ours(fast, q, v, a, tau)
        for key, ref in _pin_references(oracle, q, v, a, tau).items():
            _record(name, f"{key} vs pin", rel_err(ours[key], ref))
        for key, ref in _reference(model, q, v, a, tau).items():
            _record(name, f"{key} vs reference", rel_err(ours[key], ref))
        assert ours["rnea"].shape == (model.nv,) and ours["crba"].shape == (model.nv, model.nv)
        assert np.array_equal(ours["crba"], ours["crba"].T)


def test_batched_against_pinocchio_and_reference(case):
    name, model, oracle, fast, states = case
    Q, V, A, TAU = (np.array(x) for x in zip(*states))
    ours = _ours(fast, Q, V, A, TAU)
    assert ours["rnea"].shape == (N_STATES, model.nv)
    assert ours["crba"].shape == (N_STATES, model.nv, model.nv)
    ref_batch = _reference(model, Q, V, A, TAU)
    for k, (q, v, a, tau) in enumerate(states):
        for key, ref in _pin_references(oracle, q, v, a, tau).items():
            _record(name, f"batched {key} vs pin", rel_err(ours[key][k], ref))
        for key, ref in ref_batch.items():
            _record(name, f"batched {key} vs reference", rel_err(ours[key][k], ref[k]))


def test_batched_broadcasts_one_dimensional_arguments(case):
    name, _, _, fast, states = case
    Q = np.array([s[0] for s in states[:5]])
    v, a = states[0][1], states[0][2]
    tau = fast.rnea(Q, v, a)
    for k in range(5):
        _record(name, "broadcast rnea", rel_err(tau[k], fast.rnea(Q[k], v, a)))


def test_external_wrenches_fall_back_to_reference(case):
    name, model, oracle, fast, states = case
    rng = np.random.default_rng(5)
    links = [n for n, f in model.frames.items() if f.body >= 0][:2]
    for q, v, a, tau in states[:10]:
        f_ext = {link: rng.uniform(-20, 20, 6) for link in links}
        ref = pin.rnea(oracle.pm, oracle.pd, oracle.q(q), oracle.v(v), oracle.v(a),
                       oracle.fext(f_ext))
        _record(name, "rnea f_ext vs pin", rel_err(fast.rnea(q, v, a, f_ext), oracle.from_v(ref)))
        _record(name, "aba f_ext vs reference",
                rel_err(fast.aba(q, v, tau, f_ext), D.aba(model, q, v, tau, f_ext)))


def test_generated_source_is_inspectable(case):
    _, model, _, fast, _ = case
    src = fast.source
    for kernel in ("rnea", "gravity", "nle", "crba", "aba"):
        assert f"def {kernel}(" in src
        assert kernel in fast.sources
    assert "np." not in src and "numpy" not in src  # plain arithmetic on scalars or arrays
    if all(k == "revolute" for k in model.joint_kinds):
        # one cos/sin pair per moving body, nothing more
        assert src.count("cos(") >= model.n_bodies


def test_input_validation(case):
    _, model, _, fast, states = case
    q, v, a, tau = states[0]
    with pytest.raises(ValueError, match="q"):
        fast.rnea(q[:-1], v, a)
    with pytest.raises(ValueError, match="v"):
        fast.rnea(q, np.append(v, 0.0), a)
    bad = a.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="a contains NaN"):
        fast.rnea(q, v, bad)
    bad = tau.copy()
    bad[-1] = np.inf
    with pytest.raises(ValueError, match="tau contains NaN"):
        fast.aba(q, v, bad)
    with pytest.raises(ValueError, match="q"):
        fast.gravity(np.full(model.nq, np.nan))
    with pytest.raises(ValueError, match="q"):
        fast.crba("not numbers")
    Q = np.tile(q, (3, 1))
    Q[1, 0] = np.inf
    with pytest.raises(ValueError, match="q contains NaN"):
        fast.gravity(Q)
    with pytest.raises(ValueError, match="rows"):
        fast.rnea(np.tile(q, (3, 1)), np.tile(v, (2, 1)), a)


def test_large_finite_inputs_are_not_rejected():
    """The cheap finiteness check (a sum) must not reject finite values whose sum overflows;
    a result that overflows is refused rather than returned as inf."""
    model = load_model(kitchen_sink_urdf(with_mimic=False, with_planar=False,
                                         with_floating=False))
    fast = make_dynamics(model, kernels="python")
    q, zero = model.neutral_configuration(), np.zeros(model.nv)
    huge = np.full(model.nv, 4e307)  # the sum overflows, M a does not
    assert sum(huge.tolist()) == float("inf")
    assert np.all(np.isfinite(fast.rnea(q, zero, huge)))
    with pytest.raises(ValueError, match="inverse dynamics is undefined at this state"):
        fast.rnea(q, zero, np.full(model.nv, 1e308))


def test_model_without_joints():
    xml = ('<robot name="welded"><link name="a"/><link name="b"><inertial><mass value="1"/>'
           '<inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial></link>'
           '<joint name="w" type="fixed"><parent link="a"/><child link="b"/></joint></robot>')
    fast = make_dynamics(load_model(xml), kernels="python")
    empty = np.zeros(0)
    assert fast.rnea(empty, empty, empty).shape == (0,)
    assert fast.crba(empty).shape == (0, 0)
    assert fast.aba(np.zeros((3, 0)), np.zeros((3, 0)), np.zeros((3, 0))).shape == (3, 0)
