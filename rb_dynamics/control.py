"""Control laws and reference sampling, free of ROS.

- ``gravity_compensation``: τ = g(q) (+ optional viscous and Coulomb friction compensation).
- ``computed_torque``: τ = M(q)(q̈_d + K_d(q̇_d − q̇) + K_p(q_d − q)) + C(q, q̇)q̇ + g(q),
  evaluated as one RNEA call with the commanded acceleration.
- ``TrajectorySampler``: samples a joint trajectory the way ros2_controllers' joint trajectory
  controller does — quintic between points with positions, velocities and accelerations,
  cubic with positions and velocities, linear with positions only — starting from the state at
  the time the trajectory arrived, and holding the last point when it ends.

All vectors are in the model's independent coordinates (fixed-base, 1-DoF joints).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import dynamics
from .model import Model

__all__ = [
    "CONTROL_MODES",
    "ControlOutput",
    "ControllerError",
    "JointController",
    "ReferenceBackend",
    "TrajectoryError",
    "TrajectoryPoint",
    "TrajectorySampler",
    "clamp_effort",
    "computed_torque",
    "gravity_compensation",
    "position_error",
    "select_backend",
    "wrap_angle",
]


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


def gravity_compensation(
    model: Model, q: np.ndarray, v: np.ndarray | None = None, friction: bool = False
) -> np.ndarray:
    """τ = g(q), plus friction compensation at velocity v when asked."""
    tau = dynamics.gravity(model, q)
    if friction:
        if v is None:
            raise ValueError("v is needed for friction compensation")
        tau = tau + friction_compensation(model, dynamics.check_vector(v, model.nv, "v"))
    return tau


def computed_torque(
    model: Model,
    q: np.ndarray,
    v: np.ndarray,
    q_desired: np.ndarray,
    v_desired: np.ndarray,
    a_desired: np.ndarray,
    kp: np.ndarray,
    kd: np.ndarray,
    rnea=None,
) -> np.ndarray:
    """Computed-torque law as one inverse-dynamics call with the commanded acceleration."""
    a_command = (
        np.asarray(a_desired, dtype=float)
        + kd * (np.asarray(v_desired) - v)
        + kp * position_error(model, q_desired, q)
    )
    return (rnea or dynamics.rnea)(model, q, v, a_command)


# ----------------------------------------------------------------------------- trajectories


class TrajectoryError(ValueError):
    """A trajectory that cannot be followed; the message says which field is wrong."""


@dataclass(frozen=True)
class TrajectoryPoint:
    time: float  # seconds from the trajectory start
    positions: np.ndarray
    velocities: np.ndarray | None = None
    accelerations: np.ndarray | None = None


def _check_point(point: TrajectoryPoint, n: int, k: int) -> None:
    for field_name in ("positions", "velocities", "accelerations"):
        values = getattr(point, field_name)
        if values is None:
            continue
        if len(values) != n:
            raise TrajectoryError(f"point {k}: {field_name} has {len(values)} values, expected {n}")
        if not np.all(np.isfinite(values)):
            raise TrajectoryError(f"point {k}: {field_name} contains NaN or inf")
    if not math.isfinite(point.time) or point.time < 0:
        raise TrajectoryError(f"point {k}: time_from_start {point.time} must be finite and ≥ 0")


def _as_arrays(point: TrajectoryPoint) -> TrajectoryPoint:
    def arr(x):
        return None if x is None else np.asarray(x, dtype=float)

    return TrajectoryPoint(
        float(point.time), arr(point.positions), arr(point.velocities), arr(point.accelerations)
    )


def _segment(t: float, T: float, p0, v0, a0, p1, v1, a1):
    """Position, velocity, acceleration at t ∈ [0, T] of the ros2_controllers spline."""
    if T <= 0.0:
        return p1.copy(), np.zeros_like(p1) if v1 is None else v1.copy(), np.zeros_like(p1)
    if v0 is None or v1 is None:  # linear
        slope = (p1 - p0) / T
        return p0 + slope * t, slope, np.zeros_like(p0)
    if a0 is None or a1 is None:  # cubic Hermite
        c0, c1 = p0, v0
        c2 = (3 * (p1 - p0) - T * (2 * v0 + v1)) / T**2
        c3 = (2 * (p0 - p1) + T * (v0 + v1)) / T**3
        return (
            c0 + t * (c1 + t * (c2 + t * c3)),
            c1 + t * (2 * c2 + 3 * c3 * t),
            2 * c2 + 6 * c3 * t,
        )
    T2, T3, T4, T5 = T**2, T**3, T**4, T**5  # quintic, boundary p, v, a at both ends
    c0, c1, c2 = p0, v0, 0.5 * a0
    c3 = (20 * (p1 - p0) - (8 * v1 + 12 * v0) * T - (3 * a0 - a1) * T2) / (2 * T3)
    c4 = (30 * (p0 - p1) + (14 * v1 + 16 * v0) * T + (3 * a0 - 2 * a1) * T2) / (2 * T4)
    c5 = (12 * (p1 - p0) - 6 * (v1 + v0) * T - (a0 - a1) * T2) / (2 * T5)
    pos = c0 + t * (c1 + t * (c2 + t * (c3 + t * (c4 + t * c5))))
    vel = c1 + t * (2 * c2 + t * (3 * c3 + t * (4 * c4 + t * 5 * c5)))
    acc = 2 * c2 + t * (6 * c3 + t * (12 * c4 + t * 20 * c5))
    return pos, vel, acc


class TrajectorySampler:
    """A joint trajectory anchored at ``start_time`` and the state it started from."""

    def __init__(
        self,
        points: Sequence[TrajectoryPoint],
        start_time: float,
        start_positions: np.ndarray,
        start_velocities: np.ndarray | None = None,
    ):
        if not points:
            raise TrajectoryError("trajectory has no points")
        n = len(start_positions)
        for k, point in enumerate(points):
            _check_point(point, n, k)
            if k and point.time <= points[k - 1].time:
                raise TrajectoryError(
                    f"point {k}: time_from_start {point.time} is not after "
                    f"point {k - 1}'s {points[k - 1].time}"
                )
        self.points = [_as_arrays(point) for point in points]
        self.start_time = float(start_time)
        zero = np.zeros(n)
        v_start = zero if start_velocities is None else np.asarray(start_velocities, float)
        first = self.points[0]
        # the spline toward the first point starts from the measured state with the same
        # derivatives the first point carries (ros2_controllers does the same)
        self.start = TrajectoryPoint(
            0.0,
            np.asarray(start_positions, float),
            v_start if first.velocities is not None else None,
            zero if first.accelerations is not None else None,
        )

    @property
    def end_time(self) -> float:
        return self.start_time + self.points[-1].time

    def sample(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """(q_d, q̇_d, q̈_d, finished) at time ``now``; after the end the last point is held."""
        # before the start (a state stamped before the trajectory arrived) is the start
        t = max(now - self.start_time, 0.0)
        last = self.points[-1]
        if t >= last.time:
            hold = np.zeros_like(last.positions)
            return np.asarray(last.positions, float).copy(), hold, hold.copy(), True
        before = self.start
        for point in self.points:
            if t < point.time:
                pos, vel, acc = _segment(
                    t - before.time,
                    point.time - before.time,
                    np.asarray(before.positions, float),
                    before.velocities,
                    before.accelerations,
                    np.asarray(point.positions, float),
                    point.velocities,
                    point.accelerations,
                )
                return pos, vel, acc, False
            before = point
        raise AssertionError("unreachable")


# ----------------------------------------------------------------------------- the controller


class ControllerError(ValueError):
    """Input the controller refuses; the message says what is wrong and nothing changed."""


class ReferenceBackend:
    """The readable reference algorithms, with the same call shape as the generated kernels."""

    def __init__(self, model: Model):
        self.model = model

    def gravity(self, q):
        return dynamics.gravity(self.model, q)

    def rnea(self, q, v, a):
        return dynamics.rnea(self.model, q, v, a)

    def nonlinear_effects(self, q, v):
        return dynamics.nonlinear_effects(self.model, q, v)

    def aba(self, q, v, tau):
        return dynamics.aba(self.model, q, v, tau)

    def crba(self, q):
        return dynamics.crba(self.model, q)


def select_backend(model: Model):
    """The fastest dynamics available for ``model``: generated kernels, else the reference."""
    try:
        from .codegen import compile_dynamics
    except ImportError:  # pragma: no cover - the generator ships with the package
        return ReferenceBackend(model)
    return compile_dynamics(model)


CONTROL_MODES = ("gravity", "computed_torque")


@dataclass
class ControlOutput:
    effort: np.ndarray  # in the controller's joint order, clamped to the effort limits
    clamped: list[str]  # joints whose effort hit a limit
    position_error: np.ndarray  # q_d − q in the controller's joint order (zeros in gravity mode)


class JointController:
    """Gravity compensation and computed torque for a fixed-base arm, mapped by joint name.

    The state and the reference arrive by name in any order; commands leave in the order of
    ``joints``. Nothing is computed from a state older than ``max_state_age`` seconds.
    """

    def __init__(
        self,
        model: Model,
        joints: Sequence[str] | None = None,
        *,
        mode: str = "gravity",
        kp=100.0,
        kd=20.0,
        friction_compensation: bool = False,
        max_state_age: float = 0.1,
        backend=None,
    ):
        if any(kind not in ("revolute", "prismatic") for kind in model.joint_kinds):
            raise ControllerError(
                "the controller drives fixed-base arms; this model has "
                f"{sorted(set(model.joint_kinds))} joints"
            )
        self.model = model
        self.joints = list(joints) if joints else list(model.actuated_joint_names)
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
        self.index = np.array([model.joint_v_index[model.joint_index(n)] for n in self.joints])
        self.state_index = {n: model.joint_q_index[k] for k, n in enumerate(model.joint_names)}
        self.continuous = continuous_mask(model)
        self.has_continuous = bool(self.continuous.any())
        self.backend = backend or select_backend(model)
        self.mode = "gravity"
        self.set_mode(mode)
        self.kp = self.kd = np.zeros(model.nv)
        self.set_gains(kp, kd)
        self.friction_compensation = bool(friction_compensation)
        self.max_state_age = float(max_state_age)
        self.effort_scale = 1.0  # commands are clamped to effort_scale × the URDF limit
        self.q = self.v = None
        self.state_time = -math.inf
        self.trajectory: TrajectorySampler | None = None
        self.hold_position: np.ndarray | None = None

    # -- settings ------------------------------------------------------------------

    def set_mode(self, mode: str) -> None:
        if mode not in CONTROL_MODES:
            raise ControllerError(f"mode must be one of {CONTROL_MODES}, not {mode!r}")
        if mode != self.mode:  # a new mode starts by holding where the arm is
            self.trajectory, self.hold_position = None, None
        self.mode = mode

    def gain_vector(self, gains, name: str) -> np.ndarray:
        """Validated per-joint gains in model order (a scalar applies to every joint)."""
        values = np.asarray(gains, dtype=float)
        if values.ndim == 0:
            values = np.full(len(self.joints), float(values))
        if values.shape != (len(self.joints),):
            raise ControllerError(
                f"{name} needs 1 or {len(self.joints)} values (one per joint "
                f"in {self.joints}), got {values.size}"
            )
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ControllerError(f"{name} must be finite and ≥ 0, got {values.tolist()}")
        full = np.zeros(self.model.nv)
        full[self.index] = values
        return full

    def set_gains(self, kp=None, kd=None) -> None:
        """Per-joint gains (a scalar sets every joint); both are validated before either is set."""
        new_kp = self.kp if kp is None else self.gain_vector(kp, "kp")
        new_kd = self.kd if kd is None else self.gain_vector(kd, "kd")
        self.kp, self.kd = new_kp, new_kd

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
        if len(set(names)) != len(names):
            raise ControllerError("joint_states: repeated joint names")
        q = np.zeros(self.model.nq)
        v = np.zeros(self.model.nv)
        found = 0
        for k, name in enumerate(names):
            index = self.state_index.get(name)
            if index is None:
                continue  # other joints of a bigger robot, or a mimic joint we derive ourselves
            q[index] = positions[k]
            if len(velocities):
                v[index] = velocities[k]
            found += 1
        if found != len(self.state_index):
            seen = set(names)
            missing = [n for n in self.model.joint_names if n not in seen]
            raise ControllerError(f"joint_states: missing joints {missing}")
        if not (math.isfinite(q.sum()) and math.isfinite(v.sum())):
            raise ControllerError("joint_states: NaN or inf in positions or velocities")
        self.q, self.v, self.state_time = q, v, now

    def set_trajectory(
        self, names: Sequence[str], points: Sequence[TrajectoryPoint], now: float
    ) -> None:
        """A reference by name; joints it leaves out hold their current reference."""
        if self.q is None:
            raise ControllerError("trajectory: no joint state received yet")
        if self.mode != "computed_torque":
            raise ControllerError(
                f"trajectory: the controller is in {self.mode!r} mode; set "
                "mode to 'computed_torque' to follow trajectories"
            )
        if not names:
            raise ControllerError("trajectory: no joint names")
        unknown = [n for n in names if n not in self.state_index]
        if unknown or len(set(names)) != len(names):
            raise ControllerError(f"trajectory: unknown or repeated joints {unknown or names}")
        n = self.model.nv
        start, start_v, _ = self.reference(now)
        columns = [self.state_index[name] for name in names]
        full_points = []
        for k, point in enumerate(points):
            try:
                _check_point(_as_arrays(point), len(names), k)
            except TrajectoryError as exc:
                raise ControllerError(f"trajectory: {exc}") from None

            def spread(values, base):
                if values is None:
                    return None
                full = base.copy()
                full[columns] = values
                return full

            full_points.append(
                TrajectoryPoint(
                    point.time,
                    spread(point.positions, start),
                    spread(point.velocities, np.zeros(n)),
                    spread(point.accelerations, np.zeros(n)),
                )
            )
        try:
            sampler = TrajectorySampler(full_points, now, start, start_v)
        except TrajectoryError as exc:
            raise ControllerError(f"trajectory: {exc}") from None
        self.trajectory = sampler

    # -- outputs -------------------------------------------------------------------

    def reference(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.trajectory is not None:
            return self.trajectory.sample(now)[:3]
        if self.hold_position is None:
            self.hold_position = self.q.copy()
        zero = np.zeros(self.model.nv)
        return self.hold_position, zero, zero.copy()

    def state_age(self, now: float) -> float:
        return now - self.state_time

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
        v_friction = self.v  # gravity mode: losses at the measured velocity
        if self.mode == "gravity":
            tau = self.backend.gravity(self.q)
            error = np.zeros(self.model.nv)
        else:
            q_d, v_d, a_d = self.reference(now if reference_time is None else reference_time)
            error = q_d - self.q
            if self.has_continuous:
                error = position_error(self.model, q_d, self.q, self.continuous)
            a_command = a_d + self.kd * (v_d - self.v) + self.kp * error
            tau = self.backend.rnea(self.q, self.v, a_command)
            # Feed-forward on the reference velocity: compensating friction from the measured
            # (noisy, a step late) velocity is a high-gain positive feedback on light links.
            v_friction = v_d
        if self.friction_compensation:
            tau = tau + friction_compensation(self.model, v_friction)
        if not math.isfinite(tau.sum()):
            raise ControllerError("the computed effort is not finite; nothing published")
        limit = self.model.effort_limit[self.index] * self.effort_scale
        wanted = tau[self.index]
        command = np.clip(wanted, -limit, limit)
        clamped = []
        if (command != wanted).any():
            clamped = [name for name, c, t in zip(self.joints, command, wanted) if c != t]
        return ControlOutput(command, clamped, error[self.index])
