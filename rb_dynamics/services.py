"""The node's dynamics services, keyed by joint names (any order), never raising into rclpy.

``~/inverse_dynamics``, ``~/forward_dynamics``, ``~/dynamics_terms`` (M, C q̇, g) and
``~/simulate`` (a roll-out under constant, time-series, gravity-compensation or computed-torque
efforts). Bad input answers success=false with a message naming the field.

Arrays are keyed by ``joint_names``: every independent joint of the model once, in any order.
A joint with several coordinates takes that many consecutive entries where it is named: a
free-flyer root 7 positions [x, y, z, qx, qy, qz, qw] and 6 velocities [v; ω] (base frame), a
planar joint 3 and 3; every other joint one. A free-flyer quaternion is normalised (zero: an
error). Answers use the request's joint order with the same blocks.

Constraints declared on the node (``constraints.*`` parameters, rb_dynamics/constraint_params.py)
are honoured by ``~/forward_dynamics`` (which then also answers the constraint forces) and
``~/simulate``; ``~/inverse_dynamics`` and ``~/dynamics_terms`` describe the free tree.

``~/simulate`` runs as a coroutine in its own callback group and hands the executor back every
few milliseconds, so a node on a single-threaded executor keeps serving its other callbacks
(the 1 kHz control loop, the cheap services) during a long roll-out.
"""

from __future__ import annotations

import math
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics_interfaces.srv import DynamicsTerms, ForwardDynamics, InverseDynamics, Simulate

from . import dynamics
from .constraints import ConstraintSet, constrained_forward_dynamics
from .control import ControllerError, JointController, TrajectoryPoint, position_error
from .conversions import ConversionError, wrenches_by_link
from .model import Model
from .simulation import INTEGRATORS, joint_losses, step

__all__ = ["MAX_POINTS", "MAX_STEPS", "TORQUE_MODES", "DynamicsServices", "JointLayout"]

MAX_STEPS = 200_000  # integration steps per ~/simulate request
MAX_POINTS = 20_000  # trajectory points per ~/simulate answer
DEFAULT_TIME_STEP = 1e-3
DEFAULT_KP, DEFAULT_KD = 100.0, 20.0
TORQUE_MODES = ("constant", "series", "gravity_compensation", "computed_torque")
YIELD_EVERY_S = 0.005  # a roll-out hands the executor back this often


def _seconds(duration: Any) -> float:
    return duration.sec + duration.nanosec * 1e-9


@types.coroutine
def _pause():
    """Suspend the calling coroutine once; the executor resumes it on its next pass."""
    yield


