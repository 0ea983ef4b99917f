"""Pinocchio as the oracle: builds the same model and converts between conventions explicitly.

Our coordinates: one angle per continuous joint, planar q = [x, y, θ]; Pinocchio's: (cos, sin)
pairs. Both use q = [x, y, z, qx, qy, qz, qw] and a LOCAL [v; ω] velocity for free-flyers.
Joint order can differ, so everything is mapped by joint name.
"""

from __future__ import annotations

import glob
import os
import re
import sys

import numpy as np
import pinocchio as pin

from rb_dynamics.joints import JOINT_DIMENSIONS
from rb_dynamics.model import Model, load_model


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
