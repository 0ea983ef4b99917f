# SPDX-License-Identifier: Apache-2.0
"""Control laws and reference sampling, free of ROS.

One law (``ControlLaw``) serves the control node, ``~/simulate`` and the tests:

- ``gravity_compensation``: τ = g(q) (+ optional viscous and Coulomb friction compensation);
- ``computed_torque``: τ = M(q)(q̈_d + K_d(q̇_d − q̇) + K_p(q_d − q)) + C(q, q̇)q̇ + g(q),
  evaluated as one RNEA call with the commanded acceleration.

``TrajectorySampler`` samples a joint trajectory the way ros2_controllers' joint trajectory
controller does — quintic between points with positions, velocities and accelerations, cubic
with positions and velocities, linear with positions only — starting from the state at the time
the trajectory arrived, and holding the last point when it ends. ``JointController`` maps joint
states and references by name, refuses stale or unusable input, and clamps to the effort limits.

All vectors are in the model's independent coordinates (fixed-base, 1-DoF joints).
"""

from __future__ import annotations

import bisect
import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rb_dynamics.dynamics import Dynamics, PayloadEffort, make_dynamics
from rb_dynamics.model import Model, finite_array

__all__ = [
    "CONTROL_MODES",
    "MAX_TRAJECTORY_POINTS",
    "ControlLaw",
    "ControlOutput",
    "ControllerError",
    "JointController",
    "TrajectoryError",
    "TrajectoryPoint",
    "TrajectorySampler",
    "clamp_effort",
    "friction_compensation",
    "position_error",
    "wrap_angle",
]

CONTROL_MODES = ("gravity_compensation", "computed_torque")
# A reference this long is refused: reading (rclpy's deserialization holds the interpreter
# ~8 µs per point), converting and validating it must not hold a node for long
MAX_TRAJECTORY_POINTS = 10_000
_NO_CONTEXT = contextlib.nullcontext()


def wrap_angle(x: np.ndarray) -> np.ndarray:
    """Wrap angles to (−π, π]."""
    wrapped = np.mod(x + np.pi, 2.0 * np.pi) - np.pi
    return np.where(wrapped == -np.pi, np.pi, wrapped)


def continuous_mask(model: Model) -> np.ndarray:
    mask = np.zeros(model.nv, dtype=bool)
    for name in model.continuous_joints:
        mask[model.joint_v_index[model.joint_index(name)]] = True
    return mask


