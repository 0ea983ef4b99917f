# SPDX-License-Identifier: Apache-2.0
"""Joint drives: what a robot's motor controllers do with position, velocity and effort commands.

Per movable joint, with its latest command (``CommandLayout.decode``):

    τ = τ_cmd + kp (q_cmd − q) + kd (q̇_ref − q̇) [+ g(q)],   clamped to ±(URDF effort limit)

- τ_cmd: the effort command (0 when none);
- kp (q_cmd − q): only with a position command;
- kd (q̇_ref − q̇): with a position or a velocity command; q̇_ref is the velocity command, 0 when
  only a position is commanded (the drive damps towards rest at the target);
- g(q): gravity feed-forward on the servoed joints, off by default, because a real drive does
  not know the load's gravity; without it a joint under a load ℓ settles ℓ/kp off target
  (panda's joint 2 at 10 Hz: about 3 mrad).

A drive that compensates gravity (or friction) itself, as Franka's, UR e-Series' in torque
control and KUKA FRI's torque mode do, adds ``compensation(q, q̇)`` (its g(q), or its
friction f(q̇)) to the effort of every joint without a servo, commanded or not: a command
of zero holds the arm (docs/drives.md).

Commands are clamped to the layout's ranges first (block min/max and URDF limits). A message
that names a joint replaces its whole command (the fields it does not set are dropped), so a
controller switching from velocity to position control leaves no stale velocity behind.
``command_timeout`` seconds (simulated) after a joint's last command its effort command falls
to 0 and its velocity command to 0 (the drive brakes); a position command is held, as a
position-controlled drive holds its last set-point. At start and on reset, a joint with a
position interface holds its initial position (its command ``initial_value`` if the block
gives one), a velocity-only joint brakes, an effort joint is limp.

Gains, per joint, from a bandwidth ω and damping ratio ζ and the joint's own inertia M_ii at
the initial pose (the diagonal of CRBA's M, mimic followers included):
kp = M_ii ω², kd = 2 ζ M_ii ω, so every joint, a 30 g finger or a 3 kg·m² shoulder, responds
like a ζ-damped oscillator of natural frequency ω (critically damped at ζ = 1: 2 % settling in
about 5.8/ω). Coupling makes the real modes faster than ω (a joint alone is lighter than M_ii
when its neighbours move); ``step_spectral_radius`` checks the linearised closed loop of the
chosen integrator at the given step with that coupling (and a safety margin on the inertia).
For one joint, semi-implicit Euler is stable iff (ωh)² + 4ζωh < 4 (ωh < 0.83 at ζ = 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from rb_dynamics.dynamics import Dynamics, ReferenceDynamics, friction_effort
from rb_dynamics.dynamics import reference as dynamics
from rb_dynamics.model import (
    EFFORT,
    POSITION,
    VELOCITY,
    CommandLayout,
    JointCommand,
    Model,
    check_choice,
    check_positive,
    clamp_effort,
)

from .simulator import INTEGRATORS, Simulator

__all__ = [
    "DEFAULT_BANDWIDTH",
    "DEFAULT_DAMPING_RATIO",
    "STABILITY_MARGIN",
    "JointDrives",
    "ServoGains",
    "ServoSimulator",
    "make_drives",
    "max_stable_bandwidth",
    "servo_gains",
    "step_spectral_radius",
]

DEFAULT_BANDWIDTH = 2 * math.pi * 10.0  # rad/s: a 10 Hz position loop, like an industrial drive
DEFAULT_DAMPING_RATIO = 1.0
# the check assumes the effective inertia may drop to half its value at the initial pose
STABILITY_MARGIN = 2.0


class ServoGains:
    """kp, kd per joint of a layout (N/m or N·m/rad, and N·s/m or N·m·s/rad)."""

    def __init__(self, kp: np.ndarray, kd: np.ndarray):
        self.kp, self.kd = np.asarray(kp, dtype=float), np.asarray(kd, dtype=float)
        if self.kp.shape != self.kd.shape or not (
                np.all(np.isfinite(self.kp)) and np.all(np.isfinite(self.kd))
                and np.all(self.kp >= 0) and np.all(self.kd >= 0)):
            raise ValueError("servo gains: kp and kd must be finite, non-negative, one per joint")


def servo_gains(model: Model, q: np.ndarray, joints: list[str],
                bandwidth: float = DEFAULT_BANDWIDTH,
                damping_ratio: float = DEFAULT_DAMPING_RATIO,
                mass_matrix: np.ndarray | None = None,
                overrides: Mapping[str, tuple[float, float]] | None = None) -> ServoGains:
    """kp = M_ii ω², kd = 2ζ M_ii ω at configuration q; ``overrides``: {joint: (kp, kd)}."""
    check_positive(bandwidth, "servo bandwidth")
    check_positive(damping_ratio, "servo damping_ratio")
    M = dynamics.crba(model, q) if mass_matrix is None else mass_matrix
    inertia = np.diag(M)[model.velocity_indices(joints)]
    kp = inertia * bandwidth**2
    kd = 2 * damping_ratio * inertia * bandwidth
    for name, (p, d) in (overrides or {}).items():
        if name not in joints:
            raise ValueError(f"servo gains: {name!r} is not a movable joint ({joints})")
        kp[joints.index(name)], kd[joints.index(name)] = p, d
    return ServoGains(kp, kd)


def step_spectral_radius(model: Model, q: np.ndarray, joints: list[str], gains: ServoGains,
                         stiff: np.ndarray, damped: np.ndarray, dt: float,
                         integrator: str = "semi_implicit_euler",
                         mass_matrix: np.ndarray | None = None,
                         margin: float = STABILITY_MARGIN) -> float:
    """Spectral radius of one step of the servo loop linearised at q (stable when ≤ 1).

    τ = −K δq − D δv (K = kp on the ``stiff`` joints, D = kd on the ``damped`` ones) is held
    over the step, as the simulator does; the other joints are free. With W = margin·M⁻¹:
    semi-implicit Euler v⁺ = v + hWτ, q⁺ = q + hv⁺; rk4 (exact for a held force on this
    double integrator) v⁺ = v + hWτ, q⁺ = q + hv + h²/2·Wτ.
    """
    M = dynamics.crba(model, q) if mass_matrix is None else mass_matrix
    nv, vi = model.nv, model.velocity_indices(joints)
    K, D = np.zeros((nv, nv)), np.zeros((nv, nv))
    K[vi, vi] = np.where(stiff, gains.kp, 0.0)
    D[vi, vi] = np.where(damped, gains.kd, 0.0)
    W = margin * np.linalg.inv(M)
    force = -np.hstack([W @ K, W @ D])  # Wτ as a function of (δq, δv)
    eye = np.eye(nv)
    v_next = np.hstack([np.zeros((nv, nv)), eye]) + dt * force
    if check_choice(integrator, INTEGRATORS, "integrator") == "semi_implicit_euler":
        q_next = np.hstack([eye, np.zeros((nv, nv))]) + dt * v_next
    else:  # rk4
        q_next = np.hstack([eye, dt * eye]) + 0.5 * dt**2 * force
    return float(np.max(np.abs(np.linalg.eigvals(np.vstack([q_next, v_next])))))


def max_stable_bandwidth(model: Model, q: np.ndarray, layout: CommandLayout, dt: float,
                         integrator: str = "semi_implicit_euler",
                         damping_ratio: float = DEFAULT_DAMPING_RATIO,
                         mass_matrix: np.ndarray | None = None,
                         margin: float = STABILITY_MARGIN) -> float:
    """The largest ω whose default gains keep every servo loop stable (bisection, 1 %)."""
    M = dynamics.crba(model, q) if mass_matrix is None else mass_matrix
    stiff, damped = _servoed(layout)

    def radius(omega: float) -> float:
        gains = servo_gains(model, q, layout.joints, omega, damping_ratio, M)
        return step_spectral_radius(model, q, layout.joints, gains, stiff, damped, dt,
                                    integrator, M, margin)

    low, high = 0.0, 4.0 / dt  # (ωh)² + 4ζωh < 4 fails well before ωh = 4
    while high - low > 0.01 * high:
        mid = 0.5 * (low + high)
        low, high = (mid, high) if radius(mid) <= 1.0 + 1e-9 else (low, mid)
    return low


def _servoed(layout: CommandLayout) -> tuple[np.ndarray, np.ndarray]:
    """Joints that may run a position loop (stiffness) and any servo loop (damping)."""
    stiff = layout.allowed[POSITION].copy()
    return stiff, stiff | layout.allowed[VELOCITY]


class JointDrives:
    """The drives of a layout's joints: commands in, efforts out, vectorised over joints."""

    def __init__(self, model: Model, layout: CommandLayout, gains: ServoGains, *,
                 command_timeout: float = 0.5,
                 gravity: Callable[[np.ndarray], np.ndarray] | None = None,
                 compensation: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None):
        n = len(layout.joints)
        if gains.kp.shape != (n,):
            raise ValueError(f"servo gains: expected {n} values (one per joint of the layout)")
        if not command_timeout > 0:
            raise ValueError(f"command_timeout must be positive, got {command_timeout}")
        self.model, self.layout, self.gains = model, layout, gains
        self.command_timeout = float(command_timeout)
        self.gravity = gravity  # g(q) feed-forward on the servoed joints; None: off
        # what the drive adds itself to the efforts of the joints without a servo, over the
        # model's v (its gravity, its friction compensation); None: nothing
        self.compensation = compensation
        self.v_index = model.velocity_indices(layout.joints)
        self.q_index = model.position_indices(layout.joints)
        self.effort_limit = model.effort_limit[self.v_index]
        self._lowest = -self.effort_limit
        self.active = np.zeros((3, n), dtype=bool)  # which fields the joint's command sets
        self.target = np.zeros((3, n))
        self.stamp = np.zeros(n)  # simulated time of each joint's last command
        self._servoing = False  # any position or velocity command active (kept by the setters)
        # efforts_over's answer while every effort command is fresh, and the oldest effort
        # command's stamp (None: a setter changed the commands since)
        self._held: np.ndarray | None = None
        self._oldest = math.inf
        # what ``command`` writes into the fields a command leaves unset
        self._unset = np.clip(0.0, layout.lower, layout.upper)

    def hold(self, q: np.ndarray, t: float = 0.0) -> None:
        """The start-up command: hold position / brake / limp, or the block's initial command."""
        allowed = self.layout.allowed
        self.active[:] = False
        self.active[POSITION] = allowed[POSITION]
        self.active[VELOCITY] = allowed[VELOCITY] & ~allowed[POSITION]
        self.target[:] = 0.0
        self.target[POSITION] = np.clip(q[self.q_index], self.layout.lower[POSITION],
                                        self.layout.upper[POSITION])
        initial = self.layout.initial_command
        given = np.isfinite(initial) & allowed
        if given.any():
            joints = given.any(axis=0)
            self.active[:, joints] = given[:, joints]
            self.target[given] = np.clip(initial, self.layout.lower, self.layout.upper)[given]
        self.stamp[:] = t
        self._changed()

    def command(self, cmd: JointCommand, t: float) -> np.ndarray:
        """Apply a decoded command at time t; returns the (3, k) mask of values clamped."""
        given = np.isfinite(cmd.values) & self.layout.allowed[:, cmd.index]
        lower, upper = self.layout.lower[:, cmd.index], self.layout.upper[:, cmd.index]
        values = np.clip(np.where(given, cmd.values, 0.0), lower, upper)
        clamped = given & (values != cmd.values)
        joints = given.any(axis=0)
        columns = cmd.index[joints]
        self.active[:, columns] = given[:, joints]
        self.target[:, columns] = values[:, joints]
        self.stamp[columns] = t
        self._changed()
        return clamped

    def command_efforts(self, columns: np.ndarray, values: np.ndarray, t: float) -> np.ndarray:
        """``command`` of a decoded command that sets only efforts: effort ``values`` (k,) for
        the layout's joints ``columns`` (k,), each of which takes efforts; NaN leaves a joint's
        command as it is, a number replaces it (clamped to the joint's effort range). The
        per-message path of an effort array; returns the (k,) mask of the values clamped."""
        given = ~np.isnan(values)
        # the command range (block min/max within the URDF limit), as ``command`` clips
        lower, upper = self.layout.lower[EFFORT, columns], self.layout.upper[EFFORT, columns]
        clipped = np.clip(values, lower, upper)
        clamped = given & (clipped != values)
        if not given.all():
            columns, clipped = columns[given], clipped[given]
        self.active[:, columns] = _EFFORT_ONLY
        self.target[:EFFORT, columns] = self._unset[:EFFORT, columns]
        self.target[EFFORT, columns] = clipped
        self.stamp[columns] = t
        self._changed()
        return clamped

    def _changed(self) -> None:
        """After a setter: what the commands now servo, and no held efforts yet."""
        self._servoing = bool(self.active[:EFFORT].any())
        self._held = None

    @property
    def depend_on_state(self) -> bool:
        """Whether the efforts depend on the state: a servoed joint, or a drive that adds its
        own compensation."""
        return self._servoing or self.compensation is not None

    def efforts_over(self, starts: np.ndarray) -> np.ndarray:
        """``effort`` at the steps starting at the times ``starts`` (steps,) while the efforts
        do not depend on the state (``depend_on_state`` False): the effort commands, each 0
        once older than ``command_timeout``, clamped; (nv,) when none times out over the steps,
        else (steps, nv). The same operations as ``joint_efforts``; between commands,
        while none times out, the same read-only array (the per-step path of a lock-step
        simulator: no array work)."""
        if self._held is None:
            self._held = self._efforts(self.active[EFFORT])
            self._held.flags.writeable = False
            stamps = self.stamp[self.active[EFFORT]]
            self._oldest = float(stamps.min()) if stamps.size else math.inf
        # t − stamp falls as the stamp grows: the oldest command is the first to time out
        if float(starts[-1]) - self._oldest <= self.command_timeout:
            return self._held
        fresh = (starts[:, None] - self.stamp) <= self.command_timeout
        return self._efforts(self.active[EFFORT] & fresh)

    def _efforts(self, on: np.ndarray) -> np.ndarray:
        """The effort commands where ``on`` (n,) or (steps, n), clamped, over the model's v."""
        tau = self.target[EFFORT] * on
        tau = clamp_effort(tau, self.effort_limit, tau, lower=self._lowest)
        out = np.zeros(tau.shape[:-1] + (self.model.nv,))
        out[..., self.v_index] = tau
        return out

    def joint_efforts(self, q: np.ndarray, v: np.ndarray, t: float) -> np.ndarray:
        """τ per joint of the layout (see the module docstring), clamped to the effort limits."""
        if not self._servoing:  # efforts only (no block): the cheap path, every step
            tau = self.target[EFFORT] * (self.active[EFFORT] & (t - self.stamp
                                                                <= self.command_timeout))
            if self.compensation is not None:
                tau = tau + self.compensation(q, v)[self.v_index]
            return clamp_effort(tau, self.effort_limit, tau, lower=self._lowest)
        fresh = (t - self.stamp) <= self.command_timeout
        position, velocity, effort = self.active
        servo = position | velocity
        error = np.where(position, self.target[POSITION] - q[self.q_index], 0.0)
        v_ref = np.where(velocity & fresh, self.target[VELOCITY], 0.0)
        tau = (np.where(effort & fresh, self.target[EFFORT], 0.0) + self.gains.kp * error
               + np.where(servo, self.gains.kd * (v_ref - v[self.v_index]), 0.0))
        if self.gravity is not None and servo.any():
            tau = tau + np.where(servo, self.gravity(q)[self.v_index], 0.0)
        if self.compensation is not None:
            tau = tau + np.where(servo, 0.0, self.compensation(q, v)[self.v_index])
        return clamp_effort(tau, self.effort_limit, tau, lower=self._lowest)

    def effort(self, q: np.ndarray, v: np.ndarray, t: float) -> np.ndarray:
        """τ over the model's velocity coordinates (zero on joints without a drive)."""
        tau = np.zeros(self.model.nv)
        tau[self.v_index] = self.joint_efforts(q, v, t)
        return tau

    def modes(self) -> dict[str, tuple[str, ...]]:
        """The fields each joint's current command sets (for diagnostics)."""
        names = ("position", "velocity", "effort")
        return {n: tuple(f for f, on in zip(names, self.active[:, j]) if on)
                for j, n in enumerate(self.layout.joints)}


