# SPDX-License-Identifier: Apache-2.0
"""The generalised-momentum observer: the external joint efforts a robot feels, from its joint
states and its model, free of ROS (De Luca & Mattone 2005; Haddadin, De Luca and Albu-Schäffer,
"Robot Collisions: A Survey on Detection, Isolation, and Identification", 2017, §IV).

With p = M(q) q̇ the generalised momentum, the rigid-body dynamics give

    ṗ = τ_m − τ_f(q̇) + Cᵀ(q, q̇) q̇ − g(q) + τ_ext,

τ_m the efforts the drives apply (the measured efforts less the sensor's offset) and τ_f the
model's joint friction. The observer

    r = K (p − ∫ (τ_m + Cᵀ q̇ − g + r) dt − p(0))

obeys ṙ = K (τ_ext − r): each joint's estimate r follows its external effort as a first-order
lag of gain K (1/s), whatever the motion. It needs no acceleration and no inverse of M.

The discrete form, per state k at t_k (Δt = t_k − t_{k−1}), with β = g − Cᵀ q̇ + τ_f (what the
state itself costs):

    e_k = (p_k − p_{k−1} − ∫ τ_m dt + (β_k + β_{k−1}) Δt / 2) / Δt
    r_k = a r_{k−1} + (1 − a) e_k,   a = exp(−K Δt)

e_k is exactly the mean external effort over the interval when the integral of τ_m − β is
(β is integrated by the trapezoid rule: exact for β linear over the interval, O(Δt²) otherwise),
and the exponential update is the exact solution of ṙ = K (e − r) for e constant over it: a step
of external effort that starts at a state gives r = (1 − e^{−K(t − t₀)}) · step at every state
after it. ∫ τ_m dt depends on what the efforts in the states mean (``EFFORT_TIMINGS``; the
friction, a function of the state, is integrated with β whatever they mean):

- ``held``: the effort in state k is the one applied since state k−1 (a drive that reports the
  effort it applies over a period; this package's simulator): τ_m,k Δt;
- ``sampled``: an instantaneous measurement (a joint torque sensor): (τ_m,k + τ_m,k−1) Δt / 2.

With C kernels (a ``Dynamics`` whose ``kernels`` has ``observe``) and no payload, one call into C
does the step's arithmetic (``_ckernels.c``, ``observe``); otherwise numpy does, the same
operations (equal to rounding). The model is the caller's ``Dynamics`` (its ``momentum_terms``:
the armature is in M), a
payload's share (``rb_dynamics.dynamics.PayloadEffort``) and the model's friction
(``dynamics.friction_effort``: viscous, Coulomb and Stribeck, the engine's one law; in C its
``friction_of``) and effort offset. A gap longer than ``max_gap``, a time that goes back or an
estimate that overflows restarts the observer (r = 0, p(0) = the next state's p), and
``problem`` says why. A state whose efforts are NaN or inf is skipped (``skipped`` counts
them): it is never a start, and it restarts the observer once, "efforts not finite", unless
the observer is already waiting for a start.

After a start (the first state, and every restart) the estimate is a transient as much as an
answer: p(0) is taken from one state, and whatever that state got wrong (a velocity a busy
driver sampled late, efforts averaged over another interval) decays as e^{−K t}. ``settled``
is False until ``SETTLING`` time constants of the slowest joint (5/K) of state time have passed
since the start, and ``over`` stays False until then: a detector that watches ``over`` is
disarmed while the estimate settles.
"""

from __future__ import annotations

import math

import numpy as np

from rb_dynamics.dynamics import Dynamics, PayloadEffort, friction_effort, has_friction
from rb_dynamics.model import check_choice

from .law import ControllerError, check_gains

__all__ = ["EFFORT_TIMINGS", "MomentumObserver"]

