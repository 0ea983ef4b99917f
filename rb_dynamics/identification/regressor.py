# SPDX-License-Identifier: Apache-2.0
"""The robot's dynamics as a linear function of its parameters: τ = Y(q, q̇, q̈) θ.

θ holds, in this order (``ParameterLayout.names``):

- ten inertial parameters per body, ``<body link>.<name>`` for each name of
  ``INERTIAL_PARAMETER_NAMES`` (m, m·c, the rotational inertia about the body's origin, in the
  body's frame; welded links included), Pinocchio's order;
- per identified joint, the joint terms that are switched on: ``<joint>.armature`` (q̈),
  ``<joint>.viscous`` (q̇), ``<joint>.coulomb`` (tanh(q̇/ε)), ``<joint>.stribeck``
  (exp(−(q̇/v_s)²)·tanh(q̇/ε), v_s given), ``<joint>.offset`` (1) — the friction law of
  ``rb_dynamics.model.overlay``, whose ε is ``COULOMB_SMOOTHING``.

The layout's ε (``coulomb_smoothing``) is that ε unless set: how a real joint's Coulomb
friction passes through rest is the joint's, not the controller's (a drive's steps: ε = 0,
sign(q̇)), and a fit chooses it (``base_fit``). Above 3ε the column is within 0.5 % of
sign(q̇): the Coulomb value means the same level whichever ε fitted it.

Rows are the identified joints (``ParameterLayout.joints``, any subset of the model's 1-DoF
joints); the other joints are held at fixed positions (``locked``: a gripper's fingers), which
moves their bodies rigidly with their parent and leaves them in the regressor.

Each body's block is the payload regressor of that body's own link
(``rb_dynamics.dynamics.payload_inertial_regressor``): the body's parameters act exactly as a
payload carried there would.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from rb_dynamics.dynamics import INERTIAL_PARAMETER_NAMES, check_vector, payload_inertial_regressor
from rb_dynamics.model import COULOMB_SMOOTHING, Model

__all__ = [
    "JOINT_TERMS",
    "MAX_REGRESSOR_BYTES",
    "ParameterLayout",
    "available_memory",
    "body_parameters",
    "spatial_inertia_from_parameters",
]

# the joint terms in their column order; each may be switched on or off in a layout
JOINT_TERMS = ("armature", "viscous", "coulomb", "stribeck", "offset")
# The most memory an identification's regressors may take (a 7-joint arm's base-parameter
# basis takes ~2 MB, its fit ~70 MB); at most half of what the machine has available
MAX_REGRESSOR_BYTES = 2 * 1024 ** 3
_CHECKED_FROM = 64 * 1024 ** 2  # smaller regressors are not checked against the machine


def available_memory() -> int:
    """Bytes of memory the machine can give without swapping (MemAvailable; else free pages)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def body_parameters(inertia: np.ndarray) -> np.ndarray:
    """The ten inertial parameters (``INERTIAL_PARAMETER_NAMES`` order) of a 6×6 spatial
    inertia [angular; linear] about the body origin: m, m·c, the rotational inertia there."""
    I = np.asarray(inertia, dtype=float)
    return np.array([I[5, 5], I[2, 4], I[0, 5], I[1, 3],
                     I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])


def spatial_inertia_from_parameters(pi: np.ndarray) -> np.ndarray:
    """The 6×6 spatial inertia of ten inertial parameters (the inverse of ``body_parameters``)."""
    m, hx, hy, hz, ixx, ixy, iyy, ixz, iyz, izz = np.asarray(pi, dtype=float)
    h_cross = np.array([[0.0, -hz, hy], [hz, 0.0, -hx], [-hy, hx, 0.0]])
    I = np.zeros((6, 6))
    I[:3, :3] = [[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]]
    I[:3, 3:] = h_cross
    I[3:, :3] = h_cross.T
    I[3:, 3:] = m * np.eye(3)
    return I


