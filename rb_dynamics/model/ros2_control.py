# SPDX-License-Identifier: Apache-2.0
"""The URDF's ``<ros2_control>`` blocks: which joint takes which command (no ROS needed).

``read_ros2_control`` reads the blocks as ros2_control's ``hardware_interface`` component parser
does (``parse_control_resources_from_urdf``, jazzy): ``<ros2_control name= type=>`` with
``<hardware><plugin>…</plugin><param name=…>…</param></hardware>``, ``<joint name= [mimic=]>``,
``<command_interface name=>`` / ``<state_interface name=>`` holding ``<param name="min|max|
initial_value">``, ``data_type=`` / ``size=`` attributes and ``<limits enable=>``, plus
``<sensor>``, ``<gpio>``, ``<transmission>`` and ``<properties>`` (read, not simulated). An
unknown child tag is an error there and here. Facts and sources:
docs/ros2_control_topic_interface.md.

``command_layout`` maps the blocks onto a model: per movable joint, the JointState fields
(position, velocity, effort) it accepts, the command ranges (block ``min``/``max`` combined with
the URDF ``<limit>``, the most restrictive winning, as ros2_control's ``update_interface_limits``
does) and the initial values. ``CommandLayout.decode`` reads a JointState command by name, in
both layouts it arrives in (see there).

Conventions (documented in the README):
- no block: every movable joint takes efforts;
- with blocks: a joint takes exactly the fields of its command interfaces; a movable joint in no
  block is passive (no command, zero effort), as in ros2_control, where such a joint has no
  interface, and in gz_ros2_control, which leaves it unactuated. ``absent="effort"`` makes those
  joints take efforts instead;
- a joint that mimics another in the URDF is driven through its leader: ros2_control itself
  refuses command interfaces on it unless ``mimic="false"``; with ``mimic="false"`` its command
  interfaces are ignored here, with a warning (the model couples it rigidly).
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .checks import check_choice, name_list, repeated_names
from .tree import Model
from .xml_reading import URDFError, parse_number, parse_xml, read_source

__all__ = [
    "COMMAND_FIELDS",
    "CommandLayout",
    "EFFORT",
    "HardwareSystem",
    "Interface",
    "JointCommand",
    "JointInterfaces",
    "POSITION",
    "TOPIC_PLUGINS",
    "VELOCITY",
    "command_layout",
    "joint_command_modes",
    "read_ros2_control",
]

# JointState fields, in the order of every (3, n) array below; POSITION, VELOCITY, EFFORT are
# their rows
COMMAND_FIELDS = ("position", "velocity", "effort")
POSITION, VELOCITY, EFFORT = range(3)
COMPONENT_TYPES = ("system", "actuator", "sensor")
_BLOCK_CHILDREN = ("hardware", "properties", "joint", "sensor", "gpio", "transmission")
_TRUE, _FALSE = ("true", "True"), ("false", "False")
# joint_state_topic_hardware_interface's plugin, and the alias of its predecessor's name
TOPIC_PLUGINS = ("joint_state_topic_hardware_interface/JointStateTopicSystem",
                 "topic_based_ros2_control/TopicBasedSystem")


@dataclass(frozen=True)
class Interface:
    """One ``<command_interface>`` or ``<state_interface>``."""

    name: str
    minimum: float | None = None  # <param name="min">
    maximum: float | None = None  # <param name="max">
    initial_value: float | str | None = None  # a number for data_type double, else the text
    data_type: str = "double"
    size: int = 1
    limits_enabled: bool = True  # <limits enable="false"/> here or on the joint
    parameters: Mapping[str, str] = field(default_factory=dict)

    @property
    def simulated(self) -> bool:
        """A JointState field carries it: position, velocity or effort, one double."""
        return self.name in COMMAND_FIELDS and self.data_type == "double" and self.size == 1


@dataclass(frozen=True)
class JointInterfaces:
    """A ``<joint>`` of a block: its interfaces as declared."""

    name: str
    command: tuple[Interface, ...]
    state: tuple[Interface, ...]
    mimic: bool | None = None  # the mimic= attribute; None when not set
    parameters: Mapping[str, str] = field(default_factory=dict)

    @property
    def command_interfaces(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.command)

    @property
    def state_interfaces(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.state)

    @property
    def initial_values(self) -> dict[str, float]:
        """Numeric ``initial_value`` of the state interfaces (what the hardware starts at)."""
        return {i.name: i.initial_value for i in self.state
                if isinstance(i.initial_value, float)}

    @property
    def command_initial_values(self) -> dict[str, float]:
        return {i.name: i.initial_value for i in self.command
                if isinstance(i.initial_value, float)}

    @property
    def command_limits(self) -> dict[str, tuple[float, float]]:
        """``min``/``max`` of the command interfaces that declare one (±inf for a missing side)."""
        return {i.name: (-math.inf if i.minimum is None else i.minimum,
                         math.inf if i.maximum is None else i.maximum)
                for i in self.command if i.limits_enabled
                and (i.minimum is not None or i.maximum is not None)}

    @property
    def unsupported_command_interfaces(self) -> tuple[str, ...]:
        """Command interfaces no JointState field carries (kept, not simulated)."""
        return tuple(i.name for i in self.command if not i.simulated)


@dataclass(frozen=True)
class HardwareSystem:
    """One ``<ros2_control>`` block."""

    name: str
    type: str
    plugin: str
    parameters: Mapping[str, str]
    joints: tuple[JointInterfaces, ...]
    sensors: tuple[str, ...] = ()
    gpios: tuple[str, ...] = ()
    transmissions: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- parsing


def _text(elem: ET.Element) -> str:
    return (elem.text or "").strip()


def _name(elem: ET.Element, where: str) -> str:
    name = (elem.get("name") or "").strip()
    if not name:
        raise URDFError(f"{where}: <{elem.tag}> without name=")
    return name


def _bool(text: str | None, where: str) -> bool:
    value = (text or "").strip()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    raise URDFError(f"{where}: {text!r} is not true or false")


def _params(elem: ET.Element, where: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for param in elem.findall("param"):
        params[_name(param, where)] = _text(param)
    return params


def _limits_enabled(elem: ET.Element, where: str) -> bool:
    limits = elem.find("limits")
    return True if limits is None else _bool(limits.get("enable"), f"{where} <limits enable>")


def _parse_interface(elem: ET.Element, where: str, joint_limits: bool) -> Interface:
    name = _name(elem, where)
    where = f"{where} <{elem.tag} name={name!r}>"
    params = _params(elem, where)
    data_type = (elem.get("data_type") or "double").strip()
    size_text = (elem.get("size") or "1").strip()
    if not re.fullmatch(r"[1-9][0-9]{0,8}", size_text):
        raise URDFError(f"{where}: size={size_text!r} is not a positive integer")
    numeric = data_type == "double"
    bounds = {}
    for key in ("min", "max"):
        text = params.get(key)
        bounds[key] = None if text is None or not numeric else \
            parse_number(text, f'{where} <param name="{key}">', allow_inf=True)
    if bounds["min"] is not None and bounds["max"] is not None and bounds["min"] > bounds["max"]:
        raise URDFError(f"{where}: min {bounds['min']:g} is above max {bounds['max']:g}")
    initial: float | str | None = params.get("initial_value")
    if initial is not None and numeric:
        initial = parse_number(initial, f'{where} <param name="initial_value">')
    return Interface(name, bounds["min"], bounds["max"], initial, data_type, int(size_text),
                     joint_limits and _limits_enabled(elem, where), params)


def _parse_joint(elem: ET.Element, where: str) -> JointInterfaces:
    name = _name(elem, where)
    where = f"{where} <joint name={name!r}>"
    mimic = elem.get("mimic")
    limits = _limits_enabled(elem, where)
    interfaces = {}
    for tag in ("command_interface", "state_interface"):
        parsed = tuple(_parse_interface(e, where, limits) for e in elem.findall(tag))
        names = [i.name for i in parsed]
        repeated = repeated_names(names)
        if repeated:
            raise URDFError(f"{where}: {tag} {repeated} declared twice")
        interfaces[tag] = parsed
    return JointInterfaces(
        name, interfaces["command_interface"], interfaces["state_interface"],
        None if mimic is None else _bool(mimic, f"{where} mimic="), _params(elem, where))


def _parse_block(elem: ET.Element) -> HardwareSystem:
    name = _name(elem, "<ros2_control>")
    where = f"<ros2_control name={name!r}>"
    kind = (elem.get("type") or "").strip()
    if kind not in COMPONENT_TYPES:
        raise URDFError(f"{where}: type={kind!r}, expected one of {COMPONENT_TYPES}")
    plugin, params = None, {}
    children: dict[str, list[ET.Element]] = {tag: [] for tag in _BLOCK_CHILDREN}
    for child in elem:
        if child.tag not in children:
            raise URDFError(f"{where}: unknown element <{child.tag}> (expected one of "
                            f"{', '.join(_BLOCK_CHILDREN)})")
        children[child.tag].append(child)
    for hardware in children["hardware"]:
        plugin_elem = hardware.find("plugin")
        if plugin_elem is None or not _text(plugin_elem):
            raise URDFError(f"{where} <hardware>: missing <plugin>")
        plugin, params = _text(plugin_elem), _params(hardware, f"{where} <hardware>")
    if plugin is None:
        raise URDFError(f"{where}: missing <hardware><plugin>")
    return HardwareSystem(
        name, kind, plugin, params,
        tuple(_parse_joint(j, where) for j in children["joint"]),
        tuple(_name(s, where) for s in children["sensor"]),
        tuple(_name(g, where) for g in children["gpio"]),
        tuple(_name(t, where) for t in children["transmission"]))


def read_ros2_control(source: str | Path) -> list[HardwareSystem]:
    """Every ``<ros2_control>`` block of a URDF (XML text or file path), in document order.

    No block: an empty list. Malformed blocks raise ``URDFError`` (a ``ValueError``) naming the
    element; the XML is read with the URDF loader's hardened parser (no DTD, no entities).
    """
    root = parse_xml(read_source(source))
    systems = [_parse_block(elem) for elem in root.findall("ros2_control")]
    seen: dict[str, str] = {}
    for system in systems:
        for joint in system.joints:
            if joint.name in seen:
                raise URDFError(f"joint {joint.name!r} appears in <ros2_control name="
                                f"{seen[joint.name]!r}> and in <ros2_control name="
                                f"{system.name!r}>; a joint belongs to one block")
            seen[joint.name] = system.name
    return systems


# ----------------------------------------------------------------------------- layout


def _check_joint(model: Model, joint: JointInterfaces, system: str, warnings: list[str]) -> bool:
    """Whether the block's joint can be commanded in the model; errors like ros2_control's."""
    where = f"<ros2_control name={system!r}> joint {joint.name!r}"
    if joint.name in model.mimic_joints:
        leader = model.mimic_joints[joint.name][0]
        if joint.command and joint.mimic is not False:
            raise URDFError(f"{where} mimics {leader!r} in the URDF: a mimic joint cannot have "
                            "command interfaces (ros2_control refuses them too)")
        if joint.command:
            warnings.append(f"joint {joint.name!r} mimics {leader!r} in the model: its command "
                            f"interfaces {list(joint.command_interfaces)} are ignored")
        return False
    if joint.mimic:
        raise URDFError(f"{where} has mimic=\"true\" but no <mimic> in the URDF")
    if joint.name not in model.joint_names:
        raise URDFError(f"{where} is not a movable joint of model {model.name!r} (unknown or "
                        f"fixed); movable joints: {model.actuated_joint_names}")
    if joint.name not in model.actuated_joint_names:
        if joint.command:
            raise URDFError(f"{where}: a multi-DoF joint cannot take joint commands")
        return False
    if joint.unsupported_command_interfaces:
        warnings.append(f"joint {joint.name!r}: command interfaces "
                        f"{list(joint.unsupported_command_interfaces)} are not simulated "
                        f"(a JointState command carries {', '.join(COMMAND_FIELDS)})")
    return True


def _topic_plugin_warnings(model: Model, system: HardwareSystem) -> list[str]:
    """What joint_state_topic_hardware_interface fails on with our messages.

    Its read() calls set_state for every field of our joint states (position, velocity,
    effort) on every non-mimic joint of its block, and its write() (1.1.0) reads the state
    interface of every command interface: a missing one throws, and the read or write
    returns ERROR.
    """
    warnings = []
    for joint in system.joints:
        if joint.name in model.mimic_joints:
            continue
        missing = [f for f in COMMAND_FIELDS if f not in joint.state_interfaces]
        if missing:
            warnings.append(f"joint {joint.name!r}: no state interface {missing}; {system.plugin}"
                            " fails to read the simulator's joint states (which carry position, "
                            "velocity and effort)")
    return warnings


def joint_command_modes(model: Model, systems: Sequence[HardwareSystem],
                        absent: str = "passive") -> dict[str, frozenset[str]]:
    """Per movable joint of the model, the JointState fields it accepts as commands."""
    return command_layout(model, systems, absent).modes


def _limit_range(urdf_limit: float, interface: Interface | None) -> tuple[float, float]:
    """A symmetric range from the URDF limit and the block's min/max, the tighter winning."""
    bound = urdf_limit
    if interface is not None and interface.limits_enabled:
        for value in (interface.minimum, interface.maximum):
            if value is not None:
                bound = min(bound, abs(value))
    return -bound, bound


