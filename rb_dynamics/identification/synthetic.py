# SPDX-License-Identifier: Apache-2.0
"""A known robot to identify: the truth that tests and benchmarks compare a fit against.

- ``perturbed_model``: a model whose every body's inertial parameters differ from the URDF's
  by up to a given fraction, kept physical (the pseudo-inertia J mapped as A J Aᵀ, A near the
  identity: an affine deformation of the body's mass), with friction, armature and effort
  offsets drawn from published ranges (fractions of each joint's effort limit);
- ``synthetic_recording``: the joint states a sensor would record while that robot follows a
  ``FourierTrajectory`` exactly (inverse dynamics: its efforts are what the motion takes),
  sampled at a rate with jitter, the efforts delayed, then offset, noisy, with outliers and
  the positions quantised by the one sensor model, ``rb_dynamics.sensing.JointSensors``.

The efforts are the reference RNEA of the true model (its armature included) plus its friction:
by default ``rb_dynamics.dynamics.friction_effort`` (the smooth law the simulator applies and
the fit's regressor writes), or another law such as ``sign_law_friction`` (Coulomb friction
as a drive or MuJoCo's ``frictionloss`` has it), which the fit does not model at low speed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rb_dynamics.dynamics import coulomb_bound, friction_effort, rnea
from rb_dynamics.model import Model
from rb_dynamics.sensing import JointSensors

from .fourier import FourierTrajectory
from .measurements import JointRecording
from .regressor import body_parameters, spatial_inertia_from_parameters

__all__ = ["SensorModel", "perturbed_model", "sign_law_friction", "synthetic_recording"]


def _pseudo_inertia(pi: np.ndarray) -> np.ndarray:
    m, h, Ibar = pi[0], pi[1:4], pi[4:]
    I = np.array([[Ibar[0], Ibar[1], Ibar[3]], [Ibar[1], Ibar[2], Ibar[4]],
                  [Ibar[3], Ibar[4], Ibar[5]]])
    J = np.zeros((4, 4))
    J[:3, :3] = 0.5 * np.trace(I) * np.eye(3) - I
    J[:3, 3] = J[3, :3] = h
    J[3, 3] = m
    return J


def _parameters_of_pseudo_inertia(J: np.ndarray) -> np.ndarray:
    S = J[:3, :3]
    I = np.trace(S) * np.eye(3) - S
    return np.array([J[3, 3], *J[:3, 3], I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])


def perturbed_model(model: Model, rng: np.random.Generator, spread: float = 0.3,
                    joints: tuple[str, ...] | None = None, stribeck: bool = False) -> Model:
    """``model`` with each body's inertial parameters perturbed (mass by up to ±spread, the
    mass distribution deformed by up to ±spread/2 per axis and shifted by up to spread/3 of
    its size), and on ``joints`` (default all 1-DoF joints) armature 0.05–0.2 % of the effort
    limit (kg·m² per N·m), viscous 0.5–2 %, Coulomb 1–4 %, offset ±1 % (Stribeck 20–50 % of
    Coulomb at 0.02–0.1 rad/s when ``stribeck``); limits without a bound count as 100."""
    inertia = []
    for I in model.inertia:
        pi = body_parameters(I)
        if pi[0] <= 0:
            inertia.append(I.copy())
            continue
        J = _pseudo_inertia(pi)
        size = np.sqrt(max(np.trace(J[:3, :3]) / pi[0], 1e-6))
        A = np.eye(4)
        A[:3, :3] += rng.uniform(-spread / 2, spread / 2, (3, 3))
        A[:3, 3] = rng.uniform(-spread / 3, spread / 3, 3) * size
        A *= np.sqrt(rng.uniform(1 - spread, 1 + spread))
        inertia.append(spatial_inertia_from_parameters(
            _parameters_of_pseudo_inertia(A @ J @ A.T)))
    names = list(joints or model.actuated_joint_names)
    vi = model.velocity_indices(names)
    limit = np.where(np.isfinite(model.effort_limit[vi]), model.effort_limit[vi], 100.0)
    fields = {f: np.array(getattr(model, f), dtype=float) for f in (
        "armature", "damping", "friction", "effort_offset", "stribeck_friction",
        "stribeck_velocity")}
    k = len(names)
    fields["armature"][vi] = rng.uniform(0.5e-3, 2e-3, k) * limit
    fields["damping"][vi] = rng.uniform(0.005, 0.02, k) * limit
    fields["friction"][vi] = rng.uniform(0.01, 0.04, k) * limit
    fields["effort_offset"][vi] = rng.uniform(-0.01, 0.01, k) * limit
    if stribeck:
        fields["stribeck_friction"][vi] = rng.uniform(0.2, 0.5, k) * fields["friction"][vi]
        fields["stribeck_velocity"][vi] = rng.uniform(0.02, 0.1, k)
    return dataclasses.replace(model, inertia=inertia, **fields)


@dataclass(frozen=True)
class SensorModel:
    """How a recording's joint states are measured: ``rate`` Hz with Gaussian ``jitter`` (s)
    on the sample instants (the stamps say when each was taken), efforts ``delay`` s late,
    with noise σ = ``noise`` + ``noise_relative``·|τ| and a fraction ``outliers`` of samples
    off by 5–10 σ; positions quantised to ``position_step`` (0: exact).

    The instants are the recording's own (a grid with Gaussian jitter, not a live driver's
    reading behind ``now``); the values are measured by
    ``rb_dynamics.sensing.joint_sensors.JointSensors.measure`` (``sensors``), which refuses a
    negative option or ``outliers`` above 1."""

    rate: float = 1000.0
    jitter: float = 0.0
    delay: float = 0.0
    noise: float = 0.0
    noise_relative: float = 0.0
    outliers: float = 0.0
    position_step: float = 0.0

    def sensors(self, effort_offset: np.ndarray) -> JointSensors:
        """The joint sensors that measure the values, with the true robot's effort offset;
        its ``effort_delay`` is this ``delay`` (positions are not delayed)."""
        return JointSensors(effort_offset, effort_noise=self.noise,
                            effort_noise_relative=self.noise_relative,
                            encoder_resolution=self.position_step, effort_delay=self.delay,
                            outliers=self.outliers)


def sign_law_friction(model: Model, v) -> np.ndarray:
    """viscous·q̇ + c(q̇)·sign(q̇) over v ((nv,) or (N, nv)), c(q̇) the Coulomb and Stribeck
    magnitude (``rb_dynamics.dynamics.coulomb_bound``): the friction a moving joint feels when
    its Coulomb term steps at reversal, as a drive's does, and 0 at rest."""
    v = np.asarray(v, dtype=float)
    return model.damping * v + coulomb_bound(model, v) * np.sign(v)


