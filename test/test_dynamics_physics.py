# SPDX-License-Identifier: Apache-2.0
"""Physics checks that need no oracle: structure of M, ABA ∘ RNEA, energy, the [C05] two-link arm,
and batched evaluation equal to state-by-state evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pin_oracle import REAL_ROBOTS, random_state, robots_dir
from scipy.integrate import solve_ivp
from urdf_samples import kitchen_sink_urdf, two_link_arm_urdf

from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import load_model


def _model(name: str):
    if name == "kitchen_sink":
        model = load_model(kitchen_sink_urdf())
        model.gravity = np.array([0.5, 1.0, -9.7])
        return model
    rel, floating = REAL_ROBOTS[name]
    return load_model(Path(robots_dir(), rel), floating_base=floating)


@pytest.fixture(scope="module", params=["ur5", "panda", "solo12", "talos", "kitchen_sink"])
def model(request):
    return _model(request.param)


def test_mass_matrix_is_symmetric_positive_definite(model):
    rng = np.random.default_rng(10)
    for _ in range(100):
        M = D.crba(model, random_state(model, rng)[0])
        assert np.array_equal(M, M.T)
        assert np.linalg.eigvalsh(M)[0] > 0


def test_aba_inverts_rnea(model):
    rng = np.random.default_rng(11)
    for _ in range(100):
        q, v, a, _ = random_state(model, rng)
        f_ext = {model.body_names[-1]: rng.uniform(-5, 5, 6)}
        tau = D.rnea(model, q, v, a, f_ext)
        a_back = D.aba(model, q, v, tau, f_ext)
        assert np.linalg.norm(a_back - a) <= 1e-9 * np.linalg.norm(a)


def test_rnea_is_mass_matrix_times_acceleration_plus_bias(model):
    rng = np.random.default_rng(12)
    for _ in range(20):
        q, v, a, _ = random_state(model, rng)
        lhs = D.rnea(model, q, v, a)
        rhs = D.crba(model, q) @ a + D.nonlinear_effects(model, q, v)
        assert np.linalg.norm(lhs - rhs) <= 1e-10 * np.linalg.norm(lhs)


def test_kinetic_energy_is_half_v_M_v(model):
    rng = np.random.default_rng(13)
    for _ in range(20):
        q, v, _, _ = random_state(model, rng)
        assert D.kinetic_energy(model, q, v) == pytest.approx(0.5 * v @ D.crba(model, q) @ v,
                                                             rel=1e-12)


@pytest.mark.parametrize("name", ["ur5", "panda", "kitchen_sink"])
def test_batched_equals_one_state_at_a_time(name):
    model = _model(name)
    rng = np.random.default_rng(14)
    states = [random_state(model, rng) for _ in range(50)]
    Q, V, A, T = (np.array([s[k] for s in states]) for k in range(4))
    tau = D.rnea(model, Q, V, A)
    g = D.gravity(model, Q)
    qdd = D.aba(model, Q, V, T)
    assert tau.shape == g.shape == qdd.shape == (50, model.nv)
    for k, (q, v, a, t) in enumerate(states):
        np.testing.assert_allclose(tau[k], D.rnea(model, q, v, a), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g[k], D.gravity(model, q), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(qdd[k], D.aba(model, q, v, t), rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("name", ["ur5", "kitchen_sink"])
def test_energy_is_conserved_without_torque_or_damping(name):
    """10 s of free motion (τ = 0, no damping) with a fine integrator: E stays put to 1e-6."""
    model = _model(name)
    rng = np.random.default_rng(15)
    q0, v0, _, _ = random_state(model, rng)
    if name == "kitchen_sink":  # its free-flyer and planar joints need a Lie-group integrator
        model = load_model(kitchen_sink_urdf(with_planar=False, with_floating=False))
        q0, v0, _, _ = random_state(model, rng)
    zero = np.zeros(model.nv)

    def energy(q, v):
        return D.kinetic_energy(model, q, v) + D.potential_energy(model, q)

    def rhs(_t, x):
        q, v = x[:model.nq], x[model.nq:]
        return np.concatenate([v, D.aba(model, q, v, zero)])

    sol = solve_ivp(rhs, (0.0, 10.0), np.concatenate([q0, v0]), method="DOP853",
                    rtol=1e-11, atol=1e-11, t_eval=np.linspace(0, 10, 21))
    assert sol.success
    energies = [energy(x[:model.nq], x[model.nq:]) for x in sol.y.T]
    scale = max(abs(energies[0]), D.kinetic_energy(model, q0, v0))
    drift = max(abs(e - energies[0]) for e in energies) / scale
    assert drift <= 1e-6, drift


def test_two_link_arm_closed_form():
    """τ = M(θ) θ̈ + h(θ, θ̇) + g(θ) for the planar two-link arm of [C05].

    The lecture notes' M11 carries a stray "+2 l1 lg2" and h1 writes l12 for lg2; the textbook
    (Craig) form used here is M11 = I1 + I2 + m1 lg1² + m2 (l1² + lg2² + 2 l1 lg2 cos θ2).
    """
    m1, m2, l1, lg1, lg2, I1, I2, g = 2.0, 1.3, 0.7, 0.3, 0.25, 0.08, 0.05, 9.81
    model = load_model(two_link_arm_urdf(m1, m2, l1, lg1, lg2, I1, I2), gravity=(0, -g, 0))
    rng = np.random.default_rng(16)
    for _ in range(100):
        (t1, t2), (d1, d2), acc = rng.uniform(-np.pi, np.pi, 2), rng.uniform(-3, 3, 2), \
            rng.uniform(-5, 5, 2)
        c2, s2 = np.cos(t2), np.sin(t2)
        M = np.array([
            [I1 + I2 + m1 * lg1**2 + m2 * (l1**2 + lg2**2 + 2 * l1 * lg2 * c2),
             I2 + m2 * (lg2**2 + l1 * lg2 * c2)],
            [I2 + m2 * (lg2**2 + l1 * lg2 * c2), I2 + m2 * lg2**2],
        ])
        h = np.array([-m2 * l1 * lg2 * d2 * (2 * d1 + d2) * s2, m2 * l1 * lg2 * d1**2 * s2])
        grav = np.array([m1 * g * lg1 * np.cos(t1)
                         + m2 * g * (l1 * np.cos(t1) + lg2 * np.cos(t1 + t2)),
                         m2 * g * lg2 * np.cos(t1 + t2)])
        q, v = np.array([t1, t2]), np.array([d1, d2])
        tau = M @ acc + h + grav
        np.testing.assert_allclose(D.crba(model, q), M, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(D.gravity(model, q), grav, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(D.rnea(model, q, v, acc), tau, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(D.aba(model, q, v, tau), acc, rtol=1e-11, atol=1e-11)
