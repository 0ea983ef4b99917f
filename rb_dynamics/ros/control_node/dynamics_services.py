# SPDX-License-Identifier: Apache-2.0
"""The node's dynamics services, keyed by joint names (any order), never raising into rclpy.

``~/inverse_dynamics``, ``~/forward_dynamics``, ``~/dynamics_terms`` (M, C q̇, g) and
``~/simulate`` (a roll-out under constant, time-series, gravity-compensation or computed-torque
efforts). Every answer comes from the node's one ``Dynamics`` object (a ``LiveDynamics``:
the generated kernels once built), the same the control loop uses. Bad input answers
success=false with a message naming the field; so does an answer that would not be finite.

Arrays are keyed by ``joint_names``: every independent joint of the model once, in any order.
A joint with several coordinates takes that many consecutive entries where it is named: a
free-flyer root 7 positions [x, y, z, qx, qy, qz, qw] and 6 velocities [v; ω] (base frame), a
planar joint 3 and 3; every other joint one. A free-flyer quaternion is normalised (zero: an
error). Answers use the request's joint order with the same blocks.

Constraints declared on the node (``loop_constraints.*`` parameters) are honoured by
``~/forward_dynamics`` (which then also answers the constraint forces) and ``~/simulate``;
``~/inverse_dynamics`` and ``~/dynamics_terms`` describe the free tree.

``~/simulate`` runs as a coroutine in its own callback group and hands the executor back every
few milliseconds, so the node keeps serving its other callbacks (parameters, the cheap
services, diagnostics) during a long roll-out; the control loop runs on its own thread anyway.
"""

from __future__ import annotations

import math
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics.control import ControllerError, JointController
from rb_dynamics.dynamics import ConstraintSet, Dynamics, constrained_forward_dynamics
from rb_dynamics.dynamics import reference as dynamics
from rb_dynamics.model import Model, finite_array
from rb_dynamics.ros.conversions import (
    JointLayout,
    from_seconds,
    trajectory_points,
    wrenches_by_link,
)
from rb_dynamics.ros.runtime import failed_response
from rb_dynamics.simulation import INTEGRATORS, compiled_steps, joint_losses, step
from rb_dynamics_interfaces.srv import DynamicsTerms, ForwardDynamics, InverseDynamics, Simulate

__all__ = ["MAX_POINTS", "MAX_STEPS", "TORQUE_MODES", "DynamicsServices"]

MAX_STEPS = 200_000  # integration steps per ~/simulate request
MAX_POINTS = 20_000  # trajectory points per ~/simulate answer (and effort_times rows)
DEFAULT_TIME_STEP = 1e-3
DEFAULT_KP, DEFAULT_KD = 100.0, 20.0
TORQUE_MODES = ("constant", "series", "gravity_compensation", "computed_torque")
YIELD_EVERY_S = 0.005  # a roll-out hands the executor back this often
CHUNK_STEPS = 250  # steps per call into the compiled roll-out (then YIELD_EVERY_S is checked)
EffortSource = Callable[[float, np.ndarray, np.ndarray], np.ndarray]


@types.coroutine
def _pause():
    """Suspend the calling coroutine once; the executor resumes it on its next pass."""
    yield


def _require_finite(response: Any) -> None:
    """Every number of the answer is finite, or a ValueError naming the field."""
    for name, kind in response.get_fields_and_field_types().items():
        if kind not in ("double", "sequence<double>"):
            continue
        values = np.asarray(getattr(response, name), dtype=float)
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{name}: the result is not finite (the state is out of the "
                             "model's range: huge velocities or efforts)")