def position_error(
    model: Model, q_desired: np.ndarray, q: np.ndarray, continuous: np.ndarray | None = None
) -> np.ndarray:
    """q_d − q, wrapped to (−π, π] on continuous joints."""
    error = np.asarray(q_desired, dtype=float) - q
    if continuous is None:
        continuous = continuous_mask(model)
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
    smoothing_velocity: float = 0.1,
) -> np.ndarray:
    """Damping·q̇ + friction·tanh(q̇/ε): the URDF <dynamics> losses, smoothed through zero
    exactly as the simulator models them (``simulation.COULOMB_SMOOTHING``)."""
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

    ``payload`` (a ``payload.PayloadEffort`` built for ``dynamics.model``) adds a payload the
    model does not carry: its gravity in gravity compensation, its inverse dynamics at the
    commanded acceleration in computed torque. A new payload is a new object assigned whole,
    so the law never sees half of one.
    """

    dynamics: Dynamics
    mode: str = "gravity_compensation"
    kp: np.ndarray | None = None
    kd: np.ndarray | None = None
    friction_compensation: bool = False
    payload: PayloadEffort | None = None

    def __post_init__(self) -> None:
        model = self.dynamics.model
        if self.mode not in CONTROL_MODES:
            raise ControllerError(f"mode must be one of {CONTROL_MODES}, not {self.mode!r}")
        self.kp = np.zeros(model.nv) if self.kp is None else np.asarray(self.kp, float)
        self.kd = np.zeros(model.nv) if self.kd is None else np.asarray(self.kd, float)
        self.continuous = continuous_mask(model)
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


def _coefficients(T: float, p0, v0, a0, p1, v1, a1) -> np.ndarray:
    """Rows c0..c5 of the ros2_controllers spline p(t) = Σ c_k t^k on [0, T] (T > 0)."""
    c = np.zeros((6, len(p0)))
    if v0 is None or v1 is None:  # linear
        c[0], c[1] = p0, (p1 - p0) / T
    elif a0 is None or a1 is None:  # cubic Hermite
        c[0], c[1] = p0, v0
        c[2] = (3 * (p1 - p0) - T * (2 * v0 + v1)) / T**2
        c[3] = (2 * (p0 - p1) + T * (v0 + v1)) / T**3
    else:  # quintic, boundary p, v, a at both ends
        T2, T3, T4, T5 = T**2, T**3, T**4, T**5
        c[0], c[1], c[2] = p0, v0, 0.5 * a0
        c[3] = (20 * (p1 - p0) - (8 * v1 + 12 * v0) * T - (3 * a0 - a1) * T2) / (2 * T3)
        c[4] = (30 * (p0 - p1) + (14 * v1 + 16 * v0) * T + (3 * a0 - 2 * a1) * T2) / (2 * T4)
        c[5] = (12 * (p1 - p0) - 6 * (v1 + v0) * T - (a0 - a1) * T2) / (2 * T5)
    return c


def _segment(t: float, T: float, p0, v0, a0, p1, v1, a1):
    """Position, velocity, acceleration at t ∈ [0, T] of the ros2_controllers spline (t may be
    an array of times, shape (m, 1))."""
    if T <= 0.0:
        return p1.copy(), np.zeros_like(p1) if v1 is None else v1.copy(), np.zeros_like(p1)
    c0, c1, c2, c3, c4, c5 = _coefficients(T, p0, v0, a0, p1, v1, a1)
    pos = c0 + t * (c1 + t * (c2 + t * (c3 + t * (c4 + t * c5))))
    vel = c1 + t * (2 * c2 + t * (3 * c3 + t * (4 * c4 + t * 5 * c5)))
    acc = 2 * c2 + t * (6 * c3 + t * (12 * c4 + t * 20 * c5))
    return pos, vel, acc


def _basis(t: float) -> np.ndarray:
    """d^i/dt^i of [1, t, …, t⁵] for i = 0, 1, 2: (basis @ coefficients) = (p, ṗ, p̈) at t."""
    t2 = t * t
    t3 = t2 * t
    return np.array([[1.0, t, t2, t3, t3 * t, t3 * t2],
                     [0.0, 1.0, 2 * t, 3 * t2, 4 * t3, 5 * t3 * t],
                     [0.0, 0.0, 2.0, 6 * t, 12 * t2, 20 * t3]])


# ----------------------------------------------------------------------------- trajectories


class TrajectoryError(ValueError):
    """A trajectory that cannot be followed; the message says which field is wrong."""


@dataclass(frozen=True)
class TrajectoryPoint:
    """One point of a joint trajectory (fields left None are not given)."""
    time: float  # seconds from the trajectory start
    positions: np.ndarray
    velocities: np.ndarray | None = None
    accelerations: np.ndarray | None = None


def _check_values(values, n: int, field: str, k: int) -> np.ndarray:
    arr = finite_array(values, f"point {k}: {field}", error=TrajectoryError).reshape(-1)
    if arr.size != n:
        raise TrajectoryError(f"point {k}: {field} has {arr.size} values, expected {n}")
    return arr


class TrajectorySampler:
    """A joint trajectory anchored at ``start_time`` and the state it started from.

    Points are held as arrays and the segment at a time is found by bisection, so a sample
    costs the same for 2 points or 20,000 (the control loop samples once per state); the
    polynomial of the segment last sampled is kept, so consecutive samples in one segment
    cost one small matrix product (equal to ``_segment`` to rounding).
    """

    def __init__(
        self,
        points: Sequence[TrajectoryPoint],
        start_time: float,
        start_positions: np.ndarray,
        start_velocities: np.ndarray | None = None,
    ):
        if not points:
            raise TrajectoryError("trajectory has no points")
        if len(points) > MAX_TRAJECTORY_POINTS:
            raise TrajectoryError(f"trajectory has {len(points)} points; at most "
                                  f"{MAX_TRAJECTORY_POINTS}")
        n = len(start_positions)
        times = [float(point.time) for point in points]
        for k, t in enumerate(times):
            if not math.isfinite(t) or t < 0:
                raise TrajectoryError(f"point {k}: time_from_start {t} must be finite and ≥ 0")
            if k and t <= times[k - 1]:
                raise TrajectoryError(f"point {k}: time_from_start {t} is not after "
                                      f"point {k - 1}'s {times[k - 1]}")
        self.times = [0.0, *times]  # row 0 is the start state
        self.positions = np.empty((len(points) + 1, n))
        self.velocities = np.zeros((len(points) + 1, n))
        self.accelerations = np.zeros((len(points) + 1, n))
        # which rows carry velocities / accelerations: they choose each segment's spline
        self.has_velocity = np.zeros(len(points) + 1, dtype=bool)
        self.has_acceleration = np.zeros(len(points) + 1, dtype=bool)
        for k, point in enumerate(points, start=1):
            self.positions[k] = _check_values(point.positions, n, "positions", k - 1)
            if point.velocities is not None:
                self.velocities[k] = _check_values(point.velocities, n, "velocities", k - 1)
                self.has_velocity[k] = True
            if point.accelerations is not None:
                self.accelerations[k] = _check_values(point.accelerations, n, "accelerations",
                                                      k - 1)
                self.has_acceleration[k] = True
        self.start_time = float(start_time)
        # the spline toward the first point starts from the measured state with the same
        # derivatives the first point carries (ros2_controllers does the same)
        self.positions[0] = start_positions
        if start_velocities is not None:
            self.velocities[0] = start_velocities
        self.has_velocity[0], self.has_acceleration[0] = self.has_velocity[1], \
            self.has_acceleration[1]
        self._segment_coefficients: tuple[int, np.ndarray | None] = (-1, None)

    @property
    def end_time(self) -> float:
        return self.start_time + self.times[-1]

    def _row(self, k: int):
        return (self.positions[k], self.velocities[k] if self.has_velocity[k] else None,
                self.accelerations[k] if self.has_acceleration[k] else None)

    def sample(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """(q_d, q̇_d, q̈_d, finished) at time ``now``; after the end the last point is held."""
        # before the start (a state stamped before the trajectory arrived) is the start
        t = max(now - self.start_time, 0.0)
        if t >= self.times[-1]:
            hold = np.zeros(self.positions.shape[1])
            return self.positions[-1].copy(), hold, hold.copy(), True
        k = bisect.bisect_right(self.times, t)  # times[k-1] ≤ t < times[k]
        before, after = self.times[k - 1], self.times[k]
        if after <= before:
            return (*_segment(t - before, after - before, *self._row(k - 1), *self._row(k)),
                    False)
        cached = self._segment_coefficients  # one (index, c) tuple: safe across threads
        if cached[0] != k:
            cached = (k, _coefficients(after - before, *self._row(k - 1), *self._row(k)))
            self._segment_coefficients = cached
        # p, ṗ, p̈ in one product: a sample costs a few µs, not ~30 numpy calls
        pos, vel, acc = _basis(t - before) @ cached[1]
        return pos, vel, acc, False


# ----------------------------------------------------------------------------- the controller


@dataclass
class ControlOutput:
    """One effort command and what came with it."""
    effort: np.ndarray  # in the controller's joint order, clamped to the effort limits
    clamped: list[str]  # joints whose effort hit a limit
    position_error: np.ndarray  # q_d − q in the controller's joint order (zeros in gravity mode)


class JointController:
    """Gravity compensation and computed torque for a fixed-base arm, mapped by joint name.

    The state and the reference arrive by name in any order; commands leave in the order of
    ``joints`` (a model without actuated joints has nothing to command: empty commands).
    Nothing is computed from a state older than ``max_state_age`` seconds.
    """

    def __init__(
        self,
        model: Model,
        joints: Sequence[str] | None = None,
        *,
        mode: str = "gravity_compensation",
        kp=100.0,
        kd=20.0,
        friction_compensation: bool = False,
        max_state_age: float = 0.1,
        dynamics: Dynamics | None = None,
    ):
        if any(kind not in ("revolute", "prismatic") for kind in model.joint_kinds):
            raise ControllerError(
                "the controller drives fixed-base arms; this model has "
                f"{sorted(set(model.joint_kinds))} joints"
            )
        self.model = model
        self.joints = list(model.actuated_joint_names) if joints is None else list(joints)
        unknown = [n for n in self.joints if n not in model.joint_names]
        if unknown:
            hint = (
                " (mimic joints follow their leader)"
                if set(unknown) & set(model.mimic_joints)
                else ""
            )
            raise ControllerError(
                f"joints {unknown} are not independent joints of the "
                f"model{hint}; known: {model.joint_names}"
            )
        if len(set(self.joints)) != len(self.joints):
            raise ControllerError(f"joints {self.joints} has repeated names")
        self.index = np.array([model.joint_v_index[model.joint_index(n)] for n in self.joints],
                              dtype=int)
        self.state_index = {n: model.joint_q_index[k] for k, n in enumerate(model.joint_names)}
        self.law = ControlLaw(dynamics or make_dynamics(model), mode,
                              friction_compensation=bool(friction_compensation))
        self.set_gains(kp, kd)
        self.max_state_age = float(max_state_age)
        self.effort_scale = 1.0  # commands are clamped to effort_scale × the URDF limit
        self.q = self.v = None
        self.state_time = -math.inf
        self.trajectory: TrajectorySampler | None = None
        self.hold_position: np.ndarray | None = None
        # (q_d, q̇_d, q̈_d) the last effort was computed for (None in gravity compensation):
        # what a monitor of the loop (the trajectory action) compares the state with
        self.last_reference: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.healthy = True  # the last effort was finite (else the reference is not trusted)
        # per-state work kept small (the control loop answers every state): what does not
        # change between states is computed once
        self._zeros = np.zeros(model.nv)
        self._zeros.flags.writeable = False  # shared: the hold reference, gravity-mode errors
        self._every_joint = np.array_equal(self.index, np.arange(model.nv))
        self._columns: tuple[list[str], tuple[np.ndarray, np.ndarray] | None] | None = None
        self._limits: tuple[float, np.ndarray, np.ndarray] = (math.nan, self._zeros,
                                                               self._zeros)

    # -- settings ------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self.law.mode

    @property
    def kp(self) -> np.ndarray:
        return self.law.kp

    @property
    def kd(self) -> np.ndarray:
        return self.law.kd

    def set_mode(self, mode: str) -> None:
        if mode not in CONTROL_MODES:
            raise ControllerError(f"mode must be one of {CONTROL_MODES}, not {mode!r}")
        if mode != self.law.mode:  # a new mode starts by holding where the arm is
            self.trajectory, self.hold_position = None, None
        self.law.mode = mode

    def gain_vector(self, gains, name: str) -> np.ndarray:
        """Validated per-joint gains in model order (a scalar applies to every joint)."""
        values = check_gains(gains, name, len(self.joints))
        full = np.zeros(self.model.nv)
        full[self.index] = values
        return full

    def set_gains(self, kp=None, kd=None) -> None:
        """Per-joint gains (a scalar sets every joint); both are validated before either is set."""
        new_kp = self.law.kp if kp is None else self.gain_vector(kp, "kp")
        new_kd = self.law.kd if kd is None else self.gain_vector(kd, "kd")
        self.law.kp, self.law.kd = new_kp, new_kd

    # -- inputs --------------------------------------------------------------------

    def update_state(
        self,
        names: Sequence[str],
        positions: Sequence[float],
        velocities: Sequence[float],
        now: float,
    ) -> None:
        """A joint state by name (extra joints ignored); raises ControllerError if unusable."""
        if len(positions) != len(names):
            raise ControllerError(
                f"joint_states: {len(names)} names but {len(positions)} positions"
            )
        if len(velocities) not in (0, len(names)):
            raise ControllerError(
                f"joint_states: {len(names)} names but {len(velocities)} velocities"
            )
        columns = self._state_columns(names)
        if columns is None:  # the model's joints, in its order: copied as they are
            q = np.array(positions, dtype=float)
            v = np.array(velocities, dtype=float) if len(velocities) else np.zeros(self.model.nv)
        else:
            rows, columns = columns
            q = np.zeros(self.model.nq)
            v = np.zeros(self.model.nv)
            q[columns] = np.asarray(positions, dtype=float)[rows]
            if len(velocities):
                v[columns] = np.asarray(velocities, dtype=float)[rows]
        if not (math.isfinite(q.sum()) and math.isfinite(v.sum())):
            raise ControllerError("joint_states: NaN or inf in positions or velocities")
        self.q, self.v, self.state_time = q, v, now

    def _state_columns(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """(entries of a joint state, the model coordinates they fill) for a list of names,
        None when they are the model's joints in its order; the answer for the last list is
        kept (a driver sends the same names every time)."""
        cached = self._columns
        if cached is not None and cached[0] == names:
            return cached[1]
        if len(set(names)) != len(names):
            raise ControllerError("joint_states: repeated joint names")
        # other joints of a bigger robot, or a mimic joint we derive ourselves, are skipped
        pairs = [(k, self.state_index[name]) for k, name in enumerate(names)
                 if name in self.state_index]
        if len(pairs) != len(self.state_index):
            seen = set(names)
            missing = [n for n in self.model.joint_names if n not in seen]
            raise ControllerError(f"joint_states: missing joints {missing}")
        rows = np.array([k for k, _ in pairs], dtype=int)
        columns = np.array([index for _, index in pairs], dtype=int)
        in_order = len(names) == self.model.nq and np.array_equal(columns, np.arange(len(names)))
        self._columns = (list(names), None if in_order else (rows, columns))
        return self._columns[1]

    def prepare_trajectory(self, names: Sequence[str], points: Sequence[TrajectoryPoint],
                           start: float, now: float) -> TrajectorySampler:
        """A validated sampler for a reference by name starting at ``start``, built without
        changing the controller (so that a node can build it outside its control lock);
        joints the reference leaves out hold their current reference."""
        if self.q is None:
            raise ControllerError("trajectory: no joint state received yet")
        if self.law.mode != "computed_torque":
            raise ControllerError(f"trajectory: the controller is in {self.law.mode!r} mode; "
                                  "set mode to 'computed_torque' to follow trajectories")
        if not names:
            raise ControllerError("trajectory: no joint names")
        unknown = [n for n in names if n not in self.state_index]
        if unknown or len(set(names)) != len(names):
            raise ControllerError(f"trajectory: unknown or repeated joints {unknown or names}")
        if len(points) > MAX_TRAJECTORY_POINTS:
            raise ControllerError(f"trajectory: {len(points)} points; at most "
                                  f"{MAX_TRAJECTORY_POINTS}")
        if points and start + float(points[-1].time) < now:
            raise ControllerError(
                f"trajectory: it ended {now - start - float(points[-1].time):.3f} s ago "
                "(header stamp + the last time_from_start is in the past); ignored, as "
                "ros2_controllers' trajectory controller does")
        q_start, v_start = self._continuation(now)
        columns = [self.state_index[name] for name in names]
        n = self.model.nv

        def spread(values, base, k, field):
            if values is None:
                return None
            full = base.copy()
            full[columns] = _check_values(values, len(names), field, k)
            return full

        try:
            full_points = [TrajectoryPoint(
                point.time, spread(point.positions, q_start, k, "positions"),
                spread(point.velocities, np.zeros(n), k, "velocities"),
                spread(point.accelerations, np.zeros(n), k, "accelerations"))
                for k, point in enumerate(points)]
            return TrajectorySampler(full_points, start, q_start, v_start)
        except TrajectoryError as exc:
            raise ControllerError(f"trajectory: {exc}") from None

    def set_trajectory(self, names: Sequence[str], points: Sequence[TrajectoryPoint],
                       now: float, start: float | None = None) -> None:
        """Follow a reference by name from ``start`` (default ``now``)."""
        self.trajectory = self.prepare_trajectory(names, points,
                                                  now if start is None else start, now)

    def _continuation(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Where a new trajectory starts: the current reference, or the measured state when
        the reference gave no finite effort (a broken one must not poison the next)."""
        q_d, v_d, _ = self.reference(now)
        if self.healthy and np.all(np.isfinite(q_d)) and np.all(np.isfinite(v_d)):
            return q_d, v_d
        return self.q.copy(), self.v.copy()

    # -- outputs -------------------------------------------------------------------

    def reference(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.trajectory is not None:
            return self.trajectory.sample(now)[:3]
        if self.hold_position is None:
            self.hold_position = self.q.copy()
        return self.hold_position, self._zeros, self._zeros

    def state_age(self, now: float) -> float:
        return now - self.state_time

    def effort(self, q: np.ndarray, v: np.ndarray, reference_time: float
               ) -> tuple[np.ndarray, np.ndarray]:
        """The law at (q, q̇) with the reference sampled at ``reference_time``: (τ in model
        order, position error in model order); ControllerError when τ is not finite."""
        law = self.law
        reference = () if law.mode == "gravity_compensation" else self.reference(reference_time)
        self.last_reference = reference or None
        # overflow is refused below, with its cause; gravity alone is one kernel call and no
        # numpy arithmetic, so it needs no errstate (~1 µs)
        quiet = np.errstate(all="ignore") if reference or law.friction_compensation \
            else _NO_CONTEXT
        self.healthy = False
        with quiet:
            try:
                tau, error = law.effort(q, v, *reference)
            except ValueError as exc:  # a non-finite commanded acceleration, say
                raise ControllerError(f"the computed effort is not finite ({exc}): the state "
                                      "or the reference is out of range; nothing published"
                                      ) from None
        if not math.isfinite(tau.sum()):
            raise ControllerError("the computed effort is not finite: the state or the "
                                  "reference is out of range; nothing published")
        self.healthy = True
        return tau, self._zeros if error is None else error

    def _clamp(self, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(τ of the commanded joints, clamped to effort_scale × the URDF limits; unclamped)."""
        scale, low, high = self._limits
        if scale != self.effort_scale:  # computed again only when the scale changes
            high = self.model.effort_limit[self.index] * self.effort_scale
            low = -high
            self._limits = (self.effort_scale, low, high)
        wanted = tau if self._every_joint else tau[self.index]
        return np.minimum(np.maximum(wanted, low), high), wanted

    def effort_at(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """τ in model order at a simulated instant: the commanded joints' efforts clamped to
        the limits, zero on the others (``~/simulate`` rolls out the node's law this way)."""
        tau, _ = self.effort(q, v, t)
        command, _ = self._clamp(tau)
        if self._every_joint:
            return command
        out = np.zeros(self.model.nv)
        out[self.index] = command
        return out

    def compute(self, now: float, reference_time: float | None = None) -> ControlOutput:
        """The effort command at ``now``; raises ControllerError when the state is unusable.

        ``reference_time`` (default ``now``) is when the reference is sampled: the instant the
        state was measured, when its stamp says so.
        """
        if self.q is None:
            raise ControllerError("no joint state received yet")
        age = self.state_age(now)
        if age > self.max_state_age:
            raise ControllerError(
                f"joint state is stale ({age * 1e3:.0f} ms old, limit "
                f"{self.max_state_age * 1e3:.0f} ms)"
            )
        tau, error = self.effort(self.q, self.v, now if reference_time is None
                                 else reference_time)
        command, wanted = self._clamp(tau)
        clamped = []
        if (command != wanted).any():
            clamped = [name for name, c, t in zip(self.joints, command, wanted) if c != t]
        return ControlOutput(command, clamped, error if self._every_joint else error[self.index])


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
