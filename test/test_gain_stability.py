# SPDX-License-Identifier: Apache-2.0
"""The stability bound of the sampled PD loop (rb_dynamics/control/stability.py) against a
simulation of that loop: a double integrator under a held command computed from the state one
period before, at gains just under and just over the bound."""

from __future__ import annotations

import numpy as np
import pytest

from rb_dynamics.control import stability as S


def simulate(kp: float, kd: float, period: float, steps: int = 20000) -> float:
    """|e| at the end (from e = 1 at rest) of e'' = u held over each period, u computed from
    the state one period before (exact discretization of the double integrator)."""
    e, v, u = 1.0, 0.0, 0.0
    for _ in range(steps):
        e, v, u = e + period * v + 0.5 * period**2 * u, v + period * u, -kp * e - kd * v
        if abs(e) > 1e6:
            return abs(e)
    return abs(e)


@pytest.mark.parametrize("period", [1e-3, 2e-3, 1e-2])
@pytest.mark.parametrize("kd_period", [0.02, 0.3, 0.625, 0.9])
def test_the_bound_separates_decay_from_growth(period, kd_period):
    kd = kd_period / period
    bound = S.max_stable_kp(kd, period)
    assert bound > 0
    assert simulate(0.98 * bound, kd, period) < 1.0
    assert simulate(1.02 * bound, kd, period, steps=200_000) > 1.0
    # the roots of the characteristic polynomial agree: on the unit circle at the bound
    a, b = bound * period**2, kd_period
    roots = np.roots([1.0, -2.0, 1 + a / 2 + b, a / 2 - b])
    assert np.abs(roots).max() == pytest.approx(1.0, abs=1e-9)


def test_the_damping_bound_and_no_damping():
    period = 1e-3
    assert S.max_stable_kd(period) == pytest.approx(1000.0)
    assert simulate(0.0, 0.99e3, period) < 1.0 + 1e-9  # kp = 0: e stays, v decays
    assert S.max_stable_kp(0.0, period) == 0.0  # undamped: no position gain is stable
    assert simulate(100.0, 0.0, period, steps=200_000) > 1.0
    assert S.max_stable_kp(1000.0, period) == 0.0


def test_the_refusal_names_the_joint_and_the_bound():
    joints = ["a", "b"]
    assert S.gain_bound_violation([100.0, 400.0], [20.0, 40.0], 1e-3, joints) is None
    text = S.gain_bound_violation([100.0, 1e9], [20.0, 40.0], 1e-3, joints)
    assert text.startswith("kp 1e+09 with kd 40 on b makes the sampled loop unstable: kp < 26")
    assert "at the state period 1 ms" in text
    text = S.gain_bound_violation([100.0], [1e9], 1e-3, ["a"])
    assert "kd 1e+09 on a" in text and "kd < 1000 " in text
    # impedance: N·m/rad on an inertia of 0.01 kg·m² acts as 100× the gain
    names = ("impedance.stiffness", "impedance.damping")
    assert S.gain_bound_violation([3000.0], [50.0], 1e-3, ["w"], names, [1.0]) is None
    text = S.gain_bound_violation([3000.0], [50.0], 1e-3, ["w"], names, [0.01])
    assert text.startswith("impedance.damping 50 on w makes the sampled loop unstable: "
                           "impedance.damping < 10 at the state period 1 ms on the effective "
                           "inertia 0.01"), text
    text = S.gain_bound_violation([3000.0], [0.5], 1e-3, ["w"], names, [1.0])
    assert text.startswith("impedance.stiffness 3000 with impedance.damping 0.5"), text


def test_the_effective_inertia_is_at_most_the_diagonal():
    M = np.array([[2.0, 0.5], [0.5, 0.4]])
    m = S.effective_inertia(M)
    assert np.all(m <= np.diag(M)) and m[1] == pytest.approx(0.4 - 0.25 / 2.0)
