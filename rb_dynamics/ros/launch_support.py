# SPDX-License-Identifier: Apache-2.0
"""What the package's launch files (launch/*.launch.py) share: the robot description, from a
``description_file`` launch argument (plain URDF or xacro) to the ``robot_description``
parameter. Needs launch and launch_ros (exec_depends in package.xml), as the launch files do."""

from launch.actions import DeclareLaunchArgument
from launch.substitutions import Command, FindExecutable, LaunchConfiguration, PathJoinSubstitution
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare


def description_file_argument() -> DeclareLaunchArgument:
    """The ``description_file`` launch argument, the bundled arm by default."""
    return DeclareLaunchArgument(
        "description_file",
        default_value=PathJoinSubstitution([FindPackageShare("rb_dynamics"), "urdf",
                                            "default_arm.urdf"]),
        description="URDF or xacro file of the robot")


def robot_description() -> ParameterValue:
    """``description_file`` run through xacro, handed over as a string parameter so that it is
    never parsed as YAML."""
    return ParameterValue(
        Command([FindExecutable(name="xacro"), " ", LaunchConfiguration("description_file")]),
        value_type=str)
