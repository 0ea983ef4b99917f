# SPDX-License-Identifier: Apache-2.0
"""Joint states as recorded: ``JointRecording``, checked when made.

Whatever the source (a rosbag2 read by ``bags``, synthetic data from ``synthetic``), the fit
sees the same thing: stamps (s, strictly increasing), and per identified joint positions and
efforts (velocities when present). ``JointRecording.checked`` refuses what no fit can use with
a ``RecordingError`` naming the cause: missing joints or efforts, NaN or inf (or values beyond
``MAX_MAGNITUDE``, as in a URDF), stamps that go back or repeat, too few samples, a joint whose
efforts are all zero (a driver that fills the field without measuring).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rb_dynamics.model import MAX_MAGNITUDE

__all__ = ["MIN_SAMPLES", "JointRecording", "RecordingError"]

MIN_SAMPLES = 100


class RecordingError(ValueError):
    """Recorded data that cannot be used; the message names the cause (and the source)."""


@dataclass(frozen=True, eq=False)
class JointRecording:
    """``stamps`` (N,) s; ``position``, ``effort`` (N, n) and ``velocity`` (N, n) or None, in
    ``joints`` order; ``source`` names where the data came from (for messages)."""

    joints: tuple[str, ...]
    stamps: np.ndarray
    position: np.ndarray
    effort: np.ndarray
    velocity: np.ndarray | None = None
    source: str = "recording"

    @classmethod
    def checked(cls, joints: Sequence[str], stamps, position, effort, velocity=None,
                source: str = "recording") -> JointRecording:
        """A recording, or a ``RecordingError`` naming what is wrong with it."""
        joints = tuple(joints)
        stamps = np.asarray(stamps, dtype=float)
        n = len(joints)
        arrays = {"position": position, "effort": effort, "velocity": velocity}
        checked = {}
        for name, values in arrays.items():
            if values is None:
                if name == "velocity":
                    checked[name] = None
                    continue
                raise RecordingError(f"{source}: no joint {name}s recorded")
            values = np.asarray(values, dtype=float)
            if values.shape != (len(stamps), n):
                raise RecordingError(f"{source}: {name} has shape {values.shape}, want "
                                     f"({len(stamps)}, {n})")
            with np.errstate(invalid="ignore"):  # NaN compares False: counted as not finite
                bad = ~(np.abs(values) <= MAX_MAGNITUDE)
            if bad.any():
                k, j = np.argwhere(bad)[0]
                raise RecordingError(
                    f"{source}: {name} of joint {joints[j]!r} is {values[k, j]} at "
                    f"t = {stamps[k] - stamps[0]:.4f} s ({int(bad.sum())} values are NaN or "
                    f"inf or beyond ±{MAX_MAGNITUDE:g})")
            checked[name] = values
        if len(stamps) < MIN_SAMPLES:
            raise RecordingError(f"{source}: only {len(stamps)} joint states; a fit needs "
                                 f"at least {MIN_SAMPLES}, and several periods of an "
                                 "excitation")
        if not np.all(np.isfinite(stamps)):
            raise RecordingError(f"{source}: stamps contain NaN or inf")
        steps = np.diff(stamps)
        if np.any(steps <= 0):
            k = int(np.argmax(steps <= 0))
            raise RecordingError(
                f"{source}: stamps are not increasing: sample {k + 1} at "
                f"{stamps[k + 1] - stamps[0]:.6f} s follows {stamps[k] - stamps[0]:.6f} s "
                f"({int(np.sum(steps <= 0))} such steps; header stamps must increase)")
        silent = [joints[j] for j in np.flatnonzero(np.all(checked["effort"] == 0, axis=0))]
        if silent:
            raise RecordingError(
                f"{source}: the efforts of {silent} are zero in all {len(stamps)} joint states: "
                "the driver publishes no measured effort for them (effort: 0 is a placeholder)"
                "; record with a driver that reports the joints' efforts")
        return cls(joints, stamps, checked["position"], checked["effort"],
                   checked["velocity"], source)

    @property
    def duration(self) -> float:
        return float(self.stamps[-1] - self.stamps[0])

    @property
    def rate(self) -> float:
        """The median sample rate, Hz."""
        return float(1.0 / np.median(np.diff(self.stamps)))
