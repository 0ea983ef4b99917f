# SPDX-License-Identifier: Apache-2.0
"""Pinocchio as the oracle: builds the same model and converts between conventions explicitly.

Our coordinates: one angle per continuous joint, planar q = [x, y, θ]; Pinocchio's: (cos, sin)
pairs. Both use q = [x, y, z, qx, qy, qz, qw] and a LOCAL [v; ω] velocity for free-flyers.
Joint order can differ, so everything is mapped by joint name.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import sys
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from urdf_samples import kitchen_sink_urdf

from rb_dynamics.model import JOINT_DIMENSIONS, Model, load_model


def robots_dir() -> str:
    for base in sys.path:
        candidate = os.path.join(base, "cmeel.prefix", "share", "example-robot-data", "robots")
        if os.path.isdir(candidate):
            return candidate
    hits = glob.glob(
        os.path.join(
            sys.prefix,
            "lib",
            "python3*",
            "site-packages",
            "cmeel.prefix",
            "share",
            "example-robot-data",
            "robots",
        )
    )
    if hits:
        return hits[0]
    raise RuntimeError("example-robot-data is not installed")


REAL_ROBOTS = {
    "ur5": ("ur_description/urdf/ur5_robot.urdf", False),
    "panda": ("panda_description/urdf/panda.urdf", False),
    "solo12": ("solo_description/robots/solo12.urdf", True),
    "talos": ("talos_data/robots/talos_reduced.urdf", True),
}


TILTED_GRAVITY = np.array([1.2, -2.0, -9.5])  # the kitchen sink's: a tilted mount


def oracle_models() -> list:
    """pytest params of the models checked against Pinocchio: the real robots and the
    kitchen-sink URDF (fixed and free-flying root); ``load_case`` builds one."""
    params = [pytest.param((name, lambda rel=rel: Path(robots_dir(), rel).read_text(), floating),
                           id=name) for name, (rel, floating) in REAL_ROBOTS.items()]
    return params + [
        pytest.param(("kitchen_sink", kitchen_sink_urdf, False), id="kitchen_sink"),
        pytest.param(("kitchen_sink_ff", lambda: kitchen_sink_urdf(with_floating=False), True),
                     id="kitchen_sink_floating_base")]


def load_case(param: tuple) -> tuple[str, Model, str]:
    """(name, model, URDF) of an ``oracle_models`` param; the kitchen sink in tilted gravity."""
    name, load_xml, floating = param
    xml = load_xml()
    model = load_model(xml, floating_base=floating)
    if name.startswith("kitchen"):
        model.gravity = TILTED_GRAVITY.copy()
    return name, model, xml


class WorstErrors(dict):
    """The worst relative error per (model, quantity) so far; ``record`` also holds each one
    to its tolerance."""

    def record(self, robot: str, quantity: str, err: float, tol: float) -> None:
        self[(robot, quantity)] = max(self.get((robot, quantity), 0.0), err)
        assert err <= tol, f"{robot} {quantity}: relative error {err:.3e} > {tol}"

    def report(self, title: str) -> None:
        if self:
            print(f"\n{title}, worst relative error per model and quantity:")
            for (robot, quantity), err in sorted(self.items()):
                print(f"  {robot:<16} {quantity:<26} {err:.2e}")


@functools.lru_cache
def pinocchio_arm(path: str | os.PathLike) -> pin.Model:
    """Pinocchio's model of a fixed-base URDF (mimic joints follow their leader)."""
    return pin.buildModelFromUrdf(str(path), mimic=True)


def v_indices(pm: pin.Model, names: list[str]) -> list[int]:
    """Pinocchio's velocity index of each named one-coordinate joint."""
    return [pm.joints[pm.getJointId(name)].idx_v for name in names]


