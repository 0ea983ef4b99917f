# SPDX-License-Identifier: Apache-2.0
"""The robot model: spatial algebra (``spatial``), joint models (``joints``), the kinematic
tree (``tree``: ``Model``, ``build_model``), the URDF reader (``urdf``: ``load_model``, on the
safe XML and number readers of ``xml_reading``), the ``<ros2_control>`` interfaces a URDF
declares (``ros2_control``) and the input checks (``checks``).

Needs only NumPy. Nothing here imports another layer of the package.
"""

from .checks import (
    check_choice,
    check_positive,
    check_rotational_inertia,
    finite_array,
    finite_vector,
    name_list,
    repeated_names,
)
from .joints import (
    JOINT_DIMENSIONS,
    ONE_DOF_KINDS,
    JointModel,
    jcalc,
    motion_subspace,
)
from .ros2_control import (
    COMMAND_FIELDS,
    EFFORT,
    POSITION,
    TOPIC_PLUGINS,
    VELOCITY,
    CommandLayout,
    HardwareSystem,
    Interface,
    JointCommand,
    JointInterfaces,
    command_layout,
    joint_command_modes,
    read_ros2_control,
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
from .tree import (
    COULOMB_SMOOTHING,
    DEFAULT_GRAVITY,
    MAX_BODIES,
    URDF_JOINT_KINDS,
    Frame,
    JointDescription,
    LinkDescription,
    Model,
    build_model,
)
from .urdf import (
    load_model,
)
from .xml_reading import (
    MAX_MAGNITUDE,
    MAX_URDF_BYTES,
    URDFError,
    parse_number,
    parse_numbers,
    parse_xml,
    read_source,
)

__all__ = [
    "COMMAND_FIELDS",
    "COULOMB_SMOOTHING",
    "CommandLayout",
    "DEFAULT_GRAVITY",
    "EFFORT",
    "Frame",
    "HardwareSystem",
    "Interface",
    "JOINT_DIMENSIONS",
    "JointCommand",
    "JointDescription",
    "JointInterfaces",
    "JointModel",
    "LinkDescription",
    "MAX_BODIES",
    "MAX_MAGNITUDE",
    "MAX_URDF_BYTES",
    "Model",
    "ONE_DOF_KINDS",
    "POSITION",
    "TOPIC_PLUGINS",
    "URDFError",
    "URDF_JOINT_KINDS",
    "VELOCITY",
    "build_model",
    "check_choice",
    "check_positive",
    "check_rotational_inertia",
    "command_layout",
    "crf",
    "crm",
    "finite_array",
    "finite_vector",
    "force_apply_transpose",
    "jcalc",
    "joint_command_modes",
    "load_model",
    "mcI",
    "motion_apply",
    "motion_subspace",
    "name_list",
    "parse_number",
    "parse_numbers",
    "parse_xml",
    "plux",
    "plux_inverse",
    "quat_to_matrix",
    "read_ros2_control",
    "repeated_names",
    "read_source",
    "rotation_about_axis",
    "rpy_to_matrix",
    "skew",
    "transform_parts",
]
