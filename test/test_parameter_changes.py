# SPDX-License-Identifier: Apache-2.0
"""A change of the control node's parameters across processes is one change: refused whole,
it changes nothing (docs/topics_services.md, docs/parameters.md), whichever of the node's
parts (the control law, contact, Cartesian impedance, the trajectory's tolerances) refuses it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pin_oracle import REAL_ROBOTS, arm_torques, rel_err, robots_dir
from rcl_interfaces.msg import ParameterType
from rcl_interfaces.srv import GetParameters
from ros_harness import control_node, fresh_name
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics.model import load_model

UR5 = Path(robots_dir(), REAL_ROBOTS["ur5"][0])
UR5_JOINTS = load_model(UR5).actuated_joint_names
UR5_LIMIT = load_model(UR5).effort_limit

# one valid change of the control law's with one of another part's that part refuses
REFUSED = {
    "contact": ({"kp": [50.0], "contact.reaction": "bogus"}, "contact.reaction"),
    "cartesian": ({"kp": [50.0], "mode": "impedance", "constraints.goal_time": 5.0,
                   "cartesian.translational_stiffness": [-1.0]},
                  "cartesian.translational_stiffness"),
}


def _values(node, names: list[str]) -> list:
    answer = node.call(GetParameters, "~/get_parameters", GetParameters.Request(names=names))
    return [v.double_array_value.tolist() if v.type == ParameterType.PARAMETER_DOUBLE_ARRAY
            else v.double_value if v.type == ParameterType.PARAMETER_DOUBLE
            else v.string_value for v in answer.values]


def test_a_refused_change_changes_nothing(tmp_path):
    """computed_torque holding a set-point away from the measured state: the effort depends on
    kp. kp 50 sent with a value another part refuses is answered successful=False naming that
    value, and the parameters and the effort answering the same state stay as they were (the
    code this was written against set kp, and the mode, before the other part refused: the
    largest effort moved by 36 % with contact's refusal, by 72 % with the Cartesian one)."""
    node = control_node(tmp_path, {"urdf_path": str(UR5), "mode": "computed_torque",
                                   "kp": [100.0], "kd": [20.0], "state_timeout": 10.0},
                        name=fresh_name("rb_dynamics_params"), state_qos=100)
    try:
        q = np.zeros(6)
        assert node.command_after(UR5_JOINTS, q) is not None, node.output()
        goal = np.array([0.2, -0.3, 0.4, 0.1, 0.2, 0.3])
        node.publish_matched(JointTrajectory, "~/joint_trajectory", JointTrajectory(
            joint_names=UR5_JOINTS, points=[JointTrajectoryPoint(positions=goal.tolist())]))
        expected = arm_torques(UR5, UR5_JOINTS, q, a=100.0 * goal, limit=UR5_LIMIT)
        assert node.wait_for(lambda: rel_err(node.command_after(UR5_JOINTS, q), expected)
                             < 1e-9, 10.0), node.output()
        before = node.command_after(UR5_JOINTS, q)
        names = sorted({name for change, _ in REFUSED.values() for name in change})
        kept = _values(node, names)
        for label, (change, bad) in REFUSED.items():
            result = node.set_parameters(**change)
            assert not result.successful and bad in result.reason, (label, result)
            assert _values(node, names) == kept, label
            after = node.command_after(UR5_JOINTS, q)
            change_of_effort = np.abs(after - before).max() / np.abs(before).max()
            print(f"\n{label}: refused change moved the effort by {100 * change_of_effort:.3g} %")
            assert np.abs(after - before).max() <= 1e-12, (label, before, after)
    finally:
        node.close()