@dataclass(frozen=True)
class JointCommand:
    """A decoded command: joints ``index`` (into ``CommandLayout.joints``) and their values.

    ``values[f, k]`` is field ``COMMAND_FIELDS[f]`` of joint ``index[k]``, NaN when the message
    did not set it. ``refused`` lists (joint, field, reason) for the values left out.
    """

    index: np.ndarray
    values: np.ndarray
    refused: tuple[tuple[str, str, str], ...] = ()


    def describe_refused(self) -> str:
        """The refusals as one warning line, each naming its joint."""
        return "; ".join(f"{joint}: {label} refused ({reason})"
                         for joint, label, reason in self.refused)


MAX_NAME_LISTS = 16  # lists of names ``CommandLayout.decode`` keeps what it read from


@dataclass
class CommandLayout:
    """The command interfaces of a model's movable joints (``model.actuated_joint_names``)."""

    joints: list[str]
    allowed: np.ndarray  # (3, n) bool: field f accepted by joint j
    lower: np.ndarray  # (3, n) command ranges (position, velocity, effort)
    upper: np.ndarray
    initial_state: np.ndarray  # (3, n) state initial_value, NaN where none
    initial_command: np.ndarray  # (3, n) command initial_value, NaN where none
    systems: list[HardwareSystem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # what ``decode`` reads from the names alone, per list of names seen (a publisher sends the
    # same names with every command: the check and the lookups are done once)
    _by_names: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    @property
    def modes(self) -> dict[str, frozenset[str]]:
        return {name: frozenset(f for f, ok in zip(COMMAND_FIELDS, self.allowed[:, j]) if ok)
                for j, name in enumerate(self.joints)}

    def describe(self) -> list[str]:
        """Start-up log lines: the blocks, and each joint's command interfaces."""
        if not self.systems:
            return ["no <ros2_control> block: every joint takes effort commands"]
        lines = [f"<ros2_control name={s.name!r} type={s.type!r}> plugin {s.plugin}: "
                 f"{len(s.joints)} joints" + (f", sensors {list(s.sensors)} (not simulated)"
                                              if s.sensors else "")
                 + (f", gpios {list(s.gpios)} (not simulated)" if s.gpios else "")
                 for s in self.systems]
        declared = {j.name: j for s in self.systems for j in s.joints}
        for j, name in enumerate(self.joints):
            modes = [f for f, ok in zip(COMMAND_FIELDS, self.allowed[:, j]) if ok]
            state = list(declared[name].state_interfaces) if name in declared else []
            lines.append(f"  {name}: commands {modes or 'none (passive)'}, states {state}")
        for name in [n for n in declared if n not in self.joints]:
            lines.append(f"  {name}: commands none (not an independent joint of the model), "
                         f"states {list(declared[name].state_interfaces)}")
        return lines + [f"  warning: {w}" for w in self.warnings]

    def initial_state_of(self, model: Model, q: np.ndarray, v: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """q and v with the block's state ``initial_value``s (position, velocity) put in."""
        q, v = np.array(q, dtype=float), np.array(v, dtype=float)
        for f, state, index in ((POSITION, q, model.position_indices(self.joints)),
                                (VELOCITY, v, model.velocity_indices(self.joints))):
            given = np.isfinite(self.initial_state[f])
            state[index[given]] = self.initial_state[f, given]
        return q, v

    def allows(self, joint: str, field_name: str) -> bool:
        return bool(self.allowed[COMMAND_FIELDS.index(field_name), self.joints.index(joint)])

    def decode(self, names: Sequence[str], position: Sequence[float] = (),
               velocity: Sequence[float] = (), effort: Sequence[float] = ()) -> JointCommand:
        """A JointState command by name, in either layout a publisher uses.

        Each field is either aligned with ``names`` (one value per name, the usual JointState)
        or compact, as joint_state_topic_hardware_interface publishes for a robot whose joints
        have different interfaces: the values of the named joints that have that command
        interface, in name order (its ``write()`` pushes a joint's value only for the
        interfaces it declares). NaN means "not set" (ros2_control's command interfaces start
        at NaN until a controller writes them): left out silently. A value that the joint's
        interfaces do not allow, an infinite value, or a value for a joint that takes no
        commands (unknown, mimic, multi-DoF) is refused (listed in ``refused``); the rest
        applies. A name without values is fine (the hardware interface lists every joint of
        its block, mimic joints included). Raises ValueError for a repeated name or a field whose
        length fits neither layout.
        """
        names = tuple(names)
        columns, accepts = self._read_names(names)
        values = np.full((3, len(names)), np.nan)
        refused: list[tuple[str, str, str]] = []
        for f, (label, data) in enumerate(zip(COMMAND_FIELDS, (position, velocity, effort))):
            data = np.asarray(data, dtype=float).ravel()
            if data.size == 0:
                continue
            having = accepts[f]
            if data.size == len(names):
                slots = np.arange(len(names))
            elif data.size == having.sum():
                slots = np.flatnonzero(having)
            else:
                raise ValueError(
                    f"{label}: {data.size} values for {len(names)} names; expected "
                    f"{len(names)} (one per name) or {int(having.sum())} (one per named joint "
                    f"with a {label} command interface)")
            set_here = ~np.isnan(data)
            for slot, value, given in zip(slots, data, set_here):
                if not given:
                    continue
                if columns[slot] < 0:
                    refused.append((names[slot], label, "not a commandable joint of the model"))
                elif not having[slot]:
                    refused.append((names[slot], label,
                                    f"joint has no {label} command interface"))
                elif not math.isfinite(value):
                    refused.append((names[slot], label, f"{value} is not finite"))
                else:
                    values[f, slot] = value
        keep = (columns >= 0) & ~np.all(np.isnan(values), axis=0)
        return JointCommand(columns[keep], values[:, keep], tuple(refused))

    def _read_names(self, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Each name's joint column (-1: not a commandable joint of the model) and, per command
        field, whether the named joint takes it ((3, len(names)) bool); ValueError for a
        repeated name."""
        known = self._by_names.get(names)
        if known is not None:
            return known
        repeated = repeated_names(list(names))
        if repeated:
            raise ValueError(f"name: joints {name_list(repeated)} appear more than once")
        index = {n: i for i, n in enumerate(self.joints)}
        columns = np.array([index.get(n, -1) for n in names], dtype=int)
        accepts = np.zeros((3, len(names)), dtype=bool)
        named = columns >= 0
        accepts[:, named] = self.allowed[:, columns[named]]
        if len(self._by_names) >= MAX_NAME_LISTS:  # a publisher that varies its names
            self._by_names.clear()
        self._by_names[names] = (columns, accepts)
        return columns, accepts


def _effort_only(model: Model) -> CommandLayout:
    joints = list(model.actuated_joint_names)
    n = len(joints)
    allowed = np.zeros((3, n), dtype=bool)
    allowed[EFFORT] = True
    return _with_ranges(model, CommandLayout(joints, allowed, np.zeros((3, n)), np.zeros((3, n)),
                                             np.full((3, n), np.nan), np.full((3, n), np.nan)),
                        {})


def _with_ranges(model: Model, layout: CommandLayout,
                 declared: dict[str, JointInterfaces]) -> CommandLayout:
    q_index = model.position_indices(layout.joints)
    v_index = model.velocity_indices(layout.joints)
    for j, (name, qi, vi) in enumerate(zip(layout.joints, q_index, v_index)):
        joint = declared.get(name)
        by_name = {i.name: i for i in joint.command} if joint else {}
        lower, upper = model.position_lower[qi], model.position_upper[qi]
        position = by_name.get("position")
        if position is not None and position.limits_enabled:
            lower = max(lower, -math.inf if position.minimum is None else position.minimum)
            upper = min(upper, math.inf if position.maximum is None else position.maximum)
            if lower > upper:
                raise URDFError(f"joint {name!r}: the position command range of the block does "
                                "not overlap the URDF limits")
        layout.lower[POSITION, j], layout.upper[POSITION, j] = lower, upper
        for f, urdf in ((VELOCITY, model.velocity_limit[vi]), (EFFORT, model.effort_limit[vi])):
            layout.lower[f, j], layout.upper[f, j] = _limit_range(
                urdf, by_name.get(COMMAND_FIELDS[f]))
        if joint is not None:
            for f, label in enumerate(COMMAND_FIELDS):
                layout.initial_state[f, j] = joint.initial_values.get(label, math.nan)
                layout.initial_command[f, j] = joint.command_initial_values.get(label, math.nan)
    return layout


def command_layout(model: Model, systems: Sequence[HardwareSystem],
                   absent: str = "passive") -> CommandLayout:
    """The command interfaces of every movable joint of ``model`` under ``systems``.

    ``absent``: what a movable joint in no block takes, ``"passive"`` (nothing, ros2_control's
    view) or ``"effort"``. Raises ``URDFError`` for a block joint the model does not have (or
    has as fixed / multi-DoF with commands) and for mimic inconsistencies, as ros2_control does.
    """
    check_choice(absent, ("passive", "effort"), "absent")
    if not systems:
        return _effort_only(model)
    layout = _effort_only(model)
    layout.systems, layout.allowed[:] = list(systems), False
    declared: dict[str, JointInterfaces] = {}
    for system in systems:
        for joint in system.joints:
            if _check_joint(model, joint, system.name, layout.warnings):
                declared[joint.name] = joint
    for j, name in enumerate(layout.joints):
        if name in declared:
            for interface in declared[name].command:
                if interface.simulated:
                    layout.allowed[COMMAND_FIELDS.index(interface.name), j] = True
        elif absent == "effort":
            layout.allowed[EFFORT, j] = True
    for system in systems:
        if system.plugin in TOPIC_PLUGINS:
            layout.warnings += _topic_plugin_warnings(model, system)
    passive = [n for n in layout.joints if n not in declared]
    if passive:
        layout.warnings.append(f"joints {passive} are in no <ros2_control> block: "
                               + ("passive (no command)" if absent == "passive"
                                  else "effort-commanded"))
    return _with_ranges(model, layout, declared)