@dataclass(frozen=True, eq=False)
class ParameterLayout:
    """Which parameters an identification estimates, and the regressor that maps them to efforts.

    ``joints``: the identified joints (their efforts are measured, their motion excites the
    robot); ``locked``: positions of the model's other 1-DoF joints (default 0, clipped into
    their limits). ``terms``: the joint terms estimated (a subset of ``JOINT_TERMS``);
    ``stribeck_velocity``: v_s (rad/s or m/s) of the Stribeck column when ``"stribeck"`` is in
    ``terms``; ``coulomb_smoothing``: ε (rad/s or m/s) of the Coulomb and Stribeck columns'
    tanh(q̇/ε), 0 for sign(q̇). Raises ValueError naming unknown joints or terms.
    """

    model: Model
    joints: tuple[str, ...]
    terms: tuple[str, ...] = ("armature", "viscous", "coulomb", "offset")
    stribeck_velocity: float = 0.05
    coulomb_smoothing: float = COULOMB_SMOOTHING
    locked: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        model = self.model
        if not model.only_one_dof_joints:
            raise ValueError("identification needs a fixed-base model of revolute and prismatic "
                             "joints")
        joints = tuple(self.joints) or tuple(model.actuated_joint_names)
        repeated = sorted(j for j, count in Counter(joints).items() if count > 1)
        if repeated:
            raise ValueError(f"joints {repeated} are named more than once; name each "
                             "identified joint once")
        object.__setattr__(self, "joints", joints)
        object.__setattr__(self, "v_index", model.velocity_indices(list(joints)))
        unknown = [t for t in self.terms if t not in JOINT_TERMS]
        if unknown:
            raise ValueError(f"unknown joint terms {unknown}; terms are {list(JOINT_TERMS)}")
        object.__setattr__(self, "terms", tuple(t for t in JOINT_TERMS if t in self.terms))
        if not self.stribeck_velocity > 0:
            raise ValueError(f"stribeck_velocity must be > 0, got {self.stribeck_velocity}")
        if not self.coulomb_smoothing >= 0:
            raise ValueError(f"coulomb_smoothing must be ≥ 0, got {self.coulomb_smoothing}")
        others = [n for n in model.actuated_joint_names if n not in joints]
        unknown_locked = [n for n in self.locked if n not in others]
        if unknown_locked:
            raise ValueError(f"locked joints {unknown_locked} are not other 1-DoF joints of the "
                             f"model; they are {others}")
        q_locked = np.clip(np.zeros(model.nq), model.position_lower, model.position_upper)
        for name, value in self.locked.items():
            q_locked[model.position_indices([name])[0]] = float(value)
        object.__setattr__(self, "q_locked", q_locked)
        object.__setattr__(self, "q_index", model.position_indices(list(joints)))

    # ------------------------------------------------------------------ names and sizes

    @property
    def n_joints(self) -> int:
        return len(self.joints)

    @property
    def n_inertial(self) -> int:
        return 10 * self.model.n_bodies

    @property
    def n_parameters(self) -> int:
        return self.n_inertial + len(self.terms) * self.n_joints

    @property
    def names(self) -> list[str]:
        """Parameter names in θ's order: ``<link>.<inertial name>``, then ``<joint>.<term>``."""
        inertial = [f"{body}.{p}" for body in self.model.body_names
                    for p in INERTIAL_PARAMETER_NAMES]
        return inertial + [f"{joint}.{term}" for term in self.terms for joint in self.joints]

    def term_slice(self, term: str) -> slice:
        """Where the ``term`` column of each identified joint sits in θ (joints in order)."""
        k = self.terms.index(term)
        start = self.n_inertial + k * self.n_joints
        return slice(start, start + self.n_joints)

    # ------------------------------------------------------------------ states and θ

    def full_state(self, q, v, a) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The model's (N, nq), (N, nv), (N, nv) from the identified joints' (N, n_joints)
        positions, velocities and accelerations (the locked joints at rest)."""
        n = self.n_joints
        q = np.atleast_2d(check_vector(q, n, "q"))
        v = np.atleast_2d(check_vector(v, n, "v"))
        a = np.atleast_2d(check_vector(a, n, "a"))
        Q = np.repeat(self.q_locked[None, :], len(q), axis=0)
        Q[:, self.q_index] = q
        V = np.zeros((len(q), self.model.nv))
        A = np.zeros_like(V)
        V[:, self.v_index], A[:, self.v_index] = v, a
        return Q, V, A

    def parameters(self, model: Model | None = None) -> np.ndarray:
        """θ of ``model`` (default: the layout's): its body inertias and the joint terms it
        carries (armature, damping, friction, Stribeck, effort offset)."""
        model = self.model if model is None else model
        inertial = [body_parameters(I) for I in model.inertia]
        fields = {"armature": model.armature, "viscous": model.damping,
                  "coulomb": model.friction, "stribeck": model.stribeck_friction,
                  "offset": model.effort_offset}
        joint = [np.asarray(fields[t], dtype=float)[self.v_index] for t in self.terms]
        return np.concatenate(inertial + joint)

    # ------------------------------------------------------------------ the regressor

    def check_regressor_size(self, states: int, copies: int = 1) -> None:
        """ValueError, before anything is allocated, when ``copies`` regressors at ``states``
        states would take more than ``MAX_REGRESSOR_BYTES`` or half the available memory; the
        message gives the sizes."""
        need = 8 * states * self.n_joints * self.n_parameters * copies
        if need <= _CHECKED_FROM:
            return
        limit = min(MAX_REGRESSOR_BYTES, available_memory() // 2)
        if need > limit:
            raise ValueError(
                f"{self.model.name}: too large to identify: "
                + (f"{copies} copies of " if copies > 1 else "")
                + f"a regressor of {states} states × {self.n_joints} joints × "
                f"{self.n_parameters} parameters take "
                f"{need / 1024 ** 3:.1f} GiB, more than the {limit / 1024 ** 3:.1f} GiB "
                "allowed (at most 2 GiB, half the memory available); identify fewer joints "
                "(--joints) or a smaller model")

    def regressor(self, q, v, a) -> np.ndarray:
        """Y, (N, n_joints, n_parameters): the identified joints' efforts are Y θ, gravity
        included, at the states (identified joints' positions, velocities, accelerations,
        (N, n_joints) each; the locked joints at rest). ValueError when Y would not fit
        (``check_regressor_size``)."""
        self.check_regressor_size(len(np.atleast_2d(q)))
        Q, V, A = self.full_state(q, v, a)
        model = self.model
        Y = np.zeros((len(Q), self.n_joints, self.n_parameters))
        rows = self.v_index
        for b, link in enumerate(model.body_names):
            Y[:, :, 10 * b:10 * b + 10] = payload_inertial_regressor(model, Q, V, A, link)[:, rows]
        columns = self.joint_columns(V[:, rows], A[:, rows])
        j = np.arange(self.n_joints)
        for term in self.terms:
            Y[:, j, self.term_slice(term).start + j] = columns[term]
        return Y

    def joint_columns(self, qd: np.ndarray, qdd: np.ndarray) -> dict[str, np.ndarray]:
        """Each joint term's column at the identified joints' velocities and accelerations
        (N, n_joints) each: joint k's ``<joint>.<term>`` multiplies ``columns[term][:, k]`` in
        joint k's effort (and nowhere else)."""
        eps = self.coulomb_smoothing
        coulomb = np.tanh(qd / eps) if eps > 0 else np.sign(qd)
        return {"armature": qdd, "viscous": qd, "coulomb": coulomb,
                "stribeck": np.exp(-(qd / self.stribeck_velocity) ** 2) * coulomb,
                "offset": np.ones_like(qd)}

    def describe(self) -> str:
        return (f"{self.model.name}: {self.n_joints} joints, {self.model.n_bodies} bodies, "
                f"terms {list(self.terms)}: {self.n_parameters} parameters")

