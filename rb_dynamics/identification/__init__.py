# SPDX-License-Identifier: Apache-2.0
"""Learning a robot's dynamics from data.

- the whole robot: ``regressor`` (τ = Y θ: inertial parameters
  of every body, armature, friction, effort offsets), ``base_parameters`` (the combinations
  efforts determine), ``fourier`` and ``excitation`` (the planned periodic motion),
  ``measurements`` and ``bags`` (joint states recorded, read from rosbag2 without ROS),
  ``preprocessing`` (periods averaged, noise, filters, delay), ``base_fit`` (WLS, validation),
  ``consistency`` (a physically consistent set by SDP), ``results`` and ``pipeline`` (the
  corrected URDF, overlay, report and plot), ``synthetic`` (a known robot's measurements, the
  truth of tests and benchmarks), ``optional`` (the extra's packages, imported lazily);
- payloads: ``payload`` (mass, COM and inertia of a payload from efforts at rest or in
  motion) and ``resting`` (joint states at rest grouped into the poses the arm was held at).

Imports ``rb_dynamics.dynamics`` and ``rb_dynamics.model``; ``rosbags``, ``cvxpy`` and
``clarabel`` only inside the functions that need them.
"""


from .bags import (
    JOINT_STATE_TYPE,
    MAX_METADATA_BYTES,
    JointStateBagWriter,
    bag_folders,
    read_joint_states,
    state_capacity,
)
from .base_fit import (
    MAX_CONDITION_FIT,
    BaseFit,
    Validation,
    fit_base_parameters,
    scaled_by_validation,
    validate,
)
from .base_parameters import (
    RANK_TOLERANCE,
    BaseParameters,
    base_parameters,
    random_states,
)
from .consistency import (
    ConsistentFit,
    consistent_parameters,
    pseudo_inertia,
)
from .excitation import (
    DEFAULT_EVALUATIONS,
    MAX_HARMONICS,
    ExcitationPlan,
    excitation_limits,
    plan_excitation,
)
from .fourier import (
    FourierTrajectory,
    fit_fourier,
)
from .measurements import (
    MIN_SAMPLES,
    JointRecording,
    RecordingError,
)
from .optional import (
    IDENTIFICATION_EXTRA,
    MissingDependency,
    require,
)
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
from .pipeline import (
    MAX_VALIDATION_RATIO,
    OUTPUTS,
    Identification,
    check_outputs,
    identification_report,
    identify,
    next_round,
    next_round_reason,
    poor_fit,
    write_identification,
)
from .plan_files import (
    GOAL_STEP,
    PLAN_FORMAT,
    check_plan_model,
    excitation_goal,
    goal_points,
    model_fingerprint,
    plan_report,
    read_plan,
    write_plan,
)
from .preprocessing import (
    LOCAL_WINDOW,
    MAX_HOLE_SAMPLES,
    MIN_COVERAGE,
    OUTLIER_SIGMAS,
    Execution,
    LocalMotion,
    PeriodicData,
    align,
    execution,
    local_motion,
    low_pass,
    periodic_data,
)
from .regressor import (
    JOINT_TERMS,
    MAX_REGRESSOR_BYTES,
    ParameterLayout,
    available_memory,
    body_parameters,
    spatial_inertia_from_parameters,
)
from .resting import (
    END_MARGIN,
    MAX_REST_GAP,
    POSE_TOLERANCE,
    RESTING_CAPACITY,
    RestingSamples,
    rest_poses,
)
from .results import (
    corrected_urdf,
    identified_model,
    identified_overlay,
    own_link_inertias,
    plot_validation,
)
from .synthetic import (
    SensorModel,
    perturbed_model,
    sign_law_friction,
    synthetic_recording,
)

__all__ = [
    "DEFAULT_EVALUATIONS",
    "DEFAULT_NOISE_FLOOR",
    "END_MARGIN",
    "GOAL_STEP",
    "IDENTIFICATION_EXTRA",
    "JOINT_STATE_TYPE",
    "JOINT_TERMS",
    "LOCAL_WINDOW",
    "MAX_CONDITION",
    "MAX_CONDITION_FIT",
    "MAX_HARMONICS",
    "MAX_HOLE_SAMPLES",
    "MAX_IDENTIFICATION_POSES",
    "MAX_METADATA_BYTES",
    "MAX_REGRESSOR_BYTES",
    "MAX_REST_GAP",
    "MAX_VALIDATION_RATIO",
    "MIN_COVERAGE",
    "MIN_IDENTIFICATION_POSES",
    "MIN_MASS_SIGNIFICANCE",
    "MIN_SAMPLES",
    "OUTLIER_SIGMAS",
    "OUTPUTS",
    "PLAN_FORMAT",
    "POSE_TOLERANCE",
    "RANK_TOLERANCE",
    "RESTING_CAPACITY",
    "BaseFit",
    "BaseParameters",
    "ConsistentFit",
    "ExcitationPlan",
    "Execution",
    "FourierTrajectory",
    "Identification",
    "IdentificationError",
    "InertialEstimate",
    "JointRecording",
    "JointStateBagWriter",
    "LocalMotion",
    "MissingDependency",
    "ParameterLayout",
    "PayloadEstimate",
    "PeriodicData",
    "RecordingError",
    "RestingSamples",
    "SensorModel",
    "Validation",
    "align",
    "available_memory",
    "bag_folders",
    "base_parameters",
    "body_parameters",
    "check_outputs",
    "check_plan_model",
    "consistent_parameters",
    "corrected_urdf",
    "excitation_goal",
    "excitation_limits",
    "execution",
    "fit_base_parameters",
    "fit_fourier",
    "goal_points",
    "identification_report",
    "identified_model",
    "identified_overlay",
    "identify",
    "identify_payload",
    "identify_payload_inertia",
    "local_motion",
    "low_pass",
    "model_fingerprint",
    "own_link_inertias",
    "periodic_data",
    "perturbed_model",
    "plan_excitation",
    "plan_report",
    "plot_validation",
    "next_round",
    "next_round_reason",
    "poor_fit",
    "pseudo_inertia",
    "random_states",
    "read_joint_states",
    "read_plan",
    "require",
    "rest_poses",
    "scaled_by_validation",
    "sign_law_friction",
    "spatial_inertia_from_parameters",
    "state_capacity",
    "suggest_identification_poses",
    "synthetic_recording",
    "validate",
    "write_identification",
    "write_plan",
]