_EFFORT_ONLY = np.array([[False], [False], [True]])  # a joint's active fields: the effort


def make_drives(model: Model, layout: CommandLayout, q0: np.ndarray, *, dt: float,
                integrator: str = "semi_implicit_euler",
                bandwidth: float = DEFAULT_BANDWIDTH,
                damping_ratio: float = DEFAULT_DAMPING_RATIO,
                overrides: Mapping[str, tuple[float, float]] | None = None,
                command_timeout: float = 0.5, gravity_feedforward: bool = False,
                drive_gravity: bool = False, drive_friction: bool = False,
                dynamics: Dynamics | None = None,
                margin: float = STABILITY_MARGIN) -> JointDrives:
    """Drives with default gains at q0, checked for stability at (dt, integrator).

    Raises ValueError naming ``servo_bandwidth`` and the largest stable value when the servo
    loop would diverge. ``dynamics``: the model's dynamics object (default: the reference).
    ``drive_gravity`` / ``drive_friction``: the drives add the model's g(q) / friction f(q̇)
    to the joints without a servo (a drive that compensates them itself).
    """
    dyn = dynamics or ReferenceDynamics(model)
    M = dyn.crba(q0)
    gains = servo_gains(model, q0, layout.joints, bandwidth, damping_ratio, M, overrides)
    stiff, damped = _servoed(layout)
    if damped.any():
        inertia = np.diag(M)[model.velocity_indices(layout.joints)]
        light = [n for n, m, s in zip(layout.joints, inertia, damped) if s and not m > 0]
        if light:
            raise ValueError(f"joints {light} have no inertia: a servo cannot drive them")
        radius = step_spectral_radius(model, q0, layout.joints, gains, stiff, damped, dt,
                                      integrator, M, margin)
        if radius > 1.0 + 1e-9:
            best = max_stable_bandwidth(model, q0, layout, dt, integrator, damping_ratio, M,
                                        margin)
            raise ValueError(
                f"servo_bandwidth {bandwidth:.4g} rad/s (gains {dict(overrides or {})}) is "
                f"unstable at dt={dt} with {integrator} (step spectral radius {radius:.4f}, "
                f"inertia margin {margin}); the largest stable bandwidth here is "
                f"{best:.4g} rad/s")
    # looked up at each call: a LiveDynamics rebinds its methods when its kernels arrive
    gravity = (lambda q: dyn.gravity(q)) if gravity_feedforward else None
    drives = JointDrives(model, layout, gains, command_timeout=command_timeout, gravity=gravity,
                         compensation=drive_compensation(dyn, drive_gravity, drive_friction))
    drives.hold(q0)
    return drives


