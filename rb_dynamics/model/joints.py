# SPDX-License-Identifier: Apache-2.0
"""Joint models (Featherstone's ``jcalc``).

Every joint here has a constant motion subspace S in successor coordinates, so the velocity
product term c_J = Ṡ q̇ is zero ([F08] Table 4.1 and Example 4.5; docs/conventions.md):

- ``revolute``  q = [θ], S = [a; 0]; URDF ``continuous`` joints are revolute without limits.
- ``prismatic`` q = [d], S = [0; a].
- ``planar``    q = [x, y, θ] (translation in the predecessor's joint plane, then rotation about
  its normal), v = [vx, vy, ω] with the linear part in successor coordinates.
- ``free``      q = [x, y, z, qx, qy, qz, qw] (position in the predecessor, unit quaternion),
  v = [v_linear, ω] in successor coordinates (Pinocchio's LOCAL, ROS twist order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .spatial import plux, quat_to_matrix, rotation_about_axis

__all__ = ["JOINT_DIMENSIONS", "ONE_DOF_KINDS", "JointModel", "jcalc", "motion_subspace"]

JOINT_DIMENSIONS = {"revolute": (1, 1), "prismatic": (1, 1), "planar": (3, 3), "free": (7, 6)}
# the kinds with one coordinate (one entry in q and in v): what a joint-space controller drives
ONE_DOF_KINDS = ("revolute", "prismatic")


@dataclass(frozen=True)
class JointModel:
    """A joint's type and axis (its successor-frame motion subspace follows)."""
    kind: str
    axis: np.ndarray  # unit vector in the joint frame (the planar joint's normal is its z axis)

    @property
    def nq(self) -> int:
        return JOINT_DIMENSIONS[self.kind][0]

    @property
    def nv(self) -> int:
        return JOINT_DIMENSIONS[self.kind][1]


def motion_subspace(joint: JointModel) -> np.ndarray:
    """The constant 6×nv motion subspace S of a joint, in successor coordinates."""
    S = np.zeros((6, joint.nv))
    if joint.kind == "revolute":
        S[:3, 0] = joint.axis
    elif joint.kind == "prismatic":
        S[3:, 0] = joint.axis
    elif joint.kind == "planar":
        S[3, 0] = 1.0
        S[4, 1] = 1.0
        S[2, 2] = 1.0
    elif joint.kind == "free":
        S[3:, :3] = np.eye(3)
        S[:3, 3:] = np.eye(3)
    else:
        raise ValueError(f"unknown joint kind {joint.kind!r}")
    return S


def jcalc(joint: JointModel, qj: np.ndarray) -> np.ndarray:
    """Joint transform X_J(q) from the joint's predecessor frame to its successor frame.

    ``qj`` has shape (..., nq); the result has shape (..., 6, 6).
    """
    if joint.kind == "revolute":
        # Rotating the successor by R about a maps coordinates with E = Rᵀ.
        E = np.swapaxes(rotation_about_axis(joint.axis, qj[..., 0]), -1, -2)
        return plux(E, np.zeros(3))
    if joint.kind == "prismatic":
        return plux(np.eye(3), qj[..., 0:1] * joint.axis)
    if joint.kind == "planar":
        E = np.swapaxes(rotation_about_axis(np.array([0.0, 0.0, 1.0]), qj[..., 2]), -1, -2)
        r = np.zeros(qj.shape[:-1] + (3,))
        r[..., 0] = qj[..., 0]
        r[..., 1] = qj[..., 1]
        return plux(E, r)
    if joint.kind == "free":
        quat = qj[..., 3:7] / np.linalg.norm(qj[..., 3:7], axis=-1, keepdims=True)
        return plux(np.swapaxes(quat_to_matrix(quat), -1, -2), qj[..., 0:3])
    raise ValueError(f"unknown joint kind {joint.kind!r}")
