# SPDX-License-Identifier: Apache-2.0
"""The semi-implicit step's joint friction: viscous damping implicit, Coulomb friction implicit
in the velocity, either set-valued (``friction_law`` "stick_slip") or smooth ("smooth").

The law is ``rb_dynamics.dynamics.friction``'s, f(q̇) = viscous·q̇ + c(q̇)·s(q̇), with s the
sign, set-valued at rest (stick_slip), or tanh(q̇/ε), ε = ``COULOMB_SMOOTHING`` (smooth: the
controller's and the observer's evaluation). Over a step of dt (semi-implicit Euler, the
effort τ held):

    A = M(q) + dt·diag(viscous)                       (viscous damping at the end of the step)
    v_free = q̇ + dt·A⁻¹ (τ − viscous·q̇ − h(q, q̇))     (the velocity without Coulomb friction)
    q̇⁺ = argmin_w ½ (w − v_free)ᵀ A (w − v_free) + Σᵢ dt·cᵢ(q̇ᵢ)·φ(wᵢ)

with φ(w) = |w| (stick_slip) or ε·ln cosh(w/ε) (smooth), whose derivative is s. Both are
convex, so the minimiser is unique, and it is the velocity at which the Coulomb term acts:
A (q̇⁺ − v_free) + dt·c·s(q̇⁺) ∋ 0, implicit Euler in the velocity.

- stick_slip: q̇⁺ = v_free − A⁻¹ p with the friction impulse |pᵢ| ≤ dt·cᵢ, opposing q̇⁺ᵢ where
  it is not 0 and anywhere in the bound where it is (the principle of maximal dissipation;
  MuJoCo's ``frictionloss``). A single joint sticks (q̇⁺ = 0) when |v_free|·(I + dt·viscous)
  ≤ dt·c, the impulse one step of friction can give; otherwise it slips with the full friction
  against its motion.
- smooth: pᵢ = dt·cᵢ·tanh(q̇⁺ᵢ/ε), the smooth law at the end of the step. A single joint's
  q̇⁺ lies between 0 and v_free (tanh's sign is its argument's): friction slows it, never
  reverses it, and without a drive its speed decays to 0 (there is no stiction to hold it at
  exactly 0: near rest the law is viscous with slope c/ε).

Either step is stable at any dt and a joint that friction stops stays stopped, unlike the
smooth law linearised about q̇ (one Newton step of this one: its slope c/ε on a 1e-4 kg·m²
wrist, taken where tanh saturates, is 0, so the Coulomb term acts explicitly and flips the
velocity every step). The Stribeck magnitude c(q̇) is taken at the start of the step (its
negative slope cannot make the step unstable then).

``implicit_friction_velocity`` solves the minimisation
- stick_slip: by coordinate descent (Gauss–Seidel: per coordinate soft thresholding, so that a
  stuck coordinate is exactly 0 at every sweep), until a sweep moves no coordinate by more than
  ``STICK_SLIP_TOLERANCE``·(1 + max|v_free|) or after ``STICK_SLIP_SWEEPS`` sweeps; written
  one scalar at a time, in the order of ``_ckernels.c``'s ``implicit_friction``, so that the
  compiled roll-out takes the same decisions;
- smooth: by Newton's method on the whole system (``smooth_friction_velocity``): the objective
  is smooth and strictly convex, its Hessian A + diag(bound/ε·sech²(w/ε)) positive definite,
  so each iteration is one Cholesky solve; a backtracking line search on the objective (the
  Hessian is nearly A where tanh saturates, and the full step can jump across the steep part
  at 0) keeps it descending. Coordinate descent needs about as many sweeps as A's condition
  number (~90 on a moving six-joint arm, 75 µs a step); Newton 3–10 iterations. It stops when a
  step moves no coordinate by more than the same tolerance (quadratic convergence: the step
  before was ~1e-7) or after ``NEWTON_ITERATIONS``; ``_ckernels.c``'s ``smooth_friction`` does
  the same operations (its Cholesky its own; equal to rounding).
"""

from __future__ import annotations

import math

import numpy as np

from rb_dynamics.dynamics import Dynamics, coulomb_bound
from rb_dynamics.model import COULOMB_SMOOTHING

__all__ = ["NEWTON_ITERATIONS", "STICK_SLIP_SWEEPS", "STICK_SLIP_TOLERANCE",
           "friction_step_velocity", "implicit_friction_velocity", "smooth_friction_velocity",
           "stick_slip_velocity"]

STICK_SLIP_SWEEPS = 100  # equals STICK_SLIP_SWEEPS in _ckernels.c
STICK_SLIP_TOLERANCE = 1e-14  # relative to 1 + max|v_free|; equals _ckernels.c's
NEWTON_ITERATIONS = 100  # smooth law, Newton's iterations; equals _ckernels.c's
ARMIJO = 1e-4  # the line search's sufficient decrease, × the step's directional derivative
# the objective's rounding: a trial within 16 ulps of it is no increase (near the minimum
# the decrease of a full Newton step is below the objective's rounding)
ROUNDING = 16.0 * np.finfo(float).eps


