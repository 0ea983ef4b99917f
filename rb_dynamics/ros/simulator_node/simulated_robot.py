# SPDX-License-Identifier: Apache-2.0
"""What the simulator node builds at start from its parameters (``settings``, as
``parameters.read`` returns them): the simulated model, the joint order of its topics, which
joint takes which command, and the servo simulator with its drives. Each raises ValueError
naming the parameter for a value that cannot be used (the node then does not start).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from rb_dynamics.dynamics import ConstraintSet, Dynamics
from rb_dynamics.model import (
    CommandLayout,
    Model,
    apply_overlay,
    command_layout,
    load_model,
    read_overlay,
    read_ros2_control,
)
from rb_dynamics.ros.conversions import JointLayout
from rb_dynamics.sensing import JointSensors
from rb_dynamics.simulation import (
    JointDrives,
    ServoSimulator,
    make_drives,
    servo_gains,
)

__all__ = ["command_layout_of", "joint_order", "joint_sensors", "make_simulator",
           "simulated_model"]

Settings = dict[str, Any]


def simulated_model(source: str, settings: Settings) -> Model:
    """The URDF's model with ``gravity``, the ``dynamics_overlay`` file (the true robot's
    armature, friction and effort offset), and ``damping``/``friction`` (one value ≥ 0 per
    velocity coordinate; [] = the URDF's or the overlay's) and ``position_limits`` (false:
    none) applied: a new model, the loaded one is not changed."""
    model = load_model(source, gravity=settings["gravity"])
    if settings["dynamics_overlay"]:
        try:
            model = apply_overlay(model, read_overlay(settings["dynamics_overlay"]))
        except (OSError, ValueError) as exc:
            raise ValueError(f"dynamics_overlay: {exc}") from None
    changes: dict[str, np.ndarray] = {}
    for name in ("damping", "friction"):
        values = settings[name]
        if values:
            if len(values) != model.nv or not all(v >= 0 for v in values):
                raise ValueError(f"{name} must have {model.nv} non-negative values")
            changes[name] = np.array(values, dtype=float)
    if not settings["position_limits"]:
        changes["position_lower"] = np.full(model.nq, -np.inf)
        changes["position_upper"] = np.full(model.nq, np.inf)
    return dataclasses.replace(model, **changes) if changes else model


def joint_order(model: Model, joints: list[str]) -> list[str]:
    """The order of ``~/commands`` and joint_states: ``joints``, else the actuated joints."""
    joints = joints or model.actuated_joint_names
    unknown = [n for n in joints if n not in model.actuated_joint_names]
    if unknown or len(set(joints)) != len(joints):
        raise ValueError(f"joints {unknown or joints} are not actuated joints of the model, "
                         f"once each ({model.actuated_joint_names})")
    return list(joints)


def command_layout_of(model: Model, source: str, settings: Settings) -> CommandLayout:
    """Which joint takes which command: the URDF's <ros2_control> blocks, if read."""
    systems = read_ros2_control(source) if settings["read_ros2_control"] else []
    return command_layout(model, systems, settings["uncovered_joints"])


def make_simulator(model: Model, layout: CommandLayout, dynamics: Dynamics,
                   joints: JointLayout, constraints: ConstraintSet | None,
                   settings: Settings) -> ServoSimulator:
    """The servo simulator from the initial state (``joints``: the node's joints, the order
    of ``initial_positions``). A model whose forward dynamics are undefined gets drives whose
    stability is not checked: it never steps."""
    q0, v0 = _initial_state(model, layout, joints, settings["initial_positions"])
    options = dict(bandwidth=settings["servo_bandwidth"],
                   damping_ratio=settings["servo_damping_ratio"],
                   overrides=_gain_overrides(layout, settings))
    if model.forward_dynamics_problem() is None:
        drives = make_drives(
            model, layout, q0, dt=settings["time_step"],
            integrator=settings["integrator"], command_timeout=settings["command_timeout"],
            gravity_feedforward=settings["servo_gravity_feedforward"],
            drive_gravity=settings["drive.compensates_gravity"],
            drive_friction=settings["drive.compensates_friction"],
            dynamics=dynamics, **options)
    else:  # it never steps: no stability to check (M may be singular)
        gains = servo_gains(model, q0, layout.joints, **options,
                            mass_matrix=dynamics.crba(q0))
        drives = JointDrives(model, layout, gains, command_timeout=settings["command_timeout"])
    return ServoSimulator(dynamics, drives, dt=settings["time_step"],
                          integrator=settings["integrator"], q0=q0, v0=v0,
                          constraints=constraints or None,
                          friction_law=settings["friction_law"])


def _initial_state(model: Model, layout: CommandLayout, joints: JointLayout,
                   values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """The blocks' state ``initial_value``s, then ``initial_positions`` (which wins)."""
    q0, v0 = layout.initial_state_of(model, model.neutral_configuration(), np.zeros(model.nv))
    if values:
        if len(values) != len(joints.names):
            raise ValueError(f"initial_positions must have {len(joints.names)} values "
                             f"(one per joint in {joints.names})")
        q0[joints.q_index] = values
    return q0, v0


def _gain_overrides(layout: CommandLayout, settings: Settings) -> dict[str, tuple[float, float]]:
    """{joint: (kp, kd)} from servo_gain_joints, servo_kp, servo_kd."""
    names, kp, kd = (settings[k] for k in ("servo_gain_joints", "servo_kp", "servo_kd"))
    if not len(names) == len(kp) == len(kd):
        raise ValueError(f"servo_kp and servo_kd must have one value per servo_gain_joints "
                         f"({len(names)}), got {len(kp)} and {len(kd)}")
    bad = [n for n, p, d in zip(names, kp, kd)
           if n not in layout.joints or not (0 <= p < math.inf and 0 <= d < math.inf)]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"servo_gain_joints {bad or names}: each a movable joint once "
                         f"({layout.joints}), with finite gains ≥ 0")
    return {n: (p, d) for n, p, d in zip(names, kp, kd)}


def joint_sensors(model: Model, joints: JointLayout, settings: Settings) -> JointSensors:
    """What joint_states report of the ``joints``: the sensor parameters, and the model's
    effort offset (its overlay's)."""
    return JointSensors(
        model.effort_offset[joints.v_index], effort_noise=settings["effort_noise"],
        effort_noise_relative=settings["effort_noise_relative"],
        effort_resolution=settings["effort_resolution"],
        encoder_resolution=settings["encoder_resolution"],
        delay=settings["measurement_delay"], effort_delay=settings["effort_delay"],
        jitter=settings["publish_jitter"])
