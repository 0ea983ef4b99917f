# SPDX-License-Identifier: Apache-2.0
"""What the drive already does, without ROS (``control.drive``): the law's commands on a drive
that compensates gravity or friction, the whole joint effort from a reported one, and the
start-up check's verdicts; and gravity compensation's friction, compensated at the measured
velocity only where an overlay gave it."""

from __future__ import annotations

import numpy as np
import pytest

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.control import (
    ControlLaw,
    DriveConventions,
    JointController,
    rest_mismatch,
)
from rb_dynamics.dynamics import Payload, PayloadEffort, friction_effort, make_dynamics
from rb_dynamics.model import DynamicsOverlay, apply_overlay, load_model

MODEL = load_model(DEFAULT_URDF)
DYN = make_dynamics(MODEL, "reference")
Q = np.array([0.0, -1.2, 1.2, -1.0, -1.57, 0.0])
GRAVITY_DRIVE = DriveConventions(compensates_gravity=True)


def law(mode: str, drive: DriveConventions | None = None, **gains) -> ControlLaw:
    n = MODEL.nv
    return ControlLaw(DYN, mode, kp=np.full(n, 100.0), kd=np.full(n, 20.0),
                      stiffness=np.full(n, 50.0), damping=np.full(n, 5.0),
                      friction_compensation=True, drive=drive or DriveConventions(), **gains)


@pytest.mark.parametrize("mode", ["gravity_compensation", "computed_torque", "impedance"])
def test_a_drive_that_compensates_gravity_gets_the_law_less_g(mode):
    rng = np.random.default_rng(5)
    for _ in range(10):
        q, v = Q + rng.normal(0, 0.3, 6), rng.normal(0, 0.5, 6)
        reference = () if mode == "gravity_compensation" else (
            Q, rng.normal(0, 0.3, 6), rng.normal(0, 1.0, 6))
        plain, _ = law(mode).effort(q, v, *reference)
        drive, _ = law(mode, GRAVITY_DRIVE).effort(q, v, *reference)
        np.testing.assert_allclose(drive, plain - DYN.gravity(q), rtol=0, atol=1e-9)


def test_a_drive_that_compensates_friction_gets_none_and_a_payload_stays_in():
    v = np.full(6, 0.4)
    reference = (Q, v, np.zeros(6))
    with_friction, _ = law("impedance").effort(Q, np.zeros(6), *reference)
    without, _ = law("impedance", DriveConventions(compensates_friction=True)).effort(
        Q, np.zeros(6), *reference)
    np.testing.assert_allclose(with_friction - without, friction_effort(MODEL, v), atol=1e-12)
    # the drive holds the arm; the payload, which it does not know, is the node's to hold
    payload = PayloadEffort(MODEL, Payload("tool0", 2.0, [0.0, 0.0, 0.05], np.eye(3) * 1e-3))
    held = law("gravity_compensation", GRAVITY_DRIVE, payload=payload)
    np.testing.assert_allclose(held.effort(Q, np.zeros(6))[0], payload.gravity(Q), atol=1e-12)
    controller = JointController(MODEL, dynamics=DYN)
    controller.law.drive = GRAVITY_DRIVE
    controller.update_state(MODEL.joint_names, Q.tolist(), [0.0] * 6, 0.0)
    assert not controller.holding_effort().any()  # the stop command: nothing to add


def test_reported_efforts_become_whole_joint_efforts():
    g, f, reported = np.arange(6.0), np.full(6, 0.5), np.full(6, 0.1)
    assert np.array_equal(DriveConventions().joint_effort(reported, g, f), reported)
    ur = DriveConventions(True, False, effort_includes_gravity=False,
                          effort_includes_friction=False)
    np.testing.assert_allclose(ur.joint_effort(reported, g, f), reported + g + f)
    np.testing.assert_allclose(ur.joint_effort(reported, g, None), reported + g)


def test_the_start_up_check_names_the_setting_a_mismatch_points_to():
    g = DYN.gravity(Q)
    rng = np.random.default_rng(2)
    noise = rng.normal(0, 0.02, 6)
    plain, ur = DriveConventions(), DriveConventions(True, effort_includes_gravity=False)
    # a drive reporting efforts without gravity, read with the defaults
    said = rest_mismatch(plain, noise, g)
    assert "drive.effort_includes_gravity false" in said and "≈ " in said, said
    assert "drive.compensates_gravity true" in said
    # the settings that fit say nothing
    assert rest_mismatch(ur, noise, g) == ""
    assert rest_mismatch(plain, g + noise, g) == ""
    # gravity in the efforts though the settings say it is left out
    said = rest_mismatch(ur, g + noise, g)
    assert "set drive.effort_includes_gravity true" in said, said
    # gravity twice
    said = rest_mismatch(plain, 2 * g + noise, g)
    assert "counted twice" in said and "drive.compensates_gravity" in said, said
    # no verdict: a driver filling the field with zeros, an arm with little gravity on it,
    # efforts the fit does not explain
    assert rest_mismatch(plain, np.zeros(6), g) == ""
    assert rest_mismatch(plain, noise, g * 0.01) == ""
    assert rest_mismatch(plain, rng.normal(0, 30.0, 6), g) == ""


def test_gravity_compensation_adds_only_identified_friction_at_the_measured_velocity():
    """The URDF's <dynamics> (the bundled arm: 0.5 N·m·s/rad, 1 N·m on every joint) is not
    compensated at the measured velocity; an overlay's is, on its joints."""
    v = np.full(6, 0.3)
    urdf_only = law("gravity_compensation")
    np.testing.assert_allclose(urdf_only.effort(Q, v)[0], DYN.gravity(Q), atol=1e-12)
    overlaid = apply_overlay(MODEL, DynamicsOverlay(joints={
        "elbow_joint": {"viscous": 0.2, "coulomb": 0.4}}))
    identified = ControlLaw(make_dynamics(overlaid, "reference"), friction_compensation=True)
    added = identified.effort(Q, v)[0] - DYN.gravity(Q)
    expected = np.where(overlaid.identified_friction, friction_effort(overlaid, v), 0.0)
    assert overlaid.identified_friction.tolist() == [False, False, True, False, False, False]
    np.testing.assert_allclose(added, expected, atol=1e-12)
    # following a reference, the URDF's friction is compensated along the reference velocity
    reference = (Q, v, np.zeros(6))
    followed = law("impedance").effort(Q, np.zeros(6), *reference)[0]  # K·0 + D·q̇_d + g + f
    np.testing.assert_allclose(followed - DYN.gravity(Q) - 5.0 * v, friction_effort(MODEL, v),
                               atol=1e-9)
