# SPDX-License-Identifier: Apache-2.0
"""The two robots of [Z23] (Zhao et al. 2023; docs/conventions.md), from the paper's equations."""

from __future__ import annotations

import numpy as np

# free-floating space robot: central body + two arms, q = [θ, ψ1, ψ2]
SPACE = dict(m1=25.0, m2=5.0, I=260.42, r=4.0, L=8.0)
SPACE_Q0 = np.array([np.pi / 36, -np.pi / 6, -np.pi / 6])
SPACE_V0 = np.array([0.1, -0.1, -0.1])


def space_robot_terms(q: np.ndarray, v: np.ndarray):
    """M, F (eq. 43), and the second-order angular-momentum constraint A q̈ = b (eq. 44)."""
    m2, I, r, L = SPACE["m2"], SPACE["I"], SPACE["r"], SPACE["L"]
    _, p1, p2 = q
    dth, dp1, dp2 = v
    a11 = 2 * m2 * L**2 + 2 * m2 * r**2 + 2 * m2 * r * L * (np.cos(p1) + np.cos(p2)) + I
    a12 = -m2 * r * L * np.cos(p1) - m2 * L**2
    a13 = -m2 * r * L * np.cos(p2) - m2 * L**2
    M = np.array([[a11, a12, a13], [a12, m2 * L**2, 0.0], [a13, 0.0, m2 * L**2]])
    F = np.array([0.0,
                  dp1 * dth * m2 * r * L * np.sin(p1) - dth**2 * m2 * r * L * np.sin(p1),
                  dp2 * dth * m2 * r * L * np.sin(p2) - dth**2 * m2 * r * L * np.sin(p2)])
    A = np.array([[a11, a12, a13]])
    b = np.array([2 * dp1 * dth * m2 * r * L * np.sin(p1) + 2 * dp2 * dth * m2 * r * L * np.sin(p2)
                  - dp1**2 * m2 * r * L * np.sin(p1) - dp2**2 * m2 * r * L * np.sin(p2)])
    return M, F, A, b


def space_robot_momentum(q: np.ndarray, v: np.ndarray) -> float:
    M, _, A, _ = space_robot_terms(q, v)
    return float(A[0] @ v)


def space_robot_urdf(floating: bool = False) -> str:
    """The same robot as a URDF: a central body turning about z, two point-mass arms at
    ±r whose angles ψ are measured backwards (joint axes −z). With ``floating`` the centre is
    free in space instead of pinned."""
    m1, m2, I, r, L = SPACE["m1"], SPACE["m2"], SPACE["I"], SPACE["r"], SPACE["L"]
    point = 'ixx="0" iyy="0" izz="0" ixy="0" ixz="0" iyz="0"'
    centre = (f'<inertial><mass value="{m1}"/><inertia ixx="{I}" iyy="{I}" izz="{I}" '
              'ixy="0" ixz="0" iyz="0"/></inertial>')
    arm = f'<inertial><origin xyz="{L} 0 0"/><mass value="{m2}"/><inertia {point}/></inertial>'
    root = "" if floating else (
        '<link name="space"/><joint name="theta" type="continuous"><parent link="space"/>'
        '<child link="centre"/><axis xyz="0 0 1"/></joint>')
    return (f'<robot name="space_robot">{root}<link name="centre">{centre}</link>'
            f'<link name="arm1">{arm}</link><link name="arm2">{arm}</link>'
            '<joint name="psi1" type="continuous"><parent link="centre"/><child link="arm1"/>'
            f'<origin xyz="{r} 0 0"/><axis xyz="0 0 -1"/></joint>'
            '<joint name="psi2" type="continuous"><parent link="centre"/><child link="arm2"/>'
            f'<origin xyz="{-r} 0 0" rpy="0 0 {np.pi}"/><axis xyz="0 0 -1"/></joint></robot>')


# three-wheeled omnidirectional robot, q = [ψ1, ψ2, ψ3, x, y, θ], in the paper's units
# (kg, mm, s: inertias in kg·mm², the generalized force Q in kg·mm²/s²)
OMNI = dict(m1=0.2, m2=2.0, I1=80.0, I2=2080.0, r=20.0, L=40.0)
OMNI_Q0 = np.array([1.0, 1.0, 1.0, 1.0, 1.0, np.pi / 6])
OMNI_V0 = np.array([1.0, 1.0, 2.0, -6.667, -11.547, -0.667])
OMNI_Q = np.array([0.25, 0, 0, 0, 0, 0])


def omni_robot_terms(q: np.ndarray, v: np.ndarray):
    """M (eq. 50), F = Q, and the rolling constraints (eq. 51) differentiated: A q̈ = b."""
    m1, m2, I1, I2, r, L = (OMNI[k] for k in ("m1", "m2", "I1", "I2", "r", "L"))
    th = q[5]
    dx, dy, dth = v[3:]
    M = np.diag([I1, I1, I1, 3 * m1 + m2, 3 * m1 + m2, 3 * m1 * L**2 + I2])
    angles = (th + np.pi / 3, th, th - np.pi / 3)
    signs = (1.0, -1.0, 1.0)  # row 2 is written ẏcosθ − ẋsinθ: the opposite orientation
    A = np.zeros((3, 6))
    b = np.zeros(3)
    for k, (ang, s) in enumerate(zip(angles, signs)):
        A[k, k] = -r
        A[k, 3:] = [s * np.sin(ang), -s * np.cos(ang), -L]
        b[k] = -s * dth * (np.cos(ang) * dx + np.sin(ang) * dy)
    return M, OMNI_Q.copy(), A, b


def omni_velocity_violation(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    _, _, A, _ = omni_robot_terms(q, v)
    return A @ v
