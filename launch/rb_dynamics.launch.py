# SPDX-License-Identifier: Apache-2.0
"""rb_dynamics on a real arm (or any robot): the control node with its description and config.

    ros2 launch rb_dynamics rb_dynamics.launch.py description_file:=/path/robot.urdf.xacro \
        command_topic:=/effort_controller/commands mode:=gravity_compensation

The description (plain URDF or xacro) is run through xacro and handed over as a string
parameter, so it is never parsed as YAML.
"""

from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

from launch import LaunchDescription
from rb_dynamics.ros.launch_support import description_file_argument, robot_description


def generate_launch_description() -> LaunchDescription:
    share = FindPackageShare("rb_dynamics")
    arguments = [
        description_file_argument(),
        DeclareLaunchArgument(
            "mode", default_value="gravity_compensation",
            description="gravity_compensation or computed_torque"),
        DeclareLaunchArgument(
            "config", default_value=PathJoinSubstitution([share, "config", "rb_dynamics.yaml"]),
            description="parameter file (gains, limits, timeouts)"),
        DeclareLaunchArgument(
            "joint_states_topic", default_value="/joint_states",
            description="where the robot driver publishes sensor_msgs/JointState"),
        DeclareLaunchArgument(
            "command_topic", default_value="/effort_controller/commands",
            description="the effort controller's std_msgs/Float64MultiArray input"),
        DeclareLaunchArgument("use_sim_time", default_value="false"),
    ]
    description = robot_description()
    node = Node(
        package="rb_dynamics",
        executable="rb_dynamics_node",
        name="rb_dynamics",
        output="screen",
        parameters=[
            LaunchConfiguration("config"),
            {
                "robot_description": description,
                "mode": LaunchConfiguration("mode"),
                "use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"),
                                               value_type=bool),
            },
        ],
        remappings=[
            ("joint_states", LaunchConfiguration("joint_states_topic")),
            ("~/effort_commands", LaunchConfiguration("command_topic")),
        ],
    )
    return LaunchDescription([*arguments, node])
