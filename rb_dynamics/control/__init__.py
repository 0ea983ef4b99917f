# SPDX-License-Identifier: Apache-2.0
"""Control without ROS: the control law (gravity compensation, computed torque), trajectory
sampling, tolerances and the feasibility of a trajectory against the URDF's limits.

Imports ``rb_dynamics.dynamics`` and ``rb_dynamics.model``.
"""

from .controller import (
    CONTROL_MODES,
    MAX_TRAJECTORY_POINTS,
    ControlLaw,
    ControllerError,
    ControlOutput,
    JointController,
    TrajectoryError,
    TrajectoryPoint,
    TrajectorySampler,
    clamp_effort,
    friction_compensation,
    position_error,
    wrap_angle,
)
from .feasibility import (
    DEFAULT_SAMPLES_PER_SEGMENT,
    MAX_CHECKED_STATES,
    MAX_SAMPLES_PER_SEGMENT,
    FeasibilityReport,
    Violation,
    feasibility_report,
    trajectory_efforts,
)

__all__ = [
    "CONTROL_MODES",
    "ControlLaw",
    "ControlOutput",
    "ControllerError",
    "DEFAULT_SAMPLES_PER_SEGMENT",
    "FeasibilityReport",
    "JointController",
    "MAX_CHECKED_STATES",
    "MAX_SAMPLES_PER_SEGMENT",
    "MAX_TRAJECTORY_POINTS",
    "TrajectoryError",
    "TrajectoryPoint",
    "TrajectorySampler",
    "Violation",
    "clamp_effort",
    "feasibility_report",
    "friction_compensation",
    "position_error",
    "trajectory_efforts",
    "wrap_angle",
]
