# SPDX-License-Identifier: Apache-2.0
"""The kinematic tree [F08 §4.1–4.4]: ``Model``, everything the algorithms read, and
``build_model``, which makes one from link and joint descriptions (references:
docs/conventions.md).

Bodies are numbered regularly (parent λ(i) < i; depth-first, children in description order).
Fixed joints weld their child link into the parent body (inertia merged, the link kept as a
frame). Mimic joints are bodies whose joint variable follows ``multiplier·q_leader + offset``;
the public coordinates q, v hold only independent joints (docs/conventions.md).
Units: SI (m, kg, rad, N, N·m, s).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .joints import ONE_DOF_KINDS, JointModel, motion_subspace
from .spatial import mcI, plux, rotation_about_axis
from .xml_reading import URDFError

__all__ = [
    "COULOMB_SMOOTHING",
    "DEFAULT_GRAVITY",
    "MAX_BODIES",
    "URDF_JOINT_KINDS",
    "Frame",
    "JointDescription",
    "LinkDescription",
    "Model",
    "build_model",
]

DEFAULT_GRAVITY = (0.0, 0.0, -9.81)  # m/s², world frame
# A joint's Coulomb friction (``Model.friction``) acts as friction·tanh(q̇/ε), ε this many rad/s
# or m/s, in the simulator and in the controller's friction compensation alike, so that
# compensation cancels it exactly. A sharper ε makes the friction of light links (wrists) too
# stiff for explicit integration at a 1 ms step.
COULOMB_SMOOTHING = 0.1
# Bodies (moving joints) per model: a humanoid has ~40; the generated kernels grow ~n², and the
# reference algorithms ~n, so a description this large is refused rather than stalling a node.
MAX_BODIES = 1000
# URDF joint type → joint model kind (None: a fixed joint, welded into its parent body)
URDF_JOINT_KINDS = {
    "revolute": "revolute",
    "continuous": "revolute",
    "prismatic": "prismatic",
    "fixed": None,
    "floating": "free",
    "planar": "planar",
}


@dataclass(frozen=True)
class Frame:
    """A link frame rigidly attached to body ``body`` (-1: the world)."""

    body: int
    X_from_body: np.ndarray  # Plücker transform, body coordinates → link coordinates


@dataclass
class Model:
    """A plain system model: everything the algorithms need, nothing they don't.

    Made by ``build_model`` (``load_model`` for a URDF); the algorithms only read it. Bodies are
    numbered regularly (``parent[i] < i``, -1 the world); q (nq) and v (nv) hold the
    independent joints only, each joint's coordinates from ``joint_q_index`` /
    ``joint_v_index`` (``position_indices`` / ``velocity_indices`` by name). SI units.
    """

    name: str
    gravity: np.ndarray  # (3,) m/s², world frame
    # --- the tree, one entry per body (Featherstone's λ, joint type, X_T, I) ---
    parent: list[int]
    joint: list[JointModel]
    X_tree: list[np.ndarray]
    inertia: list[np.ndarray]
    S: list[np.ndarray]
    body_names: list[str]
    body_joint_names: list[str]
    # per body: where its joint variables live in the public q and v, or its mimic leader
    body_q_index: list[int]
    body_v_index: list[int]
    body_mimic: list[tuple[int, int, float, float] | None]  # (leader q index, v index, mult, off)
    # --- independent joints (public coordinates) ---
    nq: int
    nv: int
    joint_names: list[str]
    joint_kinds: list[str]
    joint_q_index: list[int]
    joint_v_index: list[int]
    position_lower: np.ndarray  # (nq,) rad or m, -inf where unlimited
    position_upper: np.ndarray  # (nq,) rad or m, inf where unlimited
    velocity_limit: np.ndarray  # (nv,) rad/s or m/s, inf where unlimited
    effort_limit: np.ndarray  # (nv,) N·m or N, inf where unlimited
    damping: np.ndarray  # (nv,) viscous, N·m·s/rad or N·s/m
    friction: np.ndarray  # (nv,) Coulomb, N·m or N (smoothed by COULOMB_SMOOTHING)
    # URDF <safety_controller>, as ros2_control's joint_limits reads it; (nv,), NaN on the
    # coordinates of joints without one
    soft_lower: np.ndarray  # soft_lower_limit, rad or m
    soft_upper: np.ndarray  # soft_upper_limit, rad or m
    k_position: np.ndarray  # k_position, 1/s (velocity bound per unit of position past a limit)
    k_velocity: np.ndarray  # k_velocity, N·m·s/rad or N·s/m (effort bound per unit of velocity)
    frames: dict[str, Frame]  # every link, by name
    mimic_joints: dict[str, tuple[str, float, float]]  # follower → (leader, multiplier, offset)
    root_link: str
    floating_base: bool
    continuous_joints: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # moving joints whose whole subtree carries no mass or inertia → the links they move
    massless_joints: dict[str, list[str]] = field(default_factory=dict)
    # --- what a URDF leaves out (a dynamics overlay: ``model.overlay``); (nv,), zeros if None
    armature: np.ndarray | None = None  # rotor inertia on M's diagonal, kg·m² or kg
    stribeck_friction: np.ndarray | None = None  # breakaway effort above Coulomb, N·m or N
    stribeck_velocity: np.ndarray | None = None  # rad/s or m/s where it has decayed to 1/e
    effort_offset: np.ndarray | None = None  # effort sensor offset: measured = true + offset
    # (nv,) bool: True where an overlay gave the friction (viscous, Coulomb or Stribeck), that
    # is where it was identified on the arm; a URDF's <dynamics> alone leaves it False
    identified_friction: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("armature", "stribeck_friction", "stribeck_velocity", "effort_offset"):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(self.nv))
        if self.identified_friction is None:
            self.identified_friction = np.zeros(self.nv, dtype=bool)

    @property
    def n_bodies(self) -> int:
        """Bodies in the tree (one per moving joint, mimic followers included)."""
        return len(self.parent)

    @property
    def has_mimic(self) -> bool:
        """Whether any body's joint follows another joint's coordinate."""
        return any(m is not None for m in self.body_mimic)

    @property
    def body_masses(self) -> np.ndarray:
        """Mass of each body, kg (its welded links included)."""
        return np.array([inertia[5, 5] for inertia in self.inertia])

    @property
    def total_mass(self) -> float:
        """Mass of all bodies, kg (links welded to the world not counted)."""
        return float(self.body_masses.sum())

    @property
    def only_one_dof_joints(self) -> bool:
        """Whether every independent joint is revolute or prismatic (a fixed-base model whose
        joint k is coordinate k of q and of v)."""
        return all(kind in ONE_DOF_KINDS for kind in self.joint_kinds)

    @property
    def actuated_joint_names(self) -> list[str]:
        """Independent 1-DoF joints, in tree order: what a joint-space controller drives."""
        return [n for n, k in zip(self.joint_names, self.joint_kinds) if k in ONE_DOF_KINDS]

    def forward_dynamics_problem(self) -> str | None:
        """Why q̈ is undefined for this model (a joint that moves no inertia), or None.

        RNEA and gravity stay well defined; M(q) is singular, so ABA, the simulator and the
        forward-dynamics services refuse with this message (Pinocchio would return inf/NaN).
        """
        if not self.massless_joints:
            return None
        parts = [f"joint {joint!r} moves links {links}"
                 for joint, links in self.massless_joints.items()]
        return ("forward dynamics is undefined: " + "; ".join(parts)
                + " that carry no mass or inertia (give them an <inertial>)")

    def joint_index(self, name: str) -> int:
        """Position of independent joint ``name`` in ``joint_names``; KeyError if it is none."""
        try:
            return self.joint_names.index(name)
        except ValueError:
            raise KeyError(f"unknown joint {name!r}; joints are {self.joint_names}") from None

    def velocity_indices(self, names: Sequence[str]) -> np.ndarray:
        """Where each named 1-DoF joint's velocity sits in v: an int array in ``names`` order.

        Raises ValueError naming the joints that are not independent 1-DoF joints of the model
        (unknown, fixed, mimic followers, free-flyer or planar).
        """
        return self._coordinate_indices(names, self.joint_v_index)

    def position_indices(self, names: Sequence[str]) -> np.ndarray:
        """Where each named 1-DoF joint's position sits in q: an int array in ``names`` order.

        Raises ValueError as ``velocity_indices`` does.
        """
        return self._coordinate_indices(names, self.joint_q_index)

    def _coordinate_indices(self, names: Sequence[str], index: list[int]) -> np.ndarray:
        joint = {name: k for k, name in enumerate(self.joint_names)}
        unknown = [n for n in names if n not in joint]
        if unknown:
            mimic = [n for n in unknown if n in self.mimic_joints]
            hint = f" ({mimic} follow the joints they mimic)" if mimic else ""
            raise ValueError(f"joints {unknown} are not independent joints of model "
                             f"{self.name!r}{hint}; its joints are {self.joint_names}")
        multi = [n for n in names if self.joint_kinds[joint[n]] not in ONE_DOF_KINDS]
        if multi:
            raise ValueError(f"joints {multi} have more than one coordinate; a coordinate "
                             "index names a revolute or prismatic joint")
        return np.array([index[joint[n]] for n in names], dtype=int)

    def neutral_configuration(self) -> np.ndarray:
        """q with every coordinate 0 and every free-flyer quaternion the identity."""
        q = np.zeros(self.nq)
        for kind, qi in zip(self.joint_kinds, self.joint_q_index):
            if kind == "free":
                q[qi + 6] = 1.0
        return q

    def summary(self) -> str:
        """A few lines for a log: sizes, mass, base, gravity, then each joint's limits."""
        lines = [
            (
                f"model {self.name!r}: {self.n_bodies} bodies, nq={self.nq}, nv={self.nv}, "
                f"total mass {self.total_mass:.4g} kg, "
                f"{'floating' if self.floating_base else 'fixed'} base at link {self.root_link!r}"
            ),
            f"gravity {np.array2string(self.gravity, precision=4)}",
        ]
        for name, kind, qi, vi in zip(
            self.joint_names, self.joint_kinds, self.joint_q_index, self.joint_v_index
        ):
            lo, hi = self.position_lower[qi], self.position_upper[qi]
            lines.append(
                f"  {name:<28} {kind:<9} limits [{lo:.4g}, {hi:.4g}] "
                f"effort {self.effort_limit[vi]:.4g} damping {self.damping[vi]:.4g}"
            )
        for name, (leader, mult, off) in self.mimic_joints.items():
            lines.append(f"  {name:<28} mimics {leader} (×{mult:g} {off:+g})")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# ----------------------------------------------------------------------------- descriptions


