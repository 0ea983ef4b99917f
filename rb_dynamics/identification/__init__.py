# SPDX-License-Identifier: Apache-2.0
"""Learning a robot's dynamics from data: payload identification, the mass, centre of mass and
rotational inertia of a payload from joint efforts measured at rest or in motion (``payload``),
and the joint states recorded at rest and grouped into the poses the arm was held at
(``resting``).

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
from .resting import (
    END_MARGIN,
    MAX_REST_GAP,
    POSE_TOLERANCE,
    RESTING_CAPACITY,
    RestingSamples,
    rest_poses,
)

__all__ = [
    "DEFAULT_NOISE_FLOOR",
    "END_MARGIN",
    "IdentificationError",
    "InertialEstimate",
    "MAX_CONDITION",
    "MAX_IDENTIFICATION_POSES",
    "MAX_REST_GAP",
    "MIN_IDENTIFICATION_POSES",
    "MIN_MASS_SIGNIFICANCE",
    "POSE_TOLERANCE",
    "PayloadEstimate",
    "RESTING_CAPACITY",
    "RestingSamples",
    "identify_payload",
    "identify_payload_inertia",
    "rest_poses",
    "suggest_identification_poses",
]
