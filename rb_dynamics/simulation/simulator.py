# SPDX-License-Identifier: Apache-2.0
"""Forward-dynamics simulation: configuration integration and explicit integrators.

``integrate(model, q, v, dt)`` moves q along v on the configuration manifold: exact exponential
maps for free-flyer (SE(3), quaternion kept unit) and planar (SE(2)) joints, q + v·dt for the
rest. Integrators hold the torque constant over a step (a zero-order hold, like a controller
that updates once per step):

- ``semi_implicit_euler``: v⁺ = v + a·dt, q⁺ = q ⊕ v⁺·dt (symplectic, cheap, good for real time);
- ``rk4``: classical Runge–Kutta 4 with the stage configurations q ⊕ k·dt.

Joint friction (``rb_dynamics.dynamics.friction``: the URDF ``<dynamics>`` viscous and
Coulomb terms and an overlay's Stribeck term) acts as a resisting torque. In semi-implicit
Euler without constraints it is implicit in the velocity (``friction_step``): viscous damping,
and Coulomb friction either smoothed by tanh(q̇/ε) (``friction_law`` "smooth", the default: the
controller's and the observer's evaluation) or set-valued, a joint sticking or slipping
("stick_slip"). In RK4, whose stages need a smooth force, Coulomb friction is smoothed by
tanh(q̇/ε); with constraints, semi-implicit Euler takes the smooth law linearised about q̇
(``_accel_implicit_losses``). The joints' armature is in the dynamics (M(q) and ABA). A
``ConstraintSet`` (loop
closures, fixed points, welds, couplings) replaces the free acceleration by the constrained one
at every stage. Position limits act as
inelastic stops: a joint that would pass a limit is put on it and its velocity into the limit
is zeroed (with constraints, a stop can open a loop: keep loops away from the limits).

``step`` is the readable reference. ``compiled_steps`` gives the fast path for the common case
(a fixed-base model with 1-DoF joints, C kernels, no constraints or external wrenches): many
steps of ``step`` in one call into C (``Kernels.rollout`` in ``_ckernels.c``), equal to ``step``
to rounding (the implicit solve there is a Cholesky, here an LU solve; the friction step's
sweeps and Newton iterations are the same operations). ``Simulator``
and ``~/simulate`` use it when it applies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rb_dynamics.dynamics import (
    ConstraintSet,
    Dynamics,
    LinkWrench,
    friction_effort,
    friction_slope,
    has_friction,
)
from rb_dynamics.dynamics import reference as dynamics
from rb_dynamics.model import (
    ONE_DOF_KINDS,
    Model,
    check_choice,
    check_positive,
    clamp_effort_with_mask,
    finite_array,
    quat_to_matrix,
    skew,
)

from .friction_step import friction_step_velocity

__all__ = [
    "FRICTION_LAWS",
    "INTEGRATORS",
    "CompiledSteps",
    "SimulationStep",
    "Simulator",
    "Trace",
    "apply_position_limits",
    "compiled_steps",
    "integrate",
    "joint_losses",
    "normalize_configuration",
    "project_onto_constraints",
    "step",
]

INTEGRATORS = ("semi_implicit_euler", "rk4")
# semi-implicit Euler's Coulomb friction, implicit in the velocity (``friction_step``): the
# smooth law (the controller's and the observer's own law as the truth), or the sign law,
# stick–slip
FRICTION_LAWS = ("smooth", "stick_slip")


def _so3_left_jacobian(phi: np.ndarray) -> np.ndarray:
    theta = float(np.linalg.norm(phi))
    K = skew(phi)
    if theta < 1e-6:
        return np.eye(3) + 0.5 * K + K @ K / 6.0
    return (np.eye(3) + (1 - math.cos(theta)) / theta**2 * K
            + (theta - math.sin(theta)) / theta**3 * (K @ K))


def _quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ])


def integrate(model: Model, q: np.ndarray, v: np.ndarray, dt: float = 1.0) -> np.ndarray:
    """q ⊕ v·dt (Pinocchio's ``integrate``)."""
    out = np.array(q, dtype=float)
    for kind, qi, vi in zip(model.joint_kinds, model.joint_q_index, model.joint_v_index):
        if kind == "free":
            quat = out[qi + 3:qi + 7] / np.linalg.norm(out[qi + 3:qi + 7])
            omega = v[vi + 3:vi + 6] * dt
            out[qi:qi + 3] += quat_to_matrix(quat) @ (_so3_left_jacobian(omega)
                                                      @ (v[vi:vi + 3] * dt))
            angle = float(np.linalg.norm(omega))
            half = 0.5 * angle
            axis_part = omega * (math.sin(half) / angle if angle > 1e-12 else 0.5)
            delta = np.array([*axis_part, math.cos(half)])
            new = _quat_multiply(quat, delta)
            out[qi + 3:qi + 7] = new / np.linalg.norm(new)
        elif kind == "planar":
            theta, omega = out[qi + 2], v[vi + 2] * dt
            if abs(omega) > 1e-9:
                s, c = math.sin(omega) / omega, (1 - math.cos(omega)) / omega
            else:
                s, c = 1 - omega**2 / 6, omega / 2
            local = np.array([s * v[vi] - c * v[vi + 1], c * v[vi] + s * v[vi + 1]]) * dt
            ct, st = math.cos(theta), math.sin(theta)
            out[qi] += ct * local[0] - st * local[1]
            out[qi + 1] += st * local[0] + ct * local[1]
            out[qi + 2] += omega
        else:
            out[qi] += v[vi] * dt
    return out


def normalize_configuration(model: Model, q: np.ndarray) -> np.ndarray:
    """q with every free-flyer quaternion scaled to unit length."""
    out = np.array(q, dtype=float)
    for kind, qi in zip(model.joint_kinds, model.joint_q_index):
        if kind == "free":
            norm = np.linalg.norm(out[qi + 3:qi + 7])
            if norm < 1e-9:
                raise ValueError(f"q: the quaternion of joint at q[{qi + 3}:{qi + 7}] is zero")
            out[qi + 3:qi + 7] /= norm
    return out


def joint_losses(model: Model, v: np.ndarray) -> np.ndarray:
    """The efforts joint friction exerts on the joints: −f(q̇) (``dynamics.friction_effort``:
    viscous, Coulomb and Stribeck)."""
    return -friction_effort(model, v)


def apply_position_limits(model: Model, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
    """Inelastic stops at the URDF position limits; also returns which joints hit one."""
    q, v = q.copy(), v.copy()
    hit = np.zeros(model.nv, dtype=bool)
    for kind, qi, vi in zip(model.joint_kinds, model.joint_q_index, model.joint_v_index):
        if kind not in ONE_DOF_KINDS:
            continue
        lower, upper = model.position_lower[qi], model.position_upper[qi]
        if q[qi] < lower:
            q[qi], v[vi], hit[vi] = lower, max(v[vi], 0.0), True
        elif q[qi] > upper:
            q[qi], v[vi], hit[vi] = upper, min(v[vi], 0.0), True
    return q, v, hit


def _accel_implicit_losses(dyn: Dynamics, q, v, tau, dt: float,
                           constraints: ConstraintSet | None = None,
                           t: float = 0.0) -> np.ndarray:
    """With constraints: the acceleration over a step with the smooth joint losses taken at the
    end of the step, linearised: (M + dt·C) a = τ + losses(v) − h, C = max(∂f/∂q̇, 0)
    (``dynamics.friction_slope``).

    Friction of a light link (a wrist: 1 N·m over ε = 0.1 rad/s on 1.4e-4 kg·m²) is far too
    stiff for an explicit step at 1 ms; linearised, it does not diverge, but once tanh
    saturates it can cycle between ±v every step (``friction_step``, implicit in the velocity,
    does not; it has no constrained form). The negative slope of a Stribeck dip stays
    explicit: taken implicitly it could make M + dt·C indefinite on a light link.
    """
    model = dyn.model
    slope = np.maximum(friction_slope(model, v), 0.0)
    lhs = dyn.crba(q) + dt * np.diag(slope)
    rhs = tau + joint_losses(model, v) - dyn.nonlinear_effects(q, v)
    if constraints:
        # the same Gauss principle in the metric of the step's effective inertia
        return constraints.solve(model, q, v, lhs, rhs, t).qdd
    return np.linalg.solve(lhs, rhs)


def project_onto_constraints(dyn: Dynamics, q: np.ndarray, v: np.ndarray,
                             constraints: ConstraintSet, t: float = 0.0,
                             tolerance: float = 1e-12, max_iterations: int = 1,
                             ) -> tuple[np.ndarray, np.ndarray]:
    """The state put back on the holonomic constraints after a step.

    Positions: Gauss–Newton steps q ← q ⊖ A⁺φ (one by default: a step leaves O(dt²) of drift,
    one Newton step O(dt⁴)) until max|φ| ≤ ``tolerance``. Velocities: the
    M-orthogonal projection v ← v − M⁻¹Aᵀ(A M⁻¹Aᵀ)⁺ A v onto A v = 0, which removes only the
    motion the constraints forbid and never adds kinetic energy. An explicit integrator's
    O(dt²) drift per step then never accumulates (Baumgarte alone leaves ~1e-3 m on a
    four-bar at 1 ms with semi-implicit Euler).
    """
    model = dyn.model
    holonomic = [c for c in constraints.constraints if c.holonomic]
    if not holonomic:
        return q, v
    for _ in range(max_iterations):
        rows = [c.rows(model, q, v, t, constraints.gains) for c in holonomic]
        A = np.vstack([r.A for r in rows])
        phi = np.concatenate([r.violation for r in rows])
        if np.abs(phi).max() <= tolerance:
            break
        q = integrate(model, q, -(np.linalg.pinv(A) @ phi))
    M = dyn.crba(q)
    Minv_At = np.linalg.solve(M, A.T)
    v = v - Minv_At @ (np.linalg.pinv(A @ Minv_At) @ (A @ v))
    return q, v


@dataclass
class SimulationStep:
    """The state after one step, the acceleration at its start, the stops hit."""
    q: np.ndarray
    v: np.ndarray
    a: np.ndarray  # acceleration at the start of the step
    limit_hit: np.ndarray


def step(
    dyn: Dynamics,
    q: np.ndarray,
    v: np.ndarray,
    tau: np.ndarray,
    dt: float,
    method: str = "rk4",
    *,
    f_ext=None,
    losses: bool = True,
    limits: bool = True,
    constraints: ConstraintSet | None = None,
    t: float = 0.0,
    friction_law: str = "smooth",
) -> SimulationStep:
    """One integration step of ``dt`` seconds under the constant effort ``tau`` (N·m or N).

    ``dyn`` is the model's dynamics (``rb_dynamics.dynamics``); ``method`` one of
    ``INTEGRATORS``. Semi-implicit Euler takes the joint friction implicit in the velocity as
    ``friction_step`` says, Coulomb friction smooth or, with ``friction_law`` "stick_slip",
    set-valued (with constraints: the smooth law linearised, ``_accel_implicit_losses``); RK4
    the smooth law. With ``constraints``, every
    acceleration is the constrained one (``f_ext`` is then not used; ``t`` is the time the
    constraints see). Raises ValueError for a ``dt`` that is not positive and finite, an
    unknown ``method`` or ``friction_law`` (one of ``FRICTION_LAWS``).
    """
    check_positive(dt, "dt")
    check_choice(method, INTEGRATORS, "integrator")
    check_choice(friction_law, FRICTION_LAWS, "friction_law")
    model = dyn.model

    def accel(qs, vs):
        applied = tau + joint_losses(model, vs) if losses else tau
        if constraints:
            h = dyn.nonlinear_effects(qs, vs)
            return constraints.solve(model, qs, vs, dyn.crba(qs), applied - h, t).qdd
        return dyn.aba(qs, vs, applied, f_ext or None)

    if method == "semi_implicit_euler":
        stiff = losses and not f_ext and has_friction(model)
        if stiff and not constraints:  # friction_step
            v_next = friction_step_velocity(dyn, q, v, tau, dt, friction_law)
            a = (v_next - v) / dt
        else:
            a = _accel_implicit_losses(dyn, q, v, tau, dt, constraints, t) if stiff \
                else accel(q, v)
            v_next = v + a * dt
        q_next = integrate(model, q, v_next, dt)
    elif method == "rk4":
        a1 = accel(q, v)
        v2 = v + 0.5 * dt * a1
        a2 = accel(integrate(model, q, v, 0.5 * dt), v2)
        v3 = v + 0.5 * dt * a2
        a3 = accel(integrate(model, q, v2, 0.5 * dt), v3)
        v4 = v + dt * a3
        a4 = accel(integrate(model, q, v3, dt), v4)
        v_next = v + dt / 6.0 * (a1 + 2 * a2 + 2 * a3 + a4)
        q_next = integrate(model, q, (v + 2 * v2 + 2 * v3 + v4) / 6.0, dt)
        a = a1
    hit = np.zeros(model.nv, dtype=bool)
    if limits:
        q_next, v_next, hit = apply_position_limits(model, q_next, v_next)
    if constraints and constraints.projection:
        q_next, v_next = project_onto_constraints(dyn, q_next, v_next, constraints, t + dt)
    return SimulationStep(q_next, v_next, a, hit)


@dataclass
class Trace:
    """Consecutive steps: states ``q``, ``v`` (steps + 1 rows, row 0 the start), and per step
    the acceleration at its start ``a``, the efforts it applied ``tau`` and the joints that hit
    a stop ``limit_hit``."""

    q: np.ndarray
    v: np.ndarray
    a: np.ndarray
    tau: np.ndarray
    limit_hit: np.ndarray

    @property
    def steps(self) -> int:
        return len(self.a)


def compiled_steps(dyn: Dynamics, method: str, *, losses: bool = True, limits: bool = True,
                   constraints: ConstraintSet | None = None, f_ext=None,
                   friction_law: str = "smooth") -> CompiledSteps | None:
    """The compiled roll-out of ``step`` with these options, or None where only ``step``
    applies: no C kernels (``dyn.kernels``), constraints, external wrenches, or a joint with
    more than one coordinate (free-flyer, planar)."""
    kernels = getattr(dyn, "kernels", None)
    if (kernels is None or not hasattr(kernels, "rollout") or constraints or f_ext
            or method not in INTEGRATORS
            or not dyn.model.only_one_dof_joints):
        return None
    return CompiledSteps(dyn, kernels, method, losses, limits, friction_law)


class CompiledSteps:
    """``step`` repeated in C: one call into the model's compiled kernels for many steps.

    Built by ``compiled_steps``. Each step is ``step``'s with the same options, in the same
    order of operations. The compiled loop stops before a step it cannot take as the reference
    would (a non-finite input or result, an effective inertia that is not positive definite):
    the caller takes that step with ``step``, which raises or answers as it always does. The
    model's friction coefficients and position limits are read at each call.
    """

    def __init__(self, dyn: Dynamics, kernels, method: str, losses: bool, limits: bool,
                 friction_law: str = "smooth"):
        self.dyn, self.kernels, self.method = dyn, kernels, method
        self.losses, self.limits = losses, limits
        check_choice(friction_law, FRICTION_LAWS, "friction_law")
        # 0 (stick–slip), 1 as _ckernels expects; 2: semi-implicit Euler, smooth friction
        self._integrator = 2 if method == INTEGRATORS[0] and friction_law == "smooth" \
            else INTEGRATORS.index(method)

    def run(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray | None, dt: float,
            steps: int, law: Callable[[int, np.ndarray, np.ndarray], np.ndarray] | None = None,
            ) -> Trace:
        """Up to ``steps`` steps from (q, v) under ``tau``: (nv,) held, or (steps, nv) one row
        per step; or, with a ``law``, under ``law(k, q_k, v_k)`` for step k (a state feedback:
        called from C before each step, its exceptions propagate). Fewer steps when the
        compiled loop stops (see the class): step ``trace.steps`` is then the reference's."""
        model = self.dyn.model
        n = model.nv
        Q, V = np.empty((steps + 1, n)), np.empty((steps + 1, n))
        A, hit = np.empty((steps, n)), np.zeros((steps, n), dtype=bool)
        Q[0], V[0] = q, v
        row_law = None
        if law is not None:
            tau = np.empty((steps, n))
            row_law = lambda k: law(k, Q[k], V[k])  # noqa: E731 - the C loop calls it
        else:
            tau = np.ascontiguousarray(tau, dtype=float)
        done = self.kernels.rollout(Q, V, A, hit, tau, float(dt), self._integrator,
                                    *self._model_arrays(), row_law)
        if tau.ndim == 1:  # held: a read-only view, one row per step
            tau = np.broadcast_to(tau, (steps, n))
        if done < steps:
            return Trace(Q[:done + 1], V[:done + 1], A[:done], tau[:done], hit[:done])
        return Trace(Q, V, A, tau, hit)

    def step(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray, dt: float
             ) -> SimulationStep | None:
        """One step of ``run`` under the held ``tau`` (nv,), float64 and contiguous: the
        per-command path of a lock-step simulator, through buffers kept between calls (the
        result's arrays are its own). None when the compiled loop refuses the step."""
        n = self.dyn.model.nv
        if self._one is None or self._one[0].shape[1] != n:
            self._one = (np.empty((2, n)), np.empty((2, n)), np.empty((1, n)),
                         np.zeros((1, n), dtype=bool))
        Q, V, A, hit = self._one
        Q[0], V[0], hit[0] = q, v, False
        if not self.kernels.rollout(Q, V, A, hit, tau, float(dt), self._integrator,
                                    *self._model_arrays(), None):
            return None
        return SimulationStep(Q[1].copy(), V[1].copy(), A[0].copy(), hit[0].copy())

    _one: tuple[np.ndarray, ...] | None = None  # step's buffers: Q, V, A, hit

    def _model_arrays(self) -> tuple:
        """The joint losses (viscous, Coulomb, Stribeck and its velocity) and position stops
        as the roll-out takes them, read from the model at each call (None: left out)."""
        model = self.dyn.model
        losses = ((model.damping, model.friction, model.stribeck_friction,
                   model.stribeck_velocity) if self.losses else (None,) * 4)
        stops = (model.position_lower, model.position_upper) if self.limits else (None, None)
        return (*losses, *stops)


class Simulator:
    """A model's state advanced in fixed steps under held effort commands.

    ``dt`` seconds per step with one of ``INTEGRATORS``; the state starts at ``q0``, ``v0``
    (default: the neutral configuration at rest). Commands (N·m or N over v) are clamped to
    the effort limits and fall back to zero ``command_timeout`` seconds (of simulated time)
    after the last one, so a dead controller leaves a limp, not a stuck, arm. An external
    wrench on a link (``set_external_wrench``) acts at every step as the joint efforts Jᵀ(q) F
    (not part of ``applied_effort``, which is what the drives apply and report). Raises
    ValueError for an unknown integrator, a ``dt`` that is not positive and finite, and
    states or commands of the wrong size or not finite.
    """

    def __init__(self, dyn: Dynamics, dt: float = 1e-3, integrator: str = "semi_implicit_euler",
                 q0: np.ndarray | None = None, v0: np.ndarray | None = None,
                 command_timeout: float = 0.5, constraints: ConstraintSet | None = None,
                 friction_law: str = "smooth"):
        check_choice(integrator, INTEGRATORS, "integrator")
        self.friction_law = check_choice(friction_law, FRICTION_LAWS, "friction_law")
        check_positive(dt, "dt")
        model = dyn.model
        self.dynamics, self.model, self.dt, self.integrator = dyn, model, float(dt), integrator
        self.command_timeout = float(command_timeout)
        self.constraints = constraints
        self.q0 = model.neutral_configuration() if q0 is None else \
            normalize_configuration(model, dynamics.check_vector(q0, model.nq, "q0"))
        self.v0 = np.zeros(model.nv) if v0 is None else dynamics.check_vector(v0, model.nv, "v0")
        self.wrench: tuple[LinkWrench, np.ndarray] | None = None  # (link, [force; torque])
        self.reset()

    def set_external_wrench(self, link: str | None, wrench=None) -> None:
        """Apply ``wrench`` = [force; torque] (N, N·m; in ``link``'s frame, about its origin)
        from the next step on, until replaced; ``link`` None removes it. ValueError for an
        unknown link or a wrench that is not 6 finite numbers (nothing changes then)."""
        if link is None:
            self.wrench = None
            return
        held = self.wrench[0] if self.wrench is not None else None
        jacobian = held if held is not None and held.link == link else LinkWrench(self.model,
                                                                                  link)
        self.wrench = (jacobian, finite_array(wrench, "wrench", (6,)))

    def external_effort(self, q: np.ndarray | None = None) -> np.ndarray:
        """Jᵀ(q) F of the external wrench over v (N·m or N; zeros without one), at ``q``
        (default: the current state)."""
        if self.wrench is None:
            return np.zeros(self.model.nv)
        jacobian, wrench = self.wrench
        return jacobian.effort(self.q if q is None else q, wrench)

    def reset(self, q: np.ndarray | None = None, v: np.ndarray | None = None) -> None:
        self.q = self.q0.copy() if q is None else normalize_configuration(
            self.model, dynamics.check_vector(q, self.model.nq, "q"))
        self.v = self.v0.copy() if v is None else dynamics.check_vector(v, self.model.nv, "v")
        self.a = np.zeros(self.model.nv)
        self.time = 0.0
        self.command = np.zeros(self.model.nv)
        self.command_time = -math.inf
        self.limit_hit = np.zeros(self.model.nv, dtype=bool)

    def set_command(self, tau: np.ndarray) -> np.ndarray:
        """Hold ``tau`` (clamped to the effort limits); returns the mask of clamped joints."""
        tau = dynamics.check_vector(tau, self.model.nv, "tau")
        self.command, clamped = clamp_effort_with_mask(tau, self.model.effort_limit)
        self.command_time = self.time
        return clamped

    # True when ``effort_at`` depends on the state (a subclass with joint servos): the compiled
    # roll-out then calls it back before each step instead of tabulating it ahead
    # (``efforts_over``)
    state_feedback = False
    # Told (times, q, v, effort) of the steps taken, one row per step: its start time and state
    # and the effort it applied (for delayed readings:
    # ``rb_dynamics.sensing.joint_sensors.StateHistory.record``)
    recorder: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None] | None = None

    def effort_at(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The effort applied at time ``t`` in the state (q, v): the held command, zero once
        it is older than ``command_timeout``."""
        if t - self.command_time > self.command_timeout:
            return np.zeros(self.model.nv)
        return self.command

    def efforts_over(self, starts: np.ndarray) -> np.ndarray:
        """``effort_at`` at the steps starting at the times ``starts`` (steps,), when it does
        not depend on the state (``state_feedback`` False): (nv,) when it is the same at
        every step, else (steps, nv)."""
        timed_out = starts - self.command_time > self.command_timeout
        return np.where(timed_out[:, None], 0.0, self.command) if timed_out.any() \
            else self.command

    @property
    def applied_effort(self) -> np.ndarray:
        return self.effort_at(self.time, self.q, self.v)

    @property
    def command_timed_out(self) -> bool:
        return self.time - self.command_time > self.command_timeout

    def advance(self, duration: float, max_steps: int = 1000) -> int:
        """Advance by ``duration`` seconds in steps of dt (at most ``max_steps``)."""
        steps = min(round(duration / self.dt), max_steps)
        done = 0
        fast = self._compiled()
        if fast is not None and steps > 0:
            done = self._advance_compiled(fast, steps)
        for _ in range(steps - done):  # the reference: no fast path, or from a refused step
            effort = self.applied_effort
            if self.recorder is not None:
                self.recorder(np.array([self.time]), self.q[None], self.v[None], effort[None])
            if self.wrench is not None:  # the push acts; the drives' effort is what is recorded
                effort = effort + self.external_effort()
            result = step(self.dynamics, self.q, self.v, effort, self.dt,
                          self.integrator, constraints=self.constraints, t=self.time,
                          friction_law=self.friction_law)
            self.q, self.v, self.a, self.limit_hit = result.q, result.v, result.a, result.limit_hit
            self.time += self.dt
        return steps

    def _compiled(self) -> CompiledSteps | None:
        """The compiled roll-out for the current dynamics (built once per dynamics and its
        kernels: a ``LiveDynamics`` gains its kernels later, a payload swaps the dynamics)."""
        key = (self.dynamics, getattr(self.dynamics, "kernels", None), self.integrator,
               self.friction_law, self.constraints)
        if self._compiled_for is None or any(a is not b for a, b in zip(key, self._compiled_for)):
            self._compiled_for = key
            self._fast = compiled_steps(self.dynamics, self.integrator,
                                        constraints=self.constraints,
                                        friction_law=self.friction_law)
        return self._fast

    _compiled_for: tuple | None = None
    _fast: CompiledSteps | None = None

    def _advance_compiled(self, fast: CompiledSteps, steps: int) -> int:
        """Up to ``steps`` steps in C; the steps taken (the reference takes the rest)."""
        # the times at the start of each step as the reference loop accumulates them (an
        # accumulate adds in order; one step, the path a lock-step command takes, is one sum),
        # and the effort each one applies
        if steps == 1 and self.wrench is None and not self.state_feedback:
            return self._step_compiled(fast)
        times = np.add.accumulate(np.r_[self.time, np.full(steps, self.dt)])
        drives = None  # with a push: the drives' efforts (the trace's include the push)
        if self.wrench is not None:
            starts, drives = times.tolist(), np.empty((steps, self.model.nv))

            def pushed(k: int, q: np.ndarray, v: np.ndarray) -> np.ndarray:
                drives[k] = self.effort_at(starts[k], q, v)
                return drives[k] + self.external_effort(q)

            trace = fast.run(self.q, self.v, None, self.dt, steps, law=pushed)
        elif self.state_feedback:
            starts = times.tolist()
            trace = fast.run(self.q, self.v, None, self.dt, steps,
                             law=lambda k, q, v: self.effort_at(starts[k], q, v))
        else:
            trace = fast.run(self.q, self.v, self.efforts_over(times[:-1]), self.dt, steps)
        done = trace.steps
        if done and self.recorder is not None:
            self.recorder(times[:done], trace.q[:done], trace.v[:done],
                          trace.tau[:done] if drives is None else drives[:done])
        if done:
            self.q, self.v = trace.q[done].copy(), trace.v[done].copy()
            self.a, self.limit_hit = trace.a[done - 1].copy(), trace.limit_hit[done - 1].copy()
            self.time = float(times[done])
        return done

    def _step_compiled(self, fast: CompiledSteps) -> int:
        """One step in C under efforts that do not depend on the state (``_advance_compiled``
        without a push or a feedback, as a lock-step command takes it); the steps taken."""
        start = np.array((self.time,))
        tau = self.efforts_over(start)
        if tau.ndim == 2:  # timed out at this step: its row
            tau = tau[0]
        taken = fast.step(self.q, self.v, tau, self.dt)
        if taken is None:
            return 0
        if self.recorder is not None:
            self.recorder(start, self.q[None], self.v[None], tau[None])
        self.q, self.v, self.a, self.limit_hit = taken.q, taken.v, taken.a, taken.limit_hit
        self.time = self.time + self.dt  # the reference's sum
        return 1

    def constraint_violation(self) -> float:
        """Largest |φ| (m, rad) or |A q̇ − c| of the constraints at the current state."""
        if not self.constraints:
            return 0.0
        return self.constraints.violation(self.model, self.q, self.v, self.time)
