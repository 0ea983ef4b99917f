# SPDX-License-Identifier: Apache-2.0
"""The closed-loop demo: simulator + controller + reference publisher on the bundled arm.

    ros2 launch rb_dynamics demo.launch.py [description_file:=...] [mode:=computed_torque]

The simulator publishes /clock and everyone runs on sim time; the controller's commands are
remapped onto the simulator's input.
"""

from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from launch import LaunchDescription
from rb_dynamics.ros.launch_support import description_file_argument, robot_description


def generate_launch_description() -> LaunchDescription:
    share = FindPackageShare("rb_dynamics")
    arguments = [
        description_file_argument(),
        DeclareLaunchArgument("mode", default_value="computed_torque"),
    ]
    description = robot_description()
    simulator = Node(
        package="rb_dynamics", executable="rb_simulator", name="rb_simulator", output="screen",
        parameters=[PathJoinSubstitution([share, "config", "simulator.yaml"]),
                    {"robot_description": description, "publish_clock": True}])
    controller = Node(
        package="rb_dynamics", executable="rb_dynamics_node", name="rb_dynamics", output="screen",
        parameters=[PathJoinSubstitution([share, "config", "rb_dynamics.yaml"]),
                    {"robot_description": description, "mode": LaunchConfiguration("mode"),
                     "friction_compensation": True, "use_sim_time": True,
                     # rb_reference starts its reference where it first saw the arm, which may
                     # have sagged before this node holds it: taken as JTC takes it (at once)
                     "refuse_infeasible_trajectories": False}],
        remappings=[("~/effort_commands", "/rb_simulator/commands")])
    reference = Node(
        package="rb_dynamics", executable="rb_reference", name="rb_reference", output="screen",
        parameters=[{"robot_description": description, "use_sim_time": True}])
    return LaunchDescription([*arguments, simulator, controller, reference])
