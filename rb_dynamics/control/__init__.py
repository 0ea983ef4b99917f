# SPDX-License-Identifier: Apache-2.0
"""Control without ROS: the control law, gravity compensation, computed torque and
impedance (``law``); a link held at a pose by a spring and damper in space
(``cartesian``); joint trajectories, their spline and sampler (``trajectory``);
``JointController``, mapped by joint name (``joint_controller``), reading joint states by
name (``joint_state_reader``); a controller's command bounds and those of ros2_control's soft
joint limits (``limits``); joint velocities from positions
(``velocity``); the feasibility of a trajectory against the URDF's limits (``feasibility``);
the external efforts a robot feels, from the generalised momentum (``momentum_observer``), and
collisions detected on them (``collision``); a dynamics overlay checked against the robot and
the command it changes (``overlay_checks``); what the drive adds to a command itself and what
its reported effort contains (``drive``).

Imports ``rb_dynamics.dynamics`` and ``rb_dynamics.model``.
"""

from .cartesian import (
    CARTESIAN_FRAMES,
    CartesianGains,
    CartesianImpedance,
    CartesianState,
    critical_damping,
    pose_error,
    step_toward,
)
from .collision import REACTIONS, Collision, CollisionDetector
from .drive import DRIVE_SETTINGS, DriveConventions, rest_mismatch
from .feasibility import (
    DEFAULT_SAMPLES_PER_SEGMENT,
    MAX_CHECKED_STATES,
    MAX_SAMPLES_PER_SEGMENT,
    FeasibilityReport,
    Violation,
    feasibility_report,
    trajectory_efforts,
)
from .joint_controller import ControlOutput, JointController
from .joint_state_reader import JointStateReader
from .law import (
    CONTROL_MODES,
    REFERENCE_MODES,
    ControlLaw,
    ControllerError,
    check_gains,
    position_error,
    wrap_angle,
)
from .limits import (
    POSITION_BOUNDS_TOLERANCE,
    SOFT_LIMIT_REACH_VELOCITY,
    CommandBounds,
    EffortLimiter,
    bound_effort,
    soft_limit_effort_bounds,
)
from .momentum_observer import EFFORT_TIMINGS, MomentumObserver
from .overlay_checks import (
    ARMATURE_FACTOR,
    MAX_COMMAND_STEP,
    command_step_problem,
    overlay_problem,
)
from .trajectory import (
    MAX_TRAJECTORY_POINTS,
    TrajectoryError,
    TrajectoryPoint,
    TrajectorySampler,
    check_point_field,
    evaluate_spline,
    shortest_way_start,
    spline_coefficients,
)
from .velocity import MISSING_VELOCITY, MissingVelocity, VelocityFromPositions

__all__ = [
    "ARMATURE_FACTOR",
    "CARTESIAN_FRAMES",
    "CartesianGains",
    "CartesianImpedance",
    "CartesianState",
    "critical_damping",
    "pose_error",
    "step_toward",
    "CONTROL_MODES",
    "Collision",
    "CollisionDetector",
    "EFFORT_TIMINGS",
    "ControlLaw",
    "ControlOutput",
    "ControllerError",
    "DEFAULT_SAMPLES_PER_SEGMENT",
    "DRIVE_SETTINGS",
    "DriveConventions",
    "EffortLimiter",
    "FeasibilityReport",
    "JointController",
    "JointStateReader",
    "CommandBounds",
    "MAX_CHECKED_STATES",
    "MAX_COMMAND_STEP",
    "MAX_SAMPLES_PER_SEGMENT",
    "MISSING_VELOCITY",
    "MissingVelocity",
    "MAX_TRAJECTORY_POINTS",
    "MomentumObserver",
    "POSITION_BOUNDS_TOLERANCE",
    "REACTIONS",
    "REFERENCE_MODES",
    "SOFT_LIMIT_REACH_VELOCITY",
    "TrajectoryError",
    "TrajectoryPoint",
    "TrajectorySampler",
    "VelocityFromPositions",
    "Violation",
    "bound_effort",
    "check_gains",
    "check_point_field",
    "command_step_problem",
    "evaluate_spline",
    "feasibility_report",
    "overlay_problem",
    "position_error",
    "rest_mismatch",
    "shortest_way_start",
    "soft_limit_effort_bounds",
    "spline_coefficients",
    "trajectory_efforts",
    "wrap_angle",
]
