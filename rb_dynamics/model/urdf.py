# SPDX-License-Identifier: Apache-2.0
"""URDF → ``Model``: ``load_model`` reads the ``<link>`` and ``<joint>`` elements of a URDF into
link and joint descriptions and builds the tree from them (``tree.build_model``).

Units as in URDF (m, kg, kg·m², rad, N·m or N). Every problem is a ``URDFError`` naming the
element and attribute.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from .checks import check_rotational_inertia
from .spatial import rpy_to_matrix
from .tree import (
    DEFAULT_GRAVITY,
    URDF_JOINT_KINDS,
    JointDescription,
    LinkDescription,
    Model,
    build_model,
)
from .xml_reading import (
    MAX_MAGNITUDE,
    URDFError,
    parse_number,
    parse_numbers,
    parse_xml,
    read_source,
)

__all__ = ["load_model"]


def load_model(
    source: str | Path,
    *,
    floating_base: bool = False,
    gravity: tuple[float, float, float] | np.ndarray = DEFAULT_GRAVITY,
    root_joint_name: str = "root_joint",
) -> Model:
    """Build a system model from a URDF given as an XML string or a file path.

    ``floating_base`` adds a free-flyer joint between the world and the root link; ``gravity``
    is in m/s², world frame (``ValueError`` unless 3 finite numbers). Raises ``URDFError``
    naming the element and the problem for anything invalid (``tree.build_model`` for the
    structure).
    """
    root = parse_xml(read_source(source))
    links = [_parse_link(elem) for elem in root.findall("link")]
    joints = [_parse_joint(elem) for elem in root.findall("joint")]
    return build_model(root.get("name", "robot"), links, joints, floating_base=floating_base,
                       gravity=gravity, root_joint_name=root_joint_name)


def _float(text: str | None, where: str, default: float | None = None, allow_inf=False) -> float:
    if text is None:
        if default is None:
            raise URDFError(f"{where}: missing value")
        return default
    # a limit (allow_inf) may be as large as the URDF says: inf is its "unlimited"
    return parse_number(text, where, allow_inf, math.inf if allow_inf else MAX_MAGNITUDE)


def _origin(elem: ET.Element | None, where: str) -> tuple[np.ndarray, np.ndarray]:
    if elem is None:
        return np.eye(3), np.zeros(3)
    xyz = parse_numbers(elem.get("xyz"), 3, f"{where} <origin xyz>", (0.0, 0.0, 0.0))
    rpy = parse_numbers(elem.get("rpy"), 3, f"{where} <origin rpy>", (0.0, 0.0, 0.0))
    return rpy_to_matrix(rpy), xyz


def _parse_link(elem: ET.Element) -> LinkDescription:
    name = elem.get("name")
    if not name:
        raise URDFError("<link> without a name")
    link = LinkDescription(name)
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


def _parse_joint(elem: ET.Element) -> JointDescription:
    name = elem.get("name")
    if not name:
        raise URDFError("<joint> without a name")
    where = f"joint {name!r}"
    urdf_type = elem.get("type")
    if urdf_type not in URDF_JOINT_KINDS:
        raise URDFError(f"{where}: unknown joint type {urdf_type!r}")
    parent, child = elem.find("parent"), elem.find("child")
    if parent is None or not parent.get("link"):
        raise URDFError(f"{where}: missing <parent link=...>")
    if child is None or not child.get("link"):
        raise URDFError(f"{where}: missing <child link=...>")
    rot, pos = _origin(elem.find("origin"), where)
    axis_elem = elem.find("axis")
    axis = parse_numbers(
        None if axis_elem is None else axis_elem.get("xyz"), 3, f"{where} <axis>", (1.0, 0.0, 0.0)
    )
    norm = float(np.linalg.norm(axis))
    if urdf_type not in ("fixed", "floating") and norm < 1e-12:
        raise URDFError(f"{where}: zero <axis>")
    joint = JointDescription(
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
    safety = elem.find("safety_controller")
    if safety is not None and urdf_type in ("revolute", "prismatic", "continuous"):
        # urdfdom's reading: the limits and k_position default to 0, k_velocity is required
        w = f"{where} <safety_controller"
        joint.safety = (_float(safety.get("soft_lower_limit"), f"{w} soft_lower_limit>", 0.0),
                        _float(safety.get("soft_upper_limit"), f"{w} soft_upper_limit>", 0.0),
                        _float(safety.get("k_position"), f"{w} k_position>", 0.0),
                        _float(safety.get("k_velocity"), f"{w} k_velocity>"))
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
