# SPDX-License-Identifier: Apache-2.0
"""Payload services of the control node (and the simulator's ``~/set_payload``).

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
  generating them holds the interpreter for tenths of a second at a time (measured on panda:
  0.45 s), a gap in the control loop's commands; composing costs nothing at set time and
  ~25 µs per call.
- A new robot description keeps the payload when its link exists there; otherwise the payload
  is dropped and /diagnostics says why.

Identification from recorded data: the control loop thread hands every joint state it has
answered to ``RestingSamples``, which keeps those at rest (every |q̇| below
``payload.rest_velocity``; position and effort in model order, node-clock time) in a ring
buffer of ``RESTING_CAPACITY`` states. ``rest_poses`` groups them into poses. The whole
payload is estimated against the bare model (never relative to the payload set now).
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

from rb_dynamics.control import MAX_SAMPLES_PER_SEGMENT, FeasibilityReport, feasibility_report
from rb_dynamics.control.controller import JointController, _check_values
from rb_dynamics.dynamics import (
    Dynamics,
    IdentificationError,
    Payload,
    PayloadDynamics,
    PayloadEffort,
    default_payload_link,
    identify_payload,
    identify_payload_inertia,
)
from rb_dynamics.model.urdf import Model
from rb_dynamics.ros import parameters as ros_params
from rb_dynamics.ros.conversions import ConversionError, trajectory_points
from rb_dynamics_interfaces.msg import LimitViolation
from rb_dynamics_interfaces.msg import Payload as PayloadMsg
from rb_dynamics_interfaces.srv import IdentifyPayload, SetPayload, TrajectoryEfforts

__all__ = [
    "PAYLOAD_PARAMETERS",
    "RESTING_CAPACITY",
    "PayloadServices",
    "RestingSamples",
    "SimulatorPayload",
    "payload_from_fields",
    "rest_poses",
]

RESTING_CAPACITY = 60_000  # resting joint states kept: a minute at 1 kHz, ~8 MB for 7 joints
POSE_TOLERANCE = 2e-3  # rad or m: samples farther than this from a pose's first are a new pose
MAX_REST_GAP = 0.5  # s without a resting sample: the arm moved (or the stream stopped)
DEFAULT_MIN_REST = 0.5  # s a pose must be held to count (its first half is dropped as settling)
END_MARGIN = 0.2  # s dropped at the end of a pose: the next move is starting

# the start-up payload, described in the node's schema
PAYLOAD_PARAMETERS = ros_params.node_schema("control_node").select("payload.*")


# ----------------------------------------------------------------------------- conversions


def _inertia_matrix(values, field: str) -> np.ndarray:
    """6 values (URDF order ixx ixy ixz iyy iyz izz), 9 (row-major) or none (zero)."""
    values = np.asarray(values, dtype=float).reshape(-1)
    if values.size == 0:
        return np.zeros((3, 3))
    if values.size == 6:
        xx, xy, xz, yy, yz, zz = values
        return np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    if values.size == 9:
        return values.reshape(3, 3)
    raise ValueError(f"{field}: 6 values (ixx ixy ixz iyy iyz izz) or 9 (row-major), "
                     f"got {values.size}")


def payload_from_fields(model: Model, default_link: str, link: str, mass: float, com,
                        inertia, prefix: str = "") -> tuple[Payload, PayloadEffort]:
    """A checked Payload on ``model`` from a message's fields, and its effort on ``model``
    (ValueError naming the field)."""
    link = link or default_link
    com = [com.x, com.y, com.z] if isinstance(com, Vector3) else com
    try:
        payload = Payload(link, mass, com, _inertia_matrix(inertia, f"{prefix}inertia"))
        return payload, PayloadEffort(model, payload)  # PayloadEffort: the link exists, moves
    except ValueError as exc:  # "payload mass must be ..." → "<prefix>mass must be ..."
        text = str(exc)
        if text.startswith("payload "):
            raise ValueError(prefix + text.removeprefix("payload ")) from None
        raise ValueError(f"{prefix}link: {text}" if prefix else text) from None


def payload_message(payload: Payload | None, link: str = "") -> PayloadMsg:
    if payload is None:
        return PayloadMsg(link=link)
    x, y, z = payload.com.tolist()
    return PayloadMsg(link=payload.link, mass=payload.mass, com=Vector3(x=x, y=y, z=z),
                      inertia=payload.inertia.reshape(-1).tolist())


def describe(payload: Payload | None) -> str:
    if payload is None or payload.is_empty:
        return "none"
    com = ", ".join(f"{c:.4g}" for c in payload.com)
    inertia = "" if not payload.inertia.any() else \
        f", inertia diag [{', '.join(f'{x:.3g}' for x in np.diag(payload.inertia))}] kg·m²"
    return f"{payload.mass:.4g} kg on {payload.link}, COM [{com}] m{inertia}"


# ----------------------------------------------------------------------------- resting samples


class RestingSamples:
    """The latest joint states at rest, in model order, for identification.

    ``record`` runs on the control loop thread after the command is out: a velocity check per
    state, and for a resting one a copy into arrays preallocated by ``reset`` (called when a
    model is installed). Everything tied to a model is replaced whole, never edited in place,
    so a model change between two states cannot mix two layouts.
    """

    def __init__(self, rest_velocity: float, clock: Callable[[], float],
                 capacity: int = RESTING_CAPACITY) -> None:
        self.rest_velocity, self.clock, self.capacity = rest_velocity, clock, capacity
        self._lock = threading.Lock()
        self._buffer: tuple | None = None  # (model, t, q, τ)
        self._layout: tuple | None = None  # (model, message names, columns, q index, v index)
        self.written = 0  # resting states recorded for the current model
        self.without_effort = 0  # joint states that carried no efforts

    def reset(self, model: Model) -> None:
        """Start recording for ``model`` (what was recorded for another model is dropped)."""
        buffer = (model, np.zeros(self.capacity),
                  np.tile(model.neutral_configuration(), (self.capacity, 1)),
                  np.zeros((self.capacity, model.nv)))
        with self._lock:
            self._buffer, self.written = buffer, 0

    @staticmethod
    def _map(model: Model, names: list[str]) -> tuple | None:
        """Where the model's joints are in a message (None: one is missing)."""
        index = {n: k for k, n in enumerate(names)}
        if any(n not in index for n in model.joint_names):
            return None
        return (model, list(names), np.array([index[n] for n in model.joint_names], dtype=int),
                np.array(model.joint_q_index, dtype=int), np.array(model.joint_v_index,
                                                                   dtype=int))

    def record(self, msg: Any, controller: JointController | None) -> None:
        n = len(msg.name)
        if controller is None or len(msg.velocity) != n or len(msg.position) != n:
            return  # not a state the controller took
        if len(msg.effort) != n:
            self.without_effort += 1
            return
        if n and max(map(abs, msg.velocity)) >= self.rest_velocity:
            return
        model, buffer = controller.model, self._buffer
        if buffer is None or buffer[0] is not model:
            return
        layout = self._layout
        if layout is None or layout[0] is not model or layout[1] != msg.name:
            layout = self._layout = self._map(model, msg.name)
            if layout is None:
                return
        _, _, columns, q_index, v_index = layout
        now = self.clock()
        position = np.asarray(msg.position)[columns]
        effort = np.asarray(msg.effort)[columns]
        with self._lock:
            if self._buffer is not buffer:
                return
            slot = self.written % self.capacity
            buffer[1][slot] = now
            buffer[2][slot, q_index] = position
            buffer[3][slot, v_index] = effort
            self.written += 1

    def take(self, model: Model, since: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(t, q, τ) of the resting states recorded at or after ``since``, oldest first."""
        with self._lock:
            buffer = self._buffer
            if buffer is None or buffer[0] is not model or self.written == 0:
                return np.zeros(0), np.zeros((0, model.nq)), np.zeros((0, model.nv))
            count = min(self.written, self.capacity)
            order = np.arange(self.written - count, self.written) % self.capacity
            t, q, tau = buffer[1][order], buffer[2][order], buffer[3][order]
        keep = t >= since
        return t[keep], q[keep], tau[keep]

    @property
    def stored(self) -> int:
        return min(self.written, self.capacity)


def rest_poses(t: np.ndarray, q: np.ndarray, tau: np.ndarray, min_rest: float,
               tolerance: float = POSE_TOLERANCE, max_gap: float = MAX_REST_GAP
               ) -> tuple[np.ndarray, np.ndarray, int]:
    """(poses (N, nq), mean efforts (N, nv), samples used) from time-ordered resting samples.

    A pose is a run of samples without a gap over ``max_gap`` seconds whose positions stay
    within ``tolerance`` of its first; held at least ``min_rest`` seconds, it counts with the
    mean of its samples from half-way to ``END_MARGIN`` before its end. Both ends are motion
    that the velocity threshold does not see: the first half settling (the arm still
    decelerating), the end the next move starting (slow, but already accelerating: M q̈ ≠ 0).
    """
    poses, efforts, used = [], [], 0
    start = 0
    breaks = set((np.flatnonzero(np.diff(t) > max_gap) + 1).tolist()) | {len(t)}
    while start < len(t):
        stop = min(b for b in breaks if b > start)
        moved = np.flatnonzero(np.abs(q[start:stop] - q[start]).max(axis=1) > tolerance)
        end = start + int(moved[0]) if moved.size else stop
        if t[end - 1] - t[start] >= min_rest:
            run = t[start:end]
            settled = np.flatnonzero((run >= 0.5 * (run[0] + run[-1]))
                                     & (run <= run[-1] - END_MARGIN)) + start
            if settled.size:
                poses.append(q[settled].mean(axis=0))
                efforts.append(tau[settled].mean(axis=0))
                used += len(settled)
        start = end
    if not poses:
        return np.zeros((0, q.shape[1])), np.zeros((0, tau.shape[1])), 0
    return np.array(poses), np.array(efforts), used


# ----------------------------------------------------------------------------- the services


def _fail(response: Any, exc: BaseException, node: Node, name: str) -> Any:
    if isinstance(exc, ValueError):  # IdentificationError, ConversionError, ControllerError
        response.success, response.message = False, str(exc)
    else:  # a service answers, it never kills the node
        node.get_logger().error(f"{name}: internal error: {exc!r}")
        response.success, response.message = False, f"internal error: {exc!r}"
    return response


class PayloadServices:
    """The payload of a control node: its services, the law's term, the services' dynamics.

    ``get_dynamics`` returns the node's dynamics of the bare robot (None: no model yet).
    """

    def __init__(self, node: Node, loop: Any, get_dynamics: Callable[[], Dynamics | None]
                 ) -> None:
        self.node, self.loop, self.get_dynamics = node, loop, get_dynamics
        ros_params.declare(node, PAYLOAD_PARAMETERS)
        settings = ros_params.read(node, PAYLOAD_PARAMETERS)  # a bad file: no start
        self.link_parameter = settings["payload.link"]
        self._startup: tuple | None = None
        if settings["payload.mass"] > 0:
            startup = (settings["payload.mass"], settings["payload.com"],
                       _inertia_matrix(settings["payload.inertia"], "payload.inertia"))
            Payload("unchecked", *startup)  # the values now; the link once a model is there
            self._startup = startup
        self.current: Payload | None = None  # the payload the robot carries (None: none)
        self.problem = ""
        self._lock = threading.Lock()  # one payload change at a time, model changes included
        self._loaded: PayloadDynamics | None = None  # the services' dynamics, made on demand
        self._built: PayloadEffort | None = None  # the last one ~/set_payload built
        self.samples = RestingSamples(settings["payload.rest_velocity"], loop._now)
        loop.recorder = lambda msg: self.samples.record(msg, loop.controller)
        node.create_service(SetPayload, "~/set_payload", self._set_payload)
        node.create_service(IdentifyPayload, "~/identify_payload", self._identify)
        node.create_service(TrajectoryEfforts, "~/trajectory_efforts", self._trajectory_efforts)

    # ------------------------------------------------------------------ state

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
        controller.law.payload = self._effort(controller.model, wanted)

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
                controller.law.payload = effort

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
        except Exception as exc:  # noqa: BLE001 - see _fail
            return _fail(response, exc, self.node, "set_payload")
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
        except Exception as exc:  # noqa: BLE001 - see _fail
            return _fail(response, exc, self.node, "identify_payload")
        return response

    def _identify_given(self, model: Model, link: str, bias: str, request: Any):
        names = list(request.joint_names)
        rows = _rows(model, names, request.positions, "positions")
        n = len(rows)
        q = np.tile(model.neutral_configuration(), (n, 1))
        q[:, _indices(model, names, "q")] = rows
        tau = _model_rows(model, names, request.efforts, n, "efforts")
        reference = (None if not len(request.reference_efforts) else
                     _model_rows(model, names, request.reference_efforts, n,
                                 "reference_efforts"))
        if len(request.velocities) or len(request.accelerations):
            v = _model_rows(model, names, request.velocities, n, "velocities")
            a = _model_rows(model, names, request.accelerations, n, "accelerations")
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
        since = self.loop._now() - window if window > 0 else -math.inf
        t, q, tau = self.samples.take(model, since)
        if not len(t):
            extra = (f"; {self.samples.without_effort} joint states had no efforts"
                     if self.samples.without_effort else "")
            raise IdentificationError(
                "no resting joint states recorded" + (f" in the last {window:g} s" if window
                                                      else "") + extra)
        poses, efforts, used = rest_poses(t, q, tau, min_rest)
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
        except Exception as exc:  # noqa: BLE001 - see _fail
            response.trajectory = JointTrajectory()
            return _fail(response, exc, self.node, "trajectory_efforts")
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
        q_cols, v_cols = _indices(model, names, "q"), _indices(model, names, "v")
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
                q[k, q_cols] = _check_values(point.positions, len(names), "positions", k)
                for field, array in arrays.items():
                    if array is not None:
                        array[k, v_cols] = _check_values(getattr(point, field), len(names),
                                                         field, k)
        except ValueError as exc:
            raise ValueError(f"trajectory: {exc}") from None
        times = np.array([p.time for p in points])
        return times, q, arrays["velocities"], arrays["accelerations"], v_cols, held


def _indices(model: Model, names: list[str], kind: str) -> np.ndarray:
    """Model q or v index of each named joint (1-DoF, independent, named once)."""
    unknown = [n for n in names if n not in model.joint_names]
    if unknown:
        raise ConversionError(f"joint_names: unknown joints {unknown}; the model's joints are "
                              f"{model.joint_names}")
    if len(set(names)) != len(names):
        raise ConversionError(f"joint_names: repeated joints in {names}")
    if not names:
        raise ConversionError("joint_names: empty")
    table = model.joint_q_index if kind == "q" else model.joint_v_index
    return np.array([table[model.joint_index(n)] for n in names], dtype=int)


def _rows(model: Model, names: list[str], values, field: str) -> np.ndarray:
    """Request values as (N, len(names)) rows, finite (ConversionError naming the field)."""
    _indices(model, names, "q")
    missing = [n for n in model.joint_names if n not in names]
    if missing:
        raise ConversionError(f"joint_names: missing joints {missing} (every joint of the "
                              "model once)")
    arr = np.asarray(values, dtype=float).reshape(-1)
    if arr.size == 0 or arr.size % len(names):
        raise ConversionError(f"{field}: {arr.size} values is not N × {len(names)} "
                              f"(one row per pose, ordered as joint_names)")
    if not np.all(np.isfinite(arr)):
        raise ConversionError(f"{field} contains NaN or inf")
    return arr.reshape(-1, len(names))


def _model_rows(model: Model, names: list[str], values, n: int, field: str) -> np.ndarray:
    rows = _rows(model, names, values, field)
    if len(rows) != n:
        raise ConversionError(f"{field}: {len(rows)} rows for {n} poses")
    out = np.zeros((n, model.nv))
    out[:, _indices(model, names, "v")] = rows
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


# ----------------------------------------------------------------------------- the simulator


class SimulatorPayload:
    """The simulator's ``~/set_payload``: ``carry(dynamics)`` makes the simulated robot the
    bare one (``bare``, its dynamics) with the payload (``PayloadDynamics``), or the bare one
    for mass 0; the state is kept."""

    def __init__(self, node: Node, bare: Dynamics, carry: Callable[[Dynamics], None]) -> None:
        self.node, self.bare, self.carry = node, bare, carry
        self.current: Payload | None = None
        node.create_service(SetPayload, "~/set_payload", self._set_payload)

    def _set_payload(self, request: Any, response: Any) -> Any:
        try:
            model = self.bare.model
            payload, _ = payload_from_fields(model, default_payload_link(model), request.link,
                                             request.mass, request.com, request.inertia)
            self.carry(self.bare if payload.is_empty else PayloadDynamics(self.bare, payload))
            self.current = None if payload.is_empty else payload
            response.payload = payload_message(payload)
            response.success = True
            response.message = f"simulating the robot with payload: {describe(payload)}"
            self.node.get_logger().info(response.message)
        except Exception as exc:  # noqa: BLE001 - see _fail
            return _fail(response, exc, self.node, "set_payload")
        return response
