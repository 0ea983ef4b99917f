# SPDX-License-Identifier: Apache-2.0
"""URDF → Featherstone system model [F08 §4.1–4.4] (references: docs/conventions.md).

Bodies are numbered regularly (parent λ(i) < i; depth-first, children in URDF order).
Fixed joints weld their child link into the parent body (inertia merged, the link kept as a
frame). Mimic joints are bodies whose joint variable follows ``multiplier·q_leader + offset``;
the public coordinates q, v hold only independent joints (docs/conventions.md).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .checks import check_rotational_inertia
from .joints import JointModel, motion_subspace
from .spatial import mcI, plux, rotation_about_axis, rpy_to_matrix

__all__ = ["DEFAULT_GRAVITY", "Frame", "Model", "URDFError", "load_model"]

DEFAULT_GRAVITY = (0.0, 0.0, -9.81)
MAX_URDF_BYTES = 20_000_000
# Bodies (moving joints) per model: a humanoid has ~40; the generated kernels grow ~n², and the
# reference algorithms ~n, so a description this large is refused rather than stalling a node.
MAX_BODIES = 1000
# No robot has a link heavier than 1e9 kg or an offset longer than 1e9 m; numbers past this
# bound would overflow the dynamics (inertias go as m·r²) into inf/NaN torques
MAX_MAGNITUDE = 1e9
_URDF_JOINT_KINDS = {
    "revolute": "revolute",
    "continuous": "revolute",
    "prismatic": "prismatic",
    "fixed": None,
    "floating": "free",
    "planar": "planar",
}


class URDFError(ValueError):
    """A URDF that cannot be turned into a valid model; the message names the element."""


@dataclass(frozen=True)
class Frame:
    """A link frame rigidly attached to body ``body`` (-1: the world)."""

    body: int
    X_from_body: np.ndarray  # Plücker transform, body coordinates → link coordinates


@dataclass
class Model:
    """A plain system model: everything the algorithms need, nothing they don't."""

    name: str
    gravity: np.ndarray
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
    position_lower: np.ndarray  # (nq,)
    position_upper: np.ndarray  # (nq,)
    velocity_limit: np.ndarray  # (nv,)
    effort_limit: np.ndarray  # (nv,)
    damping: np.ndarray  # (nv,)
    friction: np.ndarray  # (nv,)
    frames: dict[str, Frame]
    mimic_joints: dict[str, tuple[str, float, float]]
    root_link: str
    floating_base: bool
    continuous_joints: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # moving joints whose whole subtree carries no mass or inertia → the links they move
    massless_joints: dict[str, list[str]] = field(default_factory=dict)

    @property
    def n_bodies(self) -> int:
        return len(self.parent)

    @property
    def has_mimic(self) -> bool:
        return any(m is not None for m in self.body_mimic)

    @property
    def body_masses(self) -> np.ndarray:
        return np.array([inertia[5, 5] for inertia in self.inertia])

    @property
    def total_mass(self) -> float:
        return float(self.body_masses.sum())

    @property
    def actuated_joint_names(self) -> list[str]:
        """Independent 1-DoF joints, in tree order: what a joint-space controller drives."""
        return [
            n for n, k in zip(self.joint_names, self.joint_kinds) if k in ("revolute", "prismatic")
        ]

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
        try:
            return self.joint_names.index(name)
        except ValueError:
            raise KeyError(f"unknown joint {name!r}; joints are {self.joint_names}") from None

    def neutral_configuration(self) -> np.ndarray:
        q = np.zeros(self.nq)
        for kind, qi in zip(self.joint_kinds, self.joint_q_index):
            if kind == "free":
                q[qi + 6] = 1.0
        return q

    def summary(self) -> str:
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


# ----------------------------------------------------------------------------- parsing


@dataclass
class _Link:
    name: str
    mass: float = 0.0
    com: np.ndarray = field(default_factory=lambda: np.zeros(3))
    inertia_com: np.ndarray = field(default_factory=lambda: np.zeros((3, 3)))

    def spatial_inertia(self) -> np.ndarray:
        return mcI(self.mass, self.com, self.inertia_com)


@dataclass
class _Joint:
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
    mimic: tuple[str, float, float] | None = None


def _floats(text: str | None, count: int, where: str, default: tuple[float, ...] | None = None):
    if text is None:
        if default is None:
            raise URDFError(f"{where}: missing value")
        return np.array(default, dtype=float)
    try:
        values = [float(tok) for tok in text.split()]
    except ValueError:
        raise URDFError(f"{where}: {text!r} is not a list of {count} numbers") from None
    if len(values) != count:
        raise URDFError(f"{where}: expected {count} numbers, got {text!r}")
    if not all(math.isfinite(v) for v in values):
        raise URDFError(f"{where}: non-finite number in {text!r}")
    if any(abs(v) > MAX_MAGNITUDE for v in values):
        raise URDFError(f"{where}: {text!r} is implausibly large (limit {MAX_MAGNITUDE:g})")
    return np.array(values)