class DynamicsServices:
    """``~/forward_dynamics``, ``~/inverse_dynamics``, ``~/dynamics_terms`` and ``~/simulate``.

    ``get_dynamics`` returns the node's dynamics for its current model (None: not loaded yet,
    every call answers success=false); ``get_constraints`` the declared constraints for a
    model (ValueError: they do not fit it; the call then answers success=false with why).
    """

    def __init__(self, node: Node, get_dynamics: Callable[[], Dynamics | None],
                 get_constraints: Callable[[Model], ConstraintSet | None] | None = None) -> None:
        self.node, self.get_dynamics = node, get_dynamics
        self.get_constraints = get_constraints or (lambda model: None)
        node.create_service(InverseDynamics, "~/inverse_dynamics", self._inverse)
        node.create_service(ForwardDynamics, "~/forward_dynamics", self._forward)
        node.create_service(DynamicsTerms, "~/dynamics_terms", self._terms)
        # its own group: while a roll-out is suspended, the default group's callbacks run
        node.create_service(Simulate, "~/simulate", self._simulate,
                            callback_group=MutuallyExclusiveCallbackGroup())
        # triggered before a roll-out pauses, so the executor's wait returns at once (a group
        # that can always run: a busy group's entities are left out of the wait set)
        self._wake = node.create_guard_condition(lambda: None,
                                                 callback_group=ReentrantCallbackGroup())

    # ------------------------------------------------------------------ plumbing

    def _dynamics(self) -> Dynamics:
        dyn = self.get_dynamics()
        if dyn is None:
            raise ValueError("no robot description loaded yet")
        return dyn

    def _answer(self, name: str, response: Any, compute: Callable[[Dynamics], None]) -> Any:
        try:
            compute(self._dynamics())
            _require_finite(response)
            response.success, response.message = True, ""
        except Exception as exc:  # noqa: BLE001 - see failed_response
            return failed_response(response, exc, self.node.get_logger(), name)
        return response

    # ------------------------------------------------------------------ services

    def _inverse(self, request: Any, response: Any) -> Any:
        def compute(dyn: Dynamics) -> None:
            layout = JointLayout(dyn.model, request.joint_names)
            q = layout.positions(request.positions)
            v = layout.velocities(request.velocities, "velocities")
            a = layout.velocities(request.accelerations, "accelerations")
            response.joint_names = layout.names
            response.efforts = layout.out(dyn.rnea(q, v, a))
            response.gravity = layout.out(dyn.gravity(q))

        return self._answer("inverse_dynamics", response, compute)

    def _forward(self, request: Any, response: Any) -> Any:
        def compute(dyn: Dynamics) -> None:
            model = dyn.model
            layout = JointLayout(model, request.joint_names)
            q = layout.positions(request.positions)
            v = layout.velocities(request.velocities, "velocities")
            tau = layout.velocities(request.efforts, "efforts")
            f_ext = wrenches_by_link(list(request.wrench_links), list(request.wrenches),
                                     known_links=list(model.frames))
            response.joint_names = layout.names
            constraints = self.get_constraints(model)
            if not constraints:
                response.accelerations = layout.out(dyn.aba(q, v, tau, f_ext or None))
                return
            constraints = constraints.fresh()  # default targets: this state
            result = constrained_forward_dynamics(
                model, q, v, tau, constraints.constraints, method=constraints.method,
                gains=constraints.gains, f_ext=f_ext or None)
            response.accelerations = layout.out(result.qdd)
            response.constraint_forces = layout.out(result.constraint_force)
            response.constraint_violation = float(np.abs(result.violation).max(initial=0.0))

        return self._answer("forward_dynamics", response, compute)

    def _terms(self, request: Any, response: Any) -> Any:
        def compute(dyn: Dynamics) -> None:
            layout = JointLayout(dyn.model, request.joint_names)
            q = layout.positions(request.positions)
            v = layout.velocities(request.velocities, "velocities")
            g = dyn.gravity(q)
            M = dyn.crba(q)
            response.joint_names = layout.names
            response.mass_matrix = M[np.ix_(layout.v_index, layout.v_index)].ravel().tolist()
            response.coriolis = layout.out(dyn.nonlinear_effects(q, v) - g)
            response.gravity = layout.out(g)

        return self._answer("dynamics_terms", response, compute)

    async def _simulate(self, request: Any, response: Any) -> Any:
        try:
            roll_out = RollOut(self._dynamics(), request, self.get_constraints)
            async for _ in roll_out.run(YIELD_EVERY_S):
                self._wake.trigger()  # wake the executor's wait set, then let it run
                await _pause()
            roll_out.fill(response)
            response.success, response.message = True, ""
        except Exception as exc:  # noqa: BLE001 - see failed_response
            response.trajectory = JointTrajectory()
            response.steps, response.energy_drift = 0, 0.0
            return failed_response(response, exc, self.node.get_logger(), "simulate")
        return response


# ----------------------------------------------------------------------------- roll-outs


