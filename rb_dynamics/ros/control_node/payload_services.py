# SPDX-License-Identifier: Apache-2.0
"""Payload services of the control node.

    ~/set_payload         (rb_dynamics_interfaces/SetPayload)   a payload at run time
    ~/identify_payload    (rb_dynamics_interfaces/IdentifyPayload)  mass and COM from efforts
    ~/trajectory_efforts  (rb_dynamics_interfaces/TrajectoryEfforts)  efforts + feasibility

plus the read-only ``payload.*`` parameters: the start-up payload and the rest threshold.

How a payload takes effect (``PayloadServices``):

- The control law gets the payload's share of the dynamics (``ControlLaw.payload``, a
  ``payload.PayloadEffort``): built outside the control loop's lock, then assigned under it
  (one reference), so the cycle after the answer has it and no cycle waits for it.
- The dynamics services (``~/inverse_dynamics``, ``~/forward_dynamics``, ``~/dynamics_terms``,
  ``~/simulate``, ``~/trajectory_efforts``) answer for the loaded robot: they run on a
  ``payload.PayloadDynamics``, the node's dynamics of the bare robot (its generated kernels)
  plus the payload's terms, whose ``model`` is ``with_payload(model, payload)`` for what reads
  the model itself (the constraint solver, energies). Not new kernels for the loaded model:
  generating them holds the interpreter long enough to leave a gap in the control loop's
  commands, while composing costs nothing at set time and little per call.
- A new robot description keeps the payload when its link exists there; otherwise the payload
  is dropped and /diagnostics says why.

Identification from recorded data: the control loop thread hands every joint state it has
answered to ``identification.resting.RestingSamples``, which keeps those at rest (every |q̇|
below ``payload.rest_velocity``; position and effort in model order, node-clock time) in a
ring buffer of ``RESTING_CAPACITY`` states; ``rest_poses`` groups them into poses. The whole
payload is estimated against the bare model (never relative to the payload set now). Efforts
a drive reports without gravity (``drive.effort_includes_gravity`` false) get the bare model's
g(q) back first: the drive's compensation knows the arm, not the payload.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from geometry_msgs.msg import Vector3
from rclpy.node import Node
from trajectory_msgs.msg import JointTrajectory

from rb_dynamics.control import (
    MAX_SAMPLES_PER_SEGMENT,
    FeasibilityReport,
    JointController,
    check_point_field,
    feasibility_report,
)
from rb_dynamics.dynamics import (
    Dynamics,
    Payload,
    PayloadDynamics,
    PayloadEffort,
    default_payload_link,
)
from rb_dynamics.identification import (
    IdentificationError,
    RestingSamples,
    identify_payload,
    identify_payload_inertia,
    rest_poses,
)
from rb_dynamics.model import Model, finite_array
from rb_dynamics.ros import parameters as ros_params
from rb_dynamics.ros.conversions import ConversionError, JointLayout, trajectory_points
from rb_dynamics.ros.payload_messages import (
    describe,
    inertia_matrix,
    payload_from_fields,
    payload_message,
)
from rb_dynamics.ros.runtime import failed_response
from rb_dynamics_interfaces.msg import LimitViolation
from rb_dynamics_interfaces.srv import IdentifyPayload, SetPayload, TrajectoryEfforts

from .control_loop import ControlLoop

__all__ = ["PAYLOAD_PARAMETERS", "PayloadServices", "whole_resting_efforts"]

DEFAULT_MIN_REST = 0.5  # s a pose must be held to count (its first half is dropped as settling)

# the start-up payload, described in the node's schema
PAYLOAD_PARAMETERS = ros_params.node_schema("control_node").select("payload.*")


def whole_resting_efforts(controller: JointController | None, dynamics: Dynamics | None,
                          poses: np.ndarray, efforts: np.ndarray) -> np.ndarray:
    """The mean resting ``efforts`` at ``poses`` as the joints' whole efforts: the bare
    model's g(q) (``dynamics``) added back where the drive reports efforts without it
    (``drive.effort_includes_gravity`` false; friction is nil at rest)."""
    if controller is None or dynamics is None or controller.law.drive.effort_includes_gravity:
        return efforts
    return np.array([tau + dynamics.gravity(q) for q, tau in zip(poses, efforts)])


class PayloadServices:
    """The payload of a control node: its services, the law's term, the services' dynamics.

    ``get_dynamics`` returns the node's dynamics of the bare robot (None: no model yet).
    """

    def __init__(self, node: Node, loop: ControlLoop,
                 get_dynamics: Callable[[], Dynamics | None]) -> None:
        self.node, self.loop, self.get_dynamics = node, loop, get_dynamics
        ros_params.declare(node, PAYLOAD_PARAMETERS)
        settings = ros_params.read(node, PAYLOAD_PARAMETERS)  # a bad file: no start
        self.link_parameter = settings["payload.link"]
        self._startup: tuple | None = None
        if settings["payload.mass"] > 0:
            startup = (settings["payload.mass"], settings["payload.com"],
                       inertia_matrix(settings["payload.inertia"], "payload.inertia"))
            Payload("unchecked", *startup)  # the values now; the link once a model is there
            self._startup = startup
        self.current: Payload | None = None  # the payload the robot carries (None: none)
        self.problem = ""
        self._lock = threading.Lock()  # one payload change at a time, model changes included
        self._loaded: PayloadDynamics | None = None  # the services' dynamics, made on demand
        self._built: PayloadEffort | None = None  # the last one ~/set_payload built
        self.samples = RestingSamples(settings["payload.rest_velocity"], loop.now)
        loop.set_state_recorder(self._record)
        node.create_service(SetPayload, "~/set_payload", self._set_payload)
        node.create_service(IdentifyPayload, "~/identify_payload", self._identify)
        node.create_service(TrajectoryEfforts, "~/trajectory_efforts", self._trajectory_efforts)

    # ------------------------------------------------------------------ state

    def _record(self, msg: Any, controller: JointController | None) -> None:
        self.samples.record(msg, controller.model if controller is not None else None)

    def default_link(self, model: Model) -> str:
        return self.link_parameter or default_payload_link(model)

    def _wanted(self, model: Model) -> Payload | None:
        """The payload for ``model``: the current one, or the start-up one (ValueError when
        it does not fit the model)."""
        if self._startup is not None:
            return payload_from_fields(model, self.default_link(model), "", *self._startup,
                                       prefix="payload.")[0]
        return self.current

    def _effort(self, model: Model, payload: Payload | None) -> PayloadEffort | None:
        """The payload's effort on ``model`` (None: no payload, or its link is not in the
        model: ``installed`` says so); the one built by ``~/set_payload`` is reused."""
        if payload is None or payload.is_empty:
            return None
        built = self._built
        if built is not None and built.model is model and built.payload is payload:
            return built
        try:
            return PayloadEffort(model, payload)
        except ValueError:
            return None

    def attach(self, controller: JointController) -> None:
        """A controller about to be swapped in carries the payload from its first cycle."""
        try:
            wanted = self._wanted(controller.model)
        except ValueError:
            wanted = None
        controller.set_payload(self._effort(controller.model, wanted))

    def installed(self, model: Model) -> None:
        """After a model is swapped in: the payload goes on (or is dropped, and said, when its
        link is not in the model); a payload set meanwhile reaches the new controller."""
        with self._lock:
            try:
                payload = self._wanted(model)
                if payload is not None:
                    PayloadEffort(model, payload)
            except ValueError as exc:
                what = "start-up payload" if self._startup else f"payload {describe(payload)}"
                self.problem = f"{what} dropped for {model.name!r}: {exc}"
                self.node.get_logger().error(self.problem)
                payload = None
            if self._startup is not None and payload is not None:
                self.node.get_logger().info(f"start-up payload: {describe(payload)}")
            self._startup = None
            self.current = payload
            self._swap(payload)
        self.samples.reset(model)

    def apply(self, payload: Payload) -> None:
        """Make ``payload`` the robot's (mass 0: none), from the next control cycle."""
        with self._lock:
            self._startup = None
            self.current = None if payload.is_empty else payload
            self.problem = ""
            self._swap(self.current)
        self.node.get_logger().info(f"payload: {describe(payload)}")

    def _swap(self, payload: Payload | None) -> None:
        """Give the control law ``payload``: built here, assigned under the loop's lock."""
        controller = self.loop.controller
        if controller is None:
            return
        current = controller.law.payload
        if (current.payload if current is not None else None) is payload:
            return
        effort = self._effort(controller.model, payload)
        with self.loop.lock:
            if self.loop.controller is controller:  # else ``installed`` is coming for the new
                controller.set_payload(effort)

    def dynamics(self) -> Dynamics | None:
        """The node's dynamics with the current payload (the services' robot)."""
        dyn, payload = self.get_dynamics(), self.current
        if dyn is None or payload is None:
            return dyn
        loaded = self._loaded
        if loaded is not None and loaded.base is dyn and loaded.payload is payload:
            return loaded
        try:
            self._loaded = PayloadDynamics(dyn, payload)
        except ValueError:
            return dyn  # dropped for this model (installed() is about to say so)
        return self._loaded

    def diagnostic_values(self) -> dict[str, str]:
        values = {"payload": describe(self.current),
                  "resting states recorded": str(self.samples.stored)}
        if self.problem:
            values["payload problem"] = self.problem
        return values

    def _model(self) -> Model:
        dyn = self.get_dynamics()
        if dyn is None:
            raise ValueError("no robot description loaded yet")
        return dyn.model

    # ------------------------------------------------------------------ ~/set_payload

    def _set_payload(self, request: Any, response: Any) -> Any:
        try:
            model = self._model()
            payload, self._built = payload_from_fields(
                model, self.default_link(model), request.link, request.mass, request.com,
                request.inertia)
            self.apply(payload)
            response.payload = payload_message(payload)
            response.success, response.message = True, f"payload: {describe(payload)}"
        except Exception as exc:  # noqa: BLE001 - see failed_response
            return failed_response(response, exc, self.node.get_logger(), "set_payload")
        return response

    # ------------------------------------------------------------------ ~/identify_payload

    def _identify(self, request: Any, response: Any) -> Any:
        try:
            model = self._model()
            link = request.link or self.default_link(model)
            bias = request.bias or "auto"
            if len(request.positions):
                estimate, samples = self._identify_given(model, link, bias, request), 0
            else:
                estimate, samples = self._identify_recorded(model, link, bias, request)
            payload = _fill_estimate(response, model, estimate, samples)
            response.success = True
            response.message = f"{describe(payload)} (±{estimate.mass_std:.2g} kg)"
            if request.apply:
                self.apply(payload)
                response.applied = True
                response.message += "; applied"
        except Exception as exc:  # noqa: BLE001 - see failed_response
            return failed_response(response, exc, self.node.get_logger(), "identify_payload")
        return response

    def _identify_given(self, model: Model, link: str, bias: str, request: Any):
        layout = JointLayout(model, request.joint_names)
        rows = _pose_rows(request.positions, len(layout.q_index), "positions")
        n = len(rows)
        q = np.tile(model.neutral_configuration(), (n, 1))
        q[:, layout.q_index] = rows
        tau = _model_rows(layout, request.efforts, n, "efforts")
        reference = (None if not len(request.reference_efforts) else
                     _model_rows(layout, request.reference_efforts, n, "reference_efforts"))
        if len(request.velocities) or len(request.accelerations):
            v = _model_rows(layout, request.velocities, n, "velocities")
            a = _model_rows(layout, request.accelerations, n, "accelerations")
            return identify_payload_inertia(model, q, v, a, tau, link, bias=bias,
                                            reference_efforts=reference)
        return identify_payload(model, q, tau, link, bias=bias, reference_efforts=reference)

    def _identify_recorded(self, model: Model, link: str, bias: str, request: Any):
        window, min_rest = float(request.window), float(request.min_rest) or DEFAULT_MIN_REST
        if not (math.isfinite(window) and window >= 0):
            raise ValueError(f"window must be ≥ 0 s (0: everything recorded), got {window}")
        if not (math.isfinite(min_rest) and min_rest > 0):
            raise ValueError(f"min_rest must be > 0 s (0: {DEFAULT_MIN_REST}), got {min_rest}")
        if len(request.reference_efforts) or len(request.velocities):
            raise ValueError("reference_efforts/velocities: only with given positions")
        since = self.loop.now() - window if window > 0 else -math.inf
        t, q, tau = self.samples.take(model, since)
        if not len(t):
            extra = (f"; {self.samples.without_effort} joint states had no efforts"
                     if self.samples.without_effort else "")
            raise IdentificationError(
                "no resting joint states recorded" + (f" in the last {window:g} s" if window
                                                      else "") + extra)
        poses, efforts, used = rest_poses(t, q, tau, min_rest)
        efforts = whole_resting_efforts(self.loop.controller, self.get_dynamics(), poses, efforts)
        if len(poses) < 2:
            raise IdentificationError(
                f"{len(poses)} pose(s) held ≥ {min_rest:g} s among {len(t)} resting states: "
                "hold the arm still at several poses (about 10, turning the payload's link "
                "through different orientations)")
        return identify_payload(model, poses, efforts, link, bias=bias), used

    # ------------------------------------------------------------------ ~/trajectory_efforts

    def _trajectory_efforts(self, request: Any, response: Any) -> Any:
        try:
            dyn, payload = self._efforts_dynamics(request)
            trajectory = request.trajectory
            times, q, v, a, v_cols, held = self._trajectory_arrays(dyn.model, trajectory)
            samples = int(request.samples_per_segment) or 10
            if samples > MAX_SAMPLES_PER_SEGMENT:
                raise ValueError(f"samples_per_segment: at most {MAX_SAMPLES_PER_SEGMENT}, got "
                                 f"{samples}")
            try:
                report = feasibility_report(dyn, times, q, v, a, payload,
                                            samples_per_segment=samples)
            except ValueError as exc:
                raise ValueError(f"trajectory: {exc}") from None
            for point, row in zip(trajectory.points, report.efforts[:, v_cols]):
                point.effort = row.tolist()
            if held:
                report.notes.append(f"joints not in the trajectory, held still: {held}")
            _fill_report(response, report, trajectory)
        except Exception as exc:  # noqa: BLE001 - see failed_response
            response.trajectory = JointTrajectory()
            return failed_response(response, exc, self.node.get_logger(), "trajectory_efforts")
        return response

    def _efforts_dynamics(self, request: Any) -> tuple[Dynamics, Payload | None]:
        """The dynamics to use and the payload to add to them, as the request asks."""
        choice = request.payload or "current"
        if choice == "current":
            dyn = self.dynamics()
            if dyn is None:
                raise ValueError("no robot description loaded yet")
            return dyn, None
        dyn = self.get_dynamics()
        if dyn is None:
            raise ValueError("no robot description loaded yet")
        if choice == "none":
            return dyn, None
        if choice == "request":
            p = request.request_payload
            payload, _ = payload_from_fields(dyn.model, self.default_link(dyn.model), p.link,
                                             p.mass, p.com, p.inertia, "request_payload.")
            return dyn, None if payload.is_empty else payload
        raise ValueError(f"payload must be '' or 'current', 'none' or 'request', not {choice!r}")

    def _trajectory_arrays(self, model: Model, trajectory: Any):
        """(times, q, q̇ or None, q̈ or None) in model order, where the request's joints sit
        in v, and a note on the joints not named: they hold their last measured position (else
        the neutral one)."""
        names = list(trajectory.joint_names)
        if not names:
            raise ConversionError("joint_names: empty")
        layout = JointLayout(model, names, every_joint=False)
        q_cols, v_cols = layout.q_index, layout.v_index
        points = trajectory_points(trajectory.points, "trajectory.points")
        if not points:
            raise ValueError("trajectory.points: empty")
        controller, bare = self.loop.controller, self._model()
        measured = (controller is not None and controller.q is not None
                    and controller.model is bare)
        start = controller.q.copy() if measured else model.neutral_configuration()
        others = [name for name in model.joint_names if name not in names]
        held = (f"{others} at the {'last measured' if measured else 'neutral'} position"
                if others else "")
        n = len(points)
        q = np.tile(start, (n, 1))
        arrays = {}
        for field in ("velocities", "accelerations"):
            given = [getattr(p, field) is not None for p in points]
            if any(given) and not all(given):
                k = given.index(False)
                raise ValueError(f"trajectory.points[{k}].{field}: empty, but other points have "
                                 f"{field}: give them in every point or in none")
            arrays[field] = np.zeros((n, model.nv)) if all(given) else None
        try:
            for k, point in enumerate(points):
                q[k, q_cols] = check_point_field(point.positions, len(names), "positions", k)
                for field, array in arrays.items():
                    if array is not None:
                        array[k, v_cols] = check_point_field(getattr(point, field), len(names),
                                                              field, k)
        except ValueError as exc:
            raise ValueError(f"trajectory: {exc}") from None
        times = np.array([p.time for p in points])
        return times, q, arrays["velocities"], arrays["accelerations"], v_cols, held


