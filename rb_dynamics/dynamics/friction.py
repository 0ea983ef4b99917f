# SPDX-License-Identifier: Apache-2.0
"""Joint friction: the one law the controller compensates and the simulator applies.

Per velocity coordinate, with the model's ``damping`` (viscous), ``friction`` (Coulomb),
``stribeck_friction`` and ``stribeck_velocity`` (a dynamics overlay sets the last two,
``rb_dynamics.model.overlay``), the law is

    f(q̇) = viscous·q̇ + c(q̇)·sign(q̇),   c(q̇) = coulomb + stribeck·exp(−(q̇/v_s)²)

with sign set-valued at rest: a joint at rest holds any effort up to c(0) = coulomb + stribeck
(the breakaway). A coordinate whose ``stribeck_velocity`` or ``stribeck_friction`` is 0 has no
Stribeck term. f is the effort friction takes from the drive (it opposes motion). One law, two
evaluations:

- smooth, for control: ``friction_effort`` replaces sign(q̇) by tanh(q̇/ε), ε =
  ``COULOMB_SMOOTHING``, a function the controller's friction compensation adds (+f) and the
  observer subtracts, and the simulator applies (−f: RK4 at its stages, the semi-implicit step
  with ``friction_law`` "smooth" at the end of the step); ``friction_slope`` is its ∂f/∂q̇;
- set-valued, for the simulator's semi-implicit step with ``friction_law`` "stick_slip":
  ``coulomb_bound`` is c(q̇), the most effort the Coulomb and Stribeck term can take; the step
  lets a joint stick or slip under it (``rb_dynamics.simulation.friction_step``).

The C roll-out and observer (``_ckernels.c``: ``friction_of``, ``coulomb_bound_of``) write the
same expressions, in the same order.

Units: N·m or N for efforts, rad/s or m/s for velocities.
"""

from __future__ import annotations

import numpy as np

from rb_dynamics.model import COULOMB_SMOOTHING, Model

__all__ = ["coulomb_bound", "friction_effort", "friction_slope", "has_friction"]


def has_friction(model: Model) -> bool:
    """Whether any coordinate has viscous, Coulomb or Stribeck friction."""
    return bool(model.damping.any() or model.friction.any() or model.stribeck_friction.any())


def _stribeck(model: Model, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stribeck·exp(−(q̇/v_s)²), 1/v_s²), both 0 on the coordinates without the term."""
    vs = model.stribeck_velocity
    on = (vs > 0) & (model.stribeck_friction > 0)
    inv_vs2 = np.divide(1.0, vs * vs, out=np.zeros_like(vs), where=on)
    decay = np.where(on, model.stribeck_friction, 0.0) * np.exp(-(v * v) * inv_vs2)
    return decay, inv_vs2


def coulomb_bound(model: Model, v) -> np.ndarray:
    """c(q̇) = coulomb + stribeck·exp(−(q̇/v_s)²) over v (shape of ``v``): the magnitude of the
    set-valued Coulomb and Stribeck term (at rest: the most it holds)."""
    v = np.asarray(v, dtype=float)
    decay, _ = _stribeck(model, v)
    return model.friction + decay


def friction_effort(model: Model, v) -> np.ndarray:
    """The smooth f(q̇) over v (shape of ``v``: (nv,) or (N, nv)): viscous·q̇ +
    c(q̇)·tanh(q̇/ε)."""
    v = np.asarray(v, dtype=float)
    decay, _ = _stribeck(model, v)
    return model.damping * v + (model.friction + decay) * np.tanh(v / COULOMB_SMOOTHING)


def friction_slope(model: Model, v) -> np.ndarray:
    """∂f/∂q̇ over v: viscous + (coulomb + stribeck·e)·sech²(q̇/ε)/ε − 2 q̇/v_s²·stribeck·e·
    tanh(q̇/ε), e = exp(−(q̇/v_s)²). Negative in the Stribeck dip (friction falls as speed
    rises); tanh's argument is clipped at ±300 so sech² stays finite."""
    v = np.asarray(v, dtype=float)
    decay, inv_vs2 = _stribeck(model, v)
    x = np.clip(v / COULOMB_SMOOTHING, -300.0, 300.0)
    sech2 = 1.0 / np.cosh(x) ** 2
    return (model.damping + (model.friction + decay) * sech2 / COULOMB_SMOOTHING
            - 2.0 * v * inv_vs2 * decay * np.tanh(v / COULOMB_SMOOTHING))