@dataclass
class LinkDescription:
    """A link as a robot description gives it: mass (kg), centre of mass (m) and rotational
    inertia about the centre of mass (kg·m²), both in the link frame."""

    name: str
    mass: float = 0.0
    com: np.ndarray = field(default_factory=lambda: np.zeros(3))
    inertia_com: np.ndarray = field(default_factory=lambda: np.zeros((3, 3)))

    def spatial_inertia(self) -> np.ndarray:
        """The 6×6 spatial inertia in the link frame."""
        return mcI(self.mass, self.com, self.inertia_com)


@dataclass
class JointDescription:
    """A joint as a URDF gives it: ``urdf_type`` (a key of ``URDF_JOINT_KINDS``), the links it
    connects, its origin in the parent link frame (rotation, position in m), its unit axis,
    limits (rad or m, rad/s or m/s, N·m or N; ±inf when absent), ``<dynamics>`` losses,
    ``safety`` = ``<safety_controller>`` (soft_lower_limit, soft_upper_limit, k_position,
    k_velocity) and ``mimic`` = (leader joint, multiplier, offset)."""

    name: str
    urdf_type: str
    parent: str
    child: str
    origin_rot: np.ndarray
    origin_pos: np.ndarray
    axis: np.ndarray
    lower: float = -math.inf
    upper: float = math.inf
    effort: float = math.inf
    velocity: float = math.inf
    damping: float = 0.0
    friction: float = 0.0
    safety: tuple[float, float, float, float] | None = None
    mimic: tuple[str, float, float] | None = None


