# SPDX-License-Identifier: Apache-2.0
"""``JointController``: the control law (``law.py``) and a trajectory reference
(``trajectory.py``) mapped by joint name, free of ROS.

The state and references arrive by joint name; efforts leave in the order of the controller's
joints, clamped to the URDF effort limits. Stale or unusable input is refused with a
``ControllerError`` and changes nothing.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rb_dynamics.dynamics import Dynamics, PayloadEffort, make_dynamics
from rb_dynamics.model import (
    Model,
    check_choice,
    clamp_effort,
    name_list,
    only_joint_dynamics_differ,
    repeated_names,
)

from .drive import DriveConventions
from .feasibility import feedforward_violation, motion_violation
from .joint_state_reader import JointStateReader
from .law import (
    CONTROL_MODES,
    REFERENCE_MODES,
    CartesianLaw,
    ControlLaw,
    ControllerError,
    check_gains,
)
from .limits import CommandBounds
from .trajectory import (
    MAX_TRAJECTORY_POINTS,
    TrajectoryError,
    TrajectoryPoint,
    TrajectorySampler,
    check_point_field,
)
from .velocity import MissingVelocity

__all__ = ["ControlOutput", "JointController"]

_NO_CONTEXT = contextlib.nullcontext()


@dataclass
class ControlOutput:
    """One effort command and what came with it."""

    effort: np.ndarray  # in the controller's joint order, clamped to the effort limits
    clamped: list[str]  # joints whose effort hit a limit (or a soft limit's bound)
    position_error: np.ndarray  # q_d − q in the controller's joint order (zeros in gravity mode)


def _gain_vector(gains, name: str, index: np.ndarray, size: int, allow_inf: bool
                 ) -> np.ndarray:
    """Validated gains of the joints at coordinates ``index`` (``check_gains``; a scalar for
    all of them) over ``size`` coordinates, 0 on the others."""
    full = np.zeros(size)
    full[index] = check_gains(gains, name, len(index), allow_inf)
    return full


def _over_the_model(points: Sequence[TrajectoryPoint], columns: list[int],
                    q_hold: np.ndarray) -> list[TrajectoryPoint]:
    """``points`` of the joints at model coordinates ``columns`` as points over the whole
    model: the other joints hold ``q_hold`` at rest, with no feed-forward.
    ``TrajectoryError`` for a field that is not one finite number per joint."""
    n = len(q_hold)

    def spread(values, base, k, field):
        if values is None:
            return None
        full = base.copy()
        full[columns] = check_point_field(values, len(columns), field, k)
        return full

    return [TrajectoryPoint(point.time, spread(point.positions, q_hold, k, "positions"),
                            spread(point.velocities, np.zeros(n), k, "velocities"),
                            spread(point.accelerations, np.zeros(n), k, "accelerations"),
                            spread(point.efforts, np.zeros(n), k, "efforts"))
            for k, point in enumerate(points)]


def _check_reference(names: Sequence[str], known: dict[str, int],
                     points: Sequence[TrajectoryPoint], start: float, now: float) -> None:
    """ControllerError for a reference by ``names`` (of the ``known`` joints) from ``start``
    that cannot be followed: no, unknown or repeated names, too many points, ended before
    ``now``."""
    if not names:
        raise ControllerError("trajectory: no joint names")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ControllerError(f"trajectory: unknown joints {name_list(unknown)}")
    repeated = repeated_names(names)
    if repeated:
        raise ControllerError(f"trajectory: joints named twice {name_list(repeated)}")
    if len(points) > MAX_TRAJECTORY_POINTS:
        raise ControllerError(f"trajectory: {len(points)} points; at most "
                              f"{MAX_TRAJECTORY_POINTS}")
    if points and start + float(points[-1].time) < now:
        raise ControllerError(
            f"trajectory: it ended {now - start - float(points[-1].time):.3f} s ago "
            "(header stamp + the last time_from_start is in the past); ignored, as "
            "ros2_controllers' trajectory controller does")


def _refuse_infeasible(model: Model, sampler: TrajectorySampler) -> None:
    """ControllerError naming the first place ``sampler`` leaves the URDF position or
    velocity limits (``feasibility.motion_violation``)."""
    violation = motion_violation(model, sampler)
    if violation is not None:
        raise ControllerError(f"trajectory: not feasible: {violation} (URDF limits; "
                              "refuse_infeasible_trajectories)")


def _refuse_unfollowable(controller: JointController, sampler: TrajectorySampler) -> None:
    """ControllerError for a new reference that leaves the URDF limits (``refuse_infeasible``:
    ``_refuse_infeasible``) or whose feed-forward effort is beyond the clamp at a point
    (``feasibility.feedforward_violation``: it could only drive the joint at its limit)."""
    if controller.refuse_infeasible:
        _refuse_infeasible(controller.model, sampler)
    violation = feedforward_violation(controller.model, sampler, controller.index,
                                      controller.effort_scale)
    if violation is not None:
        raise ControllerError(f"trajectory: not feasible: {violation}")


class JointController:
    """Gravity compensation, computed torque and impedance for a fixed-base arm, mapped by
    joint name.

    The state and the reference arrive by name in any order; commands leave in the order of
    ``joints`` (default: every actuated joint; a model without one has nothing to command:
    empty commands). Gains, one per joint or one for all (``ControlLaw`` for their units):
    ``kp``, ``kd`` (computed torque, 1/s² and 1/s), ``stiffness``, ``damping`` (impedance,
    N·m/rad and N·m·s/rad), ``ki``, ``i_clamp`` (integral action, off while ki = 0; i_clamp
    inf: unclamped). ``soft_limits``: commands are also bounded as ros2_control's soft joint
    limiter bounds an effort interface (``limits.soft_limit_effort_bounds``: the URDF's
    velocity limits and ``<safety_controller>``). Without a trajectory the reference modes
    hold the position measured when holding began, at rest. A new trajectory starts from the
    measured state, or with ``interpolate_from_desired_state`` from the current reference
    (its position, velocity and feed-forward; the measured state when the last effort was
    not finite), as ros2_controllers' trajectory controller does; with ``refuse_infeasible``
    (the node's default; off here) a trajectory that leaves the URDF position or velocity
    limits, the way from the start state to its first point included, is refused naming the
    first violation (``feasibility.motion_violation``); the gains of the law are
    ``law.kp`` … ``law.i_clamp`` (``ControlLaw``).
    Times are seconds on the caller's clock; nothing is computed from a state older than
    ``max_state_age``. ``dynamics`` defaults to ``make_dynamics(model)``. Raises
    ``ControllerError`` for a model with joints other than revolute or prismatic, for joints
    unknown or named twice, and for an unknown ``mode`` or invalid gains.
    """

    def __init__(
        self,
        model: Model,
        joints: Sequence[str] | None = None,
        *,
        mode: str = "gravity_compensation",
        kp=100.0,
        kd=20.0,
        stiffness=0.0,
        damping=0.0,
        ki=0.0,
        i_clamp=math.inf,
        friction_compensation: bool = False,
        soft_limits: bool = False,
        interpolate_from_desired_state: bool = False,
        refuse_infeasible: bool = False,
        max_state_age: float = 0.1,
        missing_velocity: MissingVelocity | None = None,
        dynamics: Dynamics | None = None,
    ):
        if not model.only_one_dof_joints:
            raise ControllerError("the controller drives fixed-base arms; this model has "
                                  f"{sorted(set(model.joint_kinds))} joints")
        self.model = model
        self.joints = list(model.actuated_joint_names) if joints is None else list(joints)
        try:
            self.index = model.velocity_indices(self.joints)
        except ValueError as exc:
            raise ControllerError(str(exc)) from None
        if len(set(self.joints)) != len(self.joints):
            raise ControllerError(f"joints {self.joints} has repeated names")
        self.state_reader = JointStateReader(model, missing_velocity)
        self.state_index = self.state_reader.state_index
        self.law = ControlLaw(dynamics or make_dynamics(model), mode,
                              friction_compensation=bool(friction_compensation))
        self.set_gains(kp, kd, stiffness=stiffness, damping=damping, ki=ki, i_clamp=i_clamp)
        self.max_state_age = float(max_state_age)
        self.bounds = CommandBounds(model, self.index, bool(soft_limits))
        self.interpolate_from_desired_state = bool(interpolate_from_desired_state)
        self.refuse_infeasible = bool(refuse_infeasible)
        self.q = self.v = None
        self.state_time = -math.inf
        self.trajectory: TrajectorySampler | None = None
        self.hold_position: np.ndarray | None = None
        # (q_d, q̇_d, q̈_d) the last effort was computed for (None in gravity compensation):
        # what a monitor of the loop (the trajectory action) compares the state with
        self.last_reference: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.healthy = True  # the last effort was finite (else the reference is not trusted)
        self.refusing = ""  # why new references are refused (a latched collision); "": taken
        # the integral term belongs to one reference: the trajectory it was integrated
        # along (None: holding) and the time of the last state it integrated
        self._integral_reference: TrajectorySampler | None = None
        self._integral_time = math.inf
        # per-state work kept small (the control loop answers every state): what does not
        # change between states is computed once
        self._zeros = np.zeros(model.nv)
        self._zeros.flags.writeable = False  # shared: the hold reference, gravity-mode errors
        self._every_joint = np.array_equal(self.index, np.arange(model.nv))

    # -- settings ------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self.law.mode

    @property
    def soft_limits(self) -> bool:
        return self.bounds.soft_limits

    @property
    def effort_scale(self) -> float:
        """Commands are clamped to effort_scale × the URDF limit."""
        return self.bounds.effort_scale

    @property
    def kp(self) -> np.ndarray:
        return self.law.kp

    @property
    def kd(self) -> np.ndarray:
        return self.law.kd

    def set_mode(self, mode: str) -> None:
        check_choice(mode, CONTROL_MODES, "mode", ControllerError)
        if mode != self.law.mode:  # a new mode starts by holding where the arm is
            self.hold()
            self.reset_integral()
        self.law.mode = mode

    def reset_integral(self) -> None:
        """Restart the integral action from zero; a new mode and a new trajectory do it, and
        a node calls it when it (re)activates the controller."""
        self.law.reset_integral()
        self._integral_time = math.inf

    def set_gains(self, kp=None, kd=None, *, stiffness=None, damping=None, ki=None,
                  i_clamp=None) -> None:
        """Per-joint gains (a scalar sets every joint; None keeps the gain); all are validated
        before any is set. New ``ki`` or ``i_clamp`` restart the integral from zero."""
        law = self.law
        new = {name: getattr(law, name) if value is None else
               _gain_vector(value, name, self.index, self.model.nv, name == "i_clamp")
               for name, value in (("kp", kp), ("kd", kd), ("stiffness", stiffness),
                                   ("damping", damping), ("ki", ki), ("i_clamp", i_clamp))}
        law.kp, law.kd = new["kp"], new["kd"]
        law.stiffness, law.damping = new["stiffness"], new["damping"]
        if ki is not None or i_clamp is not None:
            law.set_integral_gains(new["ki"], new["i_clamp"])
            self._integral_time = math.inf

    def configure(self, *, friction_compensation: bool | None = None,
                  soft_limits: bool | None = None,
                  interpolate_from_desired_state: bool | None = None,
                  refuse_infeasible: bool | None = None, max_state_age: float | None = None,
                  effort_scale: float | None = None, missing_velocity: str | None = None,
                  velocity_cutoff: float | None = None, drive: DriveConventions | None = None
                  ) -> None:
        """The settings a node changes at run time (validated by its parameter listener;
        None keeps one). Under the node's control lock."""
        law = self.law
        if friction_compensation is not None:
            law.friction_compensation = bool(friction_compensation)
        if soft_limits is not None:
            self.bounds.set_soft_limits(bool(soft_limits))
        if interpolate_from_desired_state is not None:
            self.interpolate_from_desired_state = bool(interpolate_from_desired_state)
        if refuse_infeasible is not None:
            self.refuse_infeasible = bool(refuse_infeasible)
        if max_state_age is not None:
            self.max_state_age = float(max_state_age)
        if effort_scale is not None:
            self.bounds.set_scale(effort_scale)
        missing = self.state_reader.missing_velocity
        if missing_velocity is not None:
            missing.choice = missing_velocity
        if velocity_cutoff is not None:
            missing.estimator.cutoff = velocity_cutoff
        if drive is not None:
            law.drive = drive

    def set_payload(self, payload: PayloadEffort | None) -> None:
        """Carry ``payload``'s efforts (None: none) from the next effort on."""
        self.law.payload = payload

    def set_cartesian(self, cartesian: CartesianLaw | None) -> None:
        """The Cartesian law of ``cartesian_impedance`` (None: none for this model)."""
        self.law.cartesian = cartesian

    def tune_cartesian(self, candidate: CartesianLaw) -> bool:
        """``candidate``'s settings on the running Cartesian law when it drives the same link
        (its target stays), else ``candidate`` in its place; whether it took the place."""
        running = self.law.cartesian
        if running is None or running.link != candidate.link:
            self.law.cartesian = candidate
            return True
        running.take_settings(candidate)
        return False

    def set_cartesian_target(self, pose: np.ndarray) -> bool:
        """The Cartesian law's target ``pose`` (4×4, the law's checks); False when there is
        no Cartesian law to take it."""
        if self.law.cartesian is None:
            return False
        self.law.cartesian.set_target(pose)
        return True

    def swap_dynamics(self, dynamics: Dynamics) -> None:
        """Compute with ``dynamics`` from the next effort on: the dynamics of the same robot
        with other joint dynamics (a dynamics overlay: armature, friction, effort offset); the
        reference, the gains and the integral term go on. ControllerError when
        ``dynamics.model`` has other joints. Not thread-safe: a control loop calls it under
        its lock."""
        model, old = dynamics.model, self.model
        if not only_joint_dynamics_differ(model, old):
            raise ControllerError(f"model {model.name!r} is not the controller's robot "
                                  f"({old.name!r}) with other joint dynamics")
        self.model = self.state_reader.model = model
        self.law.dynamics = dynamics

    # -- the reference: what the node's parts ask for (none of them writes these fields) --

    def follow(self, sampler: TrajectorySampler) -> None:
        """Follow ``sampler`` (``prepare_trajectory``'s) from the next effort on."""
        self.trajectory = sampler

    def hold(self, position: np.ndarray | None = None) -> None:
        """No trajectory: hold ``position`` at rest (None: the position measured at the next
        effort)."""
        self.trajectory, self.hold_position = None, position
        self.law.hold_asked()

    def hold_measured(self) -> None:
        """JTC's ``set_hold_position``: hold the last measured position, at rest."""
        self.hold(None if self.q is None else self.q.copy())

    def hold_anew(self) -> None:
        """The held position is measured again at the next effort (a trajectory stays)."""
        self.hold_position = None
        self.law.hold_asked()

    def drop_trajectory(self, sampler: TrajectorySampler | None = None) -> bool:
        """Stop following ``sampler`` (None: whichever is followed), the held position
        unchanged; whether it was being followed."""
        if self.trajectory is None or sampler is not None and self.trajectory is not sampler:
            return False
        self.trajectory = None
        return True

    def restart_after_time_jump(self) -> None:
        """Time went back (a simulation reset, a bag replayed): hold where the arm will be
        measured, the integral and the velocity estimate start again (their past is at
        instants that no longer come)."""
        self.state_reader.missing_velocity.estimator.reset()
        self.hold()
        self.reset_integral()

    def refuse_references(self, reason: str) -> None:
        """New references are refused saying ``reason`` (a latched collision); "": taken."""
        self.refusing = reason

    def restart_trajectory(self, now: float) -> bool:
        """After a gap in the joint states: the reference's points still due after ``now`` (s)
        restart from the measured state, as a new trajectory starts; when none is due, or the
        way from here leaves the URDF limits (``refuse_infeasible``), the measured position is
        held instead (the old reference, resumed, would jump toward where it has got to).
        Whether a reference was restarted."""
        old, self.trajectory, self.hold_position = self.trajectory, None, None
        if old is None or self.q is None:
            return False
        try:
            sampler = old.restarted(now, self.q.copy(), self.v.copy(), self.law.continuous)
            if sampler is not None and self.refuse_infeasible:
                # the segments after the first are the old reference's, checked when it came
                _refuse_infeasible(self.model, sampler.first_segment())
        except (ControllerError, TrajectoryError):
            return False
        self.trajectory = sampler
        return sampler is not None

    # -- inputs --------------------------------------------------------------------

    def update_state(self, names: Sequence[str], positions: Sequence[float],
                     velocities: Sequence[float], now: float, stamp: float | None = None) -> bool:
        """``read`` at ``now`` (s), differencing at ``stamp`` (s, any origin); False: not taken."""
        q, v = self.state_reader.read(names, positions, velocities,
                                      now if stamp is None else stamp, self.max_state_age)
        if v is None:
            return False
        self.q, self.v, self.state_time = q, v, now
        return True

    def prepare_trajectory(self, names: Sequence[str], points: Sequence[TrajectoryPoint],
                           start: float, now: float) -> TrajectorySampler:
        """A validated sampler for a reference by name starting at ``start``, built without
        changing the controller (so that a node can build it outside its control lock);
        joints the reference leaves out hold their current reference. It starts from the
        measured state or the current reference (``interpolate_from_desired_state``)."""
        if self.q is None or self.refusing:
            raise ControllerError(f"trajectory: {self.refusing or 'no joint state received yet'}")
        if self.law.mode not in REFERENCE_MODES:
            raise ControllerError(f"trajectory: the controller is in {self.law.mode!r} mode; "
                                  f"set mode to one of {REFERENCE_MODES} to follow "
                                  "trajectories")
        _check_reference(names, self.state_index, points, start, now)
        q_hold, v_reference = self._continuation(now)
        q_start, v_start, start_efforts = self.q.copy(), self.v.copy(), None
        if self.interpolate_from_desired_state:
            q_start, v_start = q_hold, v_reference
            if (following := self.trajectory) is not None:  # read once (see reference)
                start_efforts = following.sample_effort(now)
        columns = [self.state_index[name] for name in names]
        try:
            sampler = TrajectorySampler(_over_the_model(points, columns, q_hold), start,
                                        q_start, v_start, self.law.continuous, start_efforts)
        except TrajectoryError as exc:
            raise ControllerError(f"trajectory: {exc}") from None
        _refuse_unfollowable(self, sampler)
        return sampler

    def set_trajectory(self, names: Sequence[str], points: Sequence[TrajectoryPoint],
                       now: float, start: float | None = None) -> None:
        """Follow a reference by name from ``start`` (default ``now``)."""
        self.trajectory = self.prepare_trajectory(names, points,
                                                  now if start is None else start, now)

    def _continuation(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """The current reference (q_d, q̇_d), or the measured state when the reference gave
        no finite effort (a broken one must not poison the next)."""
        q_d, v_d, _ = self.reference(now)
        if self.healthy and np.all(np.isfinite(q_d)) and np.all(np.isfinite(v_d)):
            return q_d, v_d
        return self.q.copy(), self.v.copy()

    # -- outputs -------------------------------------------------------------------

    def reference(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # each read once: prepare_trajectory runs outside the lock the node changes them under
        trajectory = self.trajectory
        if trajectory is not None:
            return trajectory.sample(now)[:3]
        hold = self.hold_position
        if hold is None:
            hold = self.hold_position = self.q.copy()
        return hold, self._zeros, self._zeros

    def state_age(self, now: float) -> float:
        return now - self.state_time

    def effort(self, q: np.ndarray, v: np.ndarray, reference_time: float, dt: float = 0.0
               ) -> tuple[np.ndarray, np.ndarray]:
        """The law at (q, q̇) with the reference sampled at ``reference_time``, the integral
        action integrating over ``dt`` s (0: not at all): (τ in model order, position error in
        model order); ControllerError when τ is not finite."""
        law = self.law
        reference = () if law.mode == "gravity_compensation" else self.reference(reference_time)
        self.last_reference = reference or None
        if reference and law.integrating and self.trajectory is not self._integral_reference:
            self.reset_integral()  # a new trajectory, or holding after one
            self._integral_reference = self.trajectory
        # overflow is refused below, with its cause; gravity alone is one kernel call and no
        # numpy arithmetic, so it skips the cost of entering an errstate
        quiet = np.errstate(all="ignore") if reference or law.friction_compensation \
            else _NO_CONTEXT
        trajectory = self.trajectory
        feedforward = trajectory.sample_effort(reference_time) \
            if reference and trajectory is not None and trajectory.feeds_forward else None
        with quiet:
            try:
                tau, error = law.effort(q, v, *reference, feedforward=feedforward, dt=dt)
                cause = "" if math.isfinite(tau.sum()) else "not finite"
            except ValueError as exc:  # a non-finite commanded acceleration, say
                cause = f"not finite ({exc})"
        # set once the outcome is known, never while the effort is in flight: a node prepares
        # trajectories on another thread and reads it (_continuation)
        self.healthy = not cause
        if cause:
            raise ControllerError(f"the computed effort is {cause}: the state or the reference "
                                  "is out of range; nothing published")
        return tau, self._zeros if error is None else error

    def _clamp(self, tau: np.ndarray, q: np.ndarray, v: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """(τ of the commanded joints within ``bounds`` at (q, q̇); τ of the commanded
        joints)."""
        wanted = tau if self._every_joint else tau[self.index]
        return self.bounds.bound(wanted, q, v), wanted

    def effort_at(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """τ in model order at a simulated instant: the commanded joints' efforts clamped to
        the limits, zero on the others (``~/simulate`` rolls out the node's law this way). The
        integral term is used as it stands, not integrated: a rollout's integrator may
        evaluate the law at instants out of order."""
        tau, _ = self.effort(q, v, t)
        command, _ = self._clamp(tau, q, v)
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
        dt = 0.0
        integrating = self.law.timed  # the integral term, the Cartesian target's rate
        if integrating:  # over the time between the states (0 for the same state)
            dt = max(self.state_time - self._integral_time, 0.0)
            self._integral_time = self.state_time
        tau, error = self.effort(self.q, self.v, now if reference_time is None
                                 else reference_time, dt)
        command, wanted = self._clamp(tau, self.q, self.v)
        clamped = []
        limited = command != wanted
        if integrating:  # anti-windup: no integration while a command is limited
            self.law.saturated[self.index] = limited
        if limited.any():
            clamped = [name for name, c, t in zip(self.joints, command, wanted) if c != t]
        return ControlOutput(command, clamped, error if self._every_joint else error[self.index])

    def holding_effort(self) -> np.ndarray | None:
        """The command holding the arm at the last measured pose (gravity + payload, less what
        the drive adds itself: ``ControlLaw.holding_command``) for the commanded joints, in
        their order, clamped to effort_scale × the URDF limits as the commands are (N·m or
        N): what a node leaves an effort controller holding when it stops commanding. None
        before a first state."""
        q = self.q
        if q is None:
            return None
        return clamp_effort(self.law.holding_command(q)[self.index], self.bounds.high)
