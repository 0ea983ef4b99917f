# SPDX-License-Identifier: Apache-2.0
"""The control law's run-time parameters → ``JointController``: its construction options
and changes to a running one, validated before anything is set (no rclpy import).

The gains (``kp``, ``kd``, ``impedance.stiffness``, ``impedance.damping``, ``ki``,
``i_clamp``) are one value per commanded joint or one for all; a refusal names the parameter
and its bad entry. Impedance's stiffness and damping may be left empty: each joint's is then
that of a critically damped loop at ``impedance.frequency`` on its own inertia
(``stability.impedance_gains_for``), as one value cannot suit a shoulder and a wrist alike.
Gains that make the sampled loop unstable at the measured state period are refused naming
the bound (``check_stable_gains``); computed torque's that are unstable at every period a driver
plausibly has are refused at once, before a period is measured or a robot known
(``check_plausible_gains``: a parameter file with them does not start the node). The switches
(``friction_compensation``, ``soft_limits``,
``interpolate_from_desired_state``, ``refuse_infeasible_trajectories``), ``state_timeout``,
``effort_scale`` and the handling of joint states without velocities (``missing_velocity``,
``velocity_cutoff``) apply as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rb_dynamics.control import ControllerError, JointController, MissingVelocity, check_gains
from rb_dynamics.control.stability import (
    active_gain_problem,
    impedance_gains_for,
    implausible_gain_problem,
)

__all__ = ["GAINS", "IMPEDANCE", "LAW_PARAMETERS", "apply_law_changes", "check_command_hold",
           "check_law_changes", "check_plausible_gains", "check_stable_gains",
           "controller_options", "impedance_gains"]

# parameter → JointController.set_gains keyword; i_clamp alone may be inf (unclamped)
GAINS = {"kp": "kp", "kd": "kd", "impedance.stiffness": "stiffness",
         "impedance.damping": "damping", "ki": "ki", "i_clamp": "i_clamp"}
# the parameters of impedance's spring and damper (stiffness and damping empty: derived)
IMPEDANCE = ("impedance.stiffness", "impedance.damping", "impedance.frequency")
# the parameters whose change rebuilds a description refused for them
LAW_PARAMETERS = (*GAINS, "impedance.frequency", "mode")


def _check(name: str, value: Any, count: int | None) -> np.ndarray:
    return check_gains(value, name, count, allow_inf=GAINS[name] == "i_clamp")


def check_law_changes(changes: dict[str, Any], count: int | None) -> dict[str, np.ndarray]:
    """The gains among ``changes`` but impedance's (``impedance_gains``), validated for
    ``count`` commanded joints (None: values only), by ``set_gains`` keyword;
    ``ControllerError`` naming the parameter otherwise."""
    return {GAINS[name]: _check(name, value, count)
            for name, value in changes.items() if name in GAINS and name not in IMPEDANCE}


def impedance_gains(controller: JointController | None, value: Callable[[str], Any],
                    dynamics: Any = None) -> dict[str, np.ndarray]:
    """Impedance's ``stiffness`` and ``damping`` (``set_gains`` keywords, one per commanded
    joint) from the parameters (``value(name)``: the new value or the current one): given
    ones validated, empty ones derived (``stability.impedance_gains_for``; on ``dynamics``
    when given, else the controller's). Without a controller only the given values are
    checked (and nothing returned)."""
    count = None if controller is None else len(controller.joints)
    given = {name: _check(name, value(name), count) if len(value(name)) else None
             for name in IMPEDANCE[:2]}
    if controller is None:
        return {}
    stiffness, damping = impedance_gains_for(controller, value("impedance.frequency"),
                                             *given.values(), dynamics)
    return {"stiffness": stiffness, "damping": damping}


# the gains each mode's loop runs on (ki: both)
MODE_GAINS = {"computed_torque": ("kp", "kd", "ki"), "impedance": ("stiffness", "damping", "ki")}


def check_stable_gains(controller: JointController, changes: dict[str, Any],
                       gains: dict[str, np.ndarray], period: float,
                       dynamics: Any = None) -> None:
    """``ControllerError`` when ``changes`` (``gains``: their ``set_gains`` keywords) make
    the loop sampled every ``period`` s unstable (``stability.active_gain_problem``, on
    ``dynamics`` when given): in the mode switched to, and in every mode whose gains they
    change (refused when set, not when that mode is switched to)."""
    index = controller.index
    over_v = {}
    for keyword, values in gains.items():
        full = np.array(getattr(controller.law, keyword), float)
        full[index] = values
        over_v[keyword] = full
    modes = [mode for mode, own in MODE_GAINS.items() if set(own) & set(gains)]
    if "mode" in changes:
        modes.append(changes["mode"])
    for mode in modes:
        why = active_gain_problem(controller, period, mode, over_v, dynamics)
        if why is not None:
            raise ControllerError(why)


def check_plausible_gains(value: Callable[[str], Any]) -> None:
    """``ControllerError`` when ``kp``, ``kd``, ``ki`` (``value(name)``: the new value or the
    current one, valid ones) make computed torque's loop unstable at every state period
    (``stability.implausible_gain_problem``)."""
    why = implausible_gain_problem(value("kp"), value("kd"), value("ki"))
    if why is not None:
        raise ControllerError(why)


def check_command_hold(max_publish_rate: float, state_timeout: float) -> None:
    """``ControllerError`` when ``max_publish_rate`` (> 0) holds a command longer than
    ``state_timeout``: a torque held for longer than the node takes a state to be valid."""
    if max_publish_rate > 0.0 and 1.0 / max_publish_rate > state_timeout:
        raise ControllerError(
            f"max_publish_rate {max_publish_rate:g} holds each command {1 / max_publish_rate:.3g}"
            f" s, longer than state_timeout {state_timeout:g} s (a torque held longer than a "
            f"joint state is valid): at least {1 / state_timeout:.6g} Hz, or 0 (every state)")


def controller_options(value: Callable[[str], Any]) -> dict[str, Any]:
    """``JointController`` keywords from the parameters (``value(name)``)."""
    options = {keyword: list(value(name)) for name, keyword in GAINS.items()
               if name not in IMPEDANCE}  # impedance's need the controller: impedance_gains
    options.update(mode=value("mode"), friction_compensation=value("friction_compensation"),
                   soft_limits=value("soft_limits"),
                   interpolate_from_desired_state=value("interpolate_from_desired_state"),
                   refuse_infeasible=value("refuse_infeasible_trajectories"),
                   max_state_age=value("state_timeout"),
                   missing_velocity=MissingVelocity(value("missing_velocity"),
                                                    value("velocity_cutoff")))
    return options


def apply_law_changes(controller: JointController, changes: dict[str, Any],
                      gains: dict[str, np.ndarray]) -> bool:
    """Set validated ``changes`` (``gains`` from ``check_law_changes``) on ``controller``
    (under the control loop's lock); True when the mode changed."""
    if gains:
        controller.set_gains(**gains)
    mode_changed = "mode" in changes
    if mode_changed:
        controller.set_mode(changes["mode"])
    controller.configure(
        friction_compensation=changes.get("friction_compensation"),
        soft_limits=changes.get("soft_limits"),
        interpolate_from_desired_state=changes.get("interpolate_from_desired_state"),
        refuse_infeasible=changes.get("refuse_infeasible_trajectories"),
        max_state_age=changes.get("state_timeout"), effort_scale=changes.get("effort_scale"),
        missing_velocity=changes.get("missing_velocity"),
        velocity_cutoff=changes.get("velocity_cutoff"))
    return mode_changed