EFFORT_TIMINGS = ("held", "sampled")
SETTLING = 5.0  # time constants 1/K after a start before the estimate is trusted (e^−5: 0.7 %)
NOT_FINITE = "observer restarted: efforts not finite (an effort is NaN or inf); such states " \
    "are skipped"


class MomentumObserver:
    """r, the external efforts over the model's velocity coordinates (N·m or N), updated by
    ``update`` with each joint state.

    ``gains`` K (1/s, > 0; one value or one per coordinate of v): the bandwidth of each
    joint's estimate. ``estimate`` is r (zeros until the second state after a restart; the
    array is updated in place: copy it to keep it). ``ready`` is False until then. ``max_gap``
    (s): two states further apart restart the observer. ``over`` says whether the last update
    left some |r_j| above ``thresholds`` (over v, inf: not watched; a collision detector's,
    so that it need look only then), once ``settled``: ``settle_time`` (s, SETTLING / min K)
    of state time after the start.
    """

    def __init__(self, dynamics: Dynamics, gains, *, effort_timing: str = "held",
                 max_gap: float = 0.1, friction: bool = True) -> None:
        model = dynamics.model
        check_choice(effort_timing, EFFORT_TIMINGS, "effort_timing", ControllerError)
        n = model.nv
        self.dynamics, self.model = dynamics, model
        self.gains = check_gains(gains, "gains", n)
        if not np.all(self.gains > 0):
            raise ControllerError("gains must be > 0 (1/s)")
        self.held = effort_timing == "held"
        self.max_gap = float(max_gap)
        self.settle_time = SETTLING / float(np.min(self.gains))
        self.friction = friction and has_friction(model)
        # the law's parameters for observe: [damping; friction; stribeck; stribeck_velocity]
        self._losses = np.stack([model.damping, model.friction, model.stribeck_friction,
                                 model.stribeck_velocity]).astype(float) if self.friction \
            else None
        self.offset = np.array(model.effort_offset, dtype=float)
        self.payload: PayloadEffort | None = None
        self.estimate = np.zeros(n)
        self.thresholds = np.full(n, np.inf)
        self.over = False
        self.problem = ""  # why the observer last restarted ("": it has not)
        self.restarts = 0
        self.skipped = 0  # states skipped: their efforts were NaN or inf
        # rows [p, Cᵀq̇, g, τ_f, τ_m] of this state (0–4) and of the previous one (5–9): e Δt is
        # one product of a row of coefficients with them, and nothing is allocated per state
        # but what the kernels return
        self._rows = np.zeros((10, n))
        self._w = np.zeros(n)  # e Δt
        self._t = math.nan  # the previous state's time (NaN: none)
        self._dt = math.nan  # the Δt the coefficients below belong to
        self._coefficients = np.zeros(10)
        self._a, self._b = np.zeros(n), np.zeros(n)  # e^{−KΔt}, (1 − e^{−KΔt})/Δt
        self._ready = False
        self._start = math.nan  # the time of the state the estimate started from

    @property
    def ready(self) -> bool:
        """Whether ``estimate`` has been updated since the last restart."""
        return self._ready

    @property
    def settled(self) -> bool:
        """Whether ``settle_time`` of state time has passed since the estimate started (the
        first state, or the last restart)."""
        return self._ready and self._t - self._start >= self.settle_time

    def reset(self, why: str = "") -> None:
        """Restart: r = 0, and the next state is the new p(0). ``why`` goes to ``problem``."""
        self.estimate[:] = 0.0
        self._t = math.nan
        self._ready = False
        if why:
            self.problem = why
            self.restarts += 1

    def set_payload(self, payload: PayloadEffort | None) -> None:
        """The payload the model carries from the next state on; a different one restarts the
        observer (p jumps with it)."""
        if payload is not self.payload:
            self.payload = payload
            self.reset("the payload changed")

    def update(self, t: float, q: np.ndarray, v: np.ndarray, effort: np.ndarray) -> bool:
        """Take the joint state at time ``t`` (s): positions, velocities and measured efforts
        over the model's coordinates (float64 arrays). True when ``estimate`` was updated;
        False on the first state after a restart, for a state at the same time as the last one
        (ignored), for a state with efforts that are not finite (skipped), and when it
        restarted (``problem`` says why)."""
        dt = t - self._t
        if dt == 0.0:
            return False
        first = not dt > 0.0 or dt > self.max_gap  # the first state (NaN), a gap, time back
        if first and not math.isfinite(np.sum(effort)):
            self.skipped += 1  # never a start (a step checks its efforts as it goes)
            return False
        if first:
            if dt < 0.0:
                self.reset(f"observer restarted: the state's time went back by {-dt:.3g} s")
            elif dt > self.max_gap:
                self.reset(f"observer restarted: {dt:.3g} s between states (max_gap "
                           f"{self.max_gap:g} s)")
        elif not abs(dt - self._dt) <= 1e-9 * dt:  # a new state period (or the first)
            self._period(dt)
        rows = self._rows
        kernels = getattr(self.dynamics, "kernels", None)
        if self.payload is None and kernels is not None and hasattr(kernels, "observe"):
            try:
                code = kernels.observe(q, v, effort, self.offset, self._losses, rows,
                                       None if first else self._coefficients, self._a, self._b,
                                       self.estimate, self.thresholds)
            except ValueError:  # not float64 arrays of the right sizes: the numpy form
                code = self._numpy_step(q, v, effort, first)
        else:
            code = self._numpy_step(q, v, effort, first)
        if code < 0:
            if math.isfinite(np.sum(effort)):
                self._restart_for(q, v)
            else:  # what was applied over the interval is unknown: start again after it
                self.skipped += 1
                self.reset(NOT_FINITE)
            return False
        if first:
            self._start = t
        self._t = t
        self._ready = self._ready or code > 0
        self.over = code == 2 and self.settled
        return code > 0

    def _numpy_step(self, q, v, effort, first: bool) -> int:
        """``observe``'s step with numpy: the same codes (−1 not finite, 0 first, 1, 2 over);
        ValueError from the dynamics for inputs that are not finite gives −1."""
        rows = self._rows
        if self.friction:
            rows[3] = friction_effort(self.model, v)
        try:
            rows[0:3] = self.dynamics.momentum_terms(q, v)
            if self.payload is not None:
                rows[0:3] += self.payload.momentum_terms(q, v)
        except ValueError:
            return -1
        np.subtract(effort, self.offset, out=rows[4])
        over = False
        if not first:
            w = np.dot(self._coefficients, rows, out=self._w)  # e Δt
            r = self.estimate
            r *= self._a
            w *= self._b
            r += w
            if not math.isfinite(r.sum()):
                return -1
            over = bool(np.any(np.abs(r) > self.thresholds))
        rows[5:10] = rows[0:5]
        return 0 if first else 1 + over

    def _restart_for(self, q, v) -> None:
        """A restart naming what was not finite (the efforts were: ``update`` checked them)."""
        try:
            self.dynamics.momentum_terms(q, v)
            why = "the estimate overflowed"
        except ValueError as exc:
            why = str(exc)
        self.reset(f"observer restarted: {why}")

    def _period(self, dt: float) -> None:
        """The coefficients of a state period of ``dt`` s: e Δt = p − p' − ∫ τ_m dt + (β + β')
        Δt/2 (primes: the previous state), β = g − Cᵀ q̇ + τ_f; a and (1 − a)/Δt."""
        self._dt = dt
        h = 0.5 * dt
        held = self.held
        self._coefficients[:] = [1.0, -h, h, h, -dt if held else -h,
                                 -1.0, -h, h, h, 0.0 if held else -h]
        np.exp(-self.gains * dt, out=self._a)
        np.divide(-np.expm1(-self.gains * dt), dt, out=self._b)