def drive_compensation(dyn: Dynamics, gravity: bool, friction: bool
                       ) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """(q, q̇) → what a drive adds itself over v: g(q) of ``dyn`` (``gravity``) and the friction
    f(q̇) of its model (``friction``: ``dynamics.friction_effort``); None when neither. A
    payload put on the simulated robot later is not in it: the drive knows only its own
    model. Looked up at each call: a LiveDynamics rebinds its methods when its kernels
    arrive."""
    if not (gravity or friction):
        return None

    def compensation(q: np.ndarray, v: np.ndarray) -> np.ndarray:
        tau = dyn.gravity(q) if gravity else np.zeros(dyn.model.nv)
        return tau + friction_effort(dyn.model, v) if friction else tau

    return compensation


class ServoSimulator(Simulator):
    """A Simulator whose applied effort comes from the joint drives at every step.

    ``drives.command(layout.decode(...), sim.time)`` sets commands; ``reset`` puts the drives
    back on their start-up command at the reset state.
    """

    def __init__(self, dyn: Dynamics, drives: JointDrives, **kwargs):
        self.drives = drives
        super().__init__(dyn, command_timeout=drives.command_timeout, **kwargs)

    def reset(self, q: np.ndarray | None = None, v: np.ndarray | None = None) -> None:
        super().reset(q, v)
        self.drives.hold(self.q, self.time)

    def set_command(self, tau: np.ndarray) -> np.ndarray:
        """Effort commands for every joint of the layout (``tau`` over the model's nv)."""
        tau = dynamics.check_vector(tau, self.model.nv, "tau")
        values = np.full((3, len(self.drives.layout.joints)), np.nan)
        values[EFFORT] = tau[self.drives.v_index]
        index = np.arange(len(self.drives.layout.joints))
        clamped = np.zeros(self.model.nv, dtype=bool)
        clamped[self.drives.v_index] = self.drives.command(
            JointCommand(index, values), self.time)[EFFORT]
        return clamped

    @property
    def state_feedback(self) -> bool:  # while the drives' effort depends on the state
        return self.drives.depend_on_state

    def effort_at(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.drives.effort(q, v, t)

    def efforts_over(self, starts: np.ndarray) -> np.ndarray:
        return self.drives.efforts_over(starts)

    @property
    def command_timed_out(self) -> bool:
        return bool(np.all(self.time - self.drives.stamp > self.drives.command_timeout))
