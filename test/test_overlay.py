# SPDX-License-Identifier: Apache-2.0
"""The dynamics overlay: read, written, applied to a model by joint name, bad files refused
naming the place."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from pin_oracle import REAL_ROBOTS, robots_dir

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.control import ControllerError, JointController
from rb_dynamics.dynamics import friction_effort, make_dynamics
from rb_dynamics.model import (
    DynamicsOverlay,
    OverlayError,
    apply_overlay,
    load_model,
    read_overlay,
    write_overlay,
)
from rb_dynamics.model.overlay import MAX_OVERLAY_BYTES

MODEL = load_model(DEFAULT_URDF)


def test_an_overlay_round_trips_and_lands_on_the_named_joints(tmp_path):
    overlay = DynamicsOverlay(
        joints={"elbow_joint": {"armature": 0.3, "viscous": 1.5, "coulomb": 2.0,
                                "stribeck": 0.5, "stribeck_velocity": 0.05, "offset": -0.2},
                "wrist_3_joint": {"armature": 0.01}},
        robot=MODEL.name, covariance_names=["elbow_joint.armature", "wrist_3_joint.armature"],
        covariance=np.diag([1e-4, 4e-6]), provenance={"bag": "run1", "urdf": "arm.urdf"})
    path = tmp_path / "overlay.yaml"
    write_overlay(overlay, path)
    back = read_overlay(path)
    assert back.joints == overlay.joints and back.robot == MODEL.name
    assert back.covariance_names == overlay.covariance_names
    assert np.array_equal(back.covariance, overlay.covariance)
    assert back.provenance == overlay.provenance
    model = apply_overlay(MODEL, back)
    elbow = MODEL.joint_names.index("elbow_joint")
    wrist = MODEL.joint_names.index("wrist_3_joint")
    assert model.armature[elbow] == 0.3 and model.armature[wrist] == 0.01
    assert model.damping[elbow] == 1.5 and model.friction[elbow] == 2.0
    assert model.stribeck_friction[elbow] == 0.5 and model.stribeck_velocity[elbow] == 0.05
    assert model.effort_offset[elbow] == -0.2
    # joints and keys the overlay leaves out keep the model's values
    assert model.damping[wrist] == MODEL.damping[wrist]
    others = [k for k in range(MODEL.nv) if k not in (elbow, wrist)]
    assert not model.armature[others].any()
    assert not MODEL.armature.any()  # the original is not touched
    # the model's own values, written out, read back and applied, change nothing
    same = apply_overlay(MODEL, read_overlay(
        __import__("yaml").safe_dump(DynamicsOverlay.from_model(MODEL).to_dict())))
    for field in ("armature", "damping", "friction", "effort_offset"):
        assert np.array_equal(getattr(same, field), getattr(MODEL, field))


@pytest.mark.parametrize("text, says", [
    ("joints: {}\n", "not a dynamics overlay"),
    ("format: rb_dynamics/dynamics_overlay\nversion: 1\njoints: {elbow_joint: "
     "{armature: -1}}\n", "'elbow_joint': armature -1.0 is negative"),
    ("format: rb_dynamics/dynamics_overlay\nversion: 1\njoints: {elbow_joint: "
     "{inertia: 1}}\n", "unknown key 'inertia'"),
    ("format: rb_dynamics/dynamics_overlay\nversion: 1\njoints: {elbow_joint: "
     "{coulomb: .nan}}\n", "coulomb nan is not a finite number"),
    ("format: rb_dynamics/dynamics_overlay\nversion: 1\njoints: {elbow_joint: "
     "{stribeck: 1.0, stribeck_velocity: 1.0e-200}}\n", "stribeck_velocity 1e-200 is below 1e-06"),
    ("format: rb_dynamics/dynamics_overlay\nversion: 1\njoints: {elbow_joint: "
     "{coulomb: fast}}\n", "coulomb must be a number"),
    ("format: rb_dynamics/dynamics_overlay\nversion: 1\njoints: {}\ncovariance: "
     "{parameters: [a, b], matrix: [[1]]}\n", "finite 2×2 matrix"),
    ("format: rb_dynamics/dynamics_overlay\nversion: 1\n: [\n", "not YAML"),
])
def test_bad_overlays_are_refused_naming_the_place(text, says):
    with pytest.raises(OverlayError, match=None) as info:
        read_overlay(text)
    assert says in str(info.value), str(info.value)


# nine lines standing for 9**9 numbers (the "billion laughs" of YAML)
ALIAS_BOMB = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def test_hostile_overlays_are_refused_at_once(tmp_path):
    """What would hold the reader or fill its memory is refused before it is read: a device, a
    FIFO, a file over the size limit, aliases, nesting deeper than any overlay."""
    fifo = tmp_path / "overlay.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    with open(big, "wb") as file:
        file.truncate(MAX_OVERLAY_BYTES + 1)
    for source, says in [("/dev/zero", "not a regular file"), (fifo, "not a regular file"),
                         (big, f"larger than {MAX_OVERLAY_BYTES} bytes"),
                         (ALIAS_BOMB, "aliases (*a)"),
                         ("x: " + "[" * 1_000_000 + "\n", "nested deeper"),
                         ("".join(" " * i + "a:\n" for i in range(1000)), "nested deeper")]:
        start = time.monotonic()
        with pytest.raises(OverlayError) as info:
            read_overlay(source)
        assert says in str(info.value), str(info.value)
        assert time.monotonic() - start < 2.0, (says, time.monotonic() - start)


def test_an_overlay_naming_another_robots_joints_is_refused():
    overlay = DynamicsOverlay(joints={"panda_joint1": {"armature": 0.1}}, robot="panda")
    with pytest.raises(OverlayError, match="panda_joint1"):
        apply_overlay(MODEL, overlay)


def test_a_controller_takes_an_overlaid_models_dynamics_and_keeps_its_reference():
    """``JointController.swap_dynamics``: the next effort is the overlaid robot's (computed torque
    with the armature, friction compensation with its friction) toward the same reference;
    another robot is refused and nothing changes."""
    overlaid = apply_overlay(MODEL, DynamicsOverlay(joints={name: {
        "armature": 0.2, "coulomb": 1.5, "stribeck": 0.7, "stribeck_velocity": 0.1}
        for name in MODEL.actuated_joint_names}))
    controller = JointController(MODEL, mode="computed_torque", kp=50.0, kd=10.0,
                                 friction_compensation=True, dynamics=make_dynamics(MODEL))
    q, v = np.full(6, 0.3), np.full(6, 0.05)
    controller.state_reader.read(MODEL.joint_names, q.tolist(), v.tolist())
    controller.q, controller.v = q + 0.1, v  # holds q + 0.1 from here
    controller.effort(q + 0.1, v, 0.0)
    controller.swap_dynamics(make_dynamics(overlaid, "reference"))
    assert controller.model is overlaid and controller.hold_position is not None
    tau, _ = controller.effort(q, v, 0.0)
    a = 50.0 * 0.1 - 10.0 * v  # toward the held position, at rest
    expected = make_dynamics(overlaid, "reference").rnea(q, v, a)
    np.testing.assert_allclose(tau, expected + friction_effort(overlaid, np.zeros(6)),
                               rtol=1e-12)
    assert np.abs(expected - make_dynamics(MODEL, "reference").rnea(q, v, a)).max() > 0.1
    other = load_model(Path(robots_dir(), REAL_ROBOTS["ur5"][0]))  # the same joint names
    with pytest.raises(ControllerError, match="is not the controller's robot"):
        controller.swap_dynamics(make_dynamics(other, "reference"))
    assert controller.model is overlaid


def _text(values: str) -> str:
    return ("format: rb_dynamics/dynamics_overlay\nversion: 1\njoints:\n"
            f"  shoulder_pan_joint: {values}\n")


def test_numbers_yaml_1_1_reads_as_strings_are_read_as_numbers():
    """``1.0e6`` (no exponent sign) and ``1e-3`` (no dot) are strings to YAML 1.1: read as
    the numbers they are; other strings are still refused."""
    read = read_overlay(_text("{coulomb: 1.0e6, viscous: 1.0e0, armature: 1e-3, "
                              "stribeck: .5E+1}"))
    assert read.joints["shoulder_pan_joint"] == {"coulomb": 1e6, "viscous": 1.0,
                                                 "armature": 1e-3, "stribeck": 5.0}
    with pytest.raises(ValueError, match="coulomb must be a number, got '1.0e6x'"):
        read_overlay(_text("{coulomb: 1.0e6x}"))


def test_an_overlay_is_checked_against_the_robot_and_the_command_it_changes():
    """Friction beyond the effort limit and an armature beyond 1e3 × the largest inertia of M
    are refused naming the joint and the bound; plausible values are not, also an armature a
    thousandfold of a light wrist's own links (a geared motor on the bundled arm's last wrist,
    which moves 8.5e-6 kg·m²); a swap that would move a command by more than half its effort
    limit is named."""
    from rb_dynamics.control import command_step_problem, overlay_problem

    model = load_model(DEFAULT_URDF)

    def problem(values: str):
        overlay = read_overlay(_text(values))
        return overlay_problem(model, apply_overlay(model, overlay), overlay)

    assert problem("{coulomb: 1.0e6}").startswith(
        "joint 'shoulder_pan_joint': friction up to 1e+06 (coulomb 1e+06 + stribeck 0 + "
        "viscous 0.5 × the velocity limit 3.15) is beyond its effort limit 150")
    assert "beyond its effort limit" in problem("{coulomb: 100, viscous: 20}")  # 163 at 3.15
    assert problem("{armature: 1e9}") == (
        "joint 'shoulder_pan_joint': armature 1e+09 is beyond 1000 × the largest inertia of "
        "M at q = 0 (3.803): 3803.14 at most")
    assert problem("{coulomb: 5.0, viscous: 2.0, stribeck: 1.0, armature: 0.5}") is None
    wrist = read_overlay(_text("{armature: 0.1}").replace("shoulder_pan_joint", "wrist_3_joint"))
    assert overlay_problem(model, apply_overlay(model, wrist), wrist) is None
    controller = JointController(model, mode="computed_torque", kp=100.0, kd=20.0)
    q = np.array([0.3, -1.0, 1.2, -0.6, 0.4, 0.2])
    controller.update_state(model.joint_names, q, np.zeros(6), 0.0)
    controller.compute(0.0)  # holding q: no acceleration commanded, nothing to jump
    heavy = make_dynamics(apply_overlay(model, read_overlay(_text("{armature: 100}"))))
    assert command_step_problem(controller, heavy) is None
    controller.update_state(model.joint_names, q + [0.1, 0, 0, 0, 0, 0], np.zeros(6), 0.001)
    controller.compute(0.001)  # 10 rad/s² on the pan: 1000 N·m through the armature
    why = command_step_problem(controller, heavy)
    assert why.startswith("it would move the command on shoulder_pan_joint by 1000 in one "
                          "step, more than 0.5 × its effort limit (75)"), why
