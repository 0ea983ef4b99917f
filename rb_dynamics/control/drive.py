# SPDX-License-Identifier: Apache-2.0
"""What the drive already does: the conventions of a torque-controlled arm's driver.

Some drives add their own model's gravity (and friction) compensation to the effort they are
commanded (Franka, UR e-Series in torque control, KUKA LBR FRI in torque mode); others apply
the command as it is (Kinova Gen3 low level, OpenArm). Some report an effort that leaves
gravity (and friction) out (UR's joint torques). ``DriveConventions`` says which, and turns
both ways between the joint's whole effort and what goes over the wire:

- a command: the law's effort τ (what the joint must get) minus what the drive adds itself
  (``command``);
- a reported effort: plus what the drive leaves out of it (``joint_effort``), which is what
  the momentum observer and the payload's identification read.

``rest_mismatch`` is the start-up plausibility check: at rest, the reported efforts against
g(q), a mismatch that a wrong setting explains said naming the setting. docs/drives.md lists
each vendor's settings and where they come from.

Vectors are over the model's velocity coordinates (N·m or N).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DRIVE_SETTINGS", "DriveConventions", "rest_mismatch"]

# the settings, as the parameters name them (drive.<name>)
DRIVE_SETTINGS = ("compensates_gravity", "compensates_friction", "effort_includes_gravity",
                  "effort_includes_friction")

# the start-up check: joints whose |g| is at least this fraction of the largest |g| are
# compared (a joint with little gravity on it tells nothing), when the largest |g| is at
# least REST_MIN_GRAVITY (N·m or N); the reported efforts fit as ratio × g(q), the ratio read
# as 0 (gravity left out), 1 (gravity in) or 2 (gravity counted twice) within RATIO_BAND
REST_GRAVITY_FRACTION = 0.3
REST_MIN_GRAVITY = 1.0
RATIO_BAND = 0.35


@dataclass(frozen=True)
class DriveConventions:
    """What the drive adds to a command itself and what its reported effort contains.

    - ``compensates_gravity``: the drive adds its model's g(q) to every command (a command of
      zero holds the arm), so the command is the law's effort minus g(q);
    - ``compensates_friction``: the drive adds its own friction compensation, so the law adds
      none;
    - ``effort_includes_gravity`` / ``effort_includes_friction``: the reported effort is the
      joint's whole effort (true), or leaves gravity / friction out (false).

    The defaults are a drive that applies the command as it is and reports the joint's whole
    effort.
    """

    compensates_gravity: bool = False
    compensates_friction: bool = False
    effort_includes_gravity: bool = True
    effort_includes_friction: bool = True

    @property
    def plain(self) -> bool:
        """The defaults: nothing added, nothing left out."""
        return self == DriveConventions()

    def command(self, tau: np.ndarray, gravity: np.ndarray) -> np.ndarray:
        """The command that makes the joints get ``tau``: ``tau`` − g(q) (``gravity``) on a
        drive that compensates gravity, else ``tau`` itself."""
        return tau - gravity if self.compensates_gravity else tau

    def joint_effort(self, reported: np.ndarray, gravity: np.ndarray,
                     friction: np.ndarray | None = None) -> np.ndarray:
        """The joint's whole effort from a ``reported`` one: plus g(q) (``gravity``) and the
        friction effort f(q̇) (``friction``; None: not known, taken as 0) where the drive
        leaves them out."""
        total = reported
        if not self.effort_includes_gravity:
            total = total + gravity
        if not self.effort_includes_friction and friction is not None:
            total = total + friction
        return total


def rest_mismatch(conventions: DriveConventions, reported: np.ndarray,
                  gravity: np.ndarray) -> str:
    """The start-up plausibility check, "" when the efforts fit the settings or tell nothing.

    At rest, before the node commands, the reported effort is the joint's share of g(q) if the
    drive reports gravity (whoever holds the arm: the drive's own compensation, its position
    hold, or a brake behind a link-side torque sensor) and about 0 if it leaves gravity out.
    The reported efforts are fitted as r·g on the joints with much gravity on them: r ≈ 0
    where ``effort_includes_gravity`` is true, r ≈ 1 where it is false, or r ≈ 2 (gravity in
    twice: a driver that adds its gravity compensation to a torque that already holds it) is
    a mismatch, said naming the
    setting. Efforts all exactly zero (a driver that fills the field without measuring) and
    arms with little gravity on them (g below REST_MIN_GRAVITY) tell nothing.
    """
    reported = np.asarray(reported, dtype=float)
    gravity = np.asarray(gravity, dtype=float)
    largest = float(np.abs(gravity).max(initial=0.0))
    if largest < REST_MIN_GRAVITY or not np.any(reported) or not np.all(np.isfinite(reported)):
        return ""
    loaded = np.abs(gravity) >= REST_GRAVITY_FRACTION * largest
    g, e = gravity[loaded], reported[loaded]
    ratio = float(g @ e / (g @ g))
    # the fit must explain the efforts: a residual as large as g itself is no verdict
    if np.abs(e - ratio * g).max() > 0.5 * largest:
        return ""
    shown = (f"reported efforts ≈ {ratio:.2f} × g(q) at rest (|g| up to {largest:.3g} on the "
             "loaded joints)")
    if abs(ratio) < RATIO_BAND and conventions.effort_includes_gravity:
        return (f"{shown}: the drive reports efforts without gravity, or holds the arm itself; "
                "set drive.effort_includes_gravity false (and drive.compensates_gravity true "
                "if the drive adds gravity to its commands, as Franka, UR e-Series torque "
                "control and KUKA FRI torque mode do: docs/drives.md), or the arm rests on "
                "its brakes")
    if abs(ratio - 1.0) < RATIO_BAND and not conventions.effort_includes_gravity:
        return (f"{shown}: the drive reports gravity in its efforts; set "
                "drive.effort_includes_gravity true (docs/drives.md)")
    if abs(ratio - 2.0) < RATIO_BAND:
        return (f"{shown}: gravity is counted twice in them; check drive.compensates_gravity "
                "and drive.effort_includes_gravity against the driver's documentation "
                "(docs/drives.md)")
    return ""
