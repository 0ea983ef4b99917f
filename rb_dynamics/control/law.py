# SPDX-License-Identifier: Apache-2.0
"""The control law, free of ROS: τ from a state and a reference, in model coordinates.

One law (``ControlLaw``) serves the control node, ``~/simulate`` and the tests:

- ``gravity_compensation``: τ = g(q) (+ optional friction compensation);
- ``computed_torque``: τ = M(q)(q̈_d + K_d(q̇_d − q̇) + K_p(q_d − q) + i) + C(q, q̇)q̇ + g(q),
  evaluated as one RNEA call with the commanded acceleration;
- ``impedance``: τ = g(q) + K(q_d − q) + D(q̇_d − q̇) + i, a joint-space spring and damper
  toward the reference on top of gravity compensation;
- ``cartesian_impedance``: a link held at a pose by a spring and damper in space
  (``cartesian.CartesianImpedance``, set as ``ControlLaw.cartesian``).

``i`` is the integral action (``ControlLaw.integrate``): off unless ``ki`` > 0. With a
trajectory the sampled point's effort is added to τ as feed-forward (``feedforward``).

Vectors are over the model's velocity coordinates (fixed-base, 1-DoF joints: rad or m, rad/s
or m/s, N·m or N).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from rb_dynamics.dynamics import Dynamics, PayloadEffort, friction_effort
from rb_dynamics.model import Model, check_choice

from .drive import DriveConventions

__all__ = [
    "CONTROL_MODES",
    "REFERENCE_MODES",
    "CartesianLaw",
    "ControlLaw",
    "ControllerError",
    "check_gains",
    "position_error",
    "wrap_angle",
]

CONTROL_MODES = ("gravity_compensation", "computed_torque", "impedance", "cartesian_impedance")
# the modes that follow a reference (q_d, q̇_d, q̈_d)
REFERENCE_MODES = ("computed_torque", "impedance")


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


class ControllerError(ValueError):
    """Input the controller refuses; the message says what is wrong and nothing changed."""


class CartesianLaw(Protocol):
    """What ``ControlLaw`` calls of its Cartesian law, ``cartesian.CartesianImpedance`` (which
    imports this module's checks: this module names the calls, not the class). ``dynamics``,
    ``payload`` and ``friction_compensation`` are set before each evaluation; ``target`` is the
    pose held (4×4, base; None before the first hold); ``hold(q)`` holds the link's pose at
    ``q``, keeping a goal asked since ``forget_goal()`` (a hold was asked for); ``effort(q, v,
    dt)`` returns τ over v first, the target moved ``dt`` s toward its goal."""

    dynamics: Dynamics
    payload: PayloadEffort | None
    friction_compensation: bool
    target: np.ndarray | None
    link: str

    def hold(self, q: np.ndarray) -> None: ...

    def set_target(self, pose: np.ndarray) -> None: ...

    def take_settings(self, other: CartesianLaw) -> None: ...

    def forget_goal(self) -> None: ...

    def effort(self, q: np.ndarray, v: np.ndarray, dt: float = 0.0
               ) -> tuple[np.ndarray, object]: ...


@dataclass
class ControlLaw:
    """The control law: τ from a state (q, q̇) and a reference (q_d, q̇_d, q̈_d), model order.

    Gains are per-coordinate arrays over v (``check_gains`` validates them):

    - ``kp``, ``kd`` (computed torque): 1/s², 1/s;
    - ``stiffness`` K, ``damping`` D (impedance): N·m/rad and N·m·s/rad (N/m and N·s/m on
      prismatic joints);
    - ``ki``, ``i_clamp`` (integral action, ``set_integral_gains``): the integral term
      i = clamp(Σ ki·(q_d − q)·dt, ±i_clamp). In computed torque i is an acceleration added to
      the commanded acceleration (ki in 1/s³, i_clamp in rad/s² or m/s²); in impedance it is
      an effort added to τ (ki in N·m/(rad·s), i_clamp in N·m, or N/(m·s) and N).

    With ``friction_compensation`` the model's joint friction f(q̇) is added
    (``dynamics.friction_effort``: the URDF's viscous and Coulomb terms, an overlay's Stribeck
    term; the law the simulator applies) at the reference velocity when following a
    reference: a feed-forward, which cannot destabilise the loop. Gravity compensation has no
    reference: there f is evaluated at the measured velocity, a positive velocity feedback
    that leaves the joint with its true friction minus the compensated one as its only
    damping, so it runs away wherever the compensated friction exceeds the true one. A URDF's
    ``<dynamics>`` promises nothing of the sort (simulators' values, often several times the
    arm's), so gravity compensation adds only the friction an overlay gave
    (``Model.identified_friction``: identified on the arm), and none on the other joints
    (docs/drives.md, "Friction compensation and stability").

    ``drive`` (``DriveConventions``) says what the drive adds to a command itself: on a drive
    that compensates gravity the command is τ − g(q) of the model (a payload's gravity stays
    in it), and on one that compensates friction no friction is added.

    ``payload`` (a ``rb_dynamics.dynamics.PayloadEffort`` built for ``dynamics.model``) adds a
    payload the model does not carry: its gravity in gravity compensation and impedance, its
    inverse dynamics at the commanded acceleration in computed torque. A new payload is a new
    object assigned whole, so the law never sees half of one.

    ``cartesian`` (a ``CartesianImpedance``, typed by what this class calls of it,
    ``CartesianLaw``; None: the mode is refused) is the law of ``cartesian_impedance``,
    evaluated with this law's dynamics, payload and friction switch (at the measured velocity
    with both stiffnesses 0, hand guiding, as in gravity compensation; else at the target's
    velocity, 0). Each new hold position ``q_d`` (a new object: activation, a mode switch, a
    collision's hold) makes it hold the link where it is, as the joint modes hold the measured
    position.
    """

    dynamics: Dynamics
    mode: str = "gravity_compensation"
    kp: np.ndarray | None = None
    kd: np.ndarray | None = None
    friction_compensation: bool = False
    payload: PayloadEffort | None = None
    stiffness: np.ndarray | None = None
    damping: np.ndarray | None = None
    cartesian: CartesianLaw | None = None
    drive: DriveConventions = DriveConventions()

    def __post_init__(self) -> None:
        model = self.dynamics.model
        check_choice(self.mode, CONTROL_MODES, "mode", ControllerError)
        nv = model.nv
        self.kp = np.zeros(nv) if self.kp is None else np.asarray(self.kp, float)
        self.kd = np.zeros(nv) if self.kd is None else np.asarray(self.kd, float)
        self.stiffness = np.zeros(nv) if self.stiffness is None \
            else np.asarray(self.stiffness, float)
        self.damping = np.zeros(nv) if self.damping is None else np.asarray(self.damping, float)
        self.continuous = _continuous_mask(model)
        self._wrap = bool(self.continuous.any())
        self.ki = np.zeros(nv)
        self.i_clamp = np.full(nv, np.inf)
        self.integrating = False  # some ki > 0
        # the integral term i (see the class docstring) and the coordinates whose last effort
        # was saturated: their integral is held (anti-windup by conditional integration)
        self.integral = np.zeros(nv)
        self.saturated = np.zeros(nv, dtype=bool)
        self._cartesian_hold: np.ndarray | None = None  # the q_d the Cartesian target held at

    @property
    def timed(self) -> bool:
        """Whether ``effort`` needs the time between states: the integral term and the
        Cartesian target's rate limit do."""
        return self.integrating or self.mode == "cartesian_impedance"

    def set_integral_gains(self, ki: np.ndarray, i_clamp: np.ndarray) -> None:
        """Integral gains and clamps over v (validated by the caller, ``check_gains``); the
        integral restarts from zero."""
        self.ki, self.i_clamp = np.asarray(ki, float), np.asarray(i_clamp, float)
        self.integrating = bool(self.ki.any())
        self.reset_integral()

    def reset_integral(self) -> None:
        """Restart the integral term from zero (a new trajectory, mode or activation)."""
        self.integral[:] = 0.0
        self.saturated[:] = False

    def integrate(self, error: np.ndarray, dt: float) -> None:
        """i ← clamp(i + ki·error·dt, ±i_clamp) over ``dt`` s, except on the coordinates whose
        last effort was saturated (``saturated``): their term is held, so that a command at
        its limit does not wind the integral up. ``dt`` ≤ 0 changes nothing."""
        if not (self.integrating and dt > 0):
            return
        step = self.ki * error
        step *= dt
        step[self.saturated] = 0.0
        integral = self.integral
        integral += step
        np.clip(integral, -self.i_clamp, self.i_clamp, out=integral)

    def gravity_effort(self, q: np.ndarray) -> np.ndarray:
        """g(q) of the model and the payload, over v (N·m or N): what holds the arm still."""
        tau = self.dynamics.gravity(q)
        return tau if self.payload is None else tau + self.payload.gravity(q)

    def holding_command(self, q: np.ndarray) -> np.ndarray:
        """The command that holds the arm still at ``q``, over v: ``gravity_effort`` less
        what the drive adds itself (``drive``: the model's g(q) on a drive that compensates
        gravity)."""
        if not self.drive.compensates_gravity:
            return self.gravity_effort(q)
        return np.zeros(self.dynamics.model.nv) if self.payload is None \
            else self.payload.gravity(q)

    def effort(self, q: np.ndarray, v: np.ndarray, q_d: np.ndarray | None = None,
               v_d: np.ndarray | None = None, a_d: np.ndarray | None = None,
               feedforward: np.ndarray | None = None,
               dt: float = 0.0) -> tuple[np.ndarray, np.ndarray | None]:
        """(τ, q_d − q): τ unclamped, the position error None in gravity compensation.

        Following a reference, the integral term first integrates the error over ``dt`` s
        (``integrate``; 0: the term is used as it stands) and ``feedforward`` (an effort over
        v, N·m or N; None: none) is added to τ. Gravity compensation ignores both.
        """
        model = self.dynamics.model
        payload = self.payload
        mode = self.mode
        drive = self.drive
        if mode == "cartesian_impedance":  # on a drive that adds g(q) itself, less the model's
            return drive.command(self._cartesian_effort(q, v, q_d, dt),
                                 self.dynamics.gravity(q)), None
        if mode == "gravity_compensation":
            tau, error, v_friction = self.holding_command(q), None, v
        else:
            error = q_d - q
            if self._wrap:
                error = position_error(model, q_d, q, self.continuous)
            if self.integrating:
                self.integrate(error, dt)
            if mode == "computed_torque":
                a_command = a_d + self.kd * (v_d - v) + self.kp * error
                if self.integrating:
                    a_command += self.integral
                tau = self.dynamics.rnea(q, v, a_command)
                if drive.compensates_gravity:
                    tau = drive.command(tau, self.dynamics.gravity(q))
                if payload is not None:
                    tau = tau + payload.effort(q, v, a_command)
            else:  # impedance
                tau = self.stiffness * error
                tau += self.damping * (v_d - v)
                tau += self.holding_command(q)
                if self.integrating:
                    tau += self.integral
            if feedforward is not None:
                tau = tau + feedforward
            v_friction = v_d
        if self.friction_compensation and not drive.compensates_friction:
            friction = friction_effort(model, v_friction)
            if error is None:  # at the measured velocity: identified friction only
                friction = np.where(model.identified_friction, friction, 0.0)
            tau = tau + friction
        return tau, error


    def hold_asked(self) -> None:
        """A new hold begins at the next effort: the Cartesian law then drops the goals asked
        before now (``CartesianImpedance.forget_goal``)."""
        if self.cartesian is not None:
            self.cartesian.forget_goal()

    def _cartesian_effort(self, q: np.ndarray, v: np.ndarray, q_hold: np.ndarray | None,
                          dt: float) -> np.ndarray:
        """τ of ``cartesian`` (class docstring), the target held anew for a new ``q_hold``."""
        cartesian = self.cartesian
        if cartesian is None:
            raise ControllerError("mode cartesian_impedance: no Cartesian law is set up "
                                  "(cartesian.link)")
        cartesian.dynamics, cartesian.payload = self.dynamics, self.payload
        cartesian.friction_compensation = self.friction_compensation \
            and not self.drive.compensates_friction
        if q_hold is not self._cartesian_hold or cartesian.target is None:
            cartesian.hold(q)
            self._cartesian_hold = q_hold
        return cartesian.effort(q, v, dt)[0]


def check_gains(gains, name: str, count: int | None = None, allow_inf: bool = False
                ) -> np.ndarray:
    """Gains as a non-negative array, finite unless ``allow_inf`` (a clamp, where inf is
    "unclamped"): one value (every joint) or ``count`` values; without a ``count`` (no model
    yet) only the values are checked. Otherwise ``ControllerError`` naming ``name`` and the
    first bad entry ("kp must be finite and ≥ 0: kp[2] = -1.0")."""
    try:
        values = np.atleast_1d(np.asarray(gains, dtype=float))
    except (TypeError, ValueError):
        raise ControllerError(f"{name} must be numbers, got {gains!r}") from None
    if values.ndim != 1 or values.size == 0:
        raise ControllerError(f"{name} needs at least one value")
    bad = np.isnan(values) | (values < 0)
    if not allow_inf:
        bad |= np.isinf(values)
    if bad.any():
        k = int(np.argmax(bad))
        kind = "≥ 0 (inf allowed)" if allow_inf else "finite and ≥ 0"
        raise ControllerError(f"{name} must be {kind}: {name}[{k}] = {values[k]}")
    if count is not None and values.size not in (1, count):
        raise ControllerError(f"{name} needs 1 or {count} values (one per commanded joint), "
                              f"got {values.size}")
    return np.full(count, values[0]) if count is not None and values.size == 1 else values
