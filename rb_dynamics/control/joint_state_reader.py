# SPDX-License-Identifier: Apache-2.0
"""Joint states by name into the model's coordinates: what a controller (and the observer
beside it) reads from a driver's sensor_msgs/JointState, without ROS."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rb_dynamics.model import Model, name_list

from .law import ControllerError
from .velocity import MissingVelocity

__all__ = ["JointStateReader"]


class JointStateReader:
    """Joint states by name → (q, q̇) in model order; extra joints are ignored. The columns
    found for a list of names are kept for the next state (a driver sends the same names
    every time); every message is checked. A state without velocities goes to
    ``missing_velocity`` (default: refused)."""

    def __init__(self, model: Model, missing_velocity: MissingVelocity | None = None):
        self.model = model
        self.missing_velocity = missing_velocity or MissingVelocity()
        self.state_index = dict(zip(model.joint_names, model.joint_q_index))
        self._columns: tuple[list[str], tuple[np.ndarray, np.ndarray] | None] | None = None

    def read(self, names: Sequence[str], positions: Sequence[float],
             velocities: Sequence[float], t: float = 0.0, max_gap: float = math.inf
             ) -> tuple[np.ndarray, np.ndarray | None]:
        """(q, q̇) as new arrays; ControllerError for lengths that do not match, repeated or
        missing joints and values that are not finite. Without velocities q̇ is
        ``missing_velocity``'s for the instant ``t`` (s; states further apart than ``max_gap``
        s start its estimate again): None while it has none, ControllerError if refused."""
        if len(positions) != len(names):
            raise ControllerError(
                f"joint_states: {len(names)} names but {len(positions)} positions"
            )
        if len(velocities) not in (0, len(names)):
            raise ControllerError(
                f"joint_states: {len(names)} names but {len(velocities)} velocities"
            )
        columns = self._state_columns(names)
        if columns is None:  # the model's joints, in its order: copied as they are
            q = np.array(positions, dtype=float)
            v = np.array(velocities, dtype=float) if len(velocities) else np.zeros(self.model.nv)
        else:
            rows, columns = columns
            q = np.zeros(self.model.nq)
            v = np.zeros(self.model.nv)
            q[columns] = np.asarray(positions, dtype=float)[rows]
            if len(velocities):
                v[columns] = np.asarray(velocities, dtype=float)[rows]
        if not (math.isfinite(q.sum()) and math.isfinite(v.sum())):
            raise ControllerError("joint_states: NaN or inf in positions or velocities")
        if not len(velocities):
            return q, self.missing_velocity.velocity(q, t, max_gap)
        return q, v

    def model_order(self, names: Sequence[str], values: Sequence[float]) -> np.ndarray:
        """Per-joint ``values`` of a joint state with these ``names`` (its efforts, say) over
        the model's coordinates, through the columns ``read`` found (call it first): the same
        ControllerError for names that do not fit. A new array."""
        columns = self._state_columns(names)
        if columns is None:
            return np.array(values, dtype=float)
        out = np.zeros(self.model.nv)
        out[columns[1]] = np.asarray(values, dtype=float)[columns[0]]
        return out

    def _state_columns(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """(entries of a joint state, the model coordinates they fill) for a list of names,
        None when they are the model's joints in its order."""
        cached = self._columns
        if cached is not None and cached[0] == names:
            return cached[1]
        if len(set(names)) != len(names):
            raise ControllerError("joint_states: repeated joint names")
        # other joints of a bigger robot, or a mimic joint we derive ourselves, are skipped
        pairs = [(k, self.state_index[name]) for k, name in enumerate(names)
                 if name in self.state_index]
        if len(pairs) != len(self.state_index):
            seen = set(names)
            missing = [n for n in self.model.joint_names if n not in seen]
            raise ControllerError(f"joint_states: missing joints {name_list(missing)}")
        rows = np.array([k for k, _ in pairs], dtype=int)
        columns = np.array([index for _, index in pairs], dtype=int)
        in_order = len(names) == self.model.nq and np.array_equal(columns, np.arange(len(names)))
        self._columns = (list(names), None if in_order else (rows, columns))
        return self._columns[1]
