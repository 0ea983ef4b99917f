# SPDX-License-Identifier: Apache-2.0
"""Spatial (6-D) vector algebra in Featherstone's conventions.

Motion vectors are [angular; linear], force vectors [moment; force]. A Plücker transform
``X = plux(E, r)`` maps motion vectors from frame A to frame B, where B is at position r
(A coordinates) and E rotates A coordinates into B coordinates. Every function broadcasts over
leading axes, so the same code serves one state and a batch of N states.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "crf",
    "crm",
    "force_apply_transpose",
    "mcI",
    "motion_apply",
    "plux",
    "plux_inverse",
    "quat_to_matrix",
    "rotation_about_axis",
    "rotation_exp",
    "rotation_log",
    "rpy_to_matrix",
    "skew",
    "transform_parts",
]


def skew(v: np.ndarray) -> np.ndarray:
    """The 3×3 matrix v× with (v×) w = v × w."""
    v = np.asarray(v, dtype=float)
    out = np.zeros(v.shape[:-1] + (3, 3))
    out[..., 0, 1] = -v[..., 2]
    out[..., 0, 2] = v[..., 1]
    out[..., 1, 0] = v[..., 2]
    out[..., 1, 2] = -v[..., 0]
    out[..., 2, 0] = -v[..., 1]
    out[..., 2, 1] = v[..., 0]
    return out


def rotation_about_axis(axis: np.ndarray, angle: np.ndarray | float) -> np.ndarray:
    """Rotation matrix (Rodrigues) of ``angle`` about the unit vector ``axis``."""
    angle = np.asarray(angle, dtype=float)
    k = skew(axis)
    s = np.sin(angle)[..., None, None]
    c = np.cos(angle)[..., None, None]
    return np.eye(3) + s * k + (1.0 - c) * (k @ k)


def rotation_log(R: np.ndarray) -> np.ndarray:
    """The rotation vector φ (rad) of one rotation matrix: R = exp(φ×), |φ| in [0, π].

    Near π the axis is read from the symmetric part R + Rᵀ = 2 cos θ I + 2 (1 − cos θ) n nᵀ
    (the antisymmetric part vanishes there); near 0, φ ≈ vee(R − Rᵀ)/2. (Scalar arithmetic:
    a control loop calls it on every state.)"""
    (r00, r01, r02), (r10, r11, r12), (r20, r21, r22) = np.asarray(R, dtype=float).tolist()
    vee = (0.5 * (r21 - r12), 0.5 * (r02 - r20), 0.5 * (r10 - r01))
    cos_angle = min(max(0.5 * (r00 + r11 + r22 - 1.0), -1.0), 1.0)
    sin_angle = math.sqrt(vee[0] ** 2 + vee[1] ** 2 + vee[2] ** 2)
    angle = math.atan2(sin_angle, cos_angle)
    if angle < 1e-8:
        return np.array(vee)
    if angle < math.pi - 1e-4:
        return np.array(vee) * (angle / sin_angle)
    R = np.asarray(R, dtype=float)
    nn = (R + R.T - 2.0 * cos_angle * np.eye(3)) / (2.0 * (1.0 - cos_angle))
    k = int(np.argmax(np.diag(nn)))
    axis = nn[k] / np.sqrt(nn[k, k])
    if axis @ np.array(vee) < 0.0:
        axis = -axis
    return angle * axis


def rotation_exp(phi: np.ndarray) -> np.ndarray:
    """The rotation matrix exp(φ×) of a rotation vector φ (rad): Rodrigues' formula."""
    phi = np.asarray(phi, dtype=float)
    angle = float(np.linalg.norm(phi))
    if angle < 1e-12:
        return np.eye(3) + skew(phi)
    return rotation_about_axis(phi / angle, angle)


def rpy_to_matrix(rpy: np.ndarray) -> np.ndarray:
    """URDF roll-pitch-yaw (fixed axes x, y, z) to a rotation matrix: R = Rz(y) Ry(p) Rx(r)."""
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def quat_to_matrix(quat: np.ndarray) -> np.ndarray:
    """Rotation matrix of a unit quaternion given in ROS order [x, y, z, w]."""
    x, y, z, w = (quat[..., k] for k in range(4))
    out = np.empty(np.shape(x) + (3, 3))
    out[..., 0, 0] = 1 - 2 * (y * y + z * z)
    out[..., 0, 1] = 2 * (x * y - z * w)
    out[..., 0, 2] = 2 * (x * z + y * w)
    out[..., 1, 0] = 2 * (x * y + z * w)
    out[..., 1, 1] = 1 - 2 * (x * x + z * z)
    out[..., 1, 2] = 2 * (y * z - x * w)
    out[..., 2, 0] = 2 * (x * z - y * w)
    out[..., 2, 1] = 2 * (y * z + x * w)
    out[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return out


def plux(E: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Plücker transform [E 0; -E r× E] (Featherstone's ``plux``)."""
    E = np.asarray(E, dtype=float)
    r = np.asarray(r, dtype=float)
    shape = np.broadcast_shapes(E.shape[:-2], r.shape[:-1])
    X = np.zeros(shape + (6, 6))
    X[..., :3, :3] = E
    X[..., 3:, 3:] = E
    X[..., 3:, :3] = -E @ skew(r)
    return X


def transform_parts(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E, r) of a Plücker transform, the inverse of ``plux``."""
    E = X[..., :3, :3]
    rx = -np.swapaxes(E, -1, -2) @ X[..., 3:, :3]
    r = np.stack([rx[..., 2, 1], rx[..., 0, 2], rx[..., 1, 0]], axis=-1)
    return E, r


def plux_inverse(X: np.ndarray) -> np.ndarray:
    """Inverse of a Plücker transform without a general 6×6 inverse."""
    Et = np.swapaxes(X[..., :3, :3], -1, -2)
    out = np.zeros(X.shape)
    out[..., :3, :3] = Et
    out[..., 3:, 3:] = Et
    out[..., 3:, :3] = -Et @ X[..., 3:, :3] @ Et
    return out


def crm(v: np.ndarray) -> np.ndarray:
    """Motion cross-product operator v× (6×6)."""
    v = np.asarray(v, dtype=float)
    w = skew(v[..., :3])
    out = np.zeros(v.shape[:-1] + (6, 6))
    out[..., :3, :3] = w
    out[..., 3:, 3:] = w
    out[..., 3:, :3] = skew(v[..., 3:])
    return out


def crf(v: np.ndarray) -> np.ndarray:
    """Force cross-product operator v×* = -(v×)ᵀ."""
    return -np.swapaxes(crm(v), -1, -2)


def mcI(mass: float, com: np.ndarray, inertia_at_com: np.ndarray) -> np.ndarray:
    """Spatial inertia of a body of ``mass`` with centre of mass ``com`` and rotational
    inertia ``inertia_at_com`` about the COM, all in body coordinates (Featherstone's ``mcI``)."""
    C = skew(com)
    out = np.zeros((6, 6))
    out[:3, :3] = inertia_at_com + mass * C @ C.T
    out[:3, 3:] = mass * C
    out[3:, :3] = mass * C.T
    out[3:, 3:] = mass * np.eye(3)
    return out


def motion_apply(X: np.ndarray, v: np.ndarray) -> np.ndarray:
    """X v for stacks of 6×6 transforms and 6-vectors."""
    return (X @ v[..., None])[..., 0]


def force_apply_transpose(X: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Xᵀ f: carries a force from the successor's coordinates back to the predecessor's."""
    return (np.swapaxes(X, -1, -2) @ f[..., None])[..., 0]
