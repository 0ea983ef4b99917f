# SPDX-License-Identifier: Apache-2.0
"""Efforts within the URDF's effort limits: the one clamp.

Every place that bounds an effort to ±(its joint's effort limit) calls ``clamp_effort``: the
controller's commands, the simulator's and the simulated drives' efforts, the soft limiter's
damping bounds. The limit a caller passes is its own choice of ``Model.effort_limit`` (its
joints, scaled by the controller's ``effort_scale``); the clamp is the same everywhere.
"""

from __future__ import annotations

import numpy as np

__all__ = ["clamp_effort", "clamp_effort_with_mask"]


def clamp_effort(tau, limit, out: np.ndarray | None = None, *,
                 lower: np.ndarray | None = None) -> np.ndarray:
    """τ clamped to [−limit, limit] entry by entry (``limit`` ≥ 0, broadcast against τ; inf
    where unbounded); NaN stays NaN. Written into ``out`` when given (it may be ``tau``
    itself), else into a new array. ``lower`` is −limit when the caller keeps it: a loop that
    clamps every state makes it once instead of per call."""
    if lower is None:
        lower = np.negative(limit)
    return np.minimum(np.maximum(tau, lower, out=out), limit, out=out)


def clamp_effort_with_mask(tau, limit) -> tuple[np.ndarray, np.ndarray]:
    """(``clamp_effort(tau, limit)``, the mask of the entries the clamp changed): for callers
    that report which joints were clamped."""
    clamped = clamp_effort(tau, limit)
    return clamped, clamped != tau
