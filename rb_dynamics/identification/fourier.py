# SPDX-License-Identifier: Apache-2.0
"""Periodic joint trajectories as finite Fourier series [Swevers et al. 1997], and their fit.

Joint j of a ``FourierTrajectory`` with base pulsation ω = 2π/T and H harmonics:

    q_j(t) = q0_j + Σ_l a_jl/(lω) sin(lωt) − b_jl/(lω) cos(lωt)
    q̇_j(t) = Σ_l a_jl cos(lωt) + b_jl sin(lωt)
    q̈_j(t) = Σ_l lω (b_jl cos(lωt) − a_jl sin(lωt))

``fit_fourier`` fits such a series to sampled positions of one period (least squares), which
gives analytic velocities and accelerations of measured periodic data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FourierTrajectory", "fit_fourier"]


@dataclass(frozen=True, eq=False)
class FourierTrajectory:
    """``q0`` (n,), ``a`` and ``b`` (n, H) in rad/s (m/s for prismatic joints), ``period`` s."""

    joints: tuple[str, ...]
    period: float
    q0: np.ndarray
    a: np.ndarray
    b: np.ndarray

    @property
    def harmonics(self) -> int:
        return self.a.shape[1]

    def _phases(self, t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = 2.0 * np.pi / self.period * np.arange(1, self.harmonics + 1)
        phase = np.asarray(t, dtype=float)[:, None] * w[None, :]
        return np.sin(phase), np.cos(phase), w

    def evaluate(self, t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions, velocities, accelerations at times ``t`` (s), each (len(t), n)."""
        S, C, w = self._phases(t)
        q = self.q0[None, :] + S @ (self.a / w).T - C @ (self.b / w).T
        qd = C @ self.a.T + S @ self.b.T
        qdd = C @ (self.b * w).T - S @ (self.a * w).T
        return q, qd, qdd

    def scaled(self, scale: np.ndarray) -> FourierTrajectory:
        """The same motion with joint j's excursion about ``q0`` scaled by ``scale[j]``."""
        s = np.asarray(scale, dtype=float)[:, None]
        return FourierTrajectory(self.joints, self.period, self.q0, self.a * s, self.b * s)

    def to_dict(self) -> dict:
        return {"joints": list(self.joints), "period": self.period, "q0": self.q0.tolist(),
                "a": self.a.tolist(), "b": self.b.tolist()}

    @classmethod
    def from_dict(cls, data: dict) -> FourierTrajectory:
        return cls(tuple(data["joints"]), float(data["period"]),
                   np.asarray(data["q0"], dtype=float), np.asarray(data["a"], dtype=float),
                   np.asarray(data["b"], dtype=float))


def fit_fourier(t: np.ndarray, q: np.ndarray, period: float, harmonics: int
                ) -> FourierTrajectory:
    """The Fourier series of ``harmonics`` harmonics nearest (least squares) to positions ``q``
    (N, n) sampled at times ``t`` (N,) of one period ``period``. ValueError when there are
    fewer samples than coefficients."""
    t, q = np.asarray(t, dtype=float), np.asarray(q, dtype=float)
    if len(t) < 2 * harmonics + 1:
        raise ValueError(f"{len(t)} samples cannot determine {2 * harmonics + 1} Fourier "
                         "coefficients")
    w = 2.0 * np.pi / period * np.arange(1, harmonics + 1)
    phase = t[:, None] * w[None, :]
    A = np.hstack([np.ones((len(t), 1)), np.sin(phase) / w, -np.cos(phase) / w])
    coeffs, *_ = np.linalg.lstsq(A, q, rcond=None)
    H = harmonics
    return FourierTrajectory(("",) * q.shape[1], period, coeffs[0], coeffs[1:H + 1].T,
                             coeffs[H + 1:].T)