class JointLayout:
    """Where the coordinates of the request's joints sit in the model's q and v.

    ``q_index[k]`` is the model q entry of the request's k-th position value, ``v_index[k]``
    the model v entry of its k-th velocity (also effort, acceleration) value.
    """

    def __init__(self, model: Model, names: Sequence[str], field: str = "joint_names"):
        names = list(names)
        index = {name: k for k, name in enumerate(model.joint_names)}
        unknown = [n for n in names if n not in index]
        if unknown:
            hint = " (mimic joints follow their leader)" if set(unknown) & set(
                model.mimic_joints) else ""
            raise ConversionError(f"{field}: unknown joints {unknown}{hint}; the model's joints "
                                  f"are {model.joint_names}")
        repeated = [n for k, n in enumerate(names) if n in names[:k]]
        if repeated:
            raise ConversionError(f"{field}: joint {repeated[0]!r} appears twice")
        missing = [n for n in model.joint_names if n not in set(names)]
        if missing:
            raise ConversionError(f"{field}: missing joints {missing}")
        q_ends = [*model.joint_q_index[1:], model.nq]
        v_ends = [*model.joint_v_index[1:], model.nv]
        q_index: list[int] = []
        v_index: list[int] = []
        self.quaternions: list[tuple[str, int]] = []  # (joint, q index of qx)
        for name in names:
            j = index[name]
            if model.joint_kinds[j] == "free":
                self.quaternions.append((name, model.joint_q_index[j] + 3))
            q_index.extend(range(model.joint_q_index[j], q_ends[j]))
            v_index.extend(range(model.joint_v_index[j], v_ends[j]))
        self.model, self.names, self.field = model, names, field
        self.q_index = np.array(q_index, dtype=int)
        self.v_index = np.array(v_index, dtype=int)
        self.multi = len(q_index) != len(names) or len(v_index) != len(names)

    def _values(self, values: Sequence[float], field: str, size: int) -> np.ndarray:
        if len(values) != size:
            blocks = " (a free-flyer takes 7 positions and 6 velocities, a planar joint 3)" \
                if self.multi else ""
            raise ConversionError(f"{field} has {len(values)} values; {self.field} "
                                  f"{self.names} needs {size}{blocks}")
        try:
            arr = np.asarray(values, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise ConversionError(f"{field}: not an array of numbers") from None
        if not np.all(np.isfinite(arr)):
            bad = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise ConversionError(f"{field}[{bad}] is {arr[bad]} (NaN or inf)")
        return arr

    def positions(self, values: Sequence[float], field: str = "positions") -> np.ndarray:
        """The model's q; free-flyer quaternions normalised (zero norm: an error)."""
        q = self.model.neutral_configuration()
        q[self.q_index] = self._values(values, field, len(self.q_index))
        for name, qi in self.quaternions:
            norm = float(np.linalg.norm(q[qi:qi + 4]))
            if norm < 1e-9:
                raise ConversionError(f"{field}: the quaternion of joint {name!r} has zero norm")
            q[qi:qi + 4] /= norm
        return q

    def velocities(self, values: Sequence[float], field: str) -> np.ndarray:
        """The model's v (or a, τ) from one value per velocity coordinate; empty: zeros."""
        v = np.zeros(self.model.nv)
        if len(values):
            v[self.v_index] = self._values(values, field, len(self.v_index))
        return v

    def out(self, x: np.ndarray) -> list[float]:
        """A model-ordered v-sized vector in the request's order."""
        return x[self.v_index].tolist()


class DynamicsServices:
    """``~/forward_dynamics``, ``~/inverse_dynamics``, ``~/dynamics_terms`` and ``~/simulate``.

    ``get_model`` returns the model to use now (None: not loaded yet, every call answers
    success=false); ``get_backend`` the node's generated kernels for that model, when it has
    them. Without matching kernels, roll-outs compile their own (once per model).
    ``get_constraints`` gives the declared constraints for a model (ValueError: they do not
    fit it; the call then answers success=false with that reason).
    """

    def __init__(self, node: Node, get_model: Callable[[], Model],
                 get_backend: Callable[[], object] | None = None,
                 get_constraints: Callable[[Model], ConstraintSet | None] | None = None) -> None:
        self.node, self.get_model = node, get_model
        self.get_backend = get_backend or (lambda: None)
        self.get_constraints = get_constraints or (lambda model: None)
        self._compiled: tuple[Model, Any] | None = None
        node.create_service(InverseDynamics, "~/inverse_dynamics", self._inverse)
        node.create_service(ForwardDynamics, "~/forward_dynamics", self._forward)
        node.create_service(DynamicsTerms, "~/dynamics_terms", self._terms)
        # its own group: while a roll-out is suspended, the default group's callbacks run
        self._simulate_group = MutuallyExclusiveCallbackGroup()
        node.create_service(Simulate, "~/simulate", self._simulate,
                            callback_group=self._simulate_group)
        # triggered before a roll-out pauses, so the executor's wait returns at once (a group
        # that can always run: a busy group's entities are left out of the wait set)
        self._wake = node.create_guard_condition(lambda: None,
                                                 callback_group=ReentrantCallbackGroup())

    # ------------------------------------------------------------------ plumbing

    def _model(self) -> Model:
        model = self.get_model()
        if model is None:
            raise ValueError("no robot description loaded yet")
        return model

    def _fail(self, name: str, response: Any, exc: BaseException) -> Any:
        if isinstance(exc, (ValueError, KeyError, ControllerError)):
            response.success, response.message = False, str(exc).strip("'\"")
        else:  # a service answers, it never kills the node
            self.node.get_logger().error(f"{name}: internal error: {exc!r}")
            response.success, response.message = False, f"internal error: {exc!r}"
        return response

    def _answer(self, name: str, response: Any, compute: Callable[[Model], None]) -> Any:
        try:
            compute(self._model())
            response.success, response.message = True, ""
        except Exception as exc:  # noqa: BLE001 - see _fail
            return self._fail(name, response, exc)
        return response

    def backend(self, model: Model) -> Any:
        """Generated kernels for ``model``: the node's when they are for this model, else ours."""
        backend = self.get_backend()
        if backend is not None and getattr(backend, "model", None) is model:
            return backend
        if self._compiled is None or self._compiled[0] is not model:
            from .codegen import compile_dynamics

            self._compiled = (model, compile_dynamics(model))
        return self._compiled[1]

    # ------------------------------------------------------------------ services

    def _inverse(self, request: Any, response: Any) -> Any:
        def compute(model: Model) -> None:
            layout = JointLayout(model, request.joint_names)
            q = layout.positions(request.positions)
            v = layout.velocities(request.velocities, "velocities")
            a = layout.velocities(request.accelerations, "accelerations")
            response.joint_names = layout.names
            response.efforts = layout.out(dynamics.rnea(model, q, v, a))
            response.gravity = layout.out(dynamics.gravity(model, q))

        return self._answer("inverse_dynamics", response, compute)

    def _forward(self, request: Any, response: Any) -> Any:
        def compute(model: Model) -> None:
            layout = JointLayout(model, request.joint_names)
            q = layout.positions(request.positions)
            v = layout.velocities(request.velocities, "velocities")
            tau = layout.velocities(request.efforts, "efforts")
            f_ext = wrenches_by_link(list(request.wrench_links), list(request.wrenches),
                                     known_links=list(model.frames))
            response.joint_names = layout.names
            constraints = self.get_constraints(model)
            if not constraints:
                response.accelerations = layout.out(dynamics.aba(model, q, v, tau,
                                                                 f_ext or None))
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
        def compute(model: Model) -> None:
            layout = JointLayout(model, request.joint_names)
            q = layout.positions(request.positions)
            v = layout.velocities(request.velocities, "velocities")
            g = dynamics.gravity(model, q)
            M = dynamics.crba(model, q)
            response.joint_names = layout.names
            response.mass_matrix = M[np.ix_(layout.v_index, layout.v_index)].ravel().tolist()
            response.coriolis = layout.out(dynamics.nonlinear_effects(model, q, v) - g)
            response.gravity = layout.out(g)

        return self._answer("dynamics_terms", response, compute)

    async def _simulate(self, request: Any, response: Any) -> Any:
        try:
            model = self._model()
            await self._roll_out(model, request, response)
            response.success, response.message = True, ""
        except Exception as exc:  # noqa: BLE001 - see _fail
            response.trajectory = JointTrajectory()
            response.steps, response.energy_drift = 0, 0.0
            return self._fail("simulate", response, exc)
        return response

    # ------------------------------------------------------------------ roll-outs

    @staticmethod
    def _steps(request: Any) -> tuple[float, int, int]:
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

    async def _roll_out(self, model: Model, request: Any, response: Any) -> None:
        layout = JointLayout(model, request.joint_names)
        q = layout.positions(request.positions)
        v = layout.velocities(request.velocities, "velocities")
        dt, steps, decimation = self._steps(request)
        integrator = request.integrator or "semi_implicit_euler"
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS}, not {integrator!r}")
        fast = self.backend(model)
        effort_at = self._torque_source(model, request, layout, q, fast)
        losses = bool(request.include_losses)
        constraints = self.get_constraints(model)
        constraints = constraints.fresh() if constraints else None
        worst_violation = 0.0

        def forward(_model, qs, vs, tau, *_):
            return fast.aba(qs, vs, tau)

        def violation(qs, vs, t) -> float:
            rows = [c.rows(model, qs, vs, t, constraints.gains)
                    for c in constraints.constraints]
            return max(float(np.abs(r.violation).max(initial=0.0)) for r in rows)

        def point(t: float, q, v, a, tau) -> JointTrajectoryPoint:
            p = JointTrajectoryPoint(positions=q[layout.q_index].tolist(),
                                     velocities=layout.out(v), accelerations=layout.out(a),
                                     effort=layout.out(tau))
            p.time_from_start.sec, p.time_from_start.nanosec = divmod(round(t * 1e9),
                                                                      1_000_000_000)
            return p

        energy0 = dynamics.kinetic_energy(model, q, v) + dynamics.potential_energy(model, q)
        trajectory = JointTrajectory(joint_names=layout.names)
        resumed = time.perf_counter()
        for k in range(steps):
            t = k * dt
            tau = effort_at(t, q, v)
            result = step(model, q, v, tau, dt, integrator, forward_dynamics=forward,
                          losses=losses, limits=losses,
                          backend=fast if losses or constraints else None,
                          constraints=constraints, t=t)
            if not (np.all(np.isfinite(result.q)) and np.all(np.isfinite(result.v))):
                raise ValueError(f"the simulation diverged at t = {t:.4f} s (non-finite "
                                 "state): lower time_step or the efforts")
            if k % decimation == 0:
                trajectory.points.append(point(t, q, v, result.a, tau))
                if constraints:
                    worst_violation = max(worst_violation, violation(q, v, t))
            q, v = result.q, result.v
            if time.perf_counter() - resumed > YIELD_EVERY_S:
                self._wake.trigger()  # wake the executor's wait set, then let it run
                await _pause()
                resumed = time.perf_counter()
        t = steps * dt
        tau = effort_at(t, q, v)
        applied = tau + joint_losses(model, v) if losses else tau
        if constraints:
            a = constraints.solve(model, q, v, fast.crba(q),
                                  applied - fast.nonlinear_effects(q, v), t).qdd
            worst_violation = max(worst_violation, violation(q, v, t))
        else:
            a = fast.aba(q, v, applied)
        trajectory.points.append(point(t, q, v, a, tau))
        energy = dynamics.kinetic_energy(model, q, v) + dynamics.potential_energy(model, q)
        response.trajectory = trajectory
        response.energy_drift = float((energy - energy0) / max(abs(energy0), 1.0))
        response.steps = steps
        response.max_constraint_violation = worst_violation

    def _torque_source(self, model: Model, request: Any, layout: JointLayout, q0: np.ndarray,
                       fast: Any) -> Callable[[float, np.ndarray, np.ndarray], np.ndarray]:
        mode = request.torque_mode or "constant"
        n = len(layout.v_index)
        if mode == "constant":
            tau = layout.velocities(request.efforts, "efforts")
            return lambda t, q, v: tau
        if mode == "series":
            times = np.asarray(request.effort_times, dtype=float)
            rows = np.asarray(request.efforts, dtype=float)
            if times.size == 0:
                raise ValueError("effort_times: series mode needs at least one time")
            if rows.size != times.size * n:
                raise ValueError(f"efforts: series mode needs len(effort_times) × {n} = "
                                 f"{times.size * n} values, got {rows.size}")
            if not np.all(np.isfinite(times)):
                raise ValueError("effort_times contain NaN or inf")
            if not np.all(np.isfinite(rows)):
                raise ValueError("efforts contain NaN or inf")
            if np.any(np.diff(times) <= 0):
                raise ValueError("effort_times must increase strictly")
            table = np.zeros((times.size, model.nv))
            table[:, layout.v_index] = rows.reshape(times.size, n)

            def series(t, q, v):
                # the row in force at t; before the first time, the first row
                k = max(int(np.searchsorted(times, t + 1e-12, side="right")) - 1, 0)
                return table[k]

            return series
        if mode in ("gravity_compensation", "computed_torque"):
            return self._control_law(model, request, mode, q0, fast)
        raise ValueError(f"torque_mode must be one of {TORQUE_MODES}, not {mode!r}")

    @staticmethod
    def _control_law(model: Model, request: Any, mode: str, q0: np.ndarray,
                     fast: Any) -> Callable[[float, np.ndarray, np.ndarray], np.ndarray]:
        """The node's JointController law: validated gains and reference, efforts clamped to the
        URDF effort limits."""

        def gains(values: Sequence[float], default: float) -> float | list[float]:
            values = list(values)
            return default if not values else values[0] if len(values) == 1 else values

        controller = JointController(
            model, mode="gravity" if mode == "gravity_compensation" else "computed_torque",
            kp=gains(request.kp, DEFAULT_KP), kd=gains(request.kd, DEFAULT_KD),
            max_state_age=math.inf, backend=fast)
        controller.update_state(model.joint_names, q0, [], 0.0)
        if mode == "computed_torque":
            reference = request.reference
            if not reference.points:
                raise ValueError("reference: computed_torque needs at least one point")
            points = [TrajectoryPoint(
                _seconds(p.time_from_start), list(p.positions),
                list(p.velocities) if len(p.velocities) else None,
                list(p.accelerations) if len(p.accelerations) else None)
                for p in reference.points]
            try:
                controller.set_trajectory(list(reference.joint_names), points, 0.0)
            except ControllerError as exc:
                raise ValueError(f"reference: {exc}") from None
        # The controller's law without its per-state bookkeeping (name mapping, staleness):
        # the same efforts, a fifth of the roll-out's time less.
        limit = model.effort_limit[controller.index] * controller.effort_scale
        index, kp, kd = controller.index, controller.kp, controller.kd
        continuous = controller.continuous if controller.has_continuous else None
        sampler = controller.trajectory

        def law(t, q, v):
            if sampler is None:
                raw = fast.gravity(q)
            else:
                q_d, v_d, a_d = sampler.sample(t)[:3]
                error = q_d - q if continuous is None else position_error(model, q_d, q,
                                                                          continuous)
                raw = fast.rnea(q, v, a_d + kd * (v_d - v) + kp * error)
            tau = np.zeros(model.nv)
            tau[index] = np.clip(raw[index], -limit, limit)
            return tau

        return law
