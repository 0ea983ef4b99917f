# SPDX-License-Identifier: Apache-2.0
"""A wrench on one link and the joint efforts it makes: τ = J(q)ᵀ F, and back.

``LinkWrench(model, link)`` keeps what is constant about the link's support (the payload
terms' chain, ``payload._Chain``: a few small products per joint for one state) and gives

- ``jacobian(q)``: the link's 6×nv Jacobian in its own frame, rows [linear; angular] (the
  velocity of the link origin and the angular velocity, link axes: ``reference.link_jacobian``
  with ``frame="local"``);
- ``pose_and_jacobian(q)``: the link's pose in the world and its Jacobian in world axes (the
  Cartesian impedance's terms) from the same pass;
- ``effort(q, wrench)``: Jᵀ F for a wrench F = [force; torque] (N, N·m) in the link's frame
  about its origin, the joint efforts it exerts (what ``rnea`` subtracts for ``f_ext``);
- ``estimate(q, effort, min_condition)``: the wrench F̂ = (Jᵀ)⁺ τ that best explains joint efforts
  (least squares), when J is well conditioned: its smallest singular value over its largest
  (SI units, rows in m/s and rad/s per unit of joint velocity) at least ``min_condition``.
  With ``force_only`` the wrench is taken to be a force at the link origin (no torque: a point
  contact there): F̂ = (J_vᵀ)⁺ τ with J_v the three linear rows, which needs three joints, not
  six, and stays well conditioned where only the wrist is singular.

A support with a free-flyer or planar joint uses ``reference.link_jacobian`` (slower, exact).
"""

from __future__ import annotations

import numpy as np

from rb_dynamics.model import Model, finite_array

from .payload import _chain  # the support chain of one link (payload terms share it)
from .reference import check_vector, link_jacobian, link_pose

__all__ = ["LinkWrench"]

_LINEAR_FIRST = [3, 4, 5, 0, 1, 2]  # Featherstone's [angular; linear] ↔ [linear; angular]


class LinkWrench:
    """Jacobian, wrench efforts and wrench estimates of ``link`` of ``model``; ValueError for an
    unknown link or one welded to the world (no joint moves it)."""

    def __init__(self, model: Model, link: str) -> None:
        if link not in model.frames:
            moving = [name for name, f in model.frames.items() if f.body >= 0]
            raise ValueError(f"unknown link {link!r}; links a wrench can act on: {moving}")
        if model.frames[link].body < 0:
            raise ValueError(f"link {link!r} is welded to the world: a wrench there moves no "
                             "joint")
        self.model, self.link = model, link
        self._chain = _chain(model, link)

    def jacobian(self, q) -> np.ndarray:
        """6×nv, rows [linear; angular], link frame (see the module docstring)."""
        q = check_vector(q, self.model.nq, "q")
        if q.ndim != 1:
            raise ValueError("q must be a single configuration")
        chain = self._chain
        if not chain.fast:
            return link_jacobian(self.model, q, self.link, "local")
        S_L, _ = chain.link_subspaces(q)
        return (chain.Gv @ S_L).T[_LINEAR_FIRST]

    def pose_and_jacobian(self, q) -> tuple[np.ndarray, np.ndarray]:
        """(T, J): the link's 4×4 pose in the world and its 6×nv Jacobian in world axes, rows
        [linear; angular] (the velocity of the link origin and the angular velocity:
        ``reference.link_jacobian`` with ``frame="local_world_aligned"``), from one pass."""
        q = check_vector(q, self.model.nq, "q")
        if q.ndim != 1:
            raise ValueError("q must be a single configuration")
        chain = self._chain
        if not chain.fast:
            return (link_pose(self.model, q, self.link),
                    link_jacobian(self.model, q, self.link, "local_world_aligned"))
        P = chain.poses(q)
        S_L, _ = chain.link_subspaces(q, P)
        J_local = (chain.Gv @ S_L).T
        R = P[0, :3, :3]
        J = np.empty_like(J_local)
        J[:3] = R @ J_local[3:]
        J[3:] = R @ J_local[:3]
        return P[0].copy(), J

    def effort(self, q, wrench) -> np.ndarray:
        """Jᵀ F over v (N·m or N) for ``wrench`` = [force; torque] in the link's frame about
        its origin; ValueError unless it is 6 finite numbers."""
        wrench = finite_array(wrench, "wrench", (6,))
        return self.jacobian(q).T @ wrench

    def estimate(self, q, effort, min_condition: float, force_only: bool = False
                 ) -> tuple[np.ndarray | None, float]:
        """(F̂, condition): the least-squares wrench [force; torque] (link frame, about its
        origin; torque 0 with ``force_only``) whose Jᵀ F̂ is closest to ``effort`` (over v), and
        σ_min/σ_max of J (of its linear rows with ``force_only``); F̂ is None when that is below
        ``min_condition`` (too few joints move the link, or near a singularity: a small joint
        effort would stand for a large wrench)."""
        J = self.jacobian(q)
        rows = 3 if force_only else 6
        U, sigma, Vt = np.linalg.svd(J[:rows], full_matrices=False)
        if len(sigma) < rows or not sigma[0] > 0.0:
            return None, 0.0
        condition = float(sigma[-1] / sigma[0])
        if condition < min_condition:
            return None, condition
        # Jᵀ = V Σ Uᵀ, so (Jᵀ)⁺ τ = U Σ⁻¹ Vᵀ τ
        wrench = np.zeros(6)
        wrench[:rows] = U @ ((Vt @ np.asarray(effort, dtype=float)) / sigma)
        return wrench, condition
