# SPDX-License-Identifier: Apache-2.0
"""The robot model: spatial algebra, joint models, the kinematic tree (``Model``), the URDF
reader and the ``<ros2_control>`` interfaces it declares, and the input checks.

Needs only NumPy. Nothing here imports another layer of the package.
"""

from .checks import (
    check_rotational_inertia,
    finite_array,
)
from .hardware_interfaces import (
    COMMAND_FIELDS,
    TOPIC_PLUGINS,
    CommandLayout,
    HardwareSystem,
    Interface,
    JointCommand,
    JointInterfaces,
    command_layout,
    joint_command_modes,
    read_ros2_control,
)
from .joints import (
    JOINT_DIMENSIONS,
    JointModel,
    jcalc,
    motion_subspace,
)
from .spatial import (
    crf,
    crm,
    force_apply_transpose,
    mcI,
    motion_apply,
    plux,
    plux_inverse,
    quat_to_matrix,
    rotation_about_axis,
    rpy_to_matrix,
    skew,
    transform_parts,
)
from .urdf import (
    DEFAULT_GRAVITY,
    Frame,
    Model,
    URDFError,
    load_model,
)

__all__ = [
    "COMMAND_FIELDS",
    "CommandLayout",
    "DEFAULT_GRAVITY",
    "Frame",
    "HardwareSystem",
    "Interface",
    "JOINT_DIMENSIONS",
    "JointCommand",
    "JointInterfaces",
    "JointModel",
    "Model",
    "TOPIC_PLUGINS",
    "URDFError",
    "check_rotational_inertia",
    "command_layout",
    "crf",
    "crm",
    "finite_array",
    "force_apply_transpose",
    "jcalc",
    "joint_command_modes",
    "load_model",
    "mcI",
    "motion_apply",
    "motion_subspace",
    "plux",
    "plux_inverse",
    "quat_to_matrix",
    "read_ros2_control",
    "rotation_about_axis",
    "rpy_to_matrix",
    "skew",
    "transform_parts",
]
