# SPDX-License-Identifier: Apache-2.0
"""``rb_dynamics_identify run`` on an arm this package did not simulate: the bundled arm in
MuJoCo (test/mujoco_driver.py) with its inertias perturbed, rotor inertia (armature), viscous
friction and MuJoCo's dry friction (``frictionloss``: a constraint, not the smooth law of the
package's simulator), efforts with noise 0.05 N·m + 1 %, driven by the control node in computed
torque on the URDF's model, which has none of these.

What holds there, and is asserted: the first round does not execute the plan in full, the
second does under the first round's model, and the identified gravity is several times closer
to the arm's than the URDF's. What does not (yet): the fit at the noise — MuJoCo's friction
leaves validation RMS/σ of 1.2-2 and a gravity error of 3-4 % of max |g| (the URDF's: 8.5 %),
against 0.1-0.2 % on the package's own simulator, and the wrists' dry friction unseen
(docs/identification.md)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mujoco_loop import MujocoLoop

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import gravity
from rb_dynamics.identification import (
    ParameterLayout,
    corrected_urdf,
    own_link_inertias,
    perturbed_model,
)
from rb_dynamics.model import apply_overlay, load_model, read_overlay

pytest.importorskip("mujoco")

HOME = [0.0, -1.2, 1.2, -1.0, -1.57, 0.0]
KP = [400.0, 400.0, 400.0, 2500.0, 1e4, 4e4]  # per joint, 1/s² (as the payload tests)
EFFORT_NOISE = 0.05  # N·m, + 1 % of the effort


def test_run_identifies_an_arm_simulated_by_mujoco(tmp_path):
    pytest.importorskip("control_msgs.action", reason="control_msgs (../shared/vendor) is not "
                        "installed: no FollowJointTrajectory action to send the plan to")
    text = Path(DEFAULT_URDF).read_text()
    model = load_model(text)
    true = perturbed_model(model, np.random.default_rng(41))
    layout = ParameterLayout(model, (), ())
    welded = [I - own for I, own in zip(model.inertia, own_link_inertias(model, text))]
    true_urdf = tmp_path / "true_arm.urdf"
    true_urdf.write_text(corrected_urdf(text, layout, layout.parameters(true), welded))
    joints = model.actuated_joint_names
    vi = model.velocity_indices(joints)
    loop = MujocoLoop(tmp_path, true_urdf, HOME, {
        "armature": true.armature[vi].tolist(), "damping": true.damping[vi].tolist(),
        "frictionloss": true.friction[vi].tolist(), "effort_noise": EFFORT_NOISE,
        "effort_noise_relative": 0.01},
        {"mode": "computed_torque", "kp": KP, "kd": [2.0 * math.sqrt(k) for k in KP]},
        model_urdf=Path(DEFAULT_URDF))
    out = tmp_path / "run"
    try:
        loop.run_for(0.5)  # the loop is closed before the plan goes out
        assert loop.joints == joints, loop.logs()
        driver, control = loop.driver.name, loop.control.name
        ran = subprocess.run([
            sys.executable, "-m", "rb_dynamics.ros.identification", "run", "--urdf",
            str(DEFAULT_URDF), "--out", str(out), "--topic", f"/{driver}/joint_states",
            "--node", f"/{control}", "--action", f"/{control}/follow_joint_trajectory",
            "--period", "3", "--harmonics", "4", "--periods", "4", "--lead-in", "2",
            "--time-budget", "8", "--rounds", "2", "--min-improvement", "0", "--timeout",
            "60"],
            capture_output=True, text=True, timeout=1800)
        print("\n" + ran.stdout)
        assert ran.returncode in (0, 1), ran.stdout + ran.stderr + loop.logs()
    finally:
        loop.close()
    summary = json.loads((out / "rounds.json").read_text())
    q = np.random.default_rng(3).uniform(-2.0, 2.0, (2000, true.nq))
    g_true = gravity(true, q)
    urdf_error = np.abs(gravity(model, q) - g_true).max() / np.abs(g_true).max()
    errors = []
    for entry in summary["rounds"]:
        folder = Path(entry["folder"])
        identified = apply_overlay(load_model((folder / "identified.urdf").read_text()),
                                   read_overlay(folder / "overlay.yaml"))
        errors.append(np.abs(gravity(identified, q) - g_true).max() / np.abs(g_true).max())
        print(f"round {entry['number']}: gravity error {100 * errors[-1]:.3f} % of max |g| "
              f"(URDF {100 * urdf_error:.2f} %); range covered "
              f"{min(entry['range_covered'].values()):.0%}–"
              f"{max(entry['range_covered'].values()):.0%}; armature true "
              f"{np.round(true.armature[vi], 4).tolist()}, identified "
              f"{np.round(identified.armature[vi], 4).tolist()}; Coulomb true "
              f"{np.round(true.friction[vi], 3).tolist()}, identified "
              f"{np.round(identified.friction[vi], 3).tolist()}")
    first, second = summary["rounds"]
    # the URDF's model lacks the armature: the plan is executed in full only under the
    # first round's model
    assert first["next"] is not None, summary
    assert min(second["range_covered"].values()) >= 0.95, summary
    assert min(second["speed_covered"].values()) >= 0.95, summary
    # what the fit finds on MuJoCo's friction: 3-4 % of max |g| against the URDF's 8.5 %
    assert errors[-1] <= 0.6 * urdf_error, (errors, urdf_error)
