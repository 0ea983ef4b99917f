# SPDX-License-Identifier: Apache-2.0
"""The semi-implicit step's joint friction: viscous damping implicit, Coulomb friction
set-valued (stick–slip).

The law is ``rb_dynamics.dynamics.friction``'s, f(q̇) = viscous·q̇ + c(q̇)·sign(q̇), with sign
set-valued at rest. Over a step of dt (semi-implicit Euler, the effort τ held):

    A = M(q) + dt·diag(viscous)                       (viscous damping at the end of the step)
    v_free = q̇ + dt·A⁻¹ (τ − viscous·q̇ − h(q, q̇))     (the velocity without Coulomb friction)
    q̇⁺ = argmin_w ½ (w − v_free)ᵀ A (w − v_free) + Σᵢ dt·cᵢ(q̇ᵢ)·|wᵢ|

The minimiser is the stick–slip projection: q̇⁺ = v_free − A⁻¹ p with the friction impulse
|pᵢ| ≤ dt·cᵢ, opposing q̇⁺ᵢ where it is not 0 and anywhere in the bound where it is (the
principle of maximal dissipation; MuJoCo's ``frictionloss``). A single joint sticks (q̇⁺ = 0)
when |v_free|·(I + dt·viscous) ≤ dt·c, the impulse one step of friction can give; otherwise it
slips with the full friction against its motion. Unlike the linearised tanh law (stiff: its
slope c/ε on a 1e-4 kg·m² wrist flips the velocity every step) this step is stable at any dt
and a joint that stops stays stopped. The Stribeck magnitude c(q̇) is taken at the start of the
step (its negative slope cannot make the step unstable then).

``stick_slip_velocity`` solves the minimisation by coordinate descent (Gauss–Seidel with soft
thresholding: a stuck coordinate is exactly 0 at every sweep), until a sweep moves no
coordinate by more than ``STICK_SLIP_TOLERANCE``·(1 + max|v_free|) or after
``STICK_SLIP_SWEEPS`` sweeps. It is written one scalar at a time, in the order of
``_ckernels.c``'s ``stick_slip``, so that the compiled roll-out takes the same decisions.
"""

from __future__ import annotations

import numpy as np

from rb_dynamics.dynamics import Dynamics, coulomb_bound

__all__ = ["STICK_SLIP_SWEEPS", "STICK_SLIP_TOLERANCE", "friction_step_velocity",
           "stick_slip_velocity"]

STICK_SLIP_SWEEPS = 100  # equals STICK_SLIP_SWEEPS in _ckernels.c
STICK_SLIP_TOLERANCE = 1e-14  # relative to 1 + max|v_free|; equals _ckernels.c's


def stick_slip_velocity(A: np.ndarray, v_free: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """argmin_w ½ (w − v_free)ᵀ A (w − v_free) + Σᵢ boundᵢ·|wᵢ| for a symmetric positive
    definite ``A`` (n, n) and impulse bounds ``bound`` ≥ 0 (n,): the velocity after the
    Coulomb impulses (see the module docstring). A coordinate with bound 0 is not held."""
    a, w, b = A.tolist(), [float(x) for x in v_free], [float(x) for x in bound]
    n = len(w)
    x = list(w)
    scale = 0.0
    for i in range(n):
        if abs(w[i]) > scale:
            scale = abs(w[i])
    tolerance = STICK_SLIP_TOLERANCE * (1.0 + scale)
    for _ in range(STICK_SLIP_SWEEPS):
        change = 0.0
        for i in range(n):
            row = a[i]
            coupled = 0.0  # Σ_{j≠i} A_ij (x_j − v_free_j): the others' impulses on i
            for j in range(n):
                if j != i:
                    coupled += row[j] * (x[j] - w[j])
            z = w[i] - coupled / row[i]  # i's velocity without its own friction
            t = b[i] / row[i]  # the velocity i's friction can take in one step
            new = z - t if z > t else (z + t if z < -t else 0.0)
            if abs(new - x[i]) > change:
                change = abs(new - x[i])
            x[i] = new
        if change <= tolerance:
            break
    return np.array(x)


def friction_step_velocity(dyn: Dynamics, q: np.ndarray, v: np.ndarray, tau: np.ndarray,
                           dt: float) -> np.ndarray:
    """q̇⁺ after one semi-implicit Euler step of ``dt`` under ``tau``, with the joint friction
    of ``dyn.model`` as the module docstring states (a fixed-base or any model; no
    constraints, no external wrench)."""
    model = dyn.model
    A = dyn.crba(q) + dt * np.diag(model.damping)
    rhs = tau - model.damping * v - dyn.nonlinear_effects(q, v)
    v_free = v + dt * np.linalg.solve(A, rhs)
    return stick_slip_velocity(A, v_free, dt * coulomb_bound(model, v))
