# SPDX-License-Identifier: Apache-2.0
"""Which PD gains the sampled control loop can take: the stability bound at a state period.

The loop per joint. Computed torque cancels the arm's dynamics, so each joint is a double
integrator driven by its command, e'' = u with e the position error, and the law is
u = −kp e − kd e'. The node computes u from a joint state and the command is held until the
next one (zero-order hold over the period T); with a driver that applies a command one period
after the state it answers (the usual case off lock-step), u_k = −kp e_{k−1} − kd e'_{k−1}.
The exact discretization of the double integrator under a held input,

    e_{k+1} = e_k + T e'_k + T²/2 u_k,     e'_{k+1} = e'_k + T u_k,

has the transfer functions E/U = T²(z + 1) / (2 (z − 1)²) and E'/U = T / (z − 1); closing the
loop through the delay z⁻¹ gives, with a = kp T² and b = kd T (dimensionless),

    p(z) = z³ − 2 z² + (1 + a/2 + b) z + (a/2 − b).

Jury's criterion for z³ + c₂z² + c₁z + c₀ (all roots inside the unit circle): p(1) > 0,
p(−1) < 0, |c₀| < 1 and 1 − c₀² > |c₀c₂ − c₁|. Here p(1) = a (kp > 0), p(−1) = −4 − 2b
(always), |a/2 − b| < 1, and, since 1 + 3a/2 − b > 0 for b < 1,

    1 − (a/2 − b)² > 1 + 3a/2 − b   ⟺   a²/4 − a (b − 3/2) − b (1 − b) < 0
                                     ⟺   a < √(9 − 8b) − 3 + 2b   (for 0 < b < 1),

which implies |a/2 − b| < 1. So the loop is stable exactly when

    0 < kd T < 1   and   kp T² < √(9 − 8 kd T) − 3 + 2 kd T.

For small kd T the bound on kp is ≈ 2 kd / (3 T): a stiffer loop needs damping in proportion,
and none (kd = 0, marginal already in continuous time) is unstable sampled; kp T² is at most
1/4 (at kd T = 5/8). kp = 0 (no position feedback) leaves the root z = 1 and z² − z + b:
0 ≤ kd T < 1. The bound with the delay is the tighter one (without it, kd T < 2 and
kp T < 2 kd): it holds for a driver that applies commands at once too.

With integral action (the law's i ← i + ki e T, added to the command in the same step, so
I/E = ki T z / (z − 1)) the loop gains a pole, and with c = ki T³

    p(z) = 2z⁴ − 6z³ + (6 + a + 2b + c) z² + (c − 2 − 4b) z + (2b − a),

which is 2 (z − 1) times the cubic above at c = 0. Its roots are found numerically, and the bound
on ki at given kp, kd (``max_stable_ki``) by bisection on c.

Impedance (τ = K (q_d − q) + D (q̇_d − q̇) + gravity) acts on the arm's inertia, so per joint
kp = K / m and kd = D / m with m the joint's effective inertia. The smallest one makes the
largest gains: ``effective_inertia`` takes 1 / (M(q)⁻¹)_jj, the inertia a joint feels with the
other joints free, which is at most M(q)_jj (the inertia with them locked). One stiffness for
every joint cannot suit an arm whose inertias span four decades (a shoulder's kg·m², a bare
wrist's 10⁻⁴ kg·m²): ``impedance_gains`` gives each joint the spring and damper of a critically
damped loop at one natural frequency on its own effective inertia, K = m ω², D = 2 m ω (or,
for a given K, D = 2 √(K m)).

The effective inertia changes with the pose, by 50× on a shoulder pan (others free, the arm
folds so that the pan turns little but the shoulder link). Gains derived at one pose act at
another as kp = ω² r, kd = 2ω r with r = m_derived / m(q): with a = kp T² = x² r and b = kd T =
2x r (x = ωT) the bound a < √(9 − 8b) − 3 + 2b reads, for small b, x < 4/3 − 32 x r / 27, which
a smaller r only relaxes; so a loop stable at r = 1 is stable at every r ≤ 1, and none is for
r large (b = 2xr ≥ 1). ``impedance_gains_for`` therefore derives them on ``workspace_inertia``:
per joint the smallest effective inertia over the reference configuration and
``WORKSPACE_SAMPLES`` poses within the limits, so r ≤ 1 at the sampled poses and, between them,
stays far below the r = 1/(2x) where damping fails (25 at 1 kHz and 2 Hz).

For fixed gains the stable periods are an interval (0, T*): along T, a = (kp/kd²) b², and the
bound √(9 − 8b) − 3 + 2b over b² falls as b grows, so a loop stable at T is stable at every
shorter period. Gains unstable at ``MIN_STATE_PERIOD``, the shortest state period an arm's
driver plausibly has, are therefore unstable at every rate a node can meet
(``implausible_gain_problem``): they can be refused before any period is measured, even
before the robot is known.

``StabilityGuard`` keeps the check running: it follows the period between joint states and
checks the controller's active gains (``active_gain_problem``) once the period is measured
(``settled``: a node commands nothing from its law before), when they change and whenever
the period has drifted, so gains set at start-up, a mode switched to and a driver that slows
down are caught as well as a gain set at run time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "MIN_STATE_PERIOD",
    "StabilityGuard",
    "active_gain_problem",
    "effective_inertia",
    "gain_bound_violation",
    "implausible_gain_problem",
    "impedance_gains",
    "impedance_gains_for",
    "integral_loop_stable",
    "max_stable_kd",
    "max_stable_ki",
    "max_stable_kp",
    "reference_configuration",
    "workspace_inertia",
]

# poses the inertia of impedance's derived gains is taken over (drawn with a fixed seed)
WORKSPACE_SAMPLES = 1000
# at most this many mass-matrix entries over those poses (32 MB): a model of many joints gets
# fewer poses (a 600-joint chain 11), not gigabytes and minutes at every load
WORKSPACE_ENTRIES = 4_000_000
# the shortest period between joint states a driver plausibly has (s): 10 kHz, above the
# 1–8 kHz of arm drivers and their fieldbuses; gains unstable here are unstable at any rate
MIN_STATE_PERIOD = 1e-4


def max_stable_kd(period: float) -> float:
    """kd (1/s) the loop sampled every ``period`` s must stay below: 1 / T."""
    return 1.0 / period


def max_stable_kp(kd: float, period: float) -> float:
    """kp (1/s²) the loop sampled every ``period`` s with damping ``kd`` (1/s) must stay
    below (module docstring): (√(9 − 8 kd T) − 3 + 2 kd T) / T²; 0 when kd T is 0 or ≥ 1."""
    b = kd * period
    if not 0.0 < b < 1.0:
        return 0.0
    return (math.sqrt(9.0 - 8.0 * b) - 3.0 + 2.0 * b) / period**2


def integral_loop_stable(kp: float, kd: float, ki: float, period: float) -> bool:
    """Whether the loop with integral action (module docstring) has every root of p(z)
    strictly inside the unit circle."""
    a, b, c = kp * period**2, kd * period, ki * period**3
    roots = np.roots([2.0, -6.0, 6.0 + a + 2.0 * b + c, c - 2.0 - 4.0 * b, 2.0 * b - a])
    return bool(np.abs(roots).max() < 1.0 - 1e-12)


def max_stable_ki(kp: float, kd: float, period: float) -> float:
    """ki (1/s³) the loop sampled every ``period`` s with ``kp``, ``kd`` must stay below; 0
    when kp, kd are not stable themselves. Found by bisection to a relative 1e-6."""
    if not (kp > 0.0 and kp < max_stable_kp(kd, period)):
        return 0.0
    high = kp * kd  # the continuous-time (Routh) bound, which heavy damping lets it pass
    while integral_loop_stable(kp, kd, high, period):
        high *= 2.0
    low = 0.0
    while high - low > 1e-6 * high:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if integral_loop_stable(kp, kd, middle, period) \
            else (low, middle)
    return low


def impedance_gains(inertia: Sequence[float], frequency: float,
                    stiffness: Sequence[float] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(K, D) per joint for a critically damped loop on each joint's ``inertia`` (kg·m² or kg,
    ``effective_inertia``): K = m ω², D = 2 m ω at ω = 2π ``frequency`` (Hz); with
    ``stiffness`` given, that K and D = 2 √(K m)."""
    m = np.asarray(inertia, float)
    if stiffness is None:
        omega = 2.0 * math.pi * frequency
        return m * omega**2, 2.0 * m * omega
    k = np.broadcast_to(np.asarray(stiffness, float), m.shape).copy()
    return k, 2.0 * np.sqrt(k * m)