def _pose_rows(values: Any, width: int, field: str) -> np.ndarray:
    """Request values as (N, width) rows, one per pose, finite (ConversionError naming the
    field)."""
    arr = finite_array(values, field, error=ConversionError).reshape(-1)
    if arr.size == 0 or arr.size % width:
        raise ConversionError(f"{field}: {arr.size} values is not N × {width} "
                              f"(one row per pose, ordered as joint_names)")
    return arr.reshape(-1, width)


def _model_rows(layout: JointLayout, values: Any, n: int, field: str) -> np.ndarray:
    """(n, nv) model-ordered rows from a request's rows in ``layout`` order."""
    rows = _pose_rows(values, len(layout.v_index), field)
    if len(rows) != n:
        raise ConversionError(f"{field}: {len(rows)} rows for {n} poses")
    out = np.zeros((n, layout.model.nv))
    out[:, layout.v_index] = rows
    return out


def _fill_estimate(response: Any, model: Model, estimate: Any, samples: int) -> Payload:
    """The response's fields from an estimate; the estimate as a Payload."""
    inertial = hasattr(estimate, "parameters")
    try:
        payload = estimate.as_payload()
    except ValueError as exc:
        raise IdentificationError(
            f"the identified inertia is not physical ({exc}): the motion does not determine "
            "it well; move faster through more varied motions, or identify mass and COM at "
            "rest") from None
    response.payload = payload_message(payload)
    response.inertia_identified = inertial
    response.mass_std = float(estimate.mass_std)
    x, y, z = np.asarray(estimate.com_std, dtype=float).tolist()
    response.com_std = Vector3(x=x, y=y, z=z)
    response.residual_rms, response.noise_std = estimate.residual_rms, estimate.noise_std
    response.condition = estimate.condition
    response.poses = estimate.n_samples if inertial else estimate.n_poses
    response.samples = samples
    names = [model.joint_names[model.joint_v_index.index(i)] for i in range(model.nv)]
    bias = estimate.friction[:, 0] if inertial and estimate.friction is not None else (
        None if inertial else estimate.bias)
    response.joint_names = names if bias is not None else []
    response.bias = [] if bias is None else bias.tolist()
    response.bias_std = ([] if inertial or estimate.bias_std is None
                         else estimate.bias_std.tolist())
    return payload


def _fill_report(response: Any, report: FeasibilityReport, trajectory: Any) -> None:
    response.trajectory = trajectory
    response.feasible = report.feasible
    response.joint_names = report.joint_names
    response.effort_ratio = report.effort_ratio.tolist()
    response.velocity_ratio = report.velocity_ratio.tolist()
    response.position_excess = report.position_excess.tolist()
    response.violations = [
        LimitViolation(kind=x.kind, joint=x.joint, time=x.time, point=x.point,
                       between=x.between, value=x.value, limit=x.limit)
        for x in report.violations]
    response.report = report.summary()
    response.success = True
    response.message = "feasible" if report.feasible else f"not feasible: {report.violations[0]}"
