# SPDX-License-Identifier: Apache-2.0
"""The control node takes a dynamics overlay: at start (the ``dynamics_overlay`` parameter) and
at run time (``~/set_dynamics_overlay``), as a real process. Its commands equal Pinocchio's
with the overlay's armature (``model.armature``) plus the friction law, at random states,
before and after a swap; with a payload on top, Pinocchio's with the payload's inertia in the
wrist's too, and so are ``~/inverse_dynamics``' answers. Bad overlays are refused saying why
while the node goes on commanding; a bad file at start refuses the description."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
import yaml
from payload_rig import set_payload_request
from pin_oracle import REAL_ROBOTS, Oracle, rel_err, robots_dir
from ros_harness import Session, control_node
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics.dynamics import Payload, friction_effort
from rb_dynamics.model import DynamicsOverlay, apply_overlay, load_model, write_overlay
from rb_dynamics_interfaces.srv import InverseDynamics, SetDynamicsOverlay, SetPayload

UR5 = Path(robots_dir(), REAL_ROBOTS["ur5"][0])
BARE = load_model(UR5)
JOINTS = BARE.actuated_joint_names
KP, KD = 100.0, 20.0
GOAL = np.array([0.2, -1.0, 1.1, -0.3, 0.4, 0.5])


def overlay(seed: int) -> DynamicsOverlay:
    """Armature, viscous, Coulomb and Stribeck friction and an offset on every joint."""
    rng = np.random.default_rng(seed)
    return DynamicsOverlay(robot=BARE.name, joints={name: {
        "armature": float(rng.uniform(0.05, 0.6)), "viscous": float(rng.uniform(0.1, 2.0)),
        "coulomb": float(rng.uniform(0.5, 3.0)), "stribeck": float(rng.uniform(0.2, 1.5)),
        "stribeck_velocity": float(rng.uniform(0.05, 0.3)),
        "offset": float(rng.uniform(-0.5, 0.5))} for name in JOINTS})


class Expected:
    """Pinocchio's inverse dynamics of ur5 with an overlay's armature (and a payload), and
    the overlay's friction law, in the node's joint order."""

    def __init__(self, given: DynamicsOverlay | None, payload: Payload | None = None):
        self.model = BARE if given is None else apply_overlay(BARE, given)
        self.oracle = Oracle(self.model, UR5.read_text())
        pm = self.oracle.pm
        pm.armature[self.oracle.v_perm] = self.model.armature
        if payload is not None:
            frame = pm.frames[pm.getFrameId(payload.link)]
            pm.inertias[frame.parentJoint] = pm.inertias[frame.parentJoint] + frame.placement.act(
                pin.Inertia(payload.mass, payload.com, payload.inertia))
        self.oracle.pd = pm.createData()

    def rnea(self, q, v, a) -> np.ndarray:
        o = self.oracle
        return o.from_v(pin.rnea(o.pm, o.pd, o.q(q), o.v(v), o.v(a)))

    def computed_torque(self, q, v) -> np.ndarray:
        """Toward the set-point GOAL at rest: friction compensated at q̇_d = 0 adds nothing."""
        return self.rnea(q, v, KP * (GOAL - q) + KD * (0 - v))

    def gravity_compensation(self, q, v) -> np.ndarray:
        return self.rnea(q, np.zeros(6), np.zeros(6)) + friction_effort(self.model, v)


def states(seed: int, count: int = 4):
    """Random states near the set-point, slow enough for the Stribeck dip, within the limits'
    reach (no command is clamped)."""
    rng = np.random.default_rng(seed)
    return [(GOAL + rng.uniform(-0.15, 0.15, 6), rng.uniform(-0.3, 0.3, 6))
            for _ in range(count)]


def commands_equal(rig: Session, expected, seed: int) -> float:
    """The worst relative error of the commands answering random states (each state sent
    until its answer comes to equal the expected one, so a swap in flight is waited out)."""
    worst = 0.0
    for q, v in states(seed):
        ref = expected(q, v)
        assert np.all(np.abs(ref) < BARE.effort_limit), "a state whose command is clamped"
        answers = []

        def equal(q=q, v=v, ref=ref, answers=answers) -> bool:
            answers.append(rig.command_after(JOINTS, q, v))
            return answers[-1] is not None and rel_err(answers[-1], ref) <= 1e-9

        assert rig.wait_for(equal, 15.0), (answers[-1:], ref, rig.output())
        worst = max(worst, rel_err(answers[-1], ref))
    return worst


def set_overlay(rig: Session, text: str = "", path: str = "") -> SetDynamicsOverlay.Response:
    return rig.call(SetDynamicsOverlay, "~/set_dynamics_overlay",
                    SetDynamicsOverlay.Request(overlay=text, path=path))


def follow_the_set_point(rig: Session) -> None:
    """GOAL as a set-point (a mode change drops the reference)."""
    rig.publish_matched(JointTrajectory, "~/joint_trajectory", JointTrajectory(
        joint_names=JOINTS, points=[JointTrajectoryPoint(positions=GOAL.tolist())]))


@pytest.fixture()
def rig(tmp_path):
    start = tmp_path / "identified.yaml"
    write_overlay(overlay(1), start)
    session = control_node(tmp_path, {
        "urdf_path": str(UR5), "mode": "computed_torque", "kp": [KP], "kd": [KD],
        # states come in bursts between service calls: none goes stale (a stale state
        # would drop the set-point and hold the measured position)
        "friction_compensation": True, "dynamics_overlay": str(start), "state_timeout": 5.0,
        "refuse_infeasible_trajectories": False})
    assert session.command_after(JOINTS, GOAL, timeout=30.0) is not None, session.output()
    follow_the_set_point(session)
    yield session
    session.close()


def test_commands_follow_the_overlay_from_start_through_swaps(rig, tmp_path):
    worst = {}
    # the start-up file: computed torque with M(q) + diag(armature)
    first = Expected(overlay(1))
    worst["start, computed torque"] = commands_equal(rig, first.computed_torque, 10)
    assert rig.set_parameters(mode="gravity_compensation").successful
    worst["start, friction compensation"] = commands_equal(rig, first.gravity_compensation, 11)
    # swapped at run time, as YAML text: the new armature and friction from the next command
    second = overlay(2)
    answer = set_overlay(rig, text=yaml.safe_dump(second.to_dict()))
    assert answer.success and "armature" in answer.message, answer.message
    worst["swap, friction compensation"] = commands_equal(
        rig, Expected(second).gravity_compensation, 12)
    assert rig.set_parameters(mode="computed_torque").successful
    follow_the_set_point(rig)
    worst["swap, computed torque"] = commands_equal(rig, Expected(second).computed_torque, 13)
    # a payload on top: both
    payload = Payload("wrist_3_link", 1.5, [0.0, 0.02, 0.05], np.diag([3e-3, 3e-3, 2e-3]))
    assert rig.call(SetPayload, "~/set_payload", set_payload_request(
        payload.link, payload.mass, payload.com, payload.inertia)).success
    worst["swap + payload"] = commands_equal(rig, Expected(second, payload).computed_torque, 14)
    # the dynamics services answer for the overlaid robot with its payload
    q, v = states(17, 1)[0]
    a = np.linspace(-2.0, 2.0, 6)
    answer = rig.call(InverseDynamics, "~/inverse_dynamics", InverseDynamics.Request(
        joint_names=JOINTS, positions=q.tolist(), velocities=v.tolist(),
        accelerations=a.tolist()))
    assert answer.success, answer.message
    worst["~/inverse_dynamics"] = rel_err(answer.efforts, Expected(second, payload).rnea(q, v, a))
    assert worst["~/inverse_dynamics"] <= 1e-9
    # bad overlays: refused with the reason, nothing changes, the node goes on commanding
    bad = overlay(3).to_dict()
    bad["joints"]["elbow_joint"]["armature"] = -0.1
    missing = str(tmp_path / "missing.yaml")
    fifo = tmp_path / "overlay.fifo"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer
    for request, says in [({"path": "/dev/zero"}, "not a regular file"),
                          ({"path": str(fifo)}, "not a regular file"),
                          ({"text": "a: &a [1, 1]\nb: [*a, *a]\n"}, "aliases"),
                          ({"text": "joints: " + "[" * 100_000 + "\n"}, "nested deeper"),
                          ({"text": yaml.safe_dump(bad)}, "'elbow_joint': armature -0.1 is "
                           "negative"),
                          ({"text": "format: rb_dynamics/dynamics_overlay\nversion: 1\njoints: "
                                    "{panda_joint1: {armature: 0.1}}\n"}, "panda_joint1"),
                          ({"path": missing}, "missing.yaml"),
                          ({"text": "joints: {}\n", "path": missing}, "not both")]:
        answer = set_overlay(rig, **request)
        assert not answer.success and says in answer.message, (says, answer.message)
    worst["after refusals"] = commands_equal(rig, Expected(second, payload).computed_torque, 15)
    # cleared (both fields empty): the URDF's values, the payload still on
    assert set_overlay(rig).success
    worst["cleared + payload"] = commands_equal(rig, Expected(None, payload).computed_torque, 16)
    print("\ncontrol node commands vs Pinocchio (armature) + friction law:")
    for what, err in worst.items():
        print(f"  {what:<32} {err:.1e}")


def test_a_bad_overlay_file_at_start_refuses_the_description(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: rb_dynamics/dynamics_overlay\nversion: 1\njoints:\n"
                   "  wrist_2_joint: {stribeck_velocity: fast}\n")
    rig = control_node(tmp_path, {"urdf_path": str(UR5), "dynamics_overlay": str(bad)})
    try:
        assert rig.wait_for_log("cannot use the description", 20.0), rig.output()
        assert f"{bad}: joint 'wrist_2_joint': stribeck_velocity must be a number" \
            in rig.output()
        good = tmp_path / "good.yaml"
        write_overlay(overlay(4), good)
        answer = set_overlay(rig, path=str(good))
        assert not answer.success and "no robot description loaded yet" in answer.message
        assert "dynamics_overlay" in answer.message, answer.message
        assert rig.command_after(JOINTS, GOAL, timeout=1.0) is None  # no model: no command
    finally:
        rig.close()


def overlay_text(joint: str, values: str) -> str:
    return (f"format: rb_dynamics/dynamics_overlay\nversion: 1\nrobot: ur5\njoints:\n"
            f"  {joint}: {values}\n")


def test_absurd_overlays_are_refused_and_plausible_ones_taken(rig, tmp_path):
    """Coulomb 1e6 and armature 1e9 on ur5's shoulder pan: the code this was written against
    took both while commanding (command jumps of 150–300 N·m, the pan swung against its
    reference). Friction beyond the joint's effort limit and an armature beyond 1e3 × the
    largest inertia of M are refused naming the joint and the bound, as is a plausible
    armature (100 kg·m² on a 4.4 kg·m² pan) whose swap would move the command by more than
    half the effort limit at once; the commands stay those of the overlay in use. YAML 1.1
    reads ``1.0e6`` as a string (refused as "must be a number"): it is read as the number
    it is, so ``1.0e0`` is taken. The same checks refuse a file at start."""
    expected = Expected(overlay(1)).computed_torque
    # 0.1 rad off the set-point: an acceleration of 10 rad/s² commanded through the armature
    away = GOAL + np.array([0.1, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert rel_err(rig.command_after(JOINTS, away), expected(away, np.zeros(6))) <= 1e-9
    for text, says in [
            (overlay_text("shoulder_pan_joint", "{coulomb: 1.0e6}"),
             "not plausible for 'ur5': joint 'shoulder_pan_joint': friction up to 1e+06 "
             "(coulomb 1e+06 + stribeck "),
            (overlay_text("shoulder_pan_joint", "{viscous: 1.0e+3}"),
             "× the velocity limit 3.15) is beyond its effort limit 150: no drive could move "
             "it"),
            (overlay_text("shoulder_pan_joint", "{armature: 1.0e9}"),
             "joint 'shoulder_pan_joint': armature 1e+09 is beyond 1000 × the largest inertia "
             "of M at q = 0 (4.377): 4376.61 at most"),
            (overlay_text("shoulder_pan_joint", "{armature: 100.0}"),
             "the dynamics overlay is refused: it would move the command on shoulder_pan_joint "
             "by ")]:
        answer = set_overlay(rig, text=text)
        assert not answer.success and says in answer.message, (says, answer.message)
    assert "0.5 × its effort limit (75)" in answer.message, answer.message
    commands_equal(rig, expected, 20)  # nothing changed
    answer = set_overlay(rig, text=overlay_text("wrist_3_joint", "{coulomb: 1.0e0}"))
    assert answer.success, answer.message
    taken = DynamicsOverlay(robot="ur5", joints={"wrist_3_joint": {"coulomb": 1.0}})
    assert rig.set_parameters(mode="gravity_compensation").successful
    commands_equal(rig, Expected(taken).gravity_compensation, 21)
    absurd = tmp_path / "absurd.yaml"
    absurd.write_text(overlay_text("elbow_joint", "{coulomb: 1.0e6}"))
    node = control_node(tmp_path, {"urdf_path": str(UR5), "dynamics_overlay": str(absurd)})
    try:
        assert node.wait_for_log("cannot use the description", 60.0), node.output()
        assert "is not plausible for 'ur5': joint 'elbow_joint': friction up to 1e+06" \
            in node.output(), node.output()
    finally:
        node.close()


def test_an_overlay_whose_inertia_the_gains_need_is_not_cleared_mid_motion(tmp_path):
    """Impedance with K 10, D 5 on every joint is stable on ur5 with 0.5 kg·m² of armature on
    the elbow and wrists (the start-up file), not on the bare 0.016 kg·m² of wrist_3 at this
    driver's 5 ms (D/m T = 1.6 ≥ 1). Clearing the overlay is refused like a gain change,
    naming the bound at the measured period; the code this was written against took it and
    the node stopped commanding."""
    armature = DynamicsOverlay(robot="ur5", joints={
        name: {"armature": 0.5} for name in JOINTS[2:]})
    start = tmp_path / "armature.yaml"
    write_overlay(armature, start)
    node = control_node(tmp_path, {
        "urdf_path": str(UR5), "mode": "impedance", "impedance.stiffness": [10.0],
        "impedance.damping": [5.0], "dynamics_overlay": str(start), "state_timeout": 0.5})
    try:
        stream = node.stream_states(JOINTS, GOAL, 0.005)
        commands = node.commands
        assert node.wait_for(lambda: len(commands) > 50, 60.0), node.output()
        answer = set_overlay(node)
        assert not answer.success, answer.message
        assert answer.message.startswith("the dynamics overlay is refused: impedance.damping 5 "
                                         "on wrist_3_joint makes the sampled loop unstable: "
                                         "impedance.damping < "), answer.message
        count = len(commands)
        assert node.wait_for(lambda: len(commands) > count + 50, 30.0), node.output()
        assert "not commanding" not in node.output(), node.output()
        stream.stop()
    finally:
        node.close()
