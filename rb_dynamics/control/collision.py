# SPDX-License-Identifier: Apache-2.0
"""Collision detection on the momentum observer's estimate, free of ROS (Haddadin et al. 2017,
§IV-C: thresholds on the external-torque estimate).

A joint is in collision when |r_j| > threshold_j, with

    threshold_j = absolute_j + factor · σ_j,

``absolute`` a per-joint floor (N·m or N) and σ_j the model's effort uncertainty on that joint
(N·m or N: how far the model's efforts may be from the robot's, 1σ; a user sets it from the
arm's identification, e.g. the residual of a fit). A detection is latched (``latched``) until
``reset``; with ``latch=False`` (no reaction) the detector re-arms by itself once every joint is
back under its threshold, so that each new contact gives one event.

``REACTIONS`` are what a controller does on a detection (the control node applies them:
docs/contact.md):

- ``none``: nothing; the event is reported;
- ``hold``: the reference is dropped and the measured position at detection is held (reference
  modes; in gravity compensation, as ``compliant``);
- ``compliant``: gravity compensation only (the model's and the payload's gravity at the measured
  pose, every state), the arm yields to the contact;
- ``stop``: no more commands; the controller's stop command goes out once.

A trajectory being followed ends (aborted) with every reaction but ``none``; the reaction holds
until ``reset``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rb_dynamics.model import check_choice

from .law import ControllerError, check_gains

__all__ = ["REACTIONS", "Collision", "CollisionDetector"]

REACTIONS = ("none", "hold", "compliant", "stop")


@dataclass(frozen=True)
class Collision:
    """One detection: at ``time`` (s), the ``joints`` whose |estimate| passed their threshold,
    their ``efforts`` (the estimates, N·m or N) and ``thresholds``."""

    time: float
    joints: tuple[str, ...]
    efforts: np.ndarray
    thresholds: np.ndarray

    def describe(self) -> str:
        """One line: the joints, estimates and thresholds."""
        return "collision on " + ", ".join(
            f"{j} ({e:+.3g} beyond ±{t:.3g})"
            for j, e, t in zip(self.joints, self.efforts, self.thresholds))


class CollisionDetector:
    """Thresholds on the estimate of the joints ``joints`` at coordinates ``index`` of the
    observer's vector (``absolute``, ``uncertainty``: one value or one per joint, ≥ 0;
    ``factor`` ≥ 0). ``ControllerError`` for bad values.

    The observer estimates every coordinate of the model; ``joints`` may be fewer (the arm of
    a robot with a gripper): the thresholds, ``Collision``'s arrays and ``check``'s reading
    are per joint of ``joints``, the other coordinates are not watched."""

    def __init__(self, joints: Sequence[str], index: np.ndarray, absolute, uncertainty=0.0,
                 factor: float = 3.0, latch: bool = True) -> None:
        self.joints = list(joints)
        self.index = np.asarray(index, dtype=int)
        n = len(self.joints)
        factor = float(check_gains(factor, "factor")[0])
        self.thresholds = check_gains(absolute, "thresholds", n) \
            + factor * check_gains(uncertainty, "effort_uncertainty", n)
        if not np.all(self.thresholds > 0):
            raise ControllerError("every collision threshold must be > 0 (thresholds + factor "
                                  "· effort_uncertainty)")
        self.latch = latch
        self.latched: Collision | None = None  # the detection in force, until reset
        self._armed = True
        self._every = False  # ``index`` is every coordinate of the estimate, in order (watch)
        self._abs, self._over = np.zeros(n), np.zeros(n, dtype=bool)

    @staticmethod
    def check_reaction(reaction: str) -> str:
        """``reaction`` if it is one of ``REACTIONS``, else ControllerError."""
        check_choice(reaction, REACTIONS, "reaction", ControllerError)
        return reaction

    def watch(self, observer) -> None:
        """Give ``observer`` (a ``MomentumObserver``) these thresholds, so that it flags the
        states that pass one (its ``over``): ``needed`` tells when ``check`` must look."""
        observer.thresholds[:] = np.inf
        observer.thresholds[self.index] = self.thresholds
        self._every = np.array_equal(self.index, np.arange(len(observer.estimate)))

    def needed(self, over: bool) -> bool:
        """Whether ``check`` has anything to do after a state whose estimate passed a
        threshold (``over``) or not: when one did, or to re-arm (``latch`` off)."""
        return over or (not self._armed and not self.latch)

    def check(self, t: float, estimate: np.ndarray) -> Collision | None:
        """A new ``Collision`` when a joint passes its threshold at time ``t`` while armed;
        None otherwise (nothing over, already latched, or not re-armed). ``estimate``: the
        observer's, over the model's coordinates."""
        values = estimate if self._every else estimate[self.index]
        np.abs(values, out=self._abs)
        over = np.greater(self._abs, self.thresholds, out=self._over)
        if not over.any():
            if not self.latch:
                self._armed = True
            return None
        if not self._armed:
            return None
        self._armed = False
        hit = np.flatnonzero(over)
        collision = Collision(t, tuple(self.joints[k] for k in hit), values[hit].copy(),
                              self.thresholds[hit].copy())
        if self.latch:
            self.latched = collision
        return collision

    def reset(self) -> Collision | None:
        """Re-arm; the latched detection (None if there was none)."""
        latched, self.latched = self.latched, None
        self._armed = True
        return latched
