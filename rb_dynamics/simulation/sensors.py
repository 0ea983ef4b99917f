# SPDX-License-Identifier: Apache-2.0
"""What a real arm's driver reports, made from the simulated truth: the joint sensors.

A ``JointSensors`` reading of the simulated joints at the instant ``now`` (simulated seconds):

- **timing**: the driver samples the arm ``u`` s before ``now``, u uniform in [0, ``jitter``]
  (the irregular cycle of a real driver's loop), and what it samples describes the arm
  ``delay`` s before that (the drive's and the bus's latency); the effort lags a further
  ``effort_delay`` s (a current or torque sensor's filter behind the encoders). Positions and
  velocities are interpolated linearly between simulation steps; the effort is the one the
  step containing that instant applied (held over the step, as the simulator holds it).
  A reading knows the instant it describes (``describes``) and the one it was sampled at
  (``sampled``): a node stamps one or the other.
- **effort**: measured = applied + offset + noise, the noise Gaussian with σ = ``effort_noise``
  + ``effort_noise_relative``·|applied| (N·m or N, and a fraction); the offset is the
  model's ``effort_offset`` (a dynamics overlay's ``offset``), a bias of the sensor only: the
  arm moves under the applied effort. Then quantised to ``effort_resolution``.
- **positions**: quantised to ``encoder_resolution`` (rad or m per count). Velocities are
  the simulated ones (a drive's own estimate), delayed like the positions.

Every option at 0 gives the simulated state exactly, at ``now``. ``StateHistory`` keeps the
recent steps a delayed reading needs (``Simulator.recorder`` feeds it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["JointSensors", "Reading", "StateHistory"]


class StateHistory:
    """The simulated joints' recent states: at each recorded instant t_k (s, increasing) the
    positions and velocities and the effort applied from t_k until the next instant.

    Keeps at least ``span`` seconds behind the newest instant once that many are recorded.
    A query before the oldest instant kept answers the oldest state (the arm as first seen).
    """

    def __init__(self, width: int, span: float) -> None:
        self.width, self.span = int(width), float(span)
        self._t = np.empty(0)
        self._rows = np.empty((0, 3 * self.width))  # [q | v | effort] per instant

    def __len__(self) -> int:
        return len(self._t)

    def clear(self) -> None:
        """Forget everything (the simulation's time restarted)."""
        self._t, self._rows = self._t[:0], self._rows[:0]

    def record(self, times, q, v, effort) -> None:
        """Instants ``times`` (k,) with their q, v, effort rows (k, width). An instant equal
        to the newest one replaces it (a new command at the same instant); older ones are
        ignored."""
        times = np.atleast_1d(np.asarray(times, dtype=float))
        rows = np.hstack([np.atleast_2d(q), np.atleast_2d(v), np.atleast_2d(effort)])
        if len(self._t):
            newest = self._t[-1]
            keep = times >= newest
            times, rows = times[keep], rows[keep]
            if len(times) and times[0] == newest:
                self._t, self._rows = self._t[:-1], self._rows[:-1]
        self._t = np.concatenate([self._t, times])
        self._rows = np.concatenate([self._rows, rows])
        old = np.searchsorted(self._t, self._t[-1] - self.span, side="right") - 1 \
            if len(self._t) else 0
        if old > len(self._t) // 2:  # drop in bulk: amortised O(1) per instant
            self._t, self._rows = self._t[old:], self._rows[old:]

    def state(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(q, v) at ``t``, linear between the recorded instants around it."""
        if not len(self._t):
            raise ValueError("no state recorded yet")
        k = int(np.searchsorted(self._t, t, side="right")) - 1
        w = self.width
        if k < 0 or k >= len(self._t) - 1:
            row = self._rows[max(k, 0)]
            return row[:w].copy(), row[w:2 * w].copy()
        t0, t1 = self._t[k], self._t[k + 1]
        s = (t - t0) / (t1 - t0)
        row = self._rows[k] + s * (self._rows[k + 1] - self._rows[k])
        return row[:w], row[w:2 * w]

    def effort(self, t: float) -> np.ndarray:
        """The effort applied at ``t``: the one of the newest instant at or before it."""
        if not len(self._t):
            raise ValueError("no state recorded yet")
        k = max(int(np.searchsorted(self._t, t, side="right")) - 1, 0)
        return self._rows[k, 2 * self.width:].copy()


@dataclass(frozen=True)
class Reading:
    """One reading of the joints: ``sampled`` is when the driver took it, ``describes`` the
    instant its positions and velocities describe (s, simulated); values in joint order."""

    sampled: float
    describes: float
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray


def _quantised(x: np.ndarray, step: float) -> np.ndarray:
    return np.round(x / step) * step if step > 0 else x


@dataclass
class JointSensors:
    """The sensors of ``width`` joints (the module docstring); every option ≥ 0, 0 = off.

    ``effort_offset`` (width,) N·m or N. Times in seconds, noise σ in N·m or N (absolute)
    and a fraction of |effort| (relative), resolutions in rad or m per count and N·m or N.
    Raises ValueError naming an option that is negative or not finite.
    """

    effort_offset: np.ndarray
    effort_noise: float = 0.0
    effort_noise_relative: float = 0.0
    effort_resolution: float = 0.0
    encoder_resolution: float = 0.0
    delay: float = 0.0
    effort_delay: float = 0.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        self.effort_offset = np.asarray(self.effort_offset, dtype=float)
        for name in ("effort_noise", "effort_noise_relative", "effort_resolution",
                     "encoder_resolution", "delay", "effort_delay", "jitter"):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and ≥ 0, got {value}")
            setattr(self, name, value)
        self._last_sampled = -math.inf

    @property
    def span(self) -> float:
        """Seconds of history a reading may reach back."""
        return self.jitter + self.delay + self.effort_delay

    def restart(self) -> None:
        """The simulated time restarted: readings may go back to an earlier instant."""
        self._last_sampled = -math.inf

    def read(self, history: StateHistory, now: float, rng: np.random.Generator) -> Reading:
        """The reading a driver publishes at ``now`` from ``history`` (which holds ``now``).

        Successive readings never go back in time: a sample drawn before the previous one
        (a jitter longer than the period between readings) is taken at the previous one's
        instant.
        """
        sampled = now - rng.uniform(0.0, self.jitter) if self.jitter > 0 else now
        sampled = max(sampled, self._last_sampled)
        self._last_sampled = sampled
        describes = sampled - self.delay
        q, v = history.state(describes)
        applied = history.effort(describes - self.effort_delay)
        effort = applied + self.effort_offset
        sigma = self.effort_noise + self.effort_noise_relative * np.abs(applied)
        if np.any(sigma > 0):
            effort = effort + sigma * rng.standard_normal(len(effort))
        return Reading(sampled, describes, _quantised(q, self.encoder_resolution), v,
                       _quantised(effort, self.effort_resolution))
