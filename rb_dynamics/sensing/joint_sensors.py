# SPDX-License-Identifier: Apache-2.0
"""What a real arm's driver reports, made from the true state: the joint sensors.

A ``JointSensors`` reading of the joints at the instant ``now`` (simulated seconds):

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
  arm moves under the applied effort. A fraction ``outliers`` of the values is off by a
  further 5–10 σ either way (a glitch of the bus). Then quantised to ``effort_resolution``.
- **positions**: quantised to ``encoder_resolution`` (rad or m per count). Velocities are
  the simulated ones (a drive's own estimate), delayed like the positions.

Every option at 0 gives the true state exactly, at ``now``. ``StateHistory`` keeps the
recent steps a delayed reading needs (``Simulator.recorder`` feeds it). ``measure`` is the
values' part alone, for readings whose instants the caller chooses (a synthetic recording's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["JointSensors", "Reading", "StateHistory"]


class StateHistory:
    """The simulated joints' recent states: at each recorded instant t_k (s, increasing) the
    positions and velocities and the effort applied from t_k until the next instant.

    Keeps at least ``span`` seconds behind the newest instant once that many are recorded, in
    arrays that grow only while that span needs more rows (a record costs a few array writes).
    A query before the oldest instant kept answers the oldest state (the arm as first seen).
    """

    def __init__(self, width: int, span: float, capacity: int = 64) -> None:
        self.width, self.span = int(width), float(span)
        self._t = np.empty(capacity)
        self._rows = np.empty((capacity, 3 * self.width))  # [q | v | effort] per instant
        self._first = self._end = 0  # the rows in use: [_first, _end)

    def __len__(self) -> int:
        return self._end - self._first

    def clear(self) -> None:
        """Forget everything (the simulation's time restarted)."""
        self._first = self._end = 0

    def record(self, times, q, v, effort) -> None:
        """Instants ``times`` (k,) with their q, v, effort rows (k, width). An instant equal
        to the newest one replaces it (a new command at the same instant); older ones are
        ignored."""
        times = np.atleast_1d(np.asarray(times, dtype=float))
        w = self.width
        if self._end > self._first:
            newest = self._t[self._end - 1]
            keep = times >= newest
            if not keep.all():
                times, q, v, effort = (times[keep], np.atleast_2d(q)[keep],
                                       np.atleast_2d(v)[keep], np.atleast_2d(effort)[keep])
            if len(times) and times[0] == newest:
                self._end -= 1
        k = len(times)
        if not k:
            return
        self._make_room(k)
        end = self._end
        self._t[end:end + k] = times
        rows = self._rows[end:end + k]
        rows[:, :w], rows[:, w:2 * w], rows[:, 2 * w:] = q, v, effort
        self._end = end + k

    def _make_room(self, k: int) -> None:
        """Room for ``k`` more rows: rows older than ``span`` dropped, the rest moved to the
        front, the arrays doubled when that is not enough."""
        if self._end + k <= len(self._t):
            return
        t = self._t[self._first:self._end]
        if len(t):  # keep the newest instant at or before newest − span, and all after
            self._first += max(int(np.searchsorted(t, t[-1] - self.span, side="right")) - 1,
                               0)
        n = self._end - self._first
        size = len(self._t)
        while n + k > size // 2:
            size *= 2
        if size != len(self._t):
            t, rows = np.empty(size), np.empty((size, 3 * self.width))
        else:
            t, rows = self._t, self._rows
        t[:n] = self._t[self._first:self._end]
        rows[:n] = self._rows[self._first:self._end]
        self._t, self._rows, self._first, self._end = t, rows, 0, n

    def _index(self, t: float) -> int:
        """The newest row at or before ``t`` (the oldest when none is)."""
        if self._end == self._first:
            raise ValueError("no state recorded yet")
        k = int(np.searchsorted(self._t[self._first:self._end], t, side="right")) - 1
        return self._first + max(k, 0)

    def state(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(q, v) at ``t``, linear between the recorded instants around it."""
        k, w = self._index(t), self.width
        if k + 1 >= self._end or t <= self._t[k]:
            row = self._rows[k]
            return row[:w].copy(), row[w:2 * w].copy()
        t0, t1 = self._t[k], self._t[k + 1]
        row = self._rows[k, :2 * w]
        row = row + (t - t0) / (t1 - t0) * (self._rows[k + 1, :2 * w] - row)
        return row[:w], row[w:]

    def effort(self, t: float) -> np.ndarray:
        """The effort applied at ``t``: the one of the newest instant at or before it."""
        return self._rows[self._index(t), 2 * self.width:].copy()


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
    ``outliers`` is a fraction (at most 1). Raises ValueError naming an option that is
    negative or not finite, or ``outliers`` above 1.
    """

    effort_offset: np.ndarray
    effort_noise: float = 0.0
    effort_noise_relative: float = 0.0
    effort_resolution: float = 0.0
    encoder_resolution: float = 0.0
    delay: float = 0.0
    effort_delay: float = 0.0
    jitter: float = 0.0
    outliers: float = 0.0

    def __post_init__(self) -> None:
        self.effort_offset = np.asarray(self.effort_offset, dtype=float)
        for name in ("effort_noise", "effort_noise_relative", "effort_resolution",
                     "encoder_resolution", "delay", "effort_delay", "jitter", "outliers"):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and ≥ 0, got {value}")
            setattr(self, name, value)
        if self.outliers > 1:
            raise ValueError(f"outliers is a fraction, at most 1, got {self.outliers}")
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
        return self._reading(sampled, describes, q, v,
                             history.effort(describes - self.effort_delay), rng)

    def read_current(self, now: float, q: np.ndarray, v: np.ndarray, effort: np.ndarray,
                     rng: np.random.Generator) -> Reading:
        """The reading of the state at ``now`` itself: for sensors without delays or jitter
        (``span`` 0), which need no history."""
        return self._reading(now, now, q, v, effort, rng)

    def _reading(self, sampled: float, describes: float, q: np.ndarray, v: np.ndarray,
                 applied: np.ndarray, rng: np.random.Generator) -> Reading:
        position, effort, _ = self.measure(q, applied, rng)
        return Reading(sampled, describes, position, v, effort)

    def measure(self, q: np.ndarray, applied: np.ndarray, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions, efforts, σ) measured of the true positions ``q`` and applied efforts
        ``applied``, one reading (width,) or many (N, width): offset, noise, outliers and
        quantisation as the module docstring says, σ each effort's noise (0 when off).

        Draws from ``rng`` only when there is noise: N(0, 1) for every effort, then (with
        ``outliers``) which are outliers, their signs and their sizes, in that order.
        """
        effort = applied + self.effort_offset
        if self.effort_noise > 0 or self.effort_noise_relative > 0:
            sigma = self.effort_noise + self.effort_noise_relative * np.abs(applied)
            effort += sigma * rng.standard_normal(effort.shape)
            if self.outliers:
                shape = effort.shape
                hit = rng.random(shape) < self.outliers
                effort += (hit * rng.choice([-1.0, 1.0], shape) * rng.uniform(5, 10, shape)
                           * sigma)
        else:
            sigma = np.zeros(effort.shape)
        return (_quantised(q, self.encoder_resolution), _quantised(effort, self.effort_resolution),
                sigma)
