# SPDX-License-Identifier: Apache-2.0
"""The trajectory action's messages, filled from the control loop's arrays:
FollowJointTrajectory feedback and control_msgs/JointTrajectoryControllerState.

The messages are passed in (this module imports no message package: control_msgs is optional)
and their double arrays are assigned as ``array.array``, which a message takes without a
conversion per element.
"""

from __future__ import annotations

import array
from typing import Any

import numpy as np

from rb_dynamics.control import ControlOutput, JointController, TrajectorySampler
from rb_dynamics.ros.conversions import from_seconds

from .goal_tracking import GoalTracker

__all__ = ["fill_controller_state", "fill_feedback", "new_controller_state"]


def fill_feedback(feedback: Any, goal: GoalTracker) -> None:
    """A FollowJointTrajectory.Feedback from the goal's last checked command (``goal.latest``,
    which must be set): header stamp, joint_names, desired, actual and error (positions
    wrapped on continuous joints, velocities)."""
    t, q_d, v_d, a_d, q, v, e_q, e_v = goal.latest
    index = goal.controller.index
    feedback.joint_names = goal.controller.joints
    from_seconds(t, feedback.header.stamp)
    since_start = t - goal.sampler.start_time
    _fill(feedback.desired, since_start, q_d[index], v_d[index], a_d[index])
    _fill(feedback.actual, since_start, q[index], v[index])
    _fill(feedback.error, since_start, e_q, e_v)


def fill_controller_state(msg: Any, t: float, controller: JointController,
                          sampler: TrajectorySampler | None, q: np.ndarray, v: np.ndarray,
                          reference: tuple | None, out: ControlOutput) -> None:
    """A JointTrajectoryControllerState for the command ``out`` computed at the state (q, v)
    stamped ``t`` against ``reference`` (q_d, q̇_d, q̈_d; None in gravity compensation: empty
    reference and error)."""
    index = controller.index
    if list(msg.joint_names) != controller.joints:  # a new model
        msg.joint_names = controller.joints
    from_seconds(t, msg.header.stamp)
    msg.feedback.positions, msg.feedback.velocities = _doubles(q[index]), _doubles(v[index])
    r, e = msg.reference, msg.error
    if reference is None:  # gravity compensation: no reference
        r.positions = r.velocities = r.accelerations = e.positions = e.velocities = \
            _doubles(())
    else:
        q_d, v_d, a_d = reference
        r.positions, r.velocities = _doubles(q_d[index]), _doubles(v_d[index])
        r.accelerations = _doubles(a_d[index])
        e.positions = _doubles(out.position_error)
        e.velocities = _doubles(v_d[index] - v[index])
    since = t - sampler.start_time if sampler is not None and reference is not None else 0.0
    from_seconds(max(since, 0.0), r.time_from_start)
    from_seconds(max(since, 0.0), e.time_from_start)
    msg.output.effort = _doubles(out.effort)


def _doubles(values: Any) -> array.array:
    """A float64 array.array, which a message's double sequence takes without a copy per
    element."""
    out = array.array("d")
    out.frombytes(np.ascontiguousarray(values, dtype=float).tobytes())
    return out


def _fill(point: Any, t_from_start: float | None, *arrays: np.ndarray) -> None:
    """positions, velocities, accelerations of a JointTrajectoryPoint (as many as given)."""
    for name, values in zip(("positions", "velocities", "accelerations"), arrays):
        setattr(point, name, _doubles(values))
    if t_from_start is not None:
        from_seconds(max(t_from_start, 0.0), point.time_from_start)


def new_controller_state(message_class: type) -> Any:
    """An empty control_msgs/JointTrajectoryControllerState of ``message_class``, its speed
    scaling 1 where the interface has that field (control_msgs ≥ 5: Jazzy on; Humble's class
    refuses the name as a constructor argument or an attribute)."""
    message = message_class()
    if "speed_scaling_factor" in message.get_fields_and_field_types():
        message.speed_scaling_factor = 1.0
    return message