def _log_cosh(y: np.ndarray) -> np.ndarray:
    """ln cosh(y) to full relative precision: ln(1 + 2 sinh²(y/2)) (no cancellation near 0,
    where it is ≈ y²/2), and |y| − ln 2 + ln(1 + e^(−2|y|)) beyond 20 (no overflow)."""
    a = np.abs(y)
    near = np.minimum(a, 20.0)
    return np.where(a < 20.0, np.log1p(2.0 * np.sinh(0.5 * near) ** 2),
                    a - math.log(2.0) + np.log1p(np.exp(-2.0 * a)))


def smooth_friction_velocity(A: np.ndarray, v_free: np.ndarray, bound: np.ndarray,
                             smoothing: float) -> np.ndarray:
    """argmin_w F(w) = ½ (w − v_free)ᵀ A (w − v_free) + Σᵢ boundᵢ·ε·ln cosh(wᵢ/ε), ε =
    ``smoothing`` > 0, for a symmetric positive definite ``A`` and ``bound`` ≥ 0: Newton's
    method from v_free with a backtracking line search (module docstring)."""
    w = np.asarray(v_free, dtype=float)
    b = np.asarray(bound, dtype=float)
    unsolvable = np.full(len(w), np.nan)  # the caller refuses a step that is not finite
    if not (np.isfinite(A).all() and np.isfinite(w).all() and np.isfinite(b).all()):
        return unsolvable
    tolerance = STICK_SLIP_TOLERANCE * (1.0 + float(np.max(np.abs(w), initial=0.0)))

    def objective(x: np.ndarray) -> float:
        r = x - w
        return 0.5 * float(r @ A @ r) + smoothing * float(b @ _log_cosh(x / smoothing))

    x = w.copy()
    value = objective(x)
    for _ in range(NEWTON_ITERATIONS):
        th = np.tanh(x / smoothing)
        gradient = A @ (x - w) + b * th
        hessian = A + np.diag(b / smoothing * (1.0 - th * th))
        try:
            L = np.linalg.cholesky(hessian)
        except np.linalg.LinAlgError:  # not positive definite: A was not
            return unsolvable
        step = -np.linalg.solve(L.T, np.linalg.solve(L, gradient))
        size = float(np.max(np.abs(step), initial=0.0))
        if not size > tolerance:  # converged (or not finite: the caller refuses it)
            return x + step
        slope = float(gradient @ step)  # < 0: a descent direction
        alpha = 1.0
        while True:
            trial = x + alpha * step
            trial_value = objective(trial)
            if trial_value <= value + ARMIJO * alpha * slope + ROUNDING * value:
                break
            alpha *= 0.5
            if not alpha * size > tolerance:  # no descent left at rounding: x is the minimum
                return x
        x, value = trial, trial_value
    return x


def implicit_friction_velocity(A: np.ndarray, v_free: np.ndarray, bound: np.ndarray,
                               smoothing: float = 0.0) -> np.ndarray:
    """argmin_w ½ (w − v_free)ᵀ A (w − v_free) + Σᵢ boundᵢ·φ(wᵢ) for a symmetric positive
    definite ``A`` (n, n) and impulse bounds ``bound`` ≥ 0 (n,), φ(w) = |w| when ``smoothing``
    is 0 (stick–slip, by coordinate descent) or ε·ln cosh(w/ε) with ε = ``smoothing`` > 0 (the
    smooth law, ``smooth_friction_velocity``): the velocity after the Coulomb impulses (see the
    module docstring). A coordinate with bound 0 has no Coulomb friction."""
    if smoothing > 0.0:
        return smooth_friction_velocity(A, v_free, bound, smoothing)
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
            # soft thresholding: stuck when the friction can take all of z
            new = z - t if z > t else (z + t if z < -t else 0.0)
            if abs(new - x[i]) > change:
                change = abs(new - x[i])
            x[i] = new
        if change <= tolerance:
            break
    return np.array(x)


def stick_slip_velocity(A: np.ndarray, v_free: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """``implicit_friction_velocity`` with Coulomb friction set-valued (stick–slip)."""
    return implicit_friction_velocity(A, v_free, bound, 0.0)


def friction_step_velocity(dyn: Dynamics, q: np.ndarray, v: np.ndarray, tau: np.ndarray,
                           dt: float, friction_law: str = "stick_slip") -> np.ndarray:
    """q̇⁺ after one semi-implicit Euler step of ``dt`` under ``tau``, with the joint friction
    of ``dyn.model`` as the module docstring states, Coulomb friction set-valued
    (``friction_law`` "stick_slip") or smooth ("smooth"); a fixed-base or any model, no
    constraints, no external wrench."""
    model = dyn.model
    A = dyn.crba(q) + dt * np.diag(model.damping)
    rhs = tau - model.damping * v - dyn.nonlinear_effects(q, v)
    v_free = v + dt * np.linalg.solve(A, rhs)
    smoothing = COULOMB_SMOOTHING if friction_law == "smooth" else 0.0
    return implicit_friction_velocity(A, v_free, dt * coulomb_bound(model, v), smoothing)
