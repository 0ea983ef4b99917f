# SPDX-License-Identifier: Apache-2.0
"""Cartesian impedance: one link held at a target pose by a spring and damper in space.

The law (Jᵀ impedance on top of the arm's own dynamics, as franka's
``cartesian_impedance_example_controller``; Ott 2008, ch. 3)::

    τ = g(q) + C(q, q̇) q̇ + Jᵀ F + N τ₀            (+ friction, + a payload's g + C q̇)
    F = K e − D ẋ,   e = [p_d − p; log(R_d Rᵀ)],   ẋ = J q̇
    τ₀ = K_n (q_n − q) − D_n q̇,   N = I − Jᵀ J̄ᵀ,   J̄ = M⁻¹ Jᵀ Λ,   Λ = (J M⁻¹ Jᵀ)⁻¹

All in the base (world) axes: J is the link's 6×nv Jacobian of [origin velocity; angular
velocity], p and R its pose, (p_d, R_d) the target; e is the position error and the rotation
vector that turns the link onto the target. K = blkdiag(K_t, K_r) holds the translational
(N/m) and rotational (N·m/rad) stiffness per axis of the chosen frame (``base``, or
``target``: K_t = R_d diag(k_t) R_dᵀ, the same for K_r). At rest, Jᵀ (F + F_ext) = 0 makes
F = −F_ext wherever J has full row rank (the null-space term is invisible there, J̄ᵀ N = 0), so
a constant wrench deflects the link by K⁻¹ F_ext: the spring is exact in statics.

Why Jᵀ impedance, not the full operational-space law (Khatib 1987), which adds Λ (ẍ_d − J̇ q̇)
and μ and shapes the inertia: shaping the inertia needs the external wrench measured (a
force/torque sensor this package does not assume), and without inertia shaping the closed loop
Λ ẍ + D ẋ + K e = F_ext (up to Λ J̇ q̇, small at the speeds an impedance is held at) keeps the
arm's own inertia, which is what makes the contact passive (Hogan 1985; Ott 2008).

The damping D is designed on Λ(q) for the damping ratio ζ (1: critical) by the double
diagonalisation of Albu-Schäffer et al. (2003): with Λ = L Lᵀ (Cholesky),
D = 2 ζ L (L⁻¹ K L⁻ᵀ)^½ Lᵀ, which makes every mode of Λ ẍ + D ẋ + K x = 0 critically damped
(for Λ and K that commute it is 2 ζ √(Λ K)); or D is given per axis of the frame. The posture
term is a joint impedance toward ``posture`` (K_n per joint; D_n = 2 ζ √(K_n m_j) on each
joint's effective inertia m_j = 1 / (M⁻¹)_jj unless given), projected with the dynamically
consistent N so that it exerts no acceleration of the link (Khatib 1987; Ott 2008, §3.3).

Near a singularity Λ grows without bound. Where the smallest singular value σ of J (m/s and
rad/s per rad/s of the joints) falls below ``singular_value_threshold`` ε, Λ and J̄ are
computed from the damped Jacobian J_λ = U diag(√(σᵢ² + λ²)) Vᵀ with
λ² = ε² − σ² (damped least squares with a variable damping, Nakamura and Hanafusa 1986;
Chiaverini 1997): the singular values used are at least ε, so Λ, D and the command stay
bounded, and the spring still acts through the true Jᵀ.

The target moves toward the one asked for (``set_target``) at most ``max_linear_rate`` (m/s)
and ``max_angular_rate`` (rad/s): a jump is followed along a straight line and the geodesic
between the rotations, as franka's example filters its target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rb_dynamics.dynamics import Dynamics, LinkWrench, PayloadEffort, friction_effort
from rb_dynamics.model import Model, check_choice, finite_array, rotation_exp, rotation_log

from .law import ControllerError, check_gains, position_error
from .stability import effective_inertia, gain_bound_violation, max_stable_kp

__all__ = [
    "CARTESIAN_FRAMES",
    "CartesianGains",
    "CartesianImpedance",
    "CartesianState",
    "critical_damping",
    "pose_error",
    "step_toward",
]

CARTESIAN_FRAMES = ("base", "target")
_AXES = ("x", "y", "z", "rx", "ry", "rz")
_BASE_AXES = np.eye(3)
_BASE_AXES.flags.writeable = False


def pose_error(pose: np.ndarray, target: np.ndarray) -> np.ndarray:
    """e = [p_d − p; log(R_d Rᵀ)] (m, rad; base axes) from the 4×4 ``pose`` to ``target``."""
    return np.concatenate([target[:3, 3] - pose[:3, 3],
                           rotation_log(target[:3, :3] @ pose[:3, :3].T)])


def step_toward(pose: np.ndarray, goal: np.ndarray, max_linear: float,
                max_angular: float) -> np.ndarray:
    """The 4×4 pose at most ``max_linear`` (m) and ``max_angular`` (rad) from ``pose`` on the
    way to ``goal``: along the straight line and the geodesic between the rotations."""
    out = goal.copy()
    dp = goal[:3, 3] - pose[:3, 3]
    distance = float(np.linalg.norm(dp))
    if distance > max_linear:
        out[:3, 3] = pose[:3, 3] + dp * (max_linear / distance)
    phi = rotation_log(goal[:3, :3] @ pose[:3, :3].T)
    angle = float(np.linalg.norm(phi))
    if angle > max_angular:
        out[:3, :3] = rotation_exp(phi * (max_angular / angle)) @ pose[:3, :3]
    return out


def critical_damping(inertia: np.ndarray, stiffness: np.ndarray, ratio: float = 1.0
                     ) -> np.ndarray:
    """D = 2 ζ L (L⁻¹ K L⁻ᵀ)^½ Lᵀ with Λ = L Lᵀ: every mode of Λ ẍ + D ẋ + K x = 0 damped at
    the ratio ζ (``ratio``; the module docstring). Λ symmetric positive definite, K symmetric
    positive semi-definite."""
    L = np.linalg.cholesky(inertia)
    C = np.linalg.solve(L, np.linalg.solve(L, stiffness).T)  # L⁻¹ K L⁻ᵀ (K symmetric)
    w, W = np.linalg.eigh(0.5 * (C + C.T))
    root = (W * np.sqrt(np.clip(w, 0.0, None))) @ W.T
    return 2.0 * ratio * (L @ root @ L.T)


@dataclass
class CartesianGains:
    """The spring and damper in space and the posture impedance, checked when made
    (``ControllerError`` naming the parameter).

    ``translational_stiffness`` (N/m) and ``rotational_stiffness`` (N·m/rad): 3 values each
    (or 1 for all three axes) along the axes of ``frame`` (``CARTESIAN_FRAMES``). ``damping``:
    None for the damping designed on Λ(q) at ``damping_ratio``, or 6 values (N·s/m ×3,
    N·m·s/rad ×3) along the same axes. ``posture_stiffness`` (N·m/rad or N/m per joint, one
    value for all; 0: no posture term) and ``posture_damping`` (None: ``damping_ratio`` on
    each joint's effective inertia)."""

    translational_stiffness: np.ndarray = field(default_factory=lambda: np.full(3, 500.0))
    rotational_stiffness: np.ndarray = field(default_factory=lambda: np.full(3, 10.0))
    frame: str = "base"
    damping: np.ndarray | None = None
    damping_ratio: float = 1.0
    posture_stiffness: np.ndarray | float = 0.0
    posture_damping: np.ndarray | float | None = None

    def __post_init__(self) -> None:
        check_choice(self.frame, CARTESIAN_FRAMES, "cartesian.frame", ControllerError)
        self.translational_stiffness = check_gains(
            self.translational_stiffness, "cartesian.translational_stiffness", 3)
        self.rotational_stiffness = check_gains(
            self.rotational_stiffness, "cartesian.rotational_stiffness", 3)
        if self.damping is not None:
            self.damping = check_gains(self.damping, "cartesian.damping", 6)
        ratio = check_gains(self.damping_ratio, "cartesian.damping_ratio")
        if ratio.size != 1:
            raise ControllerError("cartesian.damping_ratio takes one value")
        self.damping_ratio = float(ratio[0])
        self.posture_stiffness = check_gains(self.posture_stiffness,
                                             "cartesian.posture_stiffness")
        if self.posture_damping is not None:
            self.posture_damping = check_gains(self.posture_damping,
                                               "cartesian.posture_damping")


@dataclass
class CartesianState:
    """One evaluation of the law: the link's ``pose`` (4×4, base), the ``target`` it was held
    to (4×4, after the rate limit), the ``error`` e and the spring-damper ``wrench`` F =
    [force; torque] (N, N·m; base axes, about the link origin), the ``velocity`` J q̇, the
    smallest singular value of J (``singular_value``) and whether the Jacobian was damped."""

    pose: np.ndarray
    target: np.ndarray
    error: np.ndarray
    wrench: np.ndarray
    velocity: np.ndarray
    singular_value: float
    damped: bool


class CartesianImpedance:
    """The Cartesian impedance law of ``link`` (module docstring) for ``dynamics``.

    ``effort(q, v, dt)`` gives (τ, ``CartesianState``) with τ unclamped over v. The target
    starts unset: ``hold(q)`` takes the link's pose at ``q`` (what the node does on
    activation), ``set_target`` asks for another one (reached at the rate limits),
    ``reset_target`` jumps to one. ``posture`` (model q) is what the null-space term pulls
    toward (default: the configuration ``hold`` was given; no posture term before one).
    ``ControllerError`` for a bad link (one moved by fewer than six joint coordinates
    included), threshold, rate or posture, naming it.
    """

    def __init__(self, dynamics: Dynamics, link: str, gains: CartesianGains | None = None,
                 posture: np.ndarray | None = None, singular_value_threshold: float = 0.01,
                 max_linear_rate: float = 0.5, max_angular_rate: float = 1.0,
                 friction_compensation: bool = False, payload: PayloadEffort | None = None
                 ) -> None:
        model: Model = dynamics.model
        if model.floating_base:
            raise ControllerError("cartesian impedance needs a fixed-base model")
        frame = model.frames.get(link)
        if frame is None or frame.body < 0:
            moving = [name for name, f in model.frames.items() if f.body >= 0]
            raise ControllerError(f"cartesian.link {link!r} is not a link a joint moves; "
                                  f"links: {moving}")
        self._kinematics = LinkWrench(model, link)
        _, J = self._kinematics.pose_and_jacobian(model.neutral_configuration())
        moving = int(np.count_nonzero(np.abs(J).sum(0)))
        if moving < 6:
            raise ControllerError(f"cartesian impedance holds 6 axes: cartesian.link {link!r} "
                                  f"is moved by {moving} joint coordinates, it needs 6 or more")
        self.dynamics, self.model, self.link = dynamics, model, link
        self.set_gains(gains or CartesianGains())
        self.set_limits(singular_value_threshold, max_linear_rate, max_angular_rate)
        self.posture: np.ndarray | None = None
        self._posture_given = posture is not None
        if posture is not None:
            self.set_posture(posture)
        self.friction_compensation = friction_compensation
        self.payload = payload
        self.target: np.ndarray | None = None  # the pose held now (4×4, base)
        self.goal: np.ndarray | None = None  # the pose asked for, reached at the rate limits
        self._goal_since_hold = False  # a goal was asked after the last hold was (forget_goal)
        self.last: CartesianState | None = None  # the last evaluation (a node publishes it)
        # since take_period: the smallest singular value of J and the evaluations damped
        self.smallest_seen, self.damped_count = math.inf, 0

    def take_period(self) -> tuple[float, int]:
        """(smallest singular value of J, evaluations damped) since the last call; a new
        period starts."""
        out = (self.smallest_seen, self.damped_count)
        self.smallest_seen, self.damped_count = math.inf, 0
        return out

    # ------------------------------------------------------------------ settings
    def set_gains(self, gains: CartesianGains) -> None:
        """New gains (a checked ``CartesianGains``), from the next ``effort`` on; the posture
        gains are sized to the model's joints here (ControllerError otherwise)."""
        self._posture_k, self._posture_d = self._posture_gains(gains)
        self.gains = gains

    def _posture_gains(self, gains: CartesianGains) -> tuple[np.ndarray, np.ndarray | None]:
        """(K_n, D_n or None) over v from ``gains``; ControllerError for a wrong count."""
        nv = self.model.nv
        for name in ("posture_stiffness", "posture_damping"):
            values = getattr(gains, name)
            if values is not None and np.size(values) not in (1, nv):
                raise ControllerError(f"cartesian.{name} needs 1 or {nv} values (one per "
                                      f"joint coordinate), got {np.size(values)}")
        damping = gains.posture_damping
        return (np.broadcast_to(gains.posture_stiffness, (nv,)).copy(),
                None if damping is None else np.broadcast_to(damping, (nv,)).copy())

    def set_limits(self, singular_value_threshold: float, max_linear_rate: float,
                   max_angular_rate: float) -> None:
        """The damped-least-squares threshold ε (> 0) and the target's rate limits (> 0, inf
        for none)."""
        for name, value in (("singular_value_threshold", singular_value_threshold),
                            ("max_linear_rate", max_linear_rate),
                            ("max_angular_rate", max_angular_rate)):
            if not (isinstance(value, (int, float)) and value > 0.0):
                raise ControllerError(f"cartesian.{name} must be > 0, got {value!r}")
        if not math.isfinite(singular_value_threshold):
            raise ControllerError("cartesian.singular_value_threshold must be finite")
        self.threshold = float(singular_value_threshold)
        self.max_linear_rate, self.max_angular_rate = float(max_linear_rate), \
            float(max_angular_rate)

    def set_posture(self, posture: np.ndarray) -> None:
        """The null-space term's configuration (model q, within the position limits); kept
        from then on (``hold`` no longer replaces it)."""
        model = self.model
        posture = finite_array(posture, "cartesian.posture", (model.nq,), ControllerError)
        outside = (posture < model.position_lower) | (posture > model.position_upper)
        if outside.any():
            k = int(np.argmax(outside))
            raise ControllerError(
                f"cartesian.posture[{k}] = {posture[k]:g} is outside the limits "
                f"[{model.position_lower[k]:g}, {model.position_upper[k]:g}]")
        self.posture = posture
        self._posture_given = True

    def take_settings(self, other: CartesianImpedance) -> None:
        """``other``'s gains, limits and given posture (a law checked for the same link); the
        target and goal stay."""
        self.set_gains(other.gains)
        self.set_limits(other.threshold, other.max_linear_rate, other.max_angular_rate)
        if other.posture is not None:
            self.set_posture(other.posture)

    # ------------------------------------------------------------------ target
    def pose(self, q: np.ndarray) -> np.ndarray:
        """The link's 4×4 pose in the base frame at ``q``."""
        return self._kinematics.pose_and_jacobian(q)[0]

    def forget_goal(self) -> None:
        """A hold was asked for, to begin at the next state (``hold``): the goal asked before
        now is dropped then; one asked after now is kept."""
        self._goal_since_hold = False

    def hold(self, q: np.ndarray) -> None:
        """Hold the link where it is at ``q``: the target becomes its pose, and so does the
        goal unless one was asked since the hold was (``forget_goal``: a target sent right
        after a collision's reset, before the next state, is not lost); ``q`` the posture
        unless one was given."""
        goal = self.goal if self._goal_since_hold else None
        self.reset_target(self.pose(q))
        if goal is not None:
            self.goal = goal
        if not self._posture_given:
            self.posture = np.array(q, dtype=float)

    def set_target(self, pose: np.ndarray) -> None:
        """Ask for ``pose`` (4×4 homogeneous, base frame); the held target moves to it at the
        rate limits. ControllerError unless it is a finite rigid transform."""
        self.goal = _rigid_transform(pose)
        self._goal_since_hold = True
        if self.target is None:
            self.target = self.goal

    def reset_target(self, pose: np.ndarray) -> None:
        """Hold ``pose`` at once (no rate limit)."""
        self.goal = _rigid_transform(pose)
        self.target = self.goal  # the same array: reached (neither is changed in place)

    # ------------------------------------------------------------------ the law
    def _frame_rotation(self, gains: CartesianGains, q: np.ndarray | None = None
                        ) -> np.ndarray:
        """The stiffness frame's axes in the base: the target's (the pose at ``q`` before
        there is one) or the base's."""
        if gains.frame != "target":
            return _BASE_AXES
        return (self.target if self.target is not None else self.pose(q))[:3, :3]

    def stiffness_matrix(self) -> np.ndarray:
        """K (6×6, base axes) of the active gains in their frame."""
        gains = self.gains
        return _in_frame(self._frame_rotation(gains), np.concatenate(
            [gains.translational_stiffness, gains.rotational_stiffness]))

    def operational_terms(self, q: np.ndarray, J: np.ndarray | None = None
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, bool]:
        """(J_used, M, Λ, σ, damped) at ``q``: the Jacobian Λ and the projector are computed
        from (the link's, base axes; J_λ below the threshold), the joint-space inertia, the
        operational-space inertia, the smallest singular value of the link's J and whether
        it was damped. ``J``: the link's Jacobian at ``q`` when the caller has it."""
        if J is None:
            J = self._kinematics.pose_and_jacobian(q)[1]
        M = self.dynamics.crba(q)
        U, sigma, Vt = np.linalg.svd(J, full_matrices=False)
        smallest = float(sigma[-1])
        damped = smallest < self.threshold
        J_used = J
        if damped:  # J_λ = U diag(√(σ² + λ²)) Vᵀ, λ² = ε² − σ²_min
            J_used = (U * np.sqrt(sigma**2 + (self.threshold**2 - smallest**2))) @ Vt
        Minv_JT = np.linalg.solve(M, J_used.T)
        inverse = J_used @ Minv_JT
        Lambda = np.linalg.inv(0.5 * (inverse + inverse.T))
        return J_used if damped else J, M, 0.5 * (Lambda + Lambda.T), smallest, damped

    def effort(self, q: np.ndarray, v: np.ndarray, dt: float = 0.0
               ) -> tuple[np.ndarray, CartesianState]:
        """(τ, state) at (q, v), the target first moved ``dt`` s toward the goal (0: not
        moved). ControllerError before a target is set."""
        if self.target is None:
            raise ControllerError("cartesian impedance has no target yet: hold(q) or "
                                  "set_target(pose) first")
        if dt > 0.0 and self.goal is not None and self.target is not self.goal:
            self.target = step_toward(self.target, self.goal, self.max_linear_rate * dt,
                                      self.max_angular_rate * dt)
            if np.array_equal(self.target, self.goal):
                self.target = self.goal  # reached: no more steps until a new goal
        gains = self.gains
        pose, J_true = self._kinematics.pose_and_jacobian(q)
        J_used, M, Lambda, smallest, damped = self.operational_terms(q, J_true)
        error = pose_error(pose, self.target)
        velocity = J_true @ v
        K = self.stiffness_matrix()
        if gains.damping is None:
            D = critical_damping(Lambda, K, gains.damping_ratio)
        else:
            D = _in_frame(self._frame_rotation(gains), gains.damping)
        wrench = K @ error - D @ velocity
        tau = self.dynamics.nonlinear_effects(q, v) + J_true.T @ wrench
        if self.payload is not None:
            tau = tau + self.payload.effort(q, v, np.zeros(self.model.nv))
        if self.friction_compensation and not K.any():
            # hand guiding, as gravity compensation: at the measured velocity. With a spring
            # the target is at rest (q̇_d = 0, the joint modes' reference velocity): f(0) = 0;
            # compensating from the measured velocity there is a high-gain positive feedback
            # (the Coulomb term's slope at rest) the spring's damping does not outweigh
            tau = tau + friction_effort(self.model, v)
        if self.posture is not None and (
                self._posture_k.any() or (self._posture_d is not None and self._posture_d.any())):
            tau = tau + self._null_space_effort(q, v, J_used, M, Lambda)
        state = CartesianState(pose, self.target.copy(), error, wrench, velocity, smallest,
                               damped)
        self.last = state
        self.smallest_seen = min(self.smallest_seen, smallest)
        self.damped_count += damped
        return tau, state

    def _null_space_effort(self, q, v, J, M, Lambda) -> np.ndarray:
        """N τ₀ = τ₀ − Jᵀ Λ J M⁻¹ τ₀ for the posture impedance τ₀."""
        k = self._posture_k
        d = self._posture_d
        if d is None:
            d = 2.0 * self.gains.damping_ratio * np.sqrt(k * effective_inertia(M))
        tau0 = k * position_error(self.model, self.posture, q) - d * v
        return tau0 - J.T @ (Lambda @ (J @ np.linalg.solve(M, tau0)))

    # ------------------------------------------------------------------ stability
    def gain_problem(self, q: np.ndarray, period: float,
                     gains: CartesianGains | None = None) -> str | None:
        """Why ``gains`` (default: the active ones) make the loop sampled every ``period`` s
        unstable at ``q``, naming the mode, the gain and the bound; None when stable.

        The spring and damper act on Λ(q), in the modes of Λ ẍ + K x = 0 (K φ = ω² Λ φ),
        each named by the axis whose spring makes most of its stiffness. With the designed
        damping the modes are decoupled: each is a loop kp = ω², kd = 2 ζ ω, checked as
        ``stability.max_stable_kp`` bounds it. With a given damping each mode φ (unit length,
        frame axes) is taken as a spring φᵀ K φ and a damper φᵀ D φ on the inertia φᵀ Λ φ
        (``stability.gain_bound_violation``; the coupling through D is left out). Each posture
        joint is checked on its own effective inertia."""
        gains = gains or self.gains
        posture_k, posture_d = self._posture_gains(gains)
        _, M, Lambda, _, _ = self.operational_terms(q)
        R = self._frame_rotation(gains, q)
        T = np.kron(np.eye(2), R)  # frame axes → base axes; Tᵀ X T is X in frame axes
        k = np.concatenate([gains.translational_stiffness, gains.rotational_stiffness])
        K = np.diag(k)
        Lambda_f = T.T @ Lambda @ T
        D = None if gains.damping is None else np.diag(gains.damping)
        L = np.linalg.cholesky(Lambda_f)
        C = np.linalg.solve(L, np.linalg.solve(L, K).T)
        omega_sq, W = np.linalg.eigh(0.5 * (C + C.T))
        modes = np.linalg.solve(L.T, W)  # Φ: Φᵀ Λ Φ = I, Φᵀ K Φ = diag(ω²)
        modes /= np.linalg.norm(modes, axis=0)
        share = modes**2 * k[:, None]  # each axis' spring in each mode's stiffness
        axes = [int(np.argmax(share[:, i] if share[:, i].any() else np.abs(modes[:, i])))
                for i in range(6)]
        if gains.damping is None:
            problem = _mode_problem(np.sqrt(np.clip(omega_sq, 0.0, None)), axes, k,
                                    gains.damping_ratio, period, gains.frame)
        else:
            problem = gain_bound_violation(
                np.einsum("ji,jk,ki->i", modes, K, modes),
                np.einsum("ji,jk,ki->i", modes, D, modes), period,
                [f"the mode along {_AXES[a]} ({gains.frame} frame)" for a in axes],
                ("cartesian stiffness", "cartesian damping"),
                np.einsum("ji,jk,ki->i", modes, Lambda_f, modes))
        if problem is None and posture_k.any():
            inertia = effective_inertia(M)
            if posture_d is None:
                posture_d = 2.0 * gains.damping_ratio * np.sqrt(posture_k * inertia)
            problem = gain_bound_violation(
                posture_k, posture_d, period, self.model.velocity_names,
                ("cartesian.posture_stiffness", "cartesian.posture_damping"), inertia)
        return problem


def _mode_stable(omega: float, ratio: float, period: float) -> bool:
    kd = 2.0 * ratio * omega
    return omega == 0.0 or (kd * period < 1.0 and omega**2 < max_stable_kp(kd, period))


def _mode_problem(omega: np.ndarray, axes: list[int], stiffness: np.ndarray, ratio: float,
                  period: float, frame: str) -> str | None:
    """Why a critically (``ratio``) damped mode at ω (rad/s) is unstable sampled every
    ``period`` s, naming its axis, its stiffness and the highest frequency that is stable
    (found by bisection); None when every mode is stable."""
    for w, axis in zip(omega, axes):
        if _mode_stable(float(w), ratio, period):
            continue
        low, high = 0.0, float(w)
        while high - low > 1e-6 * high:
            middle = 0.5 * (low + high)
            low, high = (middle, high) if _mode_stable(middle, ratio, period) else (low, middle)
        name = ("cartesian.translational_stiffness" if axis < 3
                else "cartesian.rotational_stiffness")
        k = stiffness[axis]
        return (f"cartesian stiffness {k:g} on axis {_AXES[axis]} ({frame} frame, {name}) "
                f"makes the sampled loop unstable: its mode oscillates at "
                f"{w / (2 * math.pi):.4g} Hz on the link's inertia, at most "
                f"{low / (2 * math.pi):.4g} Hz at the state period {period * 1e3:.3g} ms with "
                f"damping ratio {ratio:g} (about {k * (low / w) ** 2:.4g} on that axis)")
    return None


def _in_frame(R: np.ndarray, diagonal: np.ndarray) -> np.ndarray:
    """blkdiag(R diag(d₀..₂) Rᵀ, R diag(d₃..₅) Rᵀ): per-axis gains of a frame in base axes."""
    out = np.zeros((6, 6))
    out[:3, :3] = (R * diagonal[:3]) @ R.T
    out[3:, 3:] = (R * diagonal[3:]) @ R.T
    return out


def _rigid_transform(pose) -> np.ndarray:
    """A 4×4 finite homogeneous transform with a proper rotation (orthonormalised), or
    ControllerError."""
    T = finite_array(pose, "target pose", (4, 4), ControllerError)
    R = T[:3, :3]
    if not np.allclose(T[3], [0.0, 0.0, 0.0, 1.0]) or \
            not np.allclose(R @ R.T, np.eye(3), atol=1e-6) or np.linalg.det(R) <= 0.0:
        raise ControllerError("target pose must be a rigid transform (a rotation and a "
                              "translation)")
    U, _, Vt = np.linalg.svd(R)
    T[:3, :3] = U @ Vt
    return T