def _steps(request: Any) -> tuple[float, int, int]:
    """(time step, steps, output decimation) of a request, within the documented bounds."""
    dt = float(request.time_step) or DEFAULT_TIME_STEP
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"time_step must be positive and finite (0: {DEFAULT_TIME_STEP}), "
                         f"got {request.time_step}")
    duration = float(request.duration)
    if not (math.isfinite(duration) and duration > 0):
        raise ValueError(f"duration must be positive and finite, got {request.duration}")
    steps = round(duration / dt)
    if steps < 1:
        raise ValueError(f"duration {duration} s is shorter than time_step {dt} s")
    if steps > MAX_STEPS:
        raise ValueError(f"duration/time_step: {duration} s at {dt} s is {steps} steps; "
                         f"at most {MAX_STEPS}")
    decimation = max(int(request.output_decimation), 1)
    points = -(-steps // decimation) + 1  # every decimation-th step and the final state
    if points > MAX_POINTS:
        raise ValueError(f"output_decimation: {steps} steps kept every {decimation} give "
                         f"{points} output points; at most {MAX_POINTS}")
    return dt, steps, decimation


class RollOut:
    """One ``~/simulate`` request: validated at construction, integrated by ``run``.

    A fixed-base model with 1-DoF joints and no constraints rolls out in C
    (``simulation.compiled_steps``), ``CHUNK_STEPS`` steps per call, the control law called
    back before each step; anything else, and a step the compiled loop refuses, takes
    ``simulation.step``.
    """

    def __init__(self, dyn: Dynamics, request: Any,
                 get_constraints: Callable[[Model], ConstraintSet | None]) -> None:
        model = dyn.model
        self.dyn, self.model = dyn, model
        self.layout = JointLayout(model, request.joint_names)
        self.q = self.layout.positions(request.positions)
        self.v = self.layout.velocities(request.velocities, "velocities")
        self.dt, self.steps, self.decimation = _steps(request)
        self.integrator = request.integrator or "semi_implicit_euler"
        if self.integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS}, not "
                             f"{self.integrator!r}")
        # efforts_at(times): a row per time, for efforts that do not depend on the state
        self.efforts_at: Callable[[np.ndarray], np.ndarray] | None = None
        self.effort_at = self._effort_source(request)
        self.losses = bool(request.include_losses)
        constraints = get_constraints(model)
        self.constraints = constraints.fresh() if constraints else None
        self.fast = compiled_steps(dyn, self.integrator, losses=self.losses,
                                   limits=self.losses, constraints=self.constraints)
        self.worst_violation = 0.0
        self.energy0 = self._energy()
        self.trajectory = JointTrajectory(joint_names=self.layout.names)

    def _energy(self) -> float:
        return float(dynamics.kinetic_energy(self.model, self.q, self.v)
                     + dynamics.potential_energy(self.model, self.q))

    def _record(self, k0: int, q: np.ndarray, v: np.ndarray, a: np.ndarray,
                tau: np.ndarray, every: int = 1) -> None:
        """Points for steps k0, k0 + every, ...: rows of the state at their start (q, v), the
        acceleration there (a) and their efforts (tau)."""
        bad = ~(np.isfinite(a).all(axis=1) & np.isfinite(tau).all(axis=1))
        if bad.any():
            t = (k0 + every * int(np.argmax(bad))) * self.dt
            raise ValueError(f"the simulation diverged at t = {t:.4f} s (non-finite "
                             "acceleration or effort): lower time_step or the efforts")
        layout, points = self.layout, self.trajectory.points
        rows = zip(q[:, layout.q_index].tolist(), v[:, layout.v_index].tolist(),
                   a[:, layout.v_index].tolist(), tau[:, layout.v_index].tolist())
        for j, (positions, velocities, accelerations, effort) in enumerate(rows):
            t = (k0 + every * j) * self.dt
            point = JointTrajectoryPoint(positions=positions, velocities=velocities,
                                         accelerations=accelerations, effort=effort)
            from_seconds(t, point.time_from_start)
            points.append(point)
            if self.constraints:
                self.worst_violation = max(self.worst_violation, self.constraints.violation(
                    self.model, q[j], v[j], t))

    async def run(self, yield_every: float):
        """Integrate every step; yields (to let the caller hand the executor back) every
        ``yield_every`` seconds of work."""
        resumed = time.perf_counter()
        k = 0
        while k < self.steps:
            k = self._compiled(k) if self.fast is not None else self._reference_step(k)
            if time.perf_counter() - resumed > yield_every:
                yield
                resumed = time.perf_counter()
        self._finish()

    def _compiled(self, k: int) -> int:
        """Up to CHUNK_STEPS steps from step k in C; the next step to take."""
        count = min(CHUNK_STEPS, self.steps - k)
        dt = self.dt
        if self.efforts_at is not None:
            trace = self.fast.run(self.q, self.v, self.efforts_at(np.arange(k, k + count) * dt),
                                  dt, count)
        else:
            effort_at = self.effort_at
            trace = self.fast.run(self.q, self.v, None, dt, count,
                                  law=lambda j, q, v: effort_at((k + j) * dt, q, v))
        kept = slice((-k) % self.decimation, trace.steps, self.decimation)
        self._record(k + kept.start, trace.q[kept], trace.v[kept], trace.a[kept],
                     trace.tau[kept], self.decimation)
        self.q, self.v = trace.q[-1].copy(), trace.v[-1].copy()
        k += trace.steps
        if trace.steps < count:  # a step the compiled loop refused: the reference's
            k = self._reference_step(k)
        return k

    def _reference_step(self, k: int) -> int:
        """Step k by ``simulation.step``; the next step to take."""
        t = k * self.dt
        tau = self.effort_at(t, self.q, self.v)
        result = step(self.dyn, self.q, self.v, tau, self.dt, self.integrator,
                      losses=self.losses, limits=self.losses, constraints=self.constraints, t=t)
        if not (np.all(np.isfinite(result.q)) and np.all(np.isfinite(result.v))):
            raise ValueError(f"the simulation diverged at t = {t:.4f} s (non-finite "
                             "state): lower time_step or the efforts")
        if k % self.decimation == 0:
            self._record(k, self.q[None], self.v[None], result.a[None], tau[None])
        self.q, self.v = result.q, result.v
        return k + 1

    def _finish(self) -> None:
        """The final state, with its acceleration under the effort at that instant."""
        t = self.steps * self.dt
        tau = self.effort_at(t, self.q, self.v)
        applied = tau + joint_losses(self.model, self.v) if self.losses else tau
        if self.constraints:
            rhs = applied - self.dyn.nonlinear_effects(self.q, self.v)
            a = self.constraints.solve(self.model, self.q, self.v, self.dyn.crba(self.q), rhs,
                                       t).qdd
        else:
            a = self.dyn.aba(self.q, self.v, applied)
        self._record(self.steps, self.q[None], self.v[None], a[None], tau[None])

    def fill(self, response: Any) -> None:
        response.trajectory = self.trajectory
        response.energy_drift = float((self._energy() - self.energy0)
                                      / max(abs(self.energy0), 1.0))
        response.steps = self.steps
        response.max_constraint_violation = self.worst_violation

    # ------------------------------------------------------------------ efforts

    def _effort_source(self, request: Any) -> EffortSource:
        mode = request.torque_mode or "constant"
        if mode == "constant":
            tau = self.layout.velocities(request.efforts, "efforts")
            self.efforts_at = lambda times: tau
            return lambda t, q, v: tau
        if mode == "series":
            return self._series(request)
        if mode in ("gravity_compensation", "computed_torque"):
            return self._control_law(request, mode)
        raise ValueError(f"torque_mode must be one of {TORQUE_MODES}, not {mode!r}")

    def _series(self, request: Any) -> EffortSource:
        n = len(self.layout.v_index)
        times = finite_array(request.effort_times, "effort_times").reshape(-1)
        rows = finite_array(request.efforts, "efforts").reshape(-1)
        if times.size == 0:
            raise ValueError("effort_times: series mode needs at least one time")
        if times.size > MAX_POINTS:
            raise ValueError(f"effort_times: {times.size} rows; at most {MAX_POINTS}")
        if rows.size != times.size * n:
            raise ValueError(f"efforts: series mode needs len(effort_times) × {n} = "
                             f"{times.size * n} values, got {rows.size}")
        if np.any(np.diff(times) <= 0):
            raise ValueError("effort_times must increase strictly")
        table = np.zeros((times.size, self.model.nv))
        table[:, self.layout.v_index] = rows.reshape(times.size, n)

        def rows_at(at: np.ndarray) -> np.ndarray:
            # the row in force at each time; before the first time, the first row
            return table[np.maximum(np.searchsorted(times, at + 1e-12, side="right") - 1, 0)]

        self.efforts_at = rows_at
        return lambda t, q, v: rows_at(np.array([t]))[0]

    def _control_law(self, request: Any, mode: str) -> EffortSource:
        """The node's controller (the one control law): validated gains and reference,
        efforts clamped to the URDF effort limits."""

        def gains(values, default: float) -> list[float]:
            return list(values) or [default]

        controller = JointController(self.model, mode=mode, kp=gains(request.kp, DEFAULT_KP),
                                     kd=gains(request.kd, DEFAULT_KD), max_state_age=math.inf,
                                     dynamics=self.dyn)
        # the reference starts from the initial positions at rest; effort_at takes the state
        controller.update_state(self.model.joint_names, self.q, np.zeros(self.model.nv), 0.0)
        if mode == "computed_torque":
            reference = request.reference
            if not reference.points:
                raise ValueError("reference: computed_torque needs at least one point")
            points = trajectory_points(reference.points, "reference.points")
            try:
                controller.set_trajectory(list(reference.joint_names), points, 0.0)
            except ControllerError as exc:
                raise ValueError(f"reference: {exc}") from None
        return controller.effort_at