def impedance_gains_for(controller: Any, frequency: float, stiffness: Sequence[float] | None,
                        damping: Sequence[float] | None, dynamics: Any = None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(K, D), one per commanded joint of ``controller``: the given ``stiffness`` and
    ``damping`` (one per commanded joint, or one for all), each one left None taken from
    ``impedance_gains`` at ``frequency`` (Hz) on the joint's smallest effective inertia over
    the workspace (``workspace_inertia``: stable at every pose where they are at the smallest
    inertia, module docstring): the same gains however the arm stands when the controller is
    built. ``dynamics``: another robot's than the controller's (an overlay about to be
    swapped in)."""
    dynamics = dynamics or controller.law.dynamics
    inertia = workspace_inertia(dynamics, dynamics.model)[controller.index]
    k, d = impedance_gains(inertia, frequency, stiffness)
    if damping is not None:
        d = np.broadcast_to(np.asarray(damping, float), d.shape).copy()
    return k, d


def reference_configuration(model: Any) -> np.ndarray:
    """q = 0, each coordinate at the middle of its limits where 0 is outside them: the pose
    gains and bounds derived from the inertia start from, however the arm stands."""
    q = np.zeros(model.nq)
    outside = (model.position_lower > 0.0) | (model.position_upper < 0.0)
    q[outside] = 0.5 * (model.position_lower[outside] + model.position_upper[outside])
    return q


def workspace_inertia(dynamics: Any, model: Any, samples: int = WORKSPACE_SAMPLES
                      ) -> np.ndarray:
    """Per velocity coordinate of ``model`` the smallest effective inertia (kg·m² or kg,
    ``effective_inertia``) that ``dynamics`` gives at the reference configuration (q = 0, each
    coordinate at the middle of its limits where 0 is outside them) and at ``samples`` poses
    drawn uniformly within the position limits (±π where a joint has none), with a fixed seed:
    the same every time; fewer poses where ``samples`` mass matrices would hold more than
    ``WORKSPACE_ENTRIES`` entries (at least 8). For a model with 1-DoF joints (q and q̇
    alike)."""
    samples = min(samples, max(8, WORKSPACE_ENTRIES // max(model.nv, 1) ** 2))
    low = np.where(np.isfinite(model.position_lower), model.position_lower, -math.pi)
    high = np.where(np.isfinite(model.position_upper), model.position_upper, math.pi)
    reference = reference_configuration(model)
    poses = np.random.default_rng(0).uniform(low, high, (samples, model.nq))
    masses = dynamics.crba(np.vstack([reference, poses]))
    try:
        return (1.0 / np.diagonal(np.linalg.inv(masses), axis1=1, axis2=2)).min(axis=0)
    except np.linalg.LinAlgError:  # a singular one among them: one at a time
        return np.min([effective_inertia(mass_matrix) for mass_matrix in masses], axis=0)


def effective_inertia(mass_matrix: np.ndarray) -> np.ndarray:
    """Per coordinate 1 / (M⁻¹)_jj (kg·m² or kg): the inertia each joint feels with the others
    free, the smallest it can feel at this configuration; the diagonal where M is singular (a
    joint that moves no inertia feels none either way)."""
    try:
        return 1.0 / np.diag(np.linalg.inv(mass_matrix))
    except np.linalg.LinAlgError:
        return np.diag(mass_matrix).copy()


def gain_bound_violation(kp: Sequence[float], kd: Sequence[float], period: float,
                         joints: Sequence[str], names: tuple[str, str] = ("kp", "kd"),
                         inertia: Sequence[float] | None = None,
                         ki: Sequence[float] | None = None, ki_name: str = "ki") -> str | None:
    """Why the gains ``kp``, ``kd`` (and ``ki``, one per joint of ``joints``; None: no
    integral action) make the loop sampled every ``period`` s unstable, naming the first joint
    and the bound; None when stable. With ``inertia`` (per joint, kg·m² or kg) the gains are
    efforts per unit error (impedance's stiffness, damping and integral gain) and act as
    kp / inertia, kd / inertia, ki / inertia; the text gives the bound in the gains' own
    units. ``names``, ``ki_name``: the parameters' names for the text."""
    kp, kd = np.asarray(kp, float), np.asarray(kd, float)
    ki = np.zeros(len(kp)) if ki is None else np.asarray(ki, float)
    scale = np.ones(len(kp)) if inertia is None else np.asarray(inertia, float)
    for j, joint in enumerate(joints):
        p, d, i, m = kp[j] / scale[j], kd[j] / scale[j], ki[j] / scale[j], scale[j]
        where = f"at the state period {period * 1e3:.3g} ms" + (
            "" if inertia is None else f" on the effective inertia {m:.3g}")
        if d * period >= 1.0:
            return (f"{names[1]} {kd[j]:g} on {joint} makes the sampled loop unstable: "
                    f"{names[1]} < {max_stable_kd(period) * m:.6g} {where}")
        if p > 0.0 and not p < max_stable_kp(d, period):
            return (f"{names[0]} {kp[j]:g} with {names[1]} {kd[j]:g} on {joint} makes the "
                    f"sampled loop unstable: {names[0]} < "
                    f"{max_stable_kp(d, period) * m:.6g} {where}"
                    + (" (no position gain is stable without damping)" if d == 0.0 else ""))
        if i > 0.0 and not integral_loop_stable(p, d, i, period):
            return (f"{ki_name} {ki[j]:g} with {names[0]} {kp[j]:g} and {names[1]} {kd[j]:g} "
                    f"on {joint} makes the sampled loop unstable: {ki_name} < "
                    f"{max_stable_ki(p, d, period) * m:.6g} {where}")
    return None


def implausible_gain_problem(kp: Sequence[float], kd: Sequence[float],
                             ki: Sequence[float] | None = None) -> str | None:
    """Why computed torque's ``kp``, ``kd`` (and ``ki``), one per joint or one for all, make
    the sampled loop unstable at every state period a driver plausibly has (unstable at
    ``MIN_STATE_PERIOD``: module docstring), naming the first bad entry; None when they are
    stable there (and when their counts do not match: checked once the joints are known).
    Needs no model: computed torque's gains act on the unit mass it makes of each joint."""
    values = [np.asarray(kp, float), np.asarray(kd, float),
              np.zeros(1) if ki is None else np.asarray(ki, float)]
    try:
        kp_, kd_, ki_ = np.broadcast_arrays(*values)
    except ValueError:
        return None
    joints = ["every joint"] if kp_.size == 1 else [f"joint {j}" for j in range(kp_.size)]
    why = gain_bound_violation(kp_.ravel(), kd_.ravel(), MIN_STATE_PERIOD, joints,
                               ki=ki_.ravel())
    if why is None:
        return None
    return (f"{why}, the shortest period a driver plausibly has ({1 / MIN_STATE_PERIOD:g} "
            "Hz): unstable at every state rate")


def active_gain_problem(controller: Any, period: float, mode: str | None = None,
                        gains: dict[str, np.ndarray] | None = None,
                        dynamics: Any = None) -> str | None:
    """Why the gains of ``controller``'s mode (``mode`` to check another; ``gains``: law gain
    arrays over v to use instead of the law's, by ``ControlLaw`` name) make its loop sampled
    every ``period`` s unstable (``gain_bound_violation``; impedance's on the effective inertia
    at the measured state, at the zero configuration before one; on ``dynamics`` when given,
    else the law's; Cartesian impedance's by ``CartesianImpedance.gain_problem``); None when
    stable, and in gravity compensation, which has no loop."""
    law = controller.law
    mode = mode or law.mode
    if mode == "gravity_compensation":
        return None
    if mode == "cartesian_impedance":  # its gains on the link's inertia (CartesianImpedance)
        cartesian = law.cartesian
        if cartesian is None:
            return "mode cartesian_impedance has no Cartesian law (see cartesian.link)"
        q = controller.q if controller.q is not None else cartesian.model.neutral_configuration()
        return cartesian.gain_problem(q, period)

    def gain(name: str) -> np.ndarray:
        values = gains[name] if gains and name in gains else getattr(law, name)
        return np.asarray(values)[controller.index]

    ki = gain("ki") if law.integrating or (gains and "ki" in gains) else None
    if mode == "computed_torque":
        return gain_bound_violation(gain("kp"), gain("kd"), period, controller.joints,
                                    ki=ki)
    q = controller.q if controller.q is not None else np.zeros(controller.model.nq)
    inertia = effective_inertia((dynamics or law.dynamics).crba(q))[controller.index]
    return gain_bound_violation(gain("stiffness"), gain("damping"), period, controller.joints,
                                ("impedance.stiffness", "impedance.damping"), inertia, ki)


class StabilityGuard:
    """Whether a controller's active gains keep its sampled loop stable at the period its
    states come at, checked when asked (``recheck``: new gains, mode or controller) and when
    the measured period drifts by ``DRIFT`` from the one last checked.

    ``observe(controller, t)`` per state (``t``: the instant it describes, s) keeps the gaps
    between states (those
    longer than the controller's ``max_state_age`` are not counted: the loop was stopped) and
    takes the period as the median of the last ``WINDOW`` of them, every ``EVERY`` states: a
    driver's rate, not bent by a pause (or by states sent by hand); then the check when due.
    It returns the current problem (None: stable, or not yet checked). The first check waits
    for ``SETTLE`` gaps, so the period is a measured one; until then ``settled`` is False and
    the gains are unchecked: not to be commanded with. ``min_period``: the shortest period
    between commands (a publish-rate limit), which lengthens the loop's.
    """

    DRIFT = 0.2
    SETTLE = 3  # a first period soon (states by hand are answered by the law within a few),
    # refined every EVERY states over up to WINDOW gaps and checked again when it drifts
    WINDOW = 64
    EVERY = 16

    def __init__(self) -> None:
        self.period = 0.0  # s between states, the median of the recent gaps (0: none yet)
        self.min_period = 0.0
        self.problem: str | None = None
        self._checked = math.nan  # the loop period last checked
        self._gaps = np.zeros(self.WINDOW)
        self._count = 0
        self._last = -math.inf
        self._pending = True

    def recheck(self) -> None:
        """Check again with the next state (the gains, mode or controller changed)."""
        self._pending = True

    @property
    def settled(self) -> bool:
        """Whether the period is measured and the gains were checked at it (they are, with
        the state that measures it)."""
        return self._count >= self.SETTLE

    @property
    def loop_period(self) -> float:
        """The period the loop is checked at (s): the measured one, or ``MIN_STATE_PERIOD``
        before one is (what is unstable there is unstable at any rate), never below
        ``min_period``."""
        return max(self.period or MIN_STATE_PERIOD, self.min_period)

    def observe(self, controller: Any, t: float) -> str | None:
        gap, self._last = t - self._last, t
        if not 0.0 < gap <= controller.max_state_age:
            return self.problem
        self._gaps[self._count % self.WINDOW] = gap
        self._count += 1
        if self._count < self.SETTLE:
            return self.problem
        if self._count == self.SETTLE or self._count % self.EVERY == 0:
            self.period = float(np.median(self._gaps[:min(self._count, self.WINDOW)]))
        period = self.loop_period
        if self._pending or not abs(period - self._checked) <= self.DRIFT * self._checked:
            self._pending, self._checked = False, period
            self.problem = active_gain_problem(controller, period)
        return self.problem