# ----------------------------------------------------------------------------- building


def build_model(
    name: str,
    links: Sequence[LinkDescription],
    joints: Sequence[JointDescription],
    *,
    floating_base: bool = False,
    gravity: tuple[float, float, float] | np.ndarray = DEFAULT_GRAVITY,
    root_joint_name: str = "root_joint",
) -> Model:
    """The model of the tree that ``joints`` make of ``links``.

    ``floating_base`` adds a free-flyer joint named ``root_joint_name`` between the world and
    the root link; ``gravity`` (m/s², world frame) must be 3 finite numbers (else
    ``ValueError``). Raises ``URDFError`` naming the link or joint for a structure that is not
    one tree (names defined twice, unknown links, a link with two parent joints, no or several
    root links, cycles, mimic chains that do not end at a 1-DoF joint) and for more than
    ``MAX_BODIES`` moving joints.
    """
    gravity = np.asarray(gravity, dtype=float)
    if gravity.shape != (3,) or not np.all(np.isfinite(gravity)):
        raise ValueError(f"gravity must be 3 finite numbers, got {gravity!r}")
    by_name: dict[str, LinkDescription] = {}
    for link in links:
        if link.name in by_name:
            raise URDFError(f"link {link.name!r} is defined twice")
        by_name[link.name] = link
    if not by_name:
        raise URDFError("URDF has no <link>")
    joint_by_name: dict[str, JointDescription] = {}
    children: dict[str, list[JointDescription]] = {link: [] for link in by_name}
    parent_joint: dict[str, JointDescription] = {}
    for joint in joints:
        if joint.name in joint_by_name:
            raise URDFError(f"joint {joint.name!r} is defined twice")
        for role, link_name in (("parent", joint.parent), ("child", joint.child)):
            if link_name not in by_name:
                raise URDFError(f"joint {joint.name!r}: {role} link {link_name!r} does not exist")
        if joint.child in parent_joint:
            raise URDFError(
                f"link {joint.child!r} is the child of two joints "
                f"({parent_joint[joint.child].name!r} and {joint.name!r})"
            )
        joint_by_name[joint.name] = joint
        parent_joint[joint.child] = joint
        children[joint.parent].append(joint)
    roots = [link for link in by_name if link not in parent_joint]
    if not roots:
        raise URDFError("URDF has no root link (the joints form a cycle)")
    if len(roots) > 1:
        raise URDFError(f"URDF has {len(roots)} root links {roots}; a robot needs exactly one")
    builder = _TreeBuilder(by_name, children, _resolve_mimics(joint_by_name))
    builder.build(roots[0], floating_base, root_joint_name)
    unreached = sorted(set(by_name) - set(builder.frames))
    if unreached:
        raise URDFError(
            f"links {unreached} are not connected to root {roots[0]!r} (the joints form a cycle)"
        )
    return builder.finish(name, gravity, roots[0], floating_base)