def _number(text: str, where: str, allow_inf: bool = False,
            largest: float = MAX_MAGNITUDE) -> float:
    """``text`` as a float: never NaN, ±inf only if ``allow_inf``, finite within ±``largest``."""
    try:
        value = float(text)
    except ValueError:
        raise URDFError(f"{where}: {text!r} is not a number") from None
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise URDFError(f"{where}: non-finite number {text!r}")
    if math.isfinite(value) and abs(value) > largest:
        raise URDFError(f"{where}: {text!r} is implausibly large (limit {largest:g})")
    return value


def _float(text: str | None, where: str, default: float | None = None, allow_inf=False) -> float:
    if text is None:
        if default is None:
            raise URDFError(f"{where}: missing value")
        return default
    # a limit (allow_inf) may be as large as the URDF says: inf is its "unlimited"
    return _number(text, where, allow_inf, math.inf if allow_inf else MAX_MAGNITUDE)


def _origin(elem: ET.Element | None, where: str) -> tuple[np.ndarray, np.ndarray]:
    if elem is None:
        return np.eye(3), np.zeros(3)
    xyz = _floats(elem.get("xyz"), 3, f"{where} <origin xyz>", (0.0, 0.0, 0.0))
    rpy = _floats(elem.get("rpy"), 3, f"{where} <origin rpy>", (0.0, 0.0, 0.0))
    return rpy_to_matrix(rpy), xyz


def _parse_link(elem: ET.Element) -> _Link:
    name = elem.get("name")
    if not name:
        raise URDFError("<link> without a name")
    link = _Link(name)
    inertial = elem.find("inertial")
    if inertial is None:
        return link
    where = f"link {name!r} <inertial>"
    mass_elem = inertial.find("mass")
    link.mass = _float(
        None if mass_elem is None else mass_elem.get("value"), f"{where} <mass>", 0.0
    )
    if link.mass < 0:
        raise URDFError(f"{where}: negative mass {link.mass}")
    rot, link.com = _origin(inertial.find("origin"), where)
    ie = inertial.find("inertia")
    keys = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
    vals = dict.fromkeys(keys, 0.0)
    if ie is not None:
        vals = {k: _float(ie.get(k), f"{where} <inertia {k}>", 0.0) for k in keys}
    inertia = np.array(
        [
            [vals["ixx"], vals["ixy"], vals["ixz"]],
            [vals["ixy"], vals["iyy"], vals["iyz"]],
            [vals["ixz"], vals["iyz"], vals["izz"]],
        ]
    )
    check_rotational_inertia(inertia, f"{where}:", URDFError)
    link.inertia_com = rot @ inertia @ rot.T
    return link


def _parse_joint(elem: ET.Element) -> _Joint:
    name = elem.get("name")
    if not name:
        raise URDFError("<joint> without a name")
    where = f"joint {name!r}"
    urdf_type = elem.get("type")
    if urdf_type not in _URDF_JOINT_KINDS:
        raise URDFError(f"{where}: unknown joint type {urdf_type!r}")
    parent, child = elem.find("parent"), elem.find("child")
    if parent is None or not parent.get("link"):
        raise URDFError(f"{where}: missing <parent link=...>")
    if child is None or not child.get("link"):
        raise URDFError(f"{where}: missing <child link=...>")
    rot, pos = _origin(elem.find("origin"), where)
    axis_elem = elem.find("axis")
    axis = _floats(
        None if axis_elem is None else axis_elem.get("xyz"), 3, f"{where} <axis>", (1.0, 0.0, 0.0)
    )
    norm = float(np.linalg.norm(axis))
    if urdf_type not in ("fixed", "floating") and norm < 1e-12:
        raise URDFError(f"{where}: zero <axis>")
    joint = _Joint(
        name,
        urdf_type,
        parent.get("link"),
        child.get("link"),
        rot,
        pos,
        axis / norm if norm > 0 else axis,
    )
    limit = elem.find("limit")
    if limit is not None and urdf_type in ("revolute", "prismatic", "continuous"):
        joint.effort = abs(_float(limit.get("effort"), f"{where} <limit effort>", math.inf, True))
        joint.velocity = abs(
            _float(limit.get("velocity"), f"{where} <limit velocity>", math.inf, True)
        )
        if urdf_type != "continuous":
            joint.lower = _float(limit.get("lower"), f"{where} <limit lower>", 0.0, True)
            joint.upper = _float(limit.get("upper"), f"{where} <limit upper>", 0.0, True)
            if joint.lower > joint.upper:
                raise URDFError(f"{where}: <limit> lower {joint.lower} > upper {joint.upper}")
    dyn = elem.find("dynamics")
    if dyn is not None:
        joint.damping = _float(dyn.get("damping"), f"{where} <dynamics damping>", 0.0)
        joint.friction = _float(dyn.get("friction"), f"{where} <dynamics friction>", 0.0)
        if joint.damping < 0 or joint.friction < 0:
            raise URDFError(f"{where}: negative <dynamics> damping or friction")
    mimic = elem.find("mimic")
    if mimic is not None and urdf_type != "fixed":  # a welded joint has nothing to follow
        if not mimic.get("joint"):
            raise URDFError(f"{where}: <mimic> without joint=")
        if urdf_type not in ("revolute", "prismatic", "continuous"):
            raise URDFError(f"{where}: only 1-DoF joints can mimic (type {urdf_type!r})")
        joint.mimic = (
            mimic.get("joint"),
            _float(mimic.get("multiplier"), f"{where} <mimic multiplier>", 1.0),
            _float(mimic.get("offset"), f"{where} <mimic offset>", 0.0),
        )
    return joint


