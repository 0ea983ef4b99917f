# SPDX-License-Identifier: Apache-2.0
"""One dynamics object per node: the control loop's law, the dynamics services and (in the
simulator) the steps all evaluate the same ``LiveDynamics``, which ends on the generated C
kernels. Real nodes in this process (their own rclpy context), no messages needed."""

from __future__ import annotations

import time

import pytest
import rclpy
from rclpy.parameter import Parameter

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import LiveDynamics
from rb_dynamics.dynamics.kernel_cache import _ckernels
from rb_dynamics.ros.control_node.node import ControlNode
from rb_dynamics.ros.simulator_node.node import SimulatorNode

pytestmark = pytest.mark.skipif(_ckernels is None, reason="no C kernels extension built")


@pytest.fixture()
def context():
    context = rclpy.Context()
    rclpy.init(context=context)
    yield context
    rclpy.shutdown(context=context)


def _until(condition, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)  # the model loads on the node's loader thread
    return condition()


def test_the_control_node_hands_one_dynamics_to_the_loop_and_the_services(context):
    node = ControlNode(context=context, parameter_overrides=[
        Parameter("urdf_path", value=str(DEFAULT_URDF))])
    try:
        assert _until(lambda: node.model_loader.dynamics is not None)
        dynamics = node.model_loader.dynamics
        assert isinstance(dynamics, LiveDynamics) and dynamics.wait(120.0)
        assert dynamics.kind == "c", dynamics.problem
        # the control law and the services (through the payload layer, no payload set)
        assert node.loop.controller.law.dynamics is dynamics
        assert node.payload.dynamics() is dynamics
        # its methods are the compiled kernels' own (taken over when they arrived)
        assert dynamics.kernels is not None and dynamics.rnea.__self__ is not dynamics
    finally:
        node.destroy_node()


def test_the_simulator_steps_the_dynamics_it_owns(context):
    node = SimulatorNode(context=context, parameter_overrides=[
        Parameter("urdf_path", value=str(DEFAULT_URDF))])
    try:
        assert node.dynamics.wait(120.0) and node.dynamics.kind == "c", node.dynamics.problem
        assert node.sim.dynamics is node.dynamics
    finally:
        node.destroy_node()
