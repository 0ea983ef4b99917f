# SPDX-License-Identifier: Apache-2.0
"""An accepted parameter change reaches the controller that answers the states, also when a
new robot description is being swapped in meanwhile (the model loader builds and installs a
controller on a thread of its own). Real control nodes in this process, each in its own rclpy
context; the two threads are made to meet where they would race."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import rclpy
from rclpy.parameter import Parameter

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.ros.control_node.node import ControlNode

KP = 77.0  # a value the default gains are not
MEET_S = 0.5  # how long the first thread waits for the other one to get through


@pytest.fixture()
def node():
    context = rclpy.Context()
    rclpy.init(context=context)
    node = ControlNode(context=context, parameter_overrides=[
        Parameter("urdf_path", value=str(DEFAULT_URDF)),
        Parameter("mode", value="computed_torque")])
    try:
        deadline = time.monotonic() + 60.0
        while node.loop.controller is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert node.loop.controller is not None, node.model_loader.refused
        assert not np.allclose(node.loop.controller.law.kp, KP)
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def _reload(node: ControlNode) -> None:
    node.model_loader._install(str(DEFAULT_URDF), "the test", {})


def test_a_description_swapped_in_while_a_change_is_checked_gets_the_change(node):
    """The loader installs a new controller while kp is being checked: the controller that
    answers the states afterwards has the new kp (the change went to the one replaced)."""
    validate = node.cartesian.validate_parameters
    loader = threading.Thread(target=_reload, args=(node,))

    def validate_while_reloading(changes):
        loader.start()
        loader.join(MEET_S)  # the loader gets through here unless the change holds it off
        return validate(changes)

    node.cartesian.validate_parameters = validate_while_reloading
    before = node.loop.controller
    result = node.set_parameters([Parameter("kp", value=[KP])])[0]
    loader.join(60.0)
    assert result.successful, result.reason
    assert node.loop.controller is not before, node.model_loader.refused
    np.testing.assert_allclose(node.loop.controller.law.kp, KP)


def test_a_change_accepted_while_a_controller_is_built_is_built_into_it(node):
    """kp is set while the loader builds the controller of a new description: the controller
    installed has the new kp (it was built from the values before the change)."""
    build = node.model_loader.build_controller
    results, started = [], []
    setter = threading.Thread(target=lambda: results.extend(
        node.set_parameters([Parameter("kp", value=[KP])])))

    def build_while_setting(model, dynamics, changes):
        controller = build(model, dynamics, changes)
        if not started:
            started.append(True)
            setter.start()
            setter.join(MEET_S)  # the change gets through here unless the build holds it off
        return controller

    node.model_loader.build_controller = build_while_setting
    before = node.loop.controller
    _reload(node)
    setter.join(60.0)
    assert results and results[0].successful, results
    assert node.loop.controller is not before, node.model_loader.refused
    np.testing.assert_allclose(node.loop.controller.law.kp, KP)
