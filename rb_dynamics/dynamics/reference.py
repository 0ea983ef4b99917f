# SPDX-License-Identifier: Apache-2.0
"""Reference rigid-body dynamics on a system model, after Featherstone's spatial_v2.

Each algorithm is one short function: ``rnea`` (ID.m), ``crba`` (HandC.m), ``aba`` (FDab.m),
plus gravity, centres of mass (MuJoCo's ``mj_comPos`` [MJ]), energies, momentum and
kinematics. They are written for clarity, and broadcast over a leading batch axis: q of shape
(N, nq) gives results of shape (N, nv) with no Python loop over states. Fast specialised
kernels live beside this module and are tested against it.

Public vectors follow docs/conventions.md: q and v are the independent coordinates; wrenches and
Jacobian rows are [linear; angular]. Internally spatial vectors are [angular; linear].
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rb_dynamics.model import (
    Model,
    crf,
    crm,
    force_apply_transpose,
    jcalc,
    motion_apply,
    plux_inverse,
    skew,
    transform_parts,
)

__all__ = [
    "Kinematics",
    "aba",
    "body_transforms",
    "center_of_mass",
    "centroidal_momentum",
    "check_vector",
    "crba",
    "forward_dynamics_crba",
    "gravity",
    "kinetic_energy",
    "link_acceleration",
    "link_jacobian",
    "point_jacobian",
    "link_pose",
    "nonlinear_effects",
    "potential_energy",
    "rnea",
    "subtree_centers_of_mass",
]

Wrenches = Mapping[str, np.ndarray]


# ----------------------------------------------------------------------------- helpers


def check_vector(x, size: int, name: str, finite: bool = True) -> np.ndarray:
    """``x`` as a float array of shape (size,) or (N, size), finite, or a ValueError naming it:
    "must be an array of numbers", "must have length …", "contains NaN or inf" (the wording
    of every ``Dynamics`` implementation, the C trampoline's included).

    ``finite=False`` leaves finiteness to a caller that checks its result instead (NaN and
    inf spread into it) and calls this again on its inputs when the result is not finite.
    """
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of numbers") from None
    if arr.ndim not in (1, 2) or arr.shape[-1] != size:
        raise ValueError(f"{name} must have length {size} (or shape (N, {size})), got shape "
                         f"{arr.shape}")
    if finite and not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def _joint_q(model: Model, q: np.ndarray, i: int) -> np.ndarray:
    mimic = model.body_mimic[i]
    if mimic is None:
        start = model.body_q_index[i]
        return q[..., start:start + model.joint[i].nq]
    q_leader, _, mult, off = mimic
    return mult * q[..., q_leader:q_leader + 1] + off


def _joint_v(model: Model, v: np.ndarray, i: int) -> np.ndarray:
    """Body i's joint velocity (or acceleration) variables: G v, row block i."""
    dofs, scale = _dof(model, i)
    return scale * v[..., dofs]


def _dof(model: Model, i: int) -> tuple[slice, float]:
    """Where body i's generalized forces land in the public vector, and their scale (Gᵀ)."""
    mimic = model.body_mimic[i]
    if mimic is None:
        start = model.body_v_index[i]
        return slice(start, start + model.joint[i].nv), 1.0
    return slice(mimic[1], mimic[1] + 1), mimic[2]


def _gravity_acceleration(model: Model) -> np.ndarray:
    a_grav = np.zeros(6)
    a_grav[3:] = model.gravity
    return a_grav


def _body_forces(model: Model, f_ext: Wrenches | None, batch: tuple[int, ...]) -> list:
    """External wrenches per body, in body coordinates and Featherstone order [n; f]."""
    forces: list = [None] * model.n_bodies
    if not f_ext:
        return forces
    for link, wrench in f_ext.items():
        frame = model.frames.get(link)
        if frame is None:
            raise ValueError(f"f_ext: unknown link {link!r}")
        wrench = check_vector(wrench, 6, f"f_ext[{link!r}]")
        if frame.body < 0:
            continue  # a wrench on a link welded to the world moves nothing
        f_link = np.concatenate([wrench[..., 3:], wrench[..., :3]], axis=-1)
        f_body = force_apply_transpose(frame.X_from_body, f_link)
        previous = forces[frame.body]
        forces[frame.body] = f_body if previous is None else previous + f_body
    return forces


def _forward_kinematics(model: Model, q: np.ndarray) -> list[np.ndarray]:
    """Xup[i] = ^iX_λ(i) = X_J(q_i) X_T(i)."""
    return [jcalc(model.joint[i], _joint_q(model, q, i)) @ model.X_tree[i]
            for i in range(model.n_bodies)]


def _forward_pass(model: Model, q: np.ndarray, v: np.ndarray, a: np.ndarray | None = None,
                  a_base: np.ndarray | None = None) -> tuple[list, list, list, list]:
    """The outward pass shared by ID.m, FDab.m and the kinematics: Xup, body velocities
    v_i = Xup v_λ + S q̇_i, velocity-product accelerations c_i = v_i × S q̇_i and, when ``a`` is
    given, body accelerations a_i = Xup a_λ + S q̈_i + c_i (the root's parent moves with
    ``a_base``, default at rest; −gravity stands in for gravity)."""
    Xup = _forward_kinematics(model, q)
    batch = _batch_shape(q, v) if a is None else _batch_shape(q, v, a)
    zero = np.zeros(batch + (6,))
    vel: list = []
    c: list = []
    acc: list = []
    for i in range(model.n_bodies):
        S, p = model.S[i], model.parent[i]
        vJ = _joint_v(model, v, i) @ S.T
        if p < 0:
            vel.append(vJ + zero)
            c.append(zero)
        else:
            vel.append(motion_apply(Xup[i], vel[p]) + vJ)
            c.append(motion_apply(crm(vel[i]), vJ))
        if a is not None:
            a_parent = (zero if a_base is None else a_base) if p < 0 else acc[p]
            acc.append(motion_apply(Xup[i], a_parent) + _joint_v(model, a, i) @ S.T + c[i])
    return Xup, vel, c, acc


def _batch_shape(*arrays: np.ndarray) -> tuple[int, ...]:
    return np.broadcast_shapes(*(a.shape[:-1] for a in arrays))


# ----------------------------------------------------------------------------- algorithms


def rnea(model: Model, q, v, a, f_ext: Wrenches | None = None) -> np.ndarray:
    """Inverse dynamics τ = M(q) a + C(q, v) v + g(q) − Σ Jᵀ f_ext (Featherstone's ID.m), M with
    the joints' armature on its diagonal (``Model.armature``, as Pinocchio's rnea adds it).

    ``f_ext`` maps link names to wrenches [force; torque] in the link frame about its origin.
    """
    q = check_vector(q, model.nq, "q")
    v = check_vector(v, model.nv, "v")
    a = check_vector(a, model.nv, "a")
    batch = _batch_shape(q, v, a)
    f_ext_body = _body_forces(model, f_ext, batch)
    # a fictitious base acceleration −a_g stands in for gravity
    Xup, vel, _, acc = _forward_pass(model, q, v, a, -_gravity_acceleration(model))
    f = []
    for i in range(model.n_bodies):
        Iv = motion_apply(model.inertia[i], vel[i])
        f.append(motion_apply(model.inertia[i], acc[i]) + motion_apply(crf(vel[i]), Iv))
        if f_ext_body[i] is not None:
            f[i] = f[i] - f_ext_body[i]
    tau = np.zeros(batch + (model.nv,))
    for i in reversed(range(model.n_bodies)):
        dofs, scale = _dof(model, i)
        tau[..., dofs] += scale * (f[i] @ model.S[i])
        if model.parent[i] >= 0:
            f[model.parent[i]] = f[model.parent[i]] + force_apply_transpose(Xup[i], f[i])
    if model.armature.any():  # the rotors' own inertia: armature·q̈ on each coordinate
        tau += model.armature * a
    return tau


def gravity(model: Model, q) -> np.ndarray:
    """g(q): the joint forces that hold the robot still (Pinocchio's generalized gravity)."""
    q = check_vector(q, model.nq, "q")
    zero = np.zeros(q.shape[:-1] + (model.nv,))
    return rnea(model, q, zero, zero)


def nonlinear_effects(model: Model, q, v) -> np.ndarray:
    """C(q, v) v + g(q)."""
    v = check_vector(v, model.nv, "v")
    return rnea(model, q, v, np.zeros(v.shape))


def crba(model: Model, q) -> np.ndarray:
    """Joint-space inertia matrix M(q) by the composite-rigid-body algorithm (HandC.m), plus
    diag(armature)."""
    q = check_vector(q, model.nq, "q")
    Xup = _forward_kinematics(model, q)
    batch = q.shape[:-1]
    IC = [np.broadcast_to(I, batch + (6, 6)).copy() for I in model.inertia]
    for i in reversed(range(model.n_bodies)):
        p = model.parent[i]
        if p >= 0:
            XT = np.swapaxes(Xup[i], -1, -2)
            IC[p] = IC[p] + XT @ IC[i] @ Xup[i]
    H = np.zeros(batch + (model.nv, model.nv))
    for i in range(model.n_bodies):
        dofs_i, scale_i = _dof(model, i)
        F = IC[i] @ model.S[i]  # composite inertia times S_i: the force that accelerates i
        block = model.S[i].T @ F
        if block.shape[-1] > 1:  # exact symmetry for multi-DoF joints, whatever the rounding
            block = 0.5 * (block + np.swapaxes(block, -1, -2))
        H[..., dofs_i, dofs_i] += scale_i * scale_i * block
        j = i
        while model.parent[j] >= 0:
            F = np.swapaxes(Xup[j], -1, -2) @ F
            j = model.parent[j]
            dofs_j, scale_j = _dof(model, j)
            block = scale_i * scale_j * (np.swapaxes(F, -1, -2) @ model.S[j])
            H[..., dofs_i, dofs_j] += block
            H[..., dofs_j, dofs_i] += np.swapaxes(block, -1, -2)
    if model.armature.any():
        H += np.diag(model.armature)
    return H


def aba(model: Model, q, v, tau, f_ext: Wrenches | None = None) -> np.ndarray:
    """Forward dynamics q̈ by the articulated-body algorithm (FDab.m), O(n); a joint's armature
    adds to its D_i = S_iᵀ I^A_i S_i (Pinocchio's choice: the rotor turns with the joint only).

    Mimic joints couple bodies outside the tree structure ABA exploits; models that have them
    are solved through CRBA and a Cholesky factorisation instead.
    """
    q = check_vector(q, model.nq, "q")
    v = check_vector(v, model.nv, "v")
    tau = check_vector(tau, model.nv, "tau")
    if model.has_mimic:
        return forward_dynamics_crba(model, q, v, tau, f_ext)
    problem = model.forward_dynamics_problem()
    if problem:
        raise ValueError(problem)
    batch = _batch_shape(q, v, tau)
    f_ext_body = _body_forces(model, f_ext, batch)
    Xup, vel, c, _ = _forward_pass(model, q, v)
    nb = model.n_bodies
    IA, pA = [None] * nb, [None] * nb
    for i in range(nb):
        IA[i] = np.broadcast_to(model.inertia[i], batch + (6, 6)).copy()
        pA[i] = motion_apply(crf(vel[i]), motion_apply(model.inertia[i], vel[i]))
        if f_ext_body[i] is not None:
            pA[i] = pA[i] - f_ext_body[i]
    U, Dinv, u = [None] * nb, [None] * nb, [None] * nb
    for i in reversed(range(nb)):
        S, p = model.S[i], model.parent[i]
        U[i] = IA[i] @ S
        D = S.T @ U[i] + np.diag(model.armature[_dof(model, i)[0]])
        Dinv[i] = _inverse_articulated_inertia(model, i, D, IA[i])
        u[i] = _joint_v(model, tau, i) - pA[i] @ S
        if p >= 0:
            UDinv = U[i] @ Dinv[i]
            Ia = IA[i] - UDinv @ np.swapaxes(U[i], -1, -2)
            pa = pA[i] + motion_apply(Ia, c[i]) + motion_apply(UDinv, u[i])
            XT = np.swapaxes(Xup[i], -1, -2)
            IA[p] = IA[p] + XT @ Ia @ Xup[i]
            pA[p] = pA[p] + force_apply_transpose(Xup[i], pa)
    qdd = np.zeros(batch + (model.nv,))
    acc = [None] * nb
    a_base = -_gravity_acceleration(model)
    for i in range(nb):
        p = model.parent[i]
        a_parent = a_base if p < 0 else acc[p]
        a_i = motion_apply(Xup[i], a_parent) + c[i]
        qdd_i = motion_apply(Dinv[i], u[i] - (np.swapaxes(U[i], -1, -2) @ a_i[..., None])[..., 0])
        qdd[..., _dof(model, i)[0]] = qdd_i
        acc[i] = a_i + qdd_i @ model.S[i].T
    return qdd


def _inverse_articulated_inertia(model: Model, i: int, D: np.ndarray,
                                 IA: np.ndarray) -> np.ndarray:
    """D⁻¹ = (Sᵀ I^A S)⁻¹, or a ValueError naming the joint when its subtree cannot be
    accelerated along the joint (no inertia there, e.g. a point mass on its axis)."""
    lowest = np.linalg.eigvalsh(D)[..., 0]
    if np.any(~(lowest > 1e-12 * np.abs(IA).max(axis=(-2, -1)))):
        raise ValueError(f"forward dynamics is undefined: joint {model.body_joint_names[i]!r} "
                         "moves no inertia along its motion")
    return np.linalg.inv(D)


def forward_dynamics_crba(model: Model, q, v, tau, f_ext: Wrenches | None = None,
                          dynamics=None) -> np.ndarray:
    """Forward dynamics through M(q) and a Cholesky solve: q̈ = M⁻¹ (τ − C v − g + Jᵀ f).

    M and the bias C v + g − Jᵀ f come from ``dynamics.crba`` and ``dynamics.rnea`` (at q̈ = 0)
    when ``dynamics`` (a ``Dynamics`` of ``model``) is given, else from the algorithms here.
    A ValueError when forward dynamics is undefined (the model's problem, or a singular M).
    """
    v = check_vector(v, model.nv, "v")
    tau = check_vector(tau, model.nv, "tau")
    problem = model.forward_dynamics_problem()
    if problem:
        raise ValueError(problem)
    if dynamics is None:
        M = crba(model, q)
        bias = rnea(model, q, v, np.zeros(v.shape), f_ext)
    else:
        M = dynamics.crba(q)
        bias = dynamics.rnea(q, v, np.zeros(v.shape), f_ext)
    rhs = tau - bias
    try:
        L = np.linalg.cholesky(M)
    except np.linalg.LinAlgError:
        raise ValueError("forward dynamics is undefined: the mass matrix is singular "
                         "(a joint moves no inertia)") from None
    y = np.linalg.solve(L, rhs[..., None])
    return np.linalg.solve(np.swapaxes(L, -1, -2), y)[..., 0]


# ----------------------------------------------------------------------------- kinematics


def body_transforms(model: Model, q) -> list[np.ndarray]:
    """^iX_0 for every body: the Plücker transform from world to body coordinates."""
    q = check_vector(q, model.nq, "q")
    Xup = _forward_kinematics(model, q)
    X0: list[np.ndarray] = []
    for i in range(model.n_bodies):
        p = model.parent[i]
        X0.append(Xup[i] if p < 0 else Xup[i] @ X0[p])
    return X0


def _link_transform(model: Model, X0: list[np.ndarray], link: str) -> tuple[np.ndarray, int]:
    frame = model.frames.get(link)
    if frame is None:
        raise ValueError(f"unknown link {link!r}")
    if frame.body < 0:
        return frame.X_from_body, -1
    return frame.X_from_body @ X0[frame.body], frame.body


def link_pose(model: Model, q, link: str) -> np.ndarray:
    """4×4 homogeneous pose of ``link`` in the world."""
    X, _ = _link_transform(model, body_transforms(model, q), link)
    E, r = transform_parts(X)
    T = np.zeros(E.shape[:-2] + (4, 4))
    T[..., :3, :3] = np.swapaxes(E, -1, -2)
    T[..., :3, 3] = r
    T[..., 3, 3] = 1.0
    return T


def link_jacobian(model: Model, q, link: str, frame: str = "local") -> np.ndarray:
    """6×nv Jacobian of ``link``, rows [linear; angular] like Pinocchio's.

    ``frame``: "local" (link frame), "local_world_aligned" (velocity of the link origin in
    world axes) or "world" (spatial velocity at the world origin, in world axes).
    """
    q = check_vector(q, model.nq, "q")
    if q.ndim != 1:
        raise ValueError("q must be a single configuration for link_jacobian")
    X0 = body_transforms(model, q)
    X_link, body = _link_transform(model, X0, link)
    J = np.zeros((6, model.nv))  # Featherstone order [angular; linear], link coordinates
    while body >= 0:
        dofs, scale = _dof(model, body)
        J[:, dofs] += scale * (X_link @ plux_inverse(X0[body]) @ model.S[body])
        body = model.parent[body]
    if frame == "world":
        J = plux_inverse(X_link) @ J
    elif frame == "local_world_aligned":
        R = np.swapaxes(X_link[:3, :3], -1, -2)
        J = np.vstack([R @ J[:3], R @ J[3:]])
    elif frame != "local":
        raise ValueError(f"frame must be 'local', 'local_world_aligned' or 'world', not {frame!r}")
    return np.vstack([J[3:], J[:3]])


def _body_com_and_mass(model: Model) -> tuple[np.ndarray, np.ndarray]:
    mass = model.body_masses
    mc = np.array([[I[2, 4], I[0, 5], I[1, 3]] for I in model.inertia])  # m·c from the m c× block
    com = np.divide(mc, mass[:, None], out=np.zeros_like(mc), where=mass[:, None] > 1e-300)
    return com, mass


def subtree_centers_of_mass(model: Model, q) -> tuple[np.ndarray, np.ndarray]:
    """World COM of every body's subtree and the subtree masses (mj_comPos's backward pass)."""
    X0 = body_transforms(model, q)
    com_body, mass = _body_com_and_mass(model)
    moment = []
    for i in range(model.n_bodies):
        E, r = transform_parts(X0[i])
        world_com = r + (np.swapaxes(E, -1, -2) @ com_body[i][:, None])[..., 0]
        moment.append(mass[i] * world_com)
    subtree_mass = mass.copy()
    for i in reversed(range(model.n_bodies)):
        p = model.parent[i]
        if p >= 0:
            moment[p] = moment[p] + moment[i]
            subtree_mass[p] += subtree_mass[i]
    com = np.stack(moment, axis=-2)
    # a massless subtree has no centre of mass; report its body origin's location as zeros
    safe = np.where(subtree_mass > 1e-12, subtree_mass, 1.0)[:, None]
    return com / safe, subtree_mass


def center_of_mass(model: Model, q) -> np.ndarray:
    """World position of the whole robot's centre of mass."""
    X0 = body_transforms(model, q)
    com_body, mass = _body_com_and_mass(model)
    total = 0.0
    for i in range(model.n_bodies):
        E, r = transform_parts(X0[i])
        total = total + mass[i] * (r + (np.swapaxes(E, -1, -2) @ com_body[i][:, None])[..., 0])
    if mass.sum() <= 1e-12:
        raise ValueError("the model has no mass, so no centre of mass")
    return total / mass.sum()


def _body_velocities(model: Model, q, v) -> list[np.ndarray]:
    q = check_vector(q, model.nq, "q")
    v = check_vector(v, model.nv, "v")
    return _forward_pass(model, q, v)[1]


def kinetic_energy(model: Model, q, v) -> np.ndarray | float:
    """T = ½ Σ vᵢᵀ Iᵢ vᵢ + ½ Σ armature·q̇² = ½ vᵀ M v: the rotors' energy counts, as in
    Pinocchio's computeKineticEnergy (their momentum does not: ``centroidal_momentum``)."""
    vel = _body_velocities(model, q, v)
    energy = 0.5 * sum(np.sum(vi * motion_apply(I, vi), axis=-1)
                       for vi, I in zip(vel, model.inertia))
    if model.armature.any():
        v = np.asarray(v, dtype=float)
        energy = energy + 0.5 * np.sum(model.armature * v * v, axis=-1)
    return energy


def potential_energy(model: Model, q) -> np.ndarray | float:
    """U = −Σ mᵢ gᵀ cᵢ (zero at the world origin; Pinocchio's convention)."""
    X0 = body_transforms(model, q)
    com_body, mass = _body_com_and_mass(model)
    energy = 0.0
    for i in range(model.n_bodies):
        E, r = transform_parts(X0[i])
        c = r + (np.swapaxes(E, -1, -2) @ com_body[i][:, None])[..., 0]
        energy = energy - mass[i] * (c @ model.gravity)
    return energy


def centroidal_momentum(model: Model, q, v) -> np.ndarray:
    """Spatial momentum about the centre of mass in world axes, [linear; angular], of the
    bodies (the armature's rotors are not bodies of the tree: Pinocchio leaves them out too)."""
    q = check_vector(q, model.nq, "q")
    vel = _body_velocities(model, q, v)
    X0 = body_transforms(model, q)
    h_world = 0.0
    for i in range(model.n_bodies):
        h_world = h_world + force_apply_transpose(X0[i], motion_apply(model.inertia[i], vel[i]))
    com = center_of_mass(model, q)
    linear = h_world[..., 3:]
    angular = h_world[..., :3] - np.cross(com, linear)
    return np.concatenate([linear, angular], axis=-1)


def link_acceleration(model: Model, q, v, a, link: str, point=None) -> np.ndarray:
    """Classical acceleration [linear; angular] of a point of ``link`` in world axes.

    ``point`` is in link coordinates (default: the link origin). Gravity is not included, so
    with a = 0 this is the bias term J̇ v of the point's Jacobian.
    """
    q = check_vector(q, model.nq, "q")
    v = check_vector(v, model.nv, "v")
    a = check_vector(a, model.nv, "a")
    _, vel, _, acc = _forward_pass(model, q, v, a)
    X0 = body_transforms(model, q)
    X_link, body = _link_transform(model, X0, link)
    if body < 0:
        return np.zeros(6)
    frame = model.frames[link].X_from_body
    v_link, a_link = frame @ vel[body], frame @ acc[body]  # spatial, link coordinates
    omega, v_origin = v_link[:3], v_link[3:]
    alpha, a_origin = a_link[:3], a_link[3:]
    r = np.zeros(3) if point is None else np.asarray(point, dtype=float)
    v_point = v_origin + np.cross(omega, r)
    linear = a_origin + np.cross(alpha, r) + np.cross(omega, v_point)  # spatial → classical
    R = X_link[:3, :3].T
    return np.concatenate([R @ linear, R @ alpha])


def point_jacobian(model: Model, q, link: str, point=None) -> np.ndarray:
    """3×nv Jacobian of the world velocity of a point of ``link`` (link coordinates)."""
    J = link_jacobian(model, q, link, "local_world_aligned")
    if point is None:
        return J[:3]
    R = link_pose(model, q, link)[:3, :3]
    offset = R @ np.asarray(point, dtype=float)
    return J[:3] - np.cross(offset, J[3:].T).T


class Kinematics:
    """One forward pass at (q, v) from which any link's pose, point Jacobian and bias
    acceleration J̇ v follow without another pass (constraint rows need several of each).

    The functions above (``link_pose``, ``point_jacobian``, ``link_acceleration`` with a = 0)
    are the readable references; tests hold this to them.
    """

    def __init__(self, model: Model, q, v) -> None:
        q = check_vector(q, model.nq, "q")
        v = check_vector(v, model.nv, "v")
        if q.ndim != 1:
            raise ValueError("Kinematics takes a single state")
        Xup, self.vel, _, self.acc = _forward_pass(model, q, v, np.zeros(model.nv))
        self.model = model
        # vel: spatial velocities, acc: velocity-product accelerations (q̈ = 0), body coordinates
        self.X0: list[np.ndarray] = []
        for i in range(model.n_bodies):
            p = model.parent[i]
            self.X0.append(Xup[i] if p < 0 else Xup[i] @ self.X0[p])
        self._links: dict[str, tuple] = {}

    def _link(self, link: str) -> tuple:
        """(X_link, R world-from-link, origin, 6×nv Jacobian [linear; angular] world axes)."""
        if link not in self._links:
            X_link, body = _link_transform(self.model, self.X0, link)
            E, r = transform_parts(X_link)
            J = np.zeros((6, self.model.nv))
            b = body
            while b >= 0:
                dofs, scale = _dof(self.model, b)
                J[:, dofs] += scale * (X_link @ plux_inverse(self.X0[b]) @ self.model.S[b])
                b = self.model.parent[b]
            R = E.T
            J_world_axes = np.vstack([R @ J[3:], R @ J[:3]])
            self._links[link] = (X_link, body, R, r, J_world_axes)
        return self._links[link]

    def pose(self, link: str) -> np.ndarray:
        _, _, R, r, _ = self._link(link)
        T = np.eye(4)
        T[:3, :3], T[:3, 3] = R, r
        return T

    def point(self, link: str, point=None) -> np.ndarray:
        """World position of a point of ``link`` (link coordinates)."""
        _, _, R, r, _ = self._link(link)
        return r if point is None else r + R @ np.asarray(point, dtype=float)

    def jacobian(self, link: str, point=None) -> np.ndarray:
        """6×nv: [world velocity of the point; angular velocity], world axes."""
        _, _, R, _, J = self._link(link)
        if point is None:
            return J
        offset = R @ np.asarray(point, dtype=float)
        return np.vstack([J[:3] - skew(offset) @ J[3:], J[3:]])

    def bias(self, link: str, point=None) -> np.ndarray:
        """Classical acceleration [linear; angular] of the point at q̈ = 0, world axes."""
        X_link, body, R, _, _ = self._link(link)
        if body < 0:
            return np.zeros(6)
        frame = self.model.frames[link].X_from_body
        v_link, a_link = frame @ self.vel[body], frame @ self.acc[body]
        omega, v_origin = v_link[:3], v_link[3:]
        alpha, a_origin = a_link[:3], a_link[3:]
        r = np.zeros(3) if point is None else np.asarray(point, dtype=float)
        w = skew(omega)
        linear = a_origin + skew(alpha) @ r + w @ (v_origin + w @ r)
        return np.concatenate([R @ linear, R @ alpha])
