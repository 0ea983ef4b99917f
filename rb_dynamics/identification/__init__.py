# SPDX-License-Identifier: Apache-2.0
"""Learning a robot's dynamics from data: payload identification, the mass, centre of mass and
rotational inertia of a payload from joint efforts measured at rest or in motion (``payload``).

Imports ``rb_dynamics.dynamics`` and ``rb_dynamics.model``.
"""

from .payload import (
    DEFAULT_NOISE_FLOOR,
    MAX_CONDITION,
    MAX_IDENTIFICATION_POSES,
    MIN_IDENTIFICATION_POSES,
    MIN_MASS_SIGNIFICANCE,
    IdentificationError,
    InertialEstimate,
    PayloadEstimate,
    identify_payload,
    identify_payload_inertia,
    suggest_identification_poses,
)

__all__ = [
    "DEFAULT_NOISE_FLOOR",
    "IdentificationError",
    "InertialEstimate",
    "MAX_CONDITION",
    "MAX_IDENTIFICATION_POSES",
    "MIN_IDENTIFICATION_POSES",
    "MIN_MASS_SIGNIFICANCE",
    "PayloadEstimate",
    "identify_payload",
    "identify_payload_inertia",
    "suggest_identification_poses",
]