def _resolve_mimics(joints: dict[str, JointDescription]) -> dict[str, tuple[str, float, float]]:
    """Follow mimic chains to an independent leader: q = mult·q_leader + offset."""
    resolved: dict[str, tuple[str, float, float]] = {}
    for name, joint in joints.items():
        if joint.mimic is None:
            continue
        mult, off, current, seen = 1.0, 0.0, joint, [name]
        while current.mimic is not None:
            leader, m, o = current.mimic
            if leader not in joints:
                raise URDFError(f"joint {current.name!r}: <mimic> names unknown joint {leader!r}")
            if leader in seen:
                raise URDFError(
                    f"joint {name!r}: mimic chain {' -> '.join(seen + [leader])} "
                    "points back at itself"
                )
            mult, off = mult * m, mult * o + off
            seen.append(leader)
            current = joints[leader]
        if current.urdf_type not in ("revolute", "prismatic", "continuous"):
            raise URDFError(f"joint {name!r}: mimics {current.name!r}, which is not a 1-DoF joint")
        resolved[name] = (current.name, mult, off)
    return resolved



class _TreeBuilder:
    """Depth-first walk that numbers bodies regularly and welds fixed joints."""

    def __init__(self, links, children, mimics):
        self.links, self.children, self.mimics = links, children, mimics
        self.parent: list[int] = []
        self.joint: list[JointModel] = []
        self.X_tree: list[np.ndarray] = []
        self.inertia: list[np.ndarray] = []
        self.body_names: list[str] = []
        self.body_joint_names: list[str] = []
        self.urdf_joint: list[JointDescription | None] = []
        self.frames: dict[str, Frame] = {}

    def _add_body(self, parent, joint_model, X_T, link_name, joint_name, urdf_joint):
        self.parent.append(parent)
        self.joint.append(joint_model)
        self.X_tree.append(X_T)
        self.inertia.append(np.zeros((6, 6)))
        self.body_names.append(link_name)
        self.body_joint_names.append(joint_name)
        self.urdf_joint.append(urdf_joint)
        return len(self.parent) - 1

    def _attach_link(self, link_name: str, body: int, X_link_from_body: np.ndarray) -> list:
        """Weld ``link_name`` into ``body``; returns its child joints still to visit."""
        self.frames[link_name] = Frame(body, X_link_from_body)
        if body >= 0:
            X = X_link_from_body
            self.inertia[body] += X.T @ self.links[link_name].spatial_inertia() @ X
        return [(joint, body, X_link_from_body) for joint in self.children[link_name]]

    def build(self, root: str, floating_base: bool, root_joint_name: str) -> None:
        """Depth-first, children in URDF order, with an explicit stack: a chain of thousands
        of links must not exhaust Python's recursion limit."""
        if floating_base:
            body = self._add_body(-1, JointModel("free", np.zeros(3)), np.eye(6), root,
                                  root_joint_name, None)
            pending = self._attach_link(root, body, np.eye(6))
        else:
            pending = self._attach_link(root, -1, np.eye(6))
        stack = list(reversed(pending))
        while stack:
            if len(self.parent) > MAX_BODIES:
                raise URDFError(f"more than {MAX_BODIES} moving joints: larger than any robot "
                                "this package serves (documented limit)")
            stack.extend(reversed(self._visit(*stack.pop())))

    def _visit(self, joint: JointDescription, body: int, X_link_from_body: np.ndarray) -> list:
        if joint.child in self.frames:
            raise URDFError(f"joint {joint.name!r}: link {joint.child!r} reached twice (cycle)")
        # joint frame relative to the predecessor body: X_T = X_origin · X_link_from_body
        X_origin = plux(joint.origin_rot.T, joint.origin_pos)
        kind = URDF_JOINT_KINDS[joint.urdf_type]
        if kind is None:
            return self._attach_link(joint.child, body, X_origin @ X_link_from_body)
        X_child_from_body = np.eye(6)
        axis = joint.axis
        if kind == "planar":
            # The planar joint moves in its own xy plane; turn z onto the URDF axis.
            R_n = _rotation_z_to(joint.axis)
            X_origin = plux(R_n.T, np.zeros(3)) @ X_origin
            X_child_from_body = plux(R_n, np.zeros(3))
            axis = np.array([0.0, 0.0, 1.0])
        new = self._add_body(body, JointModel(kind, axis), X_origin @ X_link_from_body,
                             joint.child, joint.name, joint)
        return self._attach_link(joint.child, new, X_child_from_body)

    def _coordinates(self) -> dict:
        """The independent joints in body order: where their coordinates sit in q and v, and
        their URDF limits and losses (one entry per coordinate)."""
        out: dict = {key: [] for key in ("names", "kinds", "q_index", "v_index", "lower", "upper",
                                         "velocity", "effort", "damping", "friction",
                                         "safety", "continuous", "warnings")}
        self.body_q_index, self.body_v_index = [-1] * len(self.parent), [-1] * len(self.parent)
        nq = nv = 0
        for i, (name, urdf) in enumerate(zip(self.body_joint_names, self.urdf_joint)):
            if name in self.mimics:
                continue
            jm = self.joint[i]
            self.body_q_index[i], self.body_v_index[i] = nq, nv
            for key, value in (("names", name), ("kinds", jm.kind), ("q_index", nq),
                               ("v_index", nv)):
                out[key].append(value)
            if jm.nv == 1:
                for key in ("lower", "upper", "velocity", "effort", "damping", "friction"):
                    out[key].append(getattr(urdf, key))
                out["safety"].append(urdf.safety or (math.nan,) * 4)
                if urdf.urdf_type == "continuous":
                    out["continuous"].append(name)
                if math.isinf(urdf.effort):
                    out["warnings"].append(f"joint {name!r} has no effort limit: commands are "
                                           "not clamped")
            else:  # a free-flyer or planar joint: no limits; losses as the URDF says
                out["lower"] += [-math.inf] * jm.nq
                out["upper"] += [math.inf] * jm.nq
                out["velocity"] += [math.inf] * jm.nv
                out["effort"] += [math.inf] * jm.nv
                out["damping"] += [0.0 if urdf is None else urdf.damping] * jm.nv
                out["friction"] += [0.0 if urdf is None else urdf.friction] * jm.nv
                out["safety"] += [(math.nan,) * 4] * jm.nv
            nq, nv = nq + jm.nq, nv + jm.nv
        out["nq"], out["nv"] = nq, nv
        return out

    def _body_mimics(self) -> list[tuple[int, int, float, float] | None]:
        """Per body: (leader q index, leader v index, multiplier, offset) of a mimic joint."""
        out: list[tuple[int, int, float, float] | None] = []
        for name in self.body_joint_names:
            if name not in self.mimics:
                out.append(None)
                continue
            leader, multiplier, offset = self.mimics[name]
            lb = self.body_joint_names.index(leader)
            out.append((self.body_q_index[lb], self.body_v_index[lb], multiplier, offset))
        return out

    def finish(self, name, gravity, root_link, floating_base) -> Model:
        c = self._coordinates()
        massless = self._massless_joints()
        if massless:
            c["warnings"].append(f"joints {sorted(massless)} move links without mass or "
                                 "inertia: forward dynamics is undefined (inverse dynamics works)")
        return Model(
            name=name, gravity=gravity, parent=self.parent, joint=self.joint,
            X_tree=self.X_tree, inertia=self.inertia, S=[motion_subspace(j) for j in self.joint],
            body_names=self.body_names, body_joint_names=self.body_joint_names,
            body_q_index=self.body_q_index, body_v_index=self.body_v_index,
            body_mimic=self._body_mimics(), nq=c["nq"], nv=c["nv"], joint_names=c["names"],
            joint_kinds=c["kinds"], joint_q_index=c["q_index"], joint_v_index=c["v_index"],
            position_lower=np.array(c["lower"], dtype=float),
            position_upper=np.array(c["upper"], dtype=float),
            velocity_limit=np.array(c["velocity"], dtype=float),
            effort_limit=np.array(c["effort"], dtype=float),
            damping=np.array(c["damping"], dtype=float),
            friction=np.array(c["friction"], dtype=float),
            **dict(zip(("soft_lower", "soft_upper", "k_position", "k_velocity"),
                       np.array(c["safety"], dtype=float).reshape(-1, 4).T.copy())),
            frames=self.frames, mimic_joints=dict(self.mimics), root_link=root_link,
            floating_base=floating_base, continuous_joints=c["continuous"],
            warnings=c["warnings"], massless_joints=massless)

    def _massless_joints(self) -> dict[str, list[str]]:
        """The topmost independent joints whose bodies' subtrees have no inertia at all.

        A mimic joint shares its leader's coordinate: the coordinate is stuck only when every
        body it moves (the leader's and the followers') carries nothing.
        """
        nb = len(self.parent)
        empty = [not self.inertia[i].any() for i in range(nb)]
        for i in reversed(range(nb)):  # children come after their parent
            p = self.parent[i]
            if p >= 0 and not empty[i]:
                empty[p] = False
        driven: dict[str, list[int]] = {}  # independent joint → the bodies its coordinate moves
        for i, name in enumerate(self.body_joint_names):
            leader = self.mimics[name][0] if name in self.mimics else name
            driven.setdefault(leader, []).append(i)
        out: dict[str, list[str]] = {}
        for joint, bodies in driven.items():
            if not all(empty[i] for i in bodies):
                continue
            if any(self.parent[i] >= 0 and empty[self.parent[i]] for i in bodies):
                continue  # an ancestor's coordinate is stuck already, and named
            subtree = set(bodies)
            for k in range(min(bodies) + 1, nb):
                if self.parent[k] in subtree:
                    subtree.add(k)
            out[joint] = [link for link, frame in self.frames.items() if frame.body in subtree]
        return out


def _rotation_z_to(n: np.ndarray) -> np.ndarray:
    """The smallest rotation taking the z axis onto the unit vector n (identity for n = z)."""
    z = np.array([0.0, 0.0, 1.0])
    k = np.cross(z, n)
    s, c = float(np.linalg.norm(k)), float(n @ z)
    if s < 1e-12:
        return np.eye(3) if c > 0 else np.diag([1.0, -1.0, -1.0])
    return rotation_about_axis(k / s, math.atan2(s, c))
