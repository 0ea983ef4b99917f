# SPDX-License-Identifier: Apache-2.0
"""The one friction law (``dynamics.friction``): its value against the formula written out,
its slope against a central difference, the Stribeck term off when either of its coefficients
is 0, and the same law in the controller's compensation and the simulator's losses."""

from __future__ import annotations

import math

import numpy as np

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.control import ControlLaw
from rb_dynamics.dynamics import friction_effort, friction_slope, has_friction, make_dynamics
from rb_dynamics.model import COULOMB_SMOOTHING, DynamicsOverlay, apply_overlay, load_model
from rb_dynamics.simulation import joint_losses

BARE = load_model(DEFAULT_URDF)
JOINTS = BARE.actuated_joint_names
MODEL = apply_overlay(BARE, DynamicsOverlay(joints={
    JOINTS[0]: {"viscous": 0.8, "coulomb": 1.5, "stribeck": 2.0, "stribeck_velocity": 0.2},
    JOINTS[1]: {"viscous": 0.0, "coulomb": 0.5, "stribeck": 1.0, "stribeck_velocity": 0.0},
    JOINTS[2]: {"viscous": 0.3, "coulomb": 0.0, "stribeck": 0.0, "stribeck_velocity": 0.5},
    JOINTS[3]: {"viscous": 0.0, "coulomb": 0.0, "stribeck": 0.7, "stribeck_velocity": 0.05},
}))


def written_out(model, v: np.ndarray) -> np.ndarray:
    """The law of the module docstring, one coordinate at a time."""
    out = np.zeros(model.nv)
    for i in range(model.nv):
        fs, vs = model.stribeck_friction[i], model.stribeck_velocity[i]
        stribeck = fs * math.exp(-(v[i] / vs) ** 2) if fs > 0 and vs > 0 else 0.0
        out[i] = (model.damping[i] * v[i]
                  + (model.friction[i] + stribeck) * math.tanh(v[i] / COULOMB_SMOOTHING))
    return out


def test_the_law_is_the_formula_and_its_slope_the_derivative():
    rng = np.random.default_rng(4)
    for _ in range(200):
        v = rng.normal(0.0, 0.5, MODEL.nv)
        np.testing.assert_allclose(friction_effort(MODEL, v), written_out(MODEL, v),
                                   rtol=1e-14, atol=1e-15)
        h = 1e-6
        numeric = np.array([(written_out(MODEL, v + h * e) - written_out(MODEL, v - h * e))[i]
                            / (2 * h) for i, e in enumerate(np.eye(MODEL.nv))])
        np.testing.assert_allclose(friction_slope(MODEL, v), numeric, rtol=1e-6, atol=1e-6)
    # batched: row by row the same
    V = rng.normal(0.0, 0.5, (7, MODEL.nv))
    assert np.array_equal(friction_effort(MODEL, V)[3], friction_effort(MODEL, V[3]))


def test_stribeck_lifts_the_breakaway_and_dips_the_slope():
    i = 0  # Coulomb 1.5 + Stribeck 2.0 decaying over 0.2 rad/s
    slow, fast = np.zeros(MODEL.nv), np.zeros(MODEL.nv)
    slow[i], fast[i] = 0.02, 2.0
    # at v_s/10 the Stribeck term adds 99 % of itself; at 10 v_s nothing
    coulomb_part = (friction_effort(MODEL, slow)[i] - 0.8 * 0.02) / math.tanh(0.2)
    assert 1.5 + 0.99 * 2.0 < coulomb_part < 1.5 + 2.0
    assert abs(friction_effort(MODEL, fast)[i] - (0.8 * 2.0 + 1.5 * math.tanh(20.0))) < 1e-9
    dip = np.zeros(MODEL.nv)
    dip[i] = 0.2 / math.sqrt(2)  # the steepest fall of the Stribeck decay
    assert friction_slope(MODEL, dip)[i] < 0
    # a coefficient at 0 switches the term off: joint 1 (v_s = 0), joint 2 (stribeck = 0)
    v = np.full(MODEL.nv, 0.05)
    for k in (1, 2):
        assert friction_effort(MODEL, v)[k] == (MODEL.damping[k] * 0.05 + MODEL.friction[k]
                                                * math.tanh(0.05 / COULOMB_SMOOTHING))
    assert has_friction(MODEL)
    frictionless = apply_overlay(BARE, DynamicsOverlay(joints={
        j: {"viscous": 0.0, "coulomb": 0.0} for j in JOINTS}))
    assert not has_friction(frictionless)
    assert not friction_effort(frictionless, v).any()


def test_compensation_cancels_the_simulators_losses():
    """The controller adds f at the velocity it compensates at; the simulator applies −f: the
    same law, so they cancel exactly, on the joints whose friction the overlay gave. Gravity
    compensation adds none on the joints with only the URDF's <dynamics> (the last two)."""
    rng = np.random.default_rng(9)
    law = ControlLaw(make_dynamics(MODEL, "reference"), friction_compensation=True)
    identified = MODEL.identified_friction
    assert identified.tolist() == [True] * 4 + [False] * 2
    assert MODEL.damping[~identified].all()  # the URDF gives them friction
    for _ in range(20):
        q, v = rng.uniform(-1, 1, MODEL.nq), rng.normal(0, 0.4, MODEL.nv)
        tau, _ = law.effort(q, v)
        added = tau - law.gravity_effort(q)
        np.testing.assert_allclose(added[identified], -joint_losses(MODEL, v)[identified],
                                   rtol=0, atol=1e-12)
        assert not added[~identified].any()