def _read_source(source: str | Path) -> str:
    if isinstance(source, Path) or "<" not in str(source):
        path = Path(source)
        if not path.is_file():
            raise URDFError(f"URDF file {str(path)!r} does not exist")
        if path.stat().st_size > MAX_URDF_BYTES:
            raise URDFError(f"URDF file {str(path)!r} is larger than {MAX_URDF_BYTES} bytes")
        return path.read_text(encoding="utf-8", errors="replace")
    return str(source)


def _parse_xml(text: str) -> ET.Element:
    if len(text) > MAX_URDF_BYTES:
        raise URDFError(f"URDF is larger than {MAX_URDF_BYTES} bytes")
    # A URDF never needs a DTD; refusing them rules out entity-expansion attacks.
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise URDFError("URDF contains a DTD or entity declaration, which is not allowed")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise URDFError(f"malformed XML: {exc}") from None
    except RecursionError:
        raise URDFError("malformed XML: nesting too deep") from None
    if root.tag != "robot":
        raise URDFError(f"root element is <{root.tag}>, expected <robot>")
    return root


def _resolve_mimics(joints: dict[str, _Joint]) -> dict[str, tuple[str, float, float]]:
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


def load_model(
    source: str | Path,
    *,
    floating_base: bool = False,
    gravity: tuple[float, float, float] | np.ndarray = DEFAULT_GRAVITY,
    root_joint_name: str = "root_joint",
) -> Model:
    """Build a system model from a URDF given as an XML string or a file path.

    ``floating_base`` adds a free-flyer joint between the world and the root link.
    Raises ``URDFError`` naming the element and the problem for anything invalid.
    """
    gravity = np.asarray(gravity, dtype=float)
    if gravity.shape != (3,) or not np.all(np.isfinite(gravity)):
        raise ValueError(f"gravity must be 3 finite numbers, got {gravity!r}")
    root = _parse_xml(_read_source(source))

    links: dict[str, _Link] = {}
    for elem in root.findall("link"):
        link = _parse_link(elem)
        if link.name in links:
            raise URDFError(f"link {link.name!r} is defined twice")
        links[link.name] = link
    if not links:
        raise URDFError("URDF has no <link>")
    joints: dict[str, _Joint] = {}
    children: dict[str, list[_Joint]] = {name: [] for name in links}
    parent_joint: dict[str, _Joint] = {}
    for elem in root.findall("joint"):
        joint = _parse_joint(elem)
        if joint.name in joints:
            raise URDFError(f"joint {joint.name!r} is defined twice")
        for role, link_name in (("parent", joint.parent), ("child", joint.child)):
            if link_name not in links:
                raise URDFError(f"joint {joint.name!r}: {role} link {link_name!r} does not exist")
        if joint.child in parent_joint:
            raise URDFError(
                f"link {joint.child!r} is the child of two joints "
                f"({parent_joint[joint.child].name!r} and {joint.name!r})"
            )
        joints[joint.name] = joint
        parent_joint[joint.child] = joint
        children[joint.parent].append(joint)
    roots = [name for name in links if name not in parent_joint]
    if not roots:
        raise URDFError("URDF has no root link (the joints form a cycle)")
    if len(roots) > 1:
        raise URDFError(f"URDF has {len(roots)} root links {roots}; a robot needs exactly one")
    mimics = _resolve_mimics(joints)
    builder = _TreeBuilder(links, children, mimics)
    builder.build(roots[0], floating_base, root_joint_name)
    unreached = sorted(set(links) - set(builder.frames))
    if unreached:
        raise URDFError(
            f"links {unreached} are not connected to root {roots[0]!r} (the joints form a cycle)"
        )
    return builder.finish(root.get("name", "robot"), gravity, roots[0], floating_base, joints)


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
        self.urdf_joint: list[_Joint | None] = []
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

    def _visit(self, joint: _Joint, body: int, X_link_from_body: np.ndarray) -> list:
        if joint.child in self.frames:
            raise URDFError(f"joint {joint.name!r}: link {joint.child!r} reached twice (cycle)")
        # joint frame relative to the predecessor body: X_T = X_origin · X_link_from_body
        X_origin = plux(joint.origin_rot.T, joint.origin_pos)
        kind = _URDF_JOINT_KINDS[joint.urdf_type]
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
                                         "continuous", "warnings")}
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

    def finish(self, name, gravity, root_link, floating_base, joints) -> Model:
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
