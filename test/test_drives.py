# SPDX-License-Identifier: Apache-2.0
"""What the drive already does (docs/drives.md), across processes: the simulator plays a drive
that adds its own gravity compensation to every effort command and reports efforts without
gravity (a UR e-Series in torque control), the control node runs against it.

- With the matching ``drive.*`` settings the node holds the arm in gravity compensation and
  follows a goal in computed torque; with the defaults it would command g(q) on top of the
  drive's own and throw the arm up.
- With the defaults it says on /diagnostics, naming ``drive.effort_includes_gravity``, that the
  efforts at rest do not fit, before its first command.
- Gravity compensation with a vendor URDF whose ``<dynamics>`` friction is several times the
  arm's (xArm7: Gazebo-style damping 10/5/2 N·m·s/rad) stays where it is at every pose tried:
  that friction is not compensated at the measured velocity.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticStatus
from payload_rig import SIM, ClosedLoop
from pin_oracle import robots_dir
from std_msgs.msg import Float64MultiArray

from rb_dynamics import DEFAULT_URDF

HOME = np.array([0.0, -1.2, 1.2, -1.0, -1.57, 0.0])  # the bundled arm, gravity on 4 joints
# a UR e-Series in torque control: gravity added by the drive, left out of the efforts
UR_LIKE = {"drive.compensates_gravity": True, "drive.effort_includes_gravity": False}
# the simulated arm with the URDF's friction, which computed torque compensates along the
# reference (the rig's default, no Coulomb friction, would leave 1 N·m over-compensated on a
# wrist of 1e-4 kg·m²)
UR_LIKE_SIM = {**UR_LIKE, "friction": []}
# the simulator waits for the controller however long it takes (a node generating the kernels
# of a new model on a busy machine can hold its loop for seconds): time never runs without it
WAITING = {"lockstep_timeout": 600.0}
XARM7 = Path(robots_dir(), "xarm_description/urdf/xarm7.urdf")
# the arm's own viscous friction (N·m·s/rad) and a Coulomb term, lower than the URDF's
XARM7_TRUE_VISCOUS = [2.8, 2.8, 1.5, 1.5, 0.8, 0.8, 0.8]
XARM7_TRUE_COULOMB = 0.3


def held_drift(rig: ClosedLoop, seconds: float = 2.0) -> np.ndarray:
    """The largest |q(t) − q(start)| per joint over ``seconds`` of simulated time."""
    start = len(rig.q)
    rig.run_for(seconds)
    q = np.array(rig.q[start:])
    return np.abs(q - q[0]).max(axis=0)


def drive_statuses(rig: ClosedLoop) -> list:
    return [s for _, s in rig.control.statuses() if any(v.key == "drive check"
                                                        for v in s.values)]


def check_value(status) -> str:
    return next(v.value for v in status.values if v.key == "drive check")


def test_a_drive_that_compensates_gravity_holds_and_tracks_with_the_matching_settings(
        tmp_path):
    rig = ClosedLoop(tmp_path, DEFAULT_URDF, HOME, 0.02, kp=[400.0], mode="gravity_compensation",
                     sim_params={**UR_LIKE_SIM, **WAITING}, control_params=UR_LIKE)
    try:
        rig.control.statuses()  # listening from the start
        rig.start()
        rig.run_for(0.3)
        drift = held_drift(rig)
        assert drift.max() <= 0.01, (drift, rig.logs())
        assert rig.control.set_parameters(mode="computed_torque").successful
        goal = HOME + np.array([0.3, 0.2, -0.2, 0.3, 0.0, 0.4])
        duration = rig.visit(goal[None, :], hold=0.5)
        rig.run_for(duration + 0.3)
        error = np.abs(rig.mean_position(0.2) - goal)
        assert error.max() <= 0.01, (error, rig.logs())
        assert rig.control.wait_for(lambda: drive_statuses(rig), 10.0), rig.logs()
        assert check_value(drive_statuses(rig)[-1]) == "the efforts at rest fit the drive " \
                                                       "settings"
    finally:
        rig.close()


def test_the_default_settings_say_what_is_wrong_before_commanding(tmp_path):
    rig = ClosedLoop(tmp_path, DEFAULT_URDF, HOME, 0.02, kp=[400.0], mode="gravity_compensation",
                     sim_params={**UR_LIKE, **WAITING})
    try:
        commands = []  # wall-clock arrival of each command at the simulator
        rig.peer.node.create_subscription(Float64MultiArray, f"/{SIM}/commands",
                                          lambda msg: commands.append(time.time()), 100)
        rig.control.statuses()
        rig.start()
        rig.run_for(0.05)
        assert rig.control.wait_for(lambda: drive_statuses(rig), 30.0), rig.logs()
        status = drive_statuses(rig)[-1]
        assert "drive.effort_includes_gravity" in status.message, status.message
        assert "drive.compensates_gravity" in status.message
        assert status.level >= DiagnosticStatus.WARN
        assert status.message.startswith("drive settings: "), status.message
        assert check_value(status) in status.message
        # said before the first command went out: the warning's log stamp (wall clock, the
        # node's) precedes the first command's arrival
        said = re.search(r"\[WARN\] \[(\d+\.\d+)\] \[[^]]*\]: drive settings: reported "
                         r"efforts ≈ ", rig.control.output())
        assert said is not None, rig.logs()
        assert commands and float(said.group(1)) <= commands[0], (said.group(0), commands[:1])
    finally:
        rig.close()


@pytest.mark.parametrize("pose", [
    [0.0, 0.0, 0.0, 0.5, 0.0, 0.5, 0.0],
    [0.3, -0.5, 0.8, 1.2, -0.6, 1.0, 0.4],
    [0.0, 0.6, 0.0, 1.8, 0.0, 1.2, 0.0],
])
def test_gravity_compensation_with_a_vendor_urdf_stays_where_it_is(tmp_path, pose):
    truth = tmp_path / "xarm7_true_friction.yaml"
    joints = [f"joint{k}" for k in range(1, 8)]
    truth.write_text(yaml.safe_dump({
        "format": "rb_dynamics/dynamics_overlay", "version": 1, "joints": {
            name: {"viscous": b, "coulomb": XARM7_TRUE_COULOMB}
            for name, b in zip(joints, XARM7_TRUE_VISCOUS)}}))
    rig = ClosedLoop(tmp_path, XARM7, np.array(pose), 0.0, mode="gravity_compensation",
                     sim_params={"dynamics_overlay": str(truth), "friction": [],
                                 "read_ros2_control": False, **WAITING})
    try:
        rig.start()
        drift = held_drift(rig)
        assert drift.max() <= 0.05, (drift, rig.logs())
    finally:
        rig.close()


def test_the_observer_and_payload_identification_read_whole_joint_efforts():
    """What the contact observer and ~/identify_payload are given from a drive's reported
    efforts: g(q) and the model's friction at the measured velocity added where the drive
    leaves them out (the hooks of contact.py and payload_services.py, without a node)."""
    from rb_dynamics.control import DriveConventions, JointController
    from rb_dynamics.dynamics import friction_effort, make_dynamics
    from rb_dynamics.model import load_model
    from rb_dynamics.ros.control_node.contact import joint_efforts
    from rb_dynamics.ros.control_node.payload_services import whole_resting_efforts

    model = load_model(DEFAULT_URDF)
    dynamics = make_dynamics(model, "reference")
    controller = JointController(model, dynamics=dynamics)
    names, v = list(reversed(model.joint_names)), np.full(6, 0.2)
    controller.update_state(names, HOME[::-1].tolist(), v.tolist(), 0.0)
    reported = np.linspace(-1.0, 1.0, 6)  # in the order of ``names``
    in_model_order = reported[::-1]
    assert np.array_equal(joint_efforts(controller, names, reported), in_model_order)
    np.testing.assert_array_equal(
        whole_resting_efforts(controller, dynamics, HOME[None], in_model_order[None]),
        in_model_order[None])
    controller.law.drive = DriveConventions(True, True, effort_includes_gravity=False,
                                            effort_includes_friction=False)
    np.testing.assert_allclose(joint_efforts(controller, names, reported),
                               in_model_order + dynamics.gravity(HOME)
                               + friction_effort(model, v), atol=1e-12)
    np.testing.assert_allclose(
        whole_resting_efforts(controller, dynamics, HOME[None], in_model_order[None]),
        (in_model_order + dynamics.gravity(HOME))[None], atol=1e-12)
