"""The node's dynamics services, keyed by joint names (any order), never raising into rclpy.

``~/inverse_dynamics``, ``~/forward_dynamics``, ``~/dynamics_terms`` (M, C q̇, g) and
``~/simulate`` (a roll-out under constant, time-series, gravity-compensation or computed-torque
efforts). Bad input answers success=false with a message naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.node import Node
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics_interfaces.srv import DynamicsTerms, ForwardDynamics, InverseDynamics, Simulate

from . import dynamics
from .control import ControllerError, JointController, TrajectoryPoint
from .conversions import named_state, wrenches_by_link
from .model import Model
from .simulation import INTEGRATORS, step

MAX_STEPS = 200_000
MAX_POINTS = 20_000
TORQUE_MODES = ("constant", "series", "gravity_compensation", "computed_torque")


def _seconds(duration) -> float:
    return duration.sec + duration.nanosec * 1e-9


class DynamicsServices:
    def __init__(self, node: Node, get_model: Callable[[], Model | None],
                 get_backend: Callable[[], Any] | None = None):
        self.node, self.get_model = node, get_model
        self.get_backend = get_backend or (lambda: None)
        node.create_service(InverseDynamics, "~/inverse_dynamics", self._inverse)
        node.create_service(ForwardDynamics, "~/forward_dynamics", self._forward)
        node.create_service(DynamicsTerms, "~/dynamics_terms", self._terms)
        node.create_service(Simulate, "~/simulate", self._simulate)

    # ------------------------------------------------------------------ plumbing

    def _answer(self, name: str, response: Any, compute: Callable[[Model], None]) -> Any:
        try:
            model = self.get_model()
            if model is None:
                raise ValueError("no robot description loaded yet")
            compute(model)
            response.success, response.message = True, ""
        except (ValueError, KeyError, ControllerError) as exc:
            response.success, response.message = False, str(exc).strip("'\"")
        except Exception as exc:  # noqa: BLE001 - a service answers, it never kills the node
            self.node.get_logger().error(f"{name}: internal error: {exc!r}")
            response.success, response.message = False, f"internal error: {exc!r}"
        return response

    @staticmethod
    def _order(model: Model, names: list[str]) -> np.ndarray:
        return np.array([model.joint_v_index[model.joint_index(n)] for n in names], dtype=int)

    def _backend(self, model: Model):
        """The node's generated kernels for the current model (swapped with it), if any."""
        return self.get_backend()

    # ------------------------------------------------------------------ services

    def _inverse(self, request: Any, response: Any) -> Any:
        def compute(model: Model) -> None:
            q, v, a = named_state(model.joint_names, request,
                                  ("positions", "velocities", "accelerations"))
            order = self._order(model, list(request.joint_names))
            response.joint_names = list(request.joint_names)
            response.efforts = dynamics.rnea(model, q, v, a)[order].tolist()
            response.gravity = dynamics.gravity(model, q)[order].tolist()

        return self._answer("inverse_dynamics", response, compute)

    def _forward(self, request: Any, response: Any) -> Any:
        def compute(model: Model) -> None:
            q, v, tau = named_state(model.joint_names, request,
                                    ("positions", "velocities", "efforts"))
            f_ext = wrenches_by_link(list(request.wrench_links), list(request.wrenches),
                                     known_links=list(model.frames))
            order = self._order(model, list(request.joint_names))
            response.joint_names = list(request.joint_names)
            response.accelerations = dynamics.aba(model, q, v, tau, f_ext or None)[order].tolist()

        return self._answer("forward_dynamics", response, compute)

    def _terms(self, request: Any, response: Any) -> Any:
        def compute(model: Model) -> None:
            q, v = named_state(model.joint_names, request, ("positions", "velocities"))
            order = self._order(model, list(request.joint_names))
            g = dynamics.gravity(model, q)
            response.joint_names = list(request.joint_names)
            response.mass_matrix = dynamics.crba(model, q)[np.ix_(order, order)].ravel().tolist()
            response.coriolis = (dynamics.nonlinear_effects(model, q, v) - g)[order].tolist()
            response.gravity = g[order].tolist()

        return self._answer("dynamics_terms", response, compute)

    def _simulate(self, request: Any, response: Any) -> Any:
        return self._answer("simulate", response, lambda model: self._roll_out(model, request,
                                                                                response))

    def _roll_out(self, model: Model, request: Any, response: Any) -> None:
        names = list(request.joint_names)
        q, v = named_state(model.joint_names, request, ("positions", "velocities"))
        order = self._order(model, names)
        dt = request.time_step or 1e-3
        if not (math.isfinite(dt) and dt > 0):
            raise ValueError(f"time_step must be positive, got {request.time_step}")
        if not (math.isfinite(request.duration) and request.duration > 0):
            raise ValueError(f"duration must be positive, got {request.duration}")
        steps = round(request.duration / dt)
        if steps > MAX_STEPS:
            raise ValueError(f"duration/time_step = {steps} steps; at most {MAX_STEPS}")
        decimation = max(int(request.output_decimation), 1)
        if steps // decimation > MAX_POINTS:
            raise ValueError(f"{steps // decimation} output points; at most {MAX_POINTS}: raise "
                             "output_decimation")
        integrator = request.integrator or "semi_implicit_euler"
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS}, not {integrator!r}")
        effort_at = self._torque_source(model, request, names, order)
        from .codegen import compile_dynamics

        fast = self._backend(model) or compile_dynamics(model)

        def forward(_model, qs, vs, tau, *_):
            return fast.aba(qs, vs, tau)

        energy0 = dynamics.kinetic_energy(model, q, v) + dynamics.potential_energy(model, q)
        trajectory = JointTrajectory(joint_names=names)
        t = 0.0
        for k in range(steps):
            tau = effort_at(t, q, v)
            result = step(model, q, v, tau, dt, integrator, forward_dynamics=forward,
                          losses=request.include_losses, limits=request.include_losses,
                          backend=fast if request.include_losses else None)
            if not (np.all(np.isfinite(result.q)) and np.all(np.isfinite(result.v))):
                raise ValueError(f"the simulation diverged at t = {t:.4f} s (non-finite state)")
            if k % decimation == 0:
                point = JointTrajectoryPoint(
                    positions=q[order].tolist(), velocities=v[order].tolist(),
                    accelerations=result.a[order].tolist(), effort=tau[order].tolist())
                point.time_from_start.sec, point.time_from_start.nanosec = divmod(
                    round(t * 1e9), 1_000_000_000)
                trajectory.points.append(point)
            q, v, t = result.q, result.v, (k + 1) * dt
        energy = dynamics.kinetic_energy(model, q, v) + dynamics.potential_energy(model, q)
        response.trajectory = trajectory
        response.energy_drift = float((energy - energy0) / max(abs(energy0), 1.0))
        response.steps = steps

    def _torque_source(self, model: Model, request: Any, names: list[str],
                       order: np.ndarray) -> Callable[[float, np.ndarray, np.ndarray], np.ndarray]:
        mode = request.torque_mode or "constant"
        n = len(names)
        if mode == "constant":
            efforts = np.zeros(n) if len(request.efforts) == 0 else \
                np.asarray(request.efforts, dtype=float)
            if efforts.shape != (n,) or not np.all(np.isfinite(efforts)):
                raise ValueError(f"efforts: constant mode needs {n} finite values")
            tau = np.zeros(model.nv)
            tau[order] = efforts
            return lambda t, q, v: tau
        if mode == "series":
            times = np.asarray(request.effort_times, dtype=float)
            rows = np.asarray(request.efforts, dtype=float)
            if times.size == 0 or rows.size != times.size * n:
                raise ValueError(f"efforts: series mode needs len(effort_times) × {n} values")
            if not (np.all(np.isfinite(times)) and np.all(np.isfinite(rows))):
                raise ValueError("effort_times/efforts contain NaN or inf")
            if np.any(np.diff(times) <= 0):
                raise ValueError("effort_times must increase")
            table = np.zeros((times.size, model.nv))
            table[:, order] = rows.reshape(times.size, n)

            def series(t, q, v):
                k = max(int(np.searchsorted(times, t, side="right")) - 1, 0)
                return table[k]

            return series
        if mode in ("gravity_compensation", "computed_torque"):
            controller = JointController(
                model, mode="gravity" if mode == "gravity_compensation" else "computed_torque",
                kp=list(request.kp) if len(request.kp) > 1 else (request.kp[0] if request.kp
                                                                  else 100.0),
                kd=list(request.kd) if len(request.kd) > 1 else (request.kd[0] if request.kd
                                                                  else 20.0),
                max_state_age=math.inf, backend=self._backend(model))
            if mode == "computed_torque":
                reference = request.reference
                if not reference.points:
                    raise ValueError("reference: computed_torque needs at least one point")
                points = [TrajectoryPoint(
                    _seconds(p.time_from_start), list(p.positions),
                    list(p.velocities) if len(p.velocities) else None,
                    list(p.accelerations) if len(p.accelerations) else None)
                    for p in reference.points]
                controller.update_state(model.joint_names, self._state(model, request), [], 0.0)
                controller.set_trajectory(list(reference.joint_names), points, 0.0)

            def law(t, q, v):
                controller.update_state(model.joint_names, q, v, t)
                tau = np.zeros(model.nv)
                tau[controller.index] = controller.compute(t).effort
                return tau

            return law
        raise ValueError(f"torque_mode must be one of {TORQUE_MODES}, not {mode!r}")

    @staticmethod
    def _state(model: Model, request: Any) -> np.ndarray:
        return named_state(model.joint_names, request, ("positions",))[0]
