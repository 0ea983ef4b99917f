# SPDX-License-Identifier: Apache-2.0
"""The drive tests against a simulator that is not ours: MuJoCo behind a small driver node
(test/mujoco_driver.py, lock-step on its own step), the control node on its /clock.

- MuJoCo's body ``gravcomp`` plays a drive that compensates gravity (and leaves it out of the
  reported efforts): with the matching ``drive.*`` settings the node holds the bundled arm in
  gravity compensation and follows a goal in computed torque; with the defaults it says what is
  wrong on /diagnostics, naming ``drive.effort_includes_gravity``.
- The xArm7's vendor URDF (``<dynamics damping>`` 10/5/2 N·m·s/rad) on an arm whose true viscous
  friction is 0.8–2.8: gravity compensation with the default ``friction_compensation`` stays
  where it is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from mujoco_loop import MujocoLoop
from pin_oracle import robots_dir

from rb_dynamics import DEFAULT_URDF

pytest.importorskip("mujoco")

HOME = [0.0, -1.2, 1.2, -1.0, -1.57, 0.0]
XARM7 = Path(robots_dir(), "xarm_description/urdf/xarm7.urdf")
XARM7_TRUE_VISCOUS = [2.8, 2.8, 1.5, 1.5, 0.8, 0.8, 0.8]
GRAVCOMP_SETTINGS = {"drive.compensates_gravity": True, "drive.effort_includes_gravity": False}


def drive_status(loop: MujocoLoop):
    found = [s for _, s in loop.control.statuses()
             if any(v.key == "drive check" for v in s.values)]
    return found[-1] if found else None


def test_mujoco_gravcomp_holds_and_tracks_with_the_matching_settings(tmp_path):
    loop = MujocoLoop(tmp_path, DEFAULT_URDF, HOME,
                      {"gravcomp": True, "effort_includes_gravity": False,
                       "damping": [0.5], "effort_noise": 0.02},
                      {"mode": "gravity_compensation", "kp": [400.0], "kd": [40.0],
                       **GRAVCOMP_SETTINGS})
    try:
        loop.control.statuses()
        loop.run_for(0.3)
        drift = loop.drift(2.0)
        assert drift.max() <= 0.01, (drift, loop.logs())
        assert loop.control.set_parameters(mode="computed_torque").successful
        # the wrist's last two joints stay: on their light links the URDF's Coulomb friction,
        # which computed torque compensates along the reference and MuJoCo's arm does not
        # have, would leave them behind (a friction mismatch, not the drive's business)
        goal = np.array(HOME) + np.array([0.3, 0.2, -0.2, 0.3, 0.0, 0.0])
        loop.go_to(goal, 1.5)
        loop.run_for(2.5)
        error = np.abs(loop.q[-1] - goal)
        assert error.max() <= 0.01, (error, loop.logs())
        assert loop.control.wait_for(lambda: drive_status(loop) is not None, 30.0)
        verdict = next(v.value for v in drive_status(loop).values if v.key == "drive check")
        assert verdict == "the efforts at rest fit the drive settings", verdict
    finally:
        loop.close()


def test_mujoco_gravcomp_with_the_default_settings_is_said(tmp_path):
    loop = MujocoLoop(tmp_path, DEFAULT_URDF, HOME,
                      {"gravcomp": True, "effort_includes_gravity": False,
                       "damping": [0.5], "effort_noise": 0.02},
                      {"mode": "gravity_compensation"})
    try:
        loop.control.statuses()
        loop.run_for(0.05)
        assert loop.control.wait_for(lambda: drive_status(loop) is not None, 60.0), loop.logs()
        status = drive_status(loop)
        assert status.level >= DiagnosticStatus.WARN
        assert status.message.startswith("drive settings: reported efforts ≈ "), status.message
        assert "drive.effort_includes_gravity false" in status.message
    finally:
        loop.close()


@pytest.mark.parametrize("pose", [
    [0.0, 0.0, 0.0, 0.5, 0.0, 0.5, 0.0],
    [0.3, -0.5, 0.8, 1.2, -0.6, 1.0, 0.4],
])
def test_mujoco_gravity_compensation_with_a_vendor_urdf_stays_where_it_is(tmp_path, pose):
    loop = MujocoLoop(tmp_path, XARM7, pose, {"damping": XARM7_TRUE_VISCOUS},
                      {"mode": "gravity_compensation"})
    try:
        drift = loop.drift(2.0)
        assert drift.max() <= 0.05, (drift, loop.logs())
    finally:
        loop.close()
