# SPDX-License-Identifier: Apache-2.0
"""Small URDFs written by the tests to exercise every joint type and URDF feature."""

from __future__ import annotations


def _inertial(
    mass: float,
    xyz: str = "0 0 0",
    rpy: str = "0 0 0",
    inertia: str = 'ixx="0.02" ixy="0.001" ixz="-0.002" iyy="0.03" iyz="0.003" izz="0.025"',
) -> str:
    return (
        f'<inertial><origin xyz="{xyz}" rpy="{rpy}"/><mass value="{mass}"/>'
        f"<inertia {inertia}/></inertial>"
    )


def _link(name: str, inertial: str = "") -> str:
    return f'<link name="{name}">{inertial}</link>'


def _joint(
    name: str,
    kind: str,
    parent: str,
    child: str,
    xyz: str = "0 0 0",
    rpy: str = "0 0 0",
    axis: str | None = "0 0 1",
    extra: str = "",
) -> str:
    axis_xml = f'<axis xyz="{axis}"/>' if axis else ""
    limit = (
        '<limit lower="-2.5" upper="2.5" effort="50" velocity="3"/>'
        if kind in ("revolute", "prismatic")
        else ""
    )
    if kind == "continuous":
        limit = '<limit effort="30" velocity="4"/>'
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="{xyz}" rpy="{rpy}"/>{axis_xml}{limit}{extra}'
        '<dynamics damping="0.1" friction="0.05"/></joint>'
    )


def kitchen_sink_urdf(
    with_mimic: bool = True, with_planar: bool = True, with_floating: bool = True
) -> str:
    """Every supported feature: arbitrary axes, rpy origins, rotated inertials, a massless
    link, fixed joints (merged inertia), continuous, prismatic, mimic, planar and floating."""
    parts = [
        _link("base", _inertial(3.0, "0.01 0.02 0.03")),
        _link("l1", _inertial(2.0, "0.1 0.02 -0.03", "0.3 -0.2 0.5")),
        _link("l2", _inertial(1.5, "0.0 0.15 0.02", "-0.4 0.1 0.2")),
        _link("l3"),  # massless, moved by a joint: its children carry the mass
        _link("l4", _inertial(0.8, "0.05 0.0 0.1", "0.0 0.7 0.0")),
        _link("tool", _inertial(0.4, "0.0 0.0 0.05", "0.1 0.2 0.3")),  # welded to l4
        _link("tool_tip"),  # welded, massless frame
        _link("l5", _inertial(0.6, "0.02 -0.03 0.04", "0.2 0.2 0.2")),
        _joint("j1", "revolute", "base", "l1", "0.1 -0.05 0.3", "0.2 -0.3 0.1", "1 2 3"),
        _joint("j2", "continuous", "l1", "l2", "0.3 0.1 0.0", "0 1.2 0", "0 1 0"),
        _joint("j3", "prismatic", "l2", "l3", "0 0.2 0.05", "0.5 0 0", "0.3 -0.5 0.8"),
        _joint("j4", "revolute", "l3", "l4", "0.05 0 0.2", "0 0 0.4", "0 0 2"),
        _joint("tool_mount", "fixed", "l4", "tool", "0.1 0.0 0.05", "0.3 0.2 -0.1", None),
        _joint("tip", "fixed", "tool", "tool_tip", "0 0 0.12", "0 0 0", None),
        _joint("j5", "revolute", "tool", "l5", "0 0.04 0.1", "-0.2 0.3 0", "1 0 0"),
    ]
    if with_mimic:
        parts += [
            _link("finger", _inertial(0.3, "0.01 0.01 0.02", "0.4 0 0.1")),
            _joint(
                "finger_joint",
                "revolute",
                "l4",
                "finger",
                "0 -0.05 0.1",
                "0.1 0 0",
                "0 1 0",
                '<mimic joint="j4" multiplier="-0.7" offset="0.15"/>',
            ),
        ]
    if with_planar:
        parts += [
            _link("slider", _inertial(1.2, "0.03 0.02 0.01", "0.1 0.2 0.3")),
            _joint("planar_joint", "planar", "base", "slider", "0.4 0.2 0.1", "0 0 0.3", "0 0 1"),
        ]
    if with_floating:
        parts += [
            _link("drone", _inertial(0.9, "0.02 -0.01 0.03", "0.3 0.1 -0.2")),
            _link("prop", _inertial(0.1, "0 0 0.01")),
            _joint("drone_joint", "floating", "base", "drone", "-0.3 0.1 0.5", "0.1 0.2 0.3", None),
            _joint("prop_joint", "continuous", "drone", "prop", "0 0 0.05", "0 0 0", "0 0 1"),
        ]
    return '<?xml version="1.0"?>\n<robot name="kitchen_sink">' + "".join(parts) + "</robot>"


def two_link_arm_urdf(
    m1: float, m2: float, l1: float, lg1: float, lg2: float, I1: float, I2: float
) -> str:
    """The planar two-link arm of [C05]: joints about z, links along x, gravity along -y."""

    def inertial(m, lg, izz):
        return (
            f'<inertial><origin xyz="{lg} 0 0"/><mass value="{m}"/>'
            f'<inertia ixx="{izz}" ixy="0" ixz="0" iyy="{izz}" iyz="0" izz="{izz}"/></inertial>'
        )

    return f"""<robot name="two_link">
  <link name="base"/>
  <link name="link1">{inertial(m1, lg1, I1)}</link>
  <link name="link2">{inertial(m2, lg2, I2)}</link>
  <joint name="joint1" type="continuous"><parent link="base"/><child link="link1"/>
    <axis xyz="0 0 1"/></joint>
  <joint name="joint2" type="continuous"><parent link="link1"/><child link="link2"/>
    <origin xyz="{l1} 0 0"/><axis xyz="0 0 1"/></joint>
</robot>"""


def chain_urdf(n: int, name: str | None = None, mass: float = 0.5,
               massless_tip: bool = False) -> str:
    """A serial chain of ``n`` revolute joints with alternating axes (deep-model tests);
    ``massless_tip`` adds a last revolute joint whose child link has no <inertial>."""
    inertial = _inertial(mass, "0 0 0.05", inertia='ixx="0.001" iyy="0.001" izz="0.001" '
                                                   'ixy="0" ixz="0" iyz="0"')
    parts = [_link(f"l{i}", inertial) for i in range(n + 1)]
    parts += [_joint(f"j{i}", "revolute", f"l{i - 1}", f"l{i}", "0 0 0.1", "0.1 0 0",
                     "0 1 0" if i % 2 else "0 0 1") for i in range(1, n + 1)]
    if massless_tip:
        parts += [_link("tool"), _link("tool_tip"),
                  _joint("tool_joint", "revolute", f"l{n}", "tool", "0 0 0.1", "0 0 0", "0 1 0"),
                  _joint("tool_tip_mount", "fixed", "tool", "tool_tip", "0 0 0.05", "0 0 0", None)]
    return f'<robot name="{name or f"chain{n}"}">' + "".join(parts) + "</robot>"
