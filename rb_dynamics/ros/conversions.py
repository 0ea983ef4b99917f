# SPDX-License-Identifier: Apache-2.0
"""Between ROS messages and the model's vectors: by joint name, checked, rclpy-free.

Nothing here imports rclpy or message packages: messages are read through their fields
(``msg.joint_names``, ``wrench.force.x``), so every function is testable with plain Python
values. Errors are ``ConversionError`` (a ``ValueError``) whose message names the field.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rb_dynamics.control import MAX_TRAJECTORY_POINTS, TrajectoryPoint
from rb_dynamics.model import Model, finite_array, name_list, repeated_names

__all__ = [
    "MAX_WRENCHES",
    "ConversionError",
    "JointLayout",
    "from_seconds",
    "to_seconds",
    "trajectory_points",
    "wrench_to_array",
    "wrenches_by_link",
]

# External wrenches per request: a few per link is all a robot has
MAX_WRENCHES = 1000


class ConversionError(ValueError):
    """Input that cannot be mapped onto the model; the message names the field."""


def to_seconds(stamp: Any) -> float:
    """A builtin_interfaces Time or Duration (or rosgraph Clock's ``clock``) in seconds."""
    return stamp.sec + stamp.nanosec * 1e-9


def from_seconds(seconds: float, message: Any) -> Any:
    """Writes ``seconds`` into ``message`` (a builtin_interfaces Time or Duration, which has
    ``sec`` and ``nanosec``), to the nearest nanosecond; returns ``message``.

    The whole seconds are split off before scaling, so a stamp read by ``to_seconds`` comes
    back to the same nanosecond even at epoch magnitudes.
    """
    sec = math.floor(seconds)
    nanosec = int(round((seconds - sec) * 1e9))
    if nanosec >= 1_000_000_000:
        sec, nanosec = sec + 1, nanosec - 1_000_000_000
    message.sec, message.nanosec = int(sec), nanosec
    return message


def trajectory_points(points: Sequence[Any], field: str = "points") -> list[TrajectoryPoint]:
    """trajectory_msgs/JointTrajectoryPoint → TrajectoryPoint (empty arrays: not given; the
    effort is the feed-forward added to the law's)."""
    if len(points) > MAX_TRAJECTORY_POINTS:
        raise ConversionError(f"{field}: {len(points)} points; at most {MAX_TRAJECTORY_POINTS}")
    return [TrajectoryPoint(to_seconds(p.time_from_start), p.positions,
                            p.velocities if len(p.velocities) else None,
                            p.accelerations if len(p.accelerations) else None,
                            p.effort if len(p.effort) else None) for p in points]


class JointLayout:
    """Where the coordinates of the named joints sit in the model's q and v: the one joint-name
    lookup of the ROS layer.

    ``q_index[k]`` is the model q entry of the request's k-th position value, ``v_index[k]``
    the model v entry of its k-th velocity (also effort, acceleration) value. ``names`` must
    be known joints, each once (ConversionError naming ``field``); with ``every_joint`` every
    joint of the model, else any subset (the others are the neutral configuration
    and zero in ``positions``/``velocities``).
    """

    def __init__(self, model: Model, names: Sequence[str], field: str = "joint_names",
                 every_joint: bool = True):
        names = list(names)
        index = {name: k for k, name in enumerate(model.joint_names)}
        unknown = [n for n in names if n not in index]
        if unknown:
            hint = " (mimic joints follow their leader)" if set(unknown) & set(
                model.mimic_joints) else ""
            raise ConversionError(f"{field}: unknown joints {name_list(unknown)}{hint}; the "
                                  f"model's joints are {name_list(model.joint_names)}")
        repeated = repeated_names(names)
        if repeated:
            raise ConversionError(f"{field}: joint {repeated[0]!r} appears twice")
        given = set(names)
        missing = [n for n in model.joint_names if n not in given]
        if missing and every_joint:
            raise ConversionError(f"{field}: missing joints {name_list(missing)}")
        q_ends = [*model.joint_q_index[1:], model.nq]
        v_ends = [*model.joint_v_index[1:], model.nv]
        q_index: list[int] = []
        v_index: list[int] = []
        self.quaternions: list[tuple[str, int]] = []  # (joint, q index of qx)
        for name in names:
            j = index[name]
            if model.joint_kinds[j] == "free":
                self.quaternions.append((name, model.joint_q_index[j] + 3))
            q_index.extend(range(model.joint_q_index[j], q_ends[j]))
            v_index.extend(range(model.joint_v_index[j], v_ends[j]))
        self.model, self.names, self.field = model, names, field
        self.q_index = np.array(q_index, dtype=int)
        self.v_index = np.array(v_index, dtype=int)
        self.multi = len(q_index) != len(names) or len(v_index) != len(names)

    def _values(self, values: Sequence[float], field: str, size: int) -> np.ndarray:
        if len(values) != size:
            blocks = " (a free-flyer takes 7 positions and 6 velocities, a planar joint 3)" \
                if self.multi else ""
            raise ConversionError(f"{field} has {len(values)} values; {self.field} "
                                  f"{self.names} needs {size}{blocks}")
        return finite_array(values, field, error=ConversionError).reshape(-1)

    def positions(self, values: Sequence[float], field: str = "positions") -> np.ndarray:
        """The model's q; free-flyer quaternions normalised (zero norm: an error)."""
        q = self.model.neutral_configuration()
        q[self.q_index] = self._values(values, field, len(self.q_index))
        for name, qi in self.quaternions:
            norm = float(np.linalg.norm(q[qi:qi + 4]))
            if norm < 1e-9:
                raise ConversionError(f"{field}: the quaternion of joint {name!r} has zero norm")
            q[qi:qi + 4] /= norm
        return q

    def velocities(self, values: Sequence[float], field: str) -> np.ndarray:
        """The model's v (or a, τ) from one value per velocity coordinate; empty: zeros."""
        v = np.zeros(self.model.nv)
        if len(values):
            v[self.v_index] = self._values(values, field, len(self.v_index))
        return v

    def out(self, x: np.ndarray) -> list[float]:
        """A model-ordered v-sized vector in the request's order."""
        return x[self.v_index].tolist()


def wrench_to_array(wrench: Any) -> np.ndarray:
    """A geometry_msgs/Wrench as [fx, fy, fz, tx, ty, tz]."""
    f, t = wrench.force, wrench.torque
    return np.array([f.x, f.y, f.z, t.x, t.y, t.z], dtype=float)


def wrenches_by_link(
    links: Sequence[str],
    wrenches: Sequence[Any],
    known_links: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """``{link: [f; τ]}`` from parallel lists of link names and geometry_msgs/Wrench.

    Wrenches on the same link add up. ``known_links`` (when given) rejects unknown names here,
    with the field named, rather than deep inside the dynamics.
    """
    if len(links) != len(wrenches):
        raise ConversionError(
            f"wrenches has {len(wrenches)} entries but wrench_links has {len(links)}")
    if len(links) > MAX_WRENCHES:
        raise ConversionError(f"wrenches: {len(links)} entries; at most {MAX_WRENCHES}")
    known = set(known_links) if known_links is not None else None
    out: dict[str, np.ndarray] = {}
    for k, (link, wrench) in enumerate(zip(links, wrenches)):
        if known is not None and link not in known:
            raise ConversionError(f"wrench_links[{k}]: unknown link {link!r}")
        value = finite_array(wrench_to_array(wrench), f"wrenches[{k}]", error=ConversionError)
        out[link] = out[link] + value if link in out else value
    return out
