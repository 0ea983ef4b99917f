# SPDX-License-Identifier: Apache-2.0
"""The rclpy private API the package reaches (``rb_dynamics.ros.rclpy_private``) is where it
expects it on the distribution this suite runs on: each adapter finds what it needs on real
rclpy nodes, so a distribution that moves it fails here rather than degrading a node quietly."""

from __future__ import annotations

import rclpy
from builtin_interfaces.msg import Time
from rclpy.lifecycle import LifecycleNode
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile

from rb_dynamics.ros.rclpy_private import (
    change_state_service,
    declare_qos_override_parameters,
    parameter_overrides,
)


def test_the_adapters_find_what_they_need_on_real_nodes():
    context = rclpy.Context()
    rclpy.init(context=context)
    nodes = []
    try:
        plain = rclpy.create_node("rclpy_private_plain", context=context, parameter_overrides=[
            Parameter("kp", value=[1.0, 2.0]),
            Parameter("qos_overrides./joint_states.subscription.depth", value=7)])
        lifecycle = LifecycleNode("rclpy_private_lifecycle", context=context)
        nodes += [plain, lifecycle]
        # the overrides a node was started with
        assert parameter_overrides(plain)["kp"].value == [1.0, 2.0]
        assert parameter_overrides(lifecycle) == {}
        # a lifecycle node's change_state service (its callback replaceable) and state machine
        found = change_state_service(lifecycle)
        assert found is not None
        service, machine = found
        assert callable(service.callback)
        _, state = machine.current_state
        assert state == "unconfigured"
        assert any(label == "configure" for _, label, *_ in machine.available_transitions)
        assert change_state_service(plain) is None
        # the qos_overrides parameters, declared and applied as create_subscription does
        qos = QoSProfile(depth=10)
        declare_qos_override_parameters(plain, "joint_states", qos)
        assert qos.depth == 7
        assert plain.get_parameter("qos_overrides./joint_states.subscription.depth").value == 7
        assert plain.has_parameter("qos_overrides./joint_states.subscription.reliability")
    finally:
        for node in nodes:
            node.destroy_node()
        rclpy.shutdown(context=context)


def test_a_clock_reader_keeps_the_nodes_clock_on_clock_messages_it_never_spins_for():
    """``ClockReader`` (through ``clock_subscription_on``): the node's clock follows its
    /clock (remapped, as a test rig or a second simulator does) while nothing spins the node,
    the node itself has no clock subscription, and its use_sim_time parameter still switches
    the clock back to the system's and on again."""
    import time

    from rosgraph_msgs.msg import Clock

    from rb_dynamics.ros.runtime import ClockReader

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("rclpy_private_clocked", context=context, parameter_overrides=[
        Parameter("use_sim_time", value=True)],
        cli_args=["--ros-args", "-r", "/clock:=/rclpy_private_clock"])
    source = rclpy.create_node("rclpy_private_clock_source", context=context)
    reader = ClockReader(node)
    try:
        assert not [s.topic_name for s in node.subscriptions if "clock" in s.topic_name]
        source.create_publisher(Clock, "/clock", 10).publish(Clock(clock=Time(sec=1000)))
        publisher = source.create_publisher(Clock, "/rclpy_private_clock", 10)

        def reaches(seconds: int) -> bool:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                publisher.publish(Clock(clock=Time(sec=seconds)))
                if node.get_clock().now().nanoseconds == seconds * 10**9:
                    return True
                time.sleep(0.02)
            return False

        assert reaches(42)
        assert reaches(7)  # back in time too: the override follows the messages
        node.set_parameters([Parameter("use_sim_time", value=False)])
        before = time.time_ns()  # the system's time on either side: no tolerance to choose
        now = node.get_clock().now().nanoseconds
        assert before <= now <= time.time_ns()
        node.set_parameters([Parameter("use_sim_time", value=True)])
        assert reaches(99)
    finally:
        reader.stop()
        source.destroy_node()
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_an_action_server_gets_the_clock_it_is_given_and_keeps_it():
    """``action_server_on_clock``: the server is built on the given clock (rcl_action times
    result expiry with it) and holds it, however the caller drops its own reference (the C
    side keeps a bare pointer); the node's own ``get_clock`` is not shadowed afterwards."""
    import gc

    from control_msgs.action import FollowJointTrajectory
    from rclpy.clock import Clock, ClockType

    from rb_dynamics.ros.rclpy_private import action_server_on_clock

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("rclpy_private_action", context=context)
    try:
        server = action_server_on_clock(node, Clock(clock_type=ClockType.STEADY_TIME),
                                        FollowJointTrajectory, "~/follow_joint_trajectory",
                                        execute_callback=lambda goal: None)
        gc.collect()
        assert server.rb_dynamics_clock.clock_type == ClockType.STEADY_TIME
        assert "get_clock" not in vars(node)
        assert node.get_clock().clock_type == ClockType.ROS_TIME
        server.destroy()
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
