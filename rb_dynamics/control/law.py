# SPDX-License-Identifier: Apache-2.0
"""The control law, free of ROS: τ from a state and a reference, in model coordinates.

One law (``ControlLaw``) serves the control node, ``~/simulate`` and the tests:

- ``gravity_compensation``: τ = g(q) (+ optional viscous and Coulomb friction compensation);
- ``computed_torque``: τ = M(q)(q̈_d + K_d(q̇_d − q̇) + K_p(q_d − q)) + C(q, q̇)q̇ + g(q),
  evaluated as one RNEA call with the commanded acceleration.

Vectors are over the model's velocity coordinates (fixed-base, 1-DoF joints: rad or m, rad/s
or m/s, N·m or N).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rb_dynamics.dynamics import Dynamics, PayloadEffort
from rb_dynamics.model import COULOMB_SMOOTHING, Model, check_choice

__all__ = [
    "CONTROL_MODES",
    "ControlLaw",
    "ControllerError",
    "check_gains",
    "clamp_effort",
    "friction_compensation",
    "position_error",
    "wrap_angle",
]

CONTROL_MODES = ("gravity_compensation", "computed_torque")


def wrap_angle(x: np.ndarray) -> np.ndarray:
    """Wrap angles to (−π, π]."""
    wrapped = np.mod(x + np.pi, 2.0 * np.pi) - np.pi
    return np.where(wrapped == -np.pi, np.pi, wrapped)


def _continuous_mask(model: Model) -> np.ndarray:
    """Over v: True on the coordinates of continuous (unbounded revolute) joints."""
    mask = np.zeros(model.nv, dtype=bool)
    mask[model.velocity_indices(model.continuous_joints)] = True
    return mask


def position_error(
    model: Model, q_desired: np.ndarray, q: np.ndarray, continuous: np.ndarray | None = None
) -> np.ndarray:
    """q_d − q, wrapped to (−π, π] on continuous joints."""
    error = np.asarray(q_desired, dtype=float) - q
    if continuous is None:
        continuous = _continuous_mask(model)
    if continuous.any():
        error = np.where(continuous, wrap_angle(error), error)
    return error


def clamp_effort(model: Model, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """τ clipped to the URDF effort limits, and a mask of the joints that were clipped."""
    clipped = np.clip(tau, -model.effort_limit, model.effort_limit)
    return clipped, clipped != tau


def friction_compensation(
    model: Model,
    v: np.ndarray,
    viscous: bool = True,
    coulomb: bool = True,
    smoothing_velocity: float = COULOMB_SMOOTHING,
) -> np.ndarray:
    """Damping·q̇ + friction·tanh(q̇/ε), N·m or N over v: the URDF <dynamics> losses at
    velocity ``v``, smoothed through zero as the simulator models them (ε = ``smoothing_velocity``,
    rad/s or m/s)."""
    tau = np.zeros(model.nv)
    if viscous:
        tau += model.damping * v
    if coulomb:
        tau += model.friction * np.tanh(np.asarray(v) / smoothing_velocity)
    return tau


class ControllerError(ValueError):
    """Input the controller refuses; the message says what is wrong and nothing changed."""


@dataclass
class ControlLaw:
    """The control law: τ from a state (q, q̇) and a reference (q_d, q̇_d, q̈_d), model order.

    ``kp``, ``kd`` are per-coordinate gains (1/s², 1/s). With ``friction_compensation`` the
    URDF losses are added, at the measured velocity in gravity compensation and at the
    reference velocity in computed torque: compensating friction from the measured (noisy, a
    step late) velocity is a high-gain positive feedback on light links.

    ``payload`` (a ``rb_dynamics.dynamics.PayloadEffort`` built for ``dynamics.model``) adds a
    payload the model does not carry: its gravity in gravity compensation, its inverse
    dynamics at the commanded acceleration in computed torque. A new payload is a new object
    assigned whole, so the law never sees half of one.
    """

    dynamics: Dynamics
    mode: str = "gravity_compensation"
    kp: np.ndarray | None = None
    kd: np.ndarray | None = None
    friction_compensation: bool = False
    payload: PayloadEffort | None = None

    def __post_init__(self) -> None:
        model = self.dynamics.model
        check_choice(self.mode, CONTROL_MODES, "mode", ControllerError)
        self.kp = np.zeros(model.nv) if self.kp is None else np.asarray(self.kp, float)
        self.kd = np.zeros(model.nv) if self.kd is None else np.asarray(self.kd, float)
        self.continuous = _continuous_mask(model)
        self._wrap = bool(self.continuous.any())

    def effort(self, q: np.ndarray, v: np.ndarray, q_d: np.ndarray | None = None,
               v_d: np.ndarray | None = None,
               a_d: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """(τ, q_d − q): τ unclamped, the position error None in gravity compensation."""
        model = self.dynamics.model
        payload = self.payload
        if self.mode == "gravity_compensation":
            tau, error, v_friction = self.dynamics.gravity(q), None, v
            if payload is not None:
                tau = tau + payload.gravity(q)
        else:
            error = q_d - q
            if self._wrap:
                error = position_error(model, q_d, q, self.continuous)
            a_command = a_d + self.kd * (v_d - v) + self.kp * error
            tau = self.dynamics.rnea(q, v, a_command)
            if payload is not None:
                tau = tau + payload.effort(q, v, a_command)
            v_friction = v_d
        if self.friction_compensation:
            tau = tau + friction_compensation(model, v_friction)
        return tau, error


def check_gains(gains, name: str, count: int | None = None) -> np.ndarray:
    """Gains as a finite, non-negative array: one value (every joint) or ``count`` values;
    without a ``count`` (no model yet) only the values are checked."""
    try:
        values = np.atleast_1d(np.asarray(gains, dtype=float))
    except (TypeError, ValueError):
        raise ControllerError(f"{name} must be numbers, got {gains!r}") from None
    if values.ndim != 1 or values.size == 0:
        raise ControllerError(f"{name} needs at least one value")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ControllerError(f"{name} must be finite and ≥ 0, got {values.tolist()}")
    if count is not None and values.size not in (1, count):
        raise ControllerError(f"{name} needs 1 or {count} values (one per commanded joint), "
                              f"got {values.size}")
    return np.full(count, values[0]) if count is not None and values.size == 1 else values