def synthetic_recording(true_model: Model, trajectory: FourierTrajectory, periods: int,
                        sensor: SensorModel, rng: np.random.Generator, *,
                        lead_in: float = 1.0, tail: float = 1.0,
                        friction: Callable[[Model, np.ndarray], np.ndarray] = friction_effort,
                        ) -> tuple[JointRecording, np.ndarray]:
    """What ``sensor`` records while ``true_model`` rests ``lead_in`` s at the trajectory's
    start, runs ``periods`` periods of it, then rests ``tail`` s. The other joints are at 0.
    ``friction(model, V)`` is the true robot's friction effort at velocities V (N, nv).
    Returns the recording and the noise σ of each sample's efforts (N, n)."""
    duration = lead_in + periods * trajectory.period + tail
    n_samples = int(round(duration * sensor.rate)) + 1
    nominal = np.arange(n_samples) / sensor.rate
    stamps = nominal + (rng.normal(0.0, sensor.jitter, n_samples) if sensor.jitter else 0.0)
    stamps = np.sort(stamps)

    def motion(t):
        phase = np.clip(t - lead_in, 0.0, periods * trajectory.period)
        q, qd, qdd = trajectory.evaluate(phase)
        moving = ((t >= lead_in) & (t <= lead_in + periods * trajectory.period))[:, None]
        return q, qd * moving, qdd * moving

    vi = true_model.velocity_indices(list(trajectory.joints))
    qi = true_model.position_indices(list(trajectory.joints))

    def true_effort(t):
        q, qd, qdd = motion(t)
        Q = np.zeros((len(t), true_model.nq))
        V = np.zeros((len(t), true_model.nv))
        A = np.zeros_like(V)
        Q[:, qi], V[:, vi], A[:, vi] = q, qd, qdd
        tau = rnea(true_model, Q, V, A) + friction(true_model, V)
        return tau[:, vi]

    sensors = sensor.sensors(true_model.effort_offset[vi])
    q, qd, _ = motion(stamps)
    q, effort, sigma = sensors.measure(q, true_effort(stamps - sensors.effort_delay), rng)
    recording = JointRecording.checked(trajectory.joints, stamps, q, effort, qd,
                                       source="synthetic recording")
    return recording, sigma