def arm_torques(path: str | os.PathLike, names: list[str], q, v=None, a=None,
                limit=None) -> np.ndarray:
    """Pinocchio's inverse dynamics τ = M(q) q̈ + C(q, q̇) q̇ + g(q) of a fixed-base arm, with
    q, q̇, q̈ and τ ordered as ``names`` (joints not named at 0; q̇ = q̈ = 0 unless given, so
    τ = g(q)); clamped to ±``limit`` (ordered as ``names``) when given."""
    pm = pinocchio_arm(os.fspath(path))
    ids = [pm.getJointId(name) for name in names]
    qi, vi = [pm.joints[j].idx_q for j in ids], [pm.joints[j].idx_v for j in ids]
    q_pin, v_pin, a_pin = np.zeros(pm.nq), np.zeros(pm.nv), np.zeros(pm.nv)
    q_pin[qi] = q
    if v is not None:
        v_pin[vi] = v
    if a is not None:
        a_pin[vi] = a
    tau = pin.rnea(pm, pm.createData(), q_pin, v_pin, a_pin)[vi]
    return tau if limit is None else np.clip(tau, -np.asarray(limit), np.asarray(limit))


class Oracle:
    def __init__(self, model: Model, urdf_xml: str):
        root = pin.JointModelFreeFlyer() if model.floating_base else None
        if root is not None:
            self.pm = pin.buildModelFromXML(urdf_xml, root, mimic=True)
        else:
            self.pm = pin.buildModelFromXML(urdf_xml, mimic=True)
        self.pm.gravity = pin.Motion(np.array(model.gravity), np.zeros(3))
        self.pd = self.pm.createData()
        self.model = model
        self.v_perm = np.zeros(model.nv, dtype=int)
        self.joints = []
        for name, kind, qi, vi in zip(
            model.joint_names, model.joint_kinds, model.joint_q_index, model.joint_v_index
        ):
            pj = self.pm.joints[self.pm.getJointId(name)]
            assert pj.nv == (6 if kind == "free" else 3 if kind == "planar" else 1), name
            self.v_perm[vi : vi + pj.nv] = np.arange(pj.idx_v, pj.idx_v + pj.nv)
            self.joints.append((kind, qi, pj.idx_q, pj.nq))
        assert sorted(self.v_perm) == list(range(self.pm.nv))
        # Pinocchio's momentum and energy algorithms refuse mimic joints: keep a model with the
        # mimic joints as independent ones, driven at q_m = mult·q_leader + offset.
        self.full = None
        if model.mimic_joints:
            xml = re.sub(r"<mimic[^>]*/>", "", urdf_xml)
            full_model = load_model(xml, floating_base=model.floating_base, gravity=model.gravity)
            self.full = Oracle(full_model, xml)

    def q(self, q: np.ndarray) -> np.ndarray:
        out = np.zeros(self.pm.nq)
        for kind, qi, pq, pnq in self.joints:
            if kind == "planar":
                out[pq : pq + 4] = [q[qi], q[qi + 1], np.cos(q[qi + 2]), np.sin(q[qi + 2])]
            elif kind == "free":
                out[pq : pq + 7] = q[qi : qi + 7]
            elif pnq == 2:
                out[pq : pq + 2] = [np.cos(q[qi]), np.sin(q[qi])]
            else:
                out[pq] = q[qi]
        return out

    def v(self, v: np.ndarray) -> np.ndarray:
        out = np.zeros(self.pm.nv)
        out[self.v_perm] = v
        return out

    def from_v(self, v_pin: np.ndarray) -> np.ndarray:
        return np.asarray(v_pin)[self.v_perm]

    def matrix(self, M_pin: np.ndarray) -> np.ndarray:
        return np.asarray(M_pin)[np.ix_(self.v_perm, self.v_perm)]

    def cols(self, J_pin: np.ndarray) -> np.ndarray:
        return np.asarray(J_pin)[:, self.v_perm]

    def full_state(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pinocchio (q, v) of the mimic-free model at our state (q, v)."""
        fm, m = self.full.model, self.model
        q_full, v_full = np.zeros(fm.nq), np.zeros(fm.nv)
        for name, kind, qi, vi in zip(
            fm.joint_names, fm.joint_kinds, fm.joint_q_index, fm.joint_v_index
        ):
            if name in m.mimic_joints:
                leader, mult, off = m.mimic_joints[name]
                k = m.joint_names.index(leader)
                q_full[qi] = mult * q[m.joint_q_index[k]] + off
                v_full[vi] = mult * v[m.joint_v_index[k]]
            else:
                k = m.joint_names.index(name)
                nq, nv = JOINT_DIMENSIONS[kind]
                q_full[qi : qi + nq] = q[m.joint_q_index[k] : m.joint_q_index[k] + nq]
                v_full[vi : vi + nv] = v[m.joint_v_index[k] : m.joint_v_index[k] + nv]
        return self.full.q(q_full), self.full.v(v_full)

    def pinocchio_state(self, q: np.ndarray, v: np.ndarray):
        """(model, data, q, v) of a Pinocchio model without mimic joints at our state."""
        if self.full is None:
            return self.pm, self.pd, self.q(q), self.v(v)
        qp, vp = self.full_state(q, v)
        return self.full.pm, self.full.pd, qp, vp

    def mass_matrix(self, q: np.ndarray) -> np.ndarray:
        """Pinocchio's M(q) (CRBA fills the upper triangle), in our order."""
        M = pin.crba(self.pm, self.pd, self.q(q))
        return self.matrix(np.triu(M) + np.triu(M, 1).T)

    def forward_dynamics(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray,
                         f_ext: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """q̈ = M⁻¹(τ − b) from Pinocchio's own terms (its ABA refuses mimic joints)."""
        forces = [] if f_ext is None else [self.fext(f_ext)]
        bias = pin.rnea(self.pm, self.pd, self.q(q), self.v(v), np.zeros(self.pm.nv), *forces)
        return np.linalg.solve(self.mass_matrix(q), tau - self.from_v(bias))

    def aba(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray,
            f_ext: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """Pinocchio's own ABA (models without mimic joints), in our order."""
        forces = [] if f_ext is None else [self.fext(f_ext)]
        return self.from_v(pin.aba(self.pm, self.pd, self.q(q), self.v(v), self.v(tau), *forces))

    def references(self, q: np.ndarray, v: np.ndarray, a: np.ndarray | None = None,
                   tau: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Pinocchio's τ (rnea), g, C q̇ + g (nle), M (crba) and q̈ (aba) at a state, in our
        order (q̈ = a = τ = 0 unless given)."""
        pm, pd, qp, vp = self.pm, self.pd, self.q(q), self.v(v)
        a = np.zeros(pm.nv) if a is None else a
        tau = np.zeros(pm.nv) if tau is None else tau
        return {
            "rnea": self.from_v(pin.rnea(pm, pd, qp, vp, self.v(a))),
            "gravity": self.from_v(pin.computeGeneralizedGravity(pm, pd, qp)),
            "nle": self.from_v(pin.nonLinearEffects(pm, pd, qp, vp)),
            "crba": self.mass_matrix(q),
            "aba": self.forward_dynamics(q, v, tau),
        }

    def fext(self, f_ext: dict[str, np.ndarray]) -> list:
        """Link-frame wrenches [f; τ] → Pinocchio forces per joint, in the joint frame."""
        forces = [pin.Force.Zero() for _ in range(self.pm.njoints)]
        for link, wrench in f_ext.items():
            frame = self.pm.frames[self.pm.getFrameId(link, pin.BODY)]
            force = frame.placement.act(pin.Force(wrench[:3], wrench[3:]))
            forces[frame.parentJoint] = forces[frame.parentJoint] + force
        return forces


def random_state(model: Model, rng: np.random.Generator):
    q = np.zeros(model.nq)
    for kind, qi in zip(model.joint_kinds, model.joint_q_index):
        if kind == "free":
            q[qi : qi + 3] = rng.uniform(-1, 1, 3)
            quat = rng.normal(size=4)
            q[qi + 3 : qi + 7] = quat / np.linalg.norm(quat)
        elif kind == "planar":
            q[qi : qi + 3] = rng.uniform(-1, 1, 3) * [1, 1, np.pi]
        else:
            lo, hi = model.position_lower[qi], model.position_upper[qi]
            lo, hi = (lo, hi) if np.isfinite(lo) and np.isfinite(hi) else (-np.pi, np.pi)
            q[qi] = rng.uniform(lo, hi)
    v = rng.uniform(-2, 2, model.nv)
    a = rng.uniform(-5, 5, model.nv)
    tau = rng.uniform(-10, 10, model.nv)
    return q, v, a, tau


def rel_err(ours, ref) -> float:
    ours, ref = np.asarray(ours, dtype=float), np.asarray(ref, dtype=float)
    return float(np.linalg.norm(ours - ref) / max(np.linalg.norm(ref), 1e-12))
