# SPDX-License-Identifier: Apache-2.0
"""Joint states at rest, for payload identification: recorded as they come (``RestingSamples``,
a ring buffer in model order) and grouped into the poses the arm was held at
(``rest_poses``). Plain numpy: the states are read through their fields.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from rb_dynamics.model import Model

__all__ = ["END_MARGIN", "MAX_REST_GAP", "POSE_TOLERANCE", "RESTING_CAPACITY", "RestingSamples",
           "rest_poses"]

RESTING_CAPACITY = 60_000  # resting joint states kept: a minute at 1 kHz, ~8 MB for 7 joints
POSE_TOLERANCE = 2e-3  # rad or m: samples farther than this from a pose's first are a new pose
MAX_REST_GAP = 0.5  # s without a resting sample: the arm moved (or the stream stopped)
END_MARGIN = 0.2  # s dropped at the end of a pose: the next move is starting


class RestingSamples:
    """The latest joint states at rest, in model order, for identification.

    ``record`` runs on the control loop thread after the command is out: a velocity check per
    state, and for a resting one a copy into arrays preallocated by ``reset`` (called when a
    model is installed). ``clock`` gives the time in seconds a state is recorded at.
    Everything tied to a model is replaced whole, never edited in place, so a model change
    between two states cannot mix two layouts.
    """

    def __init__(self, rest_velocity: float, clock: Callable[[], float],
                 capacity: int = RESTING_CAPACITY) -> None:
        self.rest_velocity, self.clock, self.capacity = rest_velocity, clock, capacity
        self._lock = threading.Lock()
        self._buffer: tuple | None = None  # (model, t, q, τ)
        self._layout: tuple | None = None  # (model, message names, columns, q index, v index)
        self.written = 0  # resting states recorded for the current model
        self.without_effort = 0  # joint states that carried no efforts

    def reset(self, model: Model) -> None:
        """Start recording for ``model`` (what was recorded for another model is dropped)."""
        buffer = (model, np.zeros(self.capacity),
                  np.tile(model.neutral_configuration(), (self.capacity, 1)),
                  np.zeros((self.capacity, model.nv)))
        with self._lock:
            self._buffer, self.written = buffer, 0

    def rebind(self, model: Model) -> None:
        """Go on recording for ``model``, the current model's robot with other joint dynamics
        (a dynamics overlay: the same joints and coordinates), keeping what was recorded:
        the states at rest do not depend on them. A model of other joints resets instead."""
        with self._lock:
            buffer = self._buffer
            if buffer is None or buffer[0].joint_names != model.joint_names:
                same = False
            else:
                self._buffer, same = (model, *buffer[1:]), True
        if not same:
            self.reset(model)

    @staticmethod
    def _map(model: Model, names: list[str]) -> tuple | None:
        """Where the model's joints are in a message (None: one is missing)."""
        index = {n: k for k, n in enumerate(names)}
        if any(n not in index for n in model.joint_names):
            return None
        return (model, list(names), np.array([index[n] for n in model.joint_names], dtype=int),
                np.array(model.joint_q_index, dtype=int), np.array(model.joint_v_index,
                                                                   dtype=int))

    def record(self, msg: Any, model: Model | None) -> None:
        """Keep ``msg`` (anything with ``name``, ``position``, ``velocity``, ``effort``: a
        sensor_msgs/JointState) if it is at rest, carries efforts and names every joint of
        ``model``, the model of the controller that took it (None: no controller)."""
        n = len(msg.name)
        if model is None or len(msg.velocity) != n or len(msg.position) != n:
            return  # not a state the controller took
        if len(msg.effort) != n:
            self.without_effort += 1
            return
        if n and max(map(abs, msg.velocity)) >= self.rest_velocity:
            return
        buffer = self._buffer
        if buffer is None or buffer[0] is not model:
            return
        layout = self._layout
        if layout is None or layout[0] is not model or layout[1] != msg.name:
            layout = self._layout = self._map(model, msg.name)
            if layout is None:
                return
        _, _, columns, q_index, v_index = layout
        now = self.clock()
        position = np.asarray(msg.position)[columns]
        effort = np.asarray(msg.effort)[columns]
        with self._lock:
            if self._buffer is not buffer:
                return
            slot = self.written % self.capacity
            buffer[1][slot] = now
            buffer[2][slot, q_index] = position
            buffer[3][slot, v_index] = effort
            self.written += 1

    def take(self, model: Model, since: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(t, q, τ) of the resting states recorded at or after ``since``, oldest first."""
        with self._lock:
            buffer = self._buffer
            if buffer is None or buffer[0] is not model or self.written == 0:
                return np.zeros(0), np.zeros((0, model.nq)), np.zeros((0, model.nv))
            count = min(self.written, self.capacity)
            order = np.arange(self.written - count, self.written) % self.capacity
            t, q, tau = buffer[1][order], buffer[2][order], buffer[3][order]
        keep = t >= since
        return t[keep], q[keep], tau[keep]

    @property
    def stored(self) -> int:
        """Resting states held now (at most ``capacity``)."""
        return min(self.written, self.capacity)


def rest_poses(t: np.ndarray, q: np.ndarray, tau: np.ndarray, min_rest: float,
               tolerance: float = POSE_TOLERANCE, max_gap: float = MAX_REST_GAP
               ) -> tuple[np.ndarray, np.ndarray, int]:
    """(poses (N, nq), mean efforts (N, nv), samples used) from time-ordered resting samples.

    A pose is a run of samples without a gap over ``max_gap`` seconds whose positions stay
    within ``tolerance`` of its first; held at least ``min_rest`` seconds, it counts with the
    mean of its samples from half-way to ``END_MARGIN`` before its end. Both ends are motion
    that the velocity threshold does not see: the first half settling (the arm still
    decelerating), the end the next move starting (slow, but already accelerating: M q̈ ≠ 0).
    """
    poses, efforts, used = [], [], 0
    start = 0
    breaks = set((np.flatnonzero(np.diff(t) > max_gap) + 1).tolist()) | {len(t)}
    while start < len(t):
        stop = min(b for b in breaks if b > start)
        moved = np.flatnonzero(np.abs(q[start:stop] - q[start]).max(axis=1) > tolerance)
        end = start + int(moved[0]) if moved.size else stop
        if t[end - 1] - t[start] >= min_rest:
            run = t[start:end]
            settled = np.flatnonzero((run >= 0.5 * (run[0] + run[-1]))
                                     & (run <= run[-1] - END_MARGIN)) + start
            if settled.size:
                poses.append(q[settled].mean(axis=0))
                efforts.append(tau[settled].mean(axis=0))
                used += len(settled)
        start = end
    if not poses:
        return np.zeros((0, q.shape[1])), np.zeros((0, tau.shape[1])), 0
    return np.array(poses), np.array(efforts), used
