# SPDX-License-Identifier: Apache-2.0
"""Joint velocities from joint positions alone, for drivers that publish no velocities.

``VelocityFromPositions`` takes the difference quotient (q_k − q_{k−1}) / (t_k − t_{k−1}) over
the states' times and passes it through a first-order low-pass of cut-off f_c:
v_k = v_{k−1} + α (quotient − v_{k−1}), α = 1 − exp(−2π f_c Δt). Its delay behind the true
velocity is about half a state period (the quotient is the mean over the last interval) plus the
filter's group delay 1/(2π f_c) at low frequencies: at f_c = 50 Hz and 1 kHz states, about
3.7 ms. A ramp (constant velocity) is reproduced exactly: the filter starts from the first
quotient. It starts again (no estimate for that state) after a gap longer than ``max_gap`` or a
time that does not increase (that one refused with its reason); a new model gets a new
estimator. ``MissingVelocity`` is the
choice a controller makes for states without velocities: refuse them, or estimate q̇.
"""

from __future__ import annotations

import math

import numpy as np

from rb_dynamics.model import check_choice, check_positive

from .law import ControllerError

__all__ = ["MISSING_VELOCITY", "MissingVelocity", "VelocityFromPositions"]

MISSING_VELOCITY = ("refuse", "differentiate")  # what a state without velocities gets


class VelocityFromPositions:
    """q̇ (units of q per second) from successive positions; ``cutoff`` in Hz (> 0)."""

    def __init__(self, cutoff: float) -> None:
        self.cutoff = check_positive(cutoff, "velocity_cutoff")
        self.reset()

    def reset(self) -> None:
        """Forget the history: the next state gives no estimate."""
        self._q: np.ndarray | None = None
        self._t = -math.inf
        self._v: np.ndarray | None = None

    def delay(self, period: float) -> float:
        """The estimate's delay (s) behind the true velocity for states every ``period`` s."""
        return 1.0 / (2.0 * math.pi * self.cutoff) + 0.5 * period

    def update(self, q: np.ndarray, t: float, max_gap: float) -> np.ndarray | None:
        """The filtered velocity after the positions ``q`` at time ``t`` (s, on any origin:
        a caller keeps the differences exact by giving ``t`` from a recent instant, as a float
        of epoch seconds resolves only 0.24 µs, 2.4e-4 of a 1 ms period); None for the
        first state or after a gap longer than ``max_gap`` s. A ``t`` that does not increase
        (a driver repeating or resetting its stamps) starts the estimate again too, and raises
        ``ControllerError`` saying so: without it a node would refuse such states silently."""
        dt = t - self._t
        if self._q is None or not 0.0 < dt <= max_gap or len(q) != len(self._q):
            restarted = self._q is not None and not dt > 0.0
            self._q, self._t, self._v = np.array(q, dtype=float), t, None
            if restarted:
                raise ControllerError(
                    f"joint_states: the stamp is not after the previous state's ({dt:+.9f} s "
                    "from it); no velocity from the positions until stamps increase")
            return None
        quotient = (q - self._q) / dt
        if self._v is None:
            self._v = quotient
        else:
            alpha = 1.0 - math.exp(-2.0 * math.pi * self.cutoff * dt)
            self._v = self._v + alpha * (quotient - self._v)
        self._q, self._t = np.array(q, dtype=float), t
        return self._v.copy()


class MissingVelocity:
    """What a joint state without velocities gets: ``choice`` "refuse" (ControllerError: the
    damping, friction, Coriolis and D terms need q̇) or "differentiate" (``estimator``, a
    low-pass at ``cutoff`` Hz)."""

    def __init__(self, choice: str = "refuse", cutoff: float = 50.0) -> None:
        self.choice = self.check(choice)
        self.estimator = VelocityFromPositions(cutoff)

    @staticmethod
    def check(choice: str) -> str:
        """``choice`` if it is one of ``MISSING_VELOCITY``, else ControllerError."""
        return check_choice(choice, MISSING_VELOCITY, "missing_velocity", ControllerError)

    def velocity(self, q: np.ndarray, t: float, max_gap: float) -> np.ndarray | None:
        """q̇ for the positions ``q`` of a state without velocities at ``t`` (s); None: the
        estimate needs one more state; ControllerError when such states are refused."""
        if self.choice == "refuse":
            raise ControllerError(
                "joint_states: no velocities (positions only); q̇ is needed by the damping, "
                "friction, Coriolis and D terms (set missing_velocity: differentiate to "
                "estimate it from the positions)")
        return self.estimator.update(q, t, max_gap)
