# SPDX-License-Identifier: Apache-2.0
"""The fit's friction law does not bias it: a true arm whose Coulomb friction steps with
sign(q̇) (as a drive's, or MuJoCo's ``frictionloss``) — a law the fit's smooth tanh(q̇/ε)
column does not write — follows a slow excitation (its joints 10–30 % of the time below
0.1 rad/s) exactly, efforts 2 ms late with noise; the identified model has the truth's
gravity, explains the held-out period to its noise, and finds the delay. The same plan with
the package's own law as the truth does as well."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import friction_effort, gravity
from rb_dynamics.identification import (
    ParameterLayout,
    SensorModel,
    base_parameters,
    identify,
    perturbed_model,
    plan_excitation,
    sign_law_friction,
    synthetic_recording,
)
from rb_dynamics.model import load_model

DELAY = 0.002  # s: the efforts are late by this much
SENSOR = SensorModel(jitter=1e-4, delay=DELAY, noise=0.05, noise_relative=0.01)
PERIODS = 6


@pytest.fixture(scope="module")
def slow_plan():
    """The bundled arm's excitation of 4 s with accelerations kept to 3.5 rad/s²."""
    text = Path(DEFAULT_URDF).read_text()
    model = load_model(text)
    base = base_parameters(ParameterLayout(model, ()))
    plan = plan_excitation(base, period=4.0, harmonics=3, acceleration=3.5, starts=1,
                           evaluations=300)
    return text, model, plan


def test_the_slow_plan_spends_a_tenth_to_a_third_of_its_time_below_0_1_rad_s(slow_plan):
    _, _, plan = slow_plan
    qd = plan.trajectory.evaluate(np.linspace(0.0, plan.trajectory.period, 4000,
                                              endpoint=False))[1]
    slow = np.mean(np.abs(qd) < 0.1, axis=0)
    assert np.all((slow >= 0.1) & (slow <= 0.3)), slow


@pytest.mark.parametrize("law", [sign_law_friction, friction_effort], ids=["sign", "tanh"])
def test_a_friction_law_the_fit_does_not_write_leaves_no_bias(slow_plan, law):
    """Gravity within 0.1 % of max |g| over the poses the excitation visits (1 % over random
    poses), held-out RMS within 1.3 × the noise σ on every joint, the delay within 0.3 ms."""
    text, model, plan = slow_plan
    rng = np.random.default_rng(7)
    true = perturbed_model(model, rng)
    recording, sigma = synthetic_recording(true, plan.trajectory, PERIODS, SENSOR, rng,
                                           friction=law)
    ident = identify(text, recording, plan.trajectory)
    assert abs(ident.fit.delay - DELAY) <= 3e-4, ident.fit.delay
    ratio = ident.validation.rms / np.sqrt(np.mean(sigma ** 2, axis=0))
    assert np.all(ratio <= 1.3), ratio
    visited = plan.trajectory.evaluate(np.linspace(0.0, plan.trajectory.period, 2000))[0]
    random = np.random.default_rng(1).uniform(-3, 3, (500, model.nq))
    for poses, bound in ((visited, 1e-3), (random, 1e-2)):
        g_true = gravity(true, poses)
        error = np.abs(gravity(ident.model, poses) - g_true).max() / np.abs(g_true).max()
        assert error <= bound, error
