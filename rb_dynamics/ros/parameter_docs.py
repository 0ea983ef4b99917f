# SPDX-License-Identifier: Apache-2.0
"""The parameter files and the parameter page, generated from the nodes' schemas.

    python -m rb_dynamics.ros.parameter_docs --write   # regenerate them
    python -m rb_dynamics.ros.parameter_docs           # exit 1 naming each one out of date

From each node's schema (``parameters.yaml`` in ``rb_dynamics/ros/<node package>/``): its
parameter file ``config/<node>.yaml`` (what a user copies: every parameter with its default and
a comment saying what it is) and its table in ``docs/parameters.md``. The schema's comments at
the level of its parameters (``  # --- the model``) head their group in the parameter file.
The test suite compares these files with what this module generates.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

from rb_dynamics.dynamics import CONSTRAINT_TYPES

from .constraint_parameters import PREFIX as LOOP_CONSTRAINTS
from .parameters import ParameterMap, ParameterSpec, Schema, node_schema, schema_file

__all__ = ["CONSTRAINTS_EXAMPLE", "DOCS_PAGE", "NODES", "config_text", "docs_text", "documents",
           "main"]

ROOT = Path(__file__).resolve().parents[2]  # the source tree this module is in
# the node packages: their parameter file, what the node is, its executable
NODES = {
    "control_node": ("config/rb_dynamics.yaml", "the control node", "rb_dynamics_node"),
    "simulator_node": ("config/simulator.yaml", "the topic-driven simulator", "rb_simulator"),
}
DOCS_PAGE = "docs/parameters.md"
WIDTH = 100
REGENERATE = "python -m rb_dynamics.ros.parameter_docs --write"


def value_text(value: Any) -> str:
    """``value`` as YAML that reads back as the same value of the same type."""
    if isinstance(value, list):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    plain = isinstance(value, str) and re.fullmatch(r"[A-Za-z_/][\w/.-]*", value)
    if plain and yaml.safe_load(value) == value:
        return value
    return json.dumps(value, ensure_ascii=False)


def _note(spec: ParameterSpec) -> str:
    """The description with what limits the value."""
    limits = [text for text in (spec.constraints_text(),
                                "read-only" if spec.read_only else "") if text]
    return spec.description + (f" ({'; '.join(limits)})" if limits else "")


def _comment(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=f"{indent}# ",
                         subsequent_indent=f"{indent}# ", break_on_hyphens=False)


def group_notes(package: str) -> dict[str, list[str]]:
    """The comment lines in the schema file just above each top-level parameter or block (its
    lines indented by two spaces; the file's own heading, above the node's name, is not one)."""
    notes: dict[str, list[str]] = {}
    pending: list[str] = []
    for line in schema_file(package).read_text(encoding="utf-8").splitlines():
        if line.startswith("  # "):
            pending.append(line[4:])
        elif re.match(r"  [^ #]", line):
            if pending:
                notes[line.strip().rstrip(":")] = pending
            pending = []
    return notes


def _tree(schema: Schema) -> dict[str, Any]:
    """The schema's parameters as nested blocks in the file's order (a leaf: its
    ParameterSpec), each map last in its block (as a ParameterMap)."""
    tree: dict[str, Any] = {}
    for name, spec in schema.parameters.items():
        *blocks, key = name.split(".")
        branch = tree
        for block in blocks:
            branch = branch.setdefault(block, {})
        branch[key] = spec
    for prefix, owner in schema.maps.items():
        branch = tree
        for block in prefix.split("."):
            branch = branch.setdefault(block, {})
        branch[f"<{owner.keys_from}>"] = owner
    return tree


def _config_lines(tree: dict[str, Any], indent: str, notes: dict[str, list[str]]
                  ) -> list[str]:
    lines: list[str] = []
    for key, item in tree.items():
        if key in notes:
            lines += ["", *(f"{indent}# {line}" for line in notes[key])]
        if isinstance(item, ParameterMap):
            lines += _map_lines(item, indent)
        elif isinstance(item, ParameterSpec):
            lines += _comment(_note(item), indent)
            entry = f"{key}: {value_text(item.default)}"
            lines.append(f"{indent}# {entry}" if item.commented_in_config else f"{indent}{entry}")
        else:
            lines += [f"{indent}{key}:", *_config_lines(item, indent + "  ", {})]
    return lines


def _map_lines(owner: ParameterMap, indent: str) -> list[str]:
    key = owner.keys_from.rsplit(".", 1)[-1].removesuffix("s")
    lines = _comment(f"one block per value of {owner.keys_from}, each with these keys "
                     f"({DOCS_PAGE} says what each is):", indent)
    lines.append(f"{indent}# <{key}>:")
    lines += [f"{indent}#   {entry}: {value_text(spec.default)}"
              for entry, spec in owner.entries.items()]
    return lines


def config_text(package: str) -> str:
    """The parameter file of the node in ``rb_dynamics.ros.<package>``."""
    schema = node_schema(package)
    path, what, executable = NODES[package]
    head = [
        f"# Parameters of {what} ({executable}), with their defaults.",
        f"# Generated from rb_dynamics/ros/{package}/parameters.yaml, the node's schema, by",
        f"# `{REGENERATE}`: edit the schema, not this file.",
        "# Read-only parameters need a restart; the others can be changed at run time",
        "# (ros2 param set) and are validated: a refused change leaves everything as it was and",
        f"# says why. Types and allowed values: {DOCS_PAGE}.",
        f"{schema.node_name}:",
        "  ros__parameters:",
    ]
    body = _config_lines(_tree(schema), "    ", group_notes(package))
    return "\n".join(head + (body[1:] if body and body[0] == "" else body)) + "\n"


def _cell(text: str) -> str:
    """Text for a table cell: a | would end it, a <tag> would be taken for HTML."""
    return text.replace("|", "\\|").replace("<", "\\<")


def _rows(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """A table row per parameter, in the parameter file's order."""
    rows: list[str] = []
    for key, item in tree.items():
        if isinstance(item, ParameterMap):
            key = item.keys_from.rsplit(".", 1)[-1].removesuffix("s")
            rows += [_row(f"{prefix}<{key}>.{entry}", spec,
                          f"; one per value of `{item.keys_from}`")
                     for entry, spec in item.entries.items()]
        elif isinstance(item, ParameterSpec):
            rows.append(_row(f"{prefix}{key}", item))
        else:
            rows += _rows(item, f"{prefix}{key}.")
    return rows


def _row(name: str, spec: ParameterSpec, extra: str = "") -> str:
    limits = "; ".join(text for text in (spec.constraints_text(),
                                         "read-only" if spec.read_only else "") if text)
    description = spec.description + extra
    if spec.declared_by_rclpy:
        description += " (declared by rclpy)"
    return (f"| `{name}` | {spec.type} | `{value_text(spec.default)}` | {_cell(description)} "
            f"| {_cell(limits)} |")


def _node_section(package: str) -> list[str]:
    schema = node_schema(package)
    path, what, executable = NODES[package]
    lines = [
        f"## {schema.node_name}: {what}", "",
        f"`ros2 run rb_dynamics {executable}`; schema "
        f"[rb_dynamics/ros/{package}/parameters.yaml](../rb_dynamics/ros/{package}/parameters.yaml),"
        f" parameter file [{path}](../{path}).", "",
        "| name | type | default | description | constraints |",
        "| --- | --- | --- | --- | --- |",
    ]
    return lines + _rows(_tree(schema)) + [""]


# a four-bar linkage closed at the rocker's ground pivot; a gear coupling an arm's two joints
CONSTRAINTS_EXAMPLE = """\
loop_constraints:
  names: [loop, gear]
  loop:
    type: loop_point
    link_a: rocker
    point_a: [0.2, 0.0, 0.0]     # link coordinates, m
    link_b: ground
    point_b: [0.2, 0.0, 0.0]
  gear:
    type: joint_coupling         # q_follower = ratio q_leader + offset
    follower: wrist_3_joint
    leader: wrist_2_joint
    ratio: 0.5
"""


def _constraint_types() -> list[str]:
    lines = [
        f"### `{LOOP_CONSTRAINTS}.<name>.*`: the keys of each type", "",
        f"Each name in `{LOOP_CONSTRAINTS}.names` has a block: its `type`, then the keys that type "
        "takes (declared once the type is known; `\"\"` or `[]` = not given). Numbers are "
        "written as floats (`0.0`, not `0`).", "",
        "| type | required keys | optional keys |",
        "| --- | --- | --- |",
    ]
    for kind, (required, optional) in CONSTRAINT_TYPES.items():
        lines.append(f"| `{kind}` | {', '.join(required) or '–'} | "
                     f"{', '.join(optional) or '–'} |")
    example = ("For example, in a node's `ros__parameters` (two robots' blocks: the loop "
               "closes a four-bar linkage, the gear couples an arm's wrist joints):")
    return lines + ["", example, "", "```yaml", *CONSTRAINTS_EXAMPLE.splitlines(), "```", ""]


def docs_text() -> str:
    """docs/parameters.md: one table per node."""
    lines = [
        "# Parameters", "",
        f"Every parameter of the package's two nodes. Generated from the nodes' schemas by "
        f"`{REGENERATE}`, together with the parameter files in config/; a test fails when "
        "they disagree with the schemas. To change a parameter, edit its schema.", "",
        "Read-only parameters are read at start; the others can be set at run time (`ros2 "
        "param set`) and every change is validated first: a refused change leaves everything "
        "as it was and says why. A name `a.<joint>.b` stands for one parameter per value of the "
        "string-array parameter it names. Empty lists (`[]`) mean \"none\" or \"the default\" "
        "as the description says; a `[]` in a parameter file keeps the default. rclpy declares "
        "its own too (`use_sim_time`, `start_type_description_service` and the "
        "`qos_overrides.*` of a subscription).", "",
    ]
    for package in NODES:
        lines += _node_section(package)
    lines += _constraint_types()
    return "\n".join(lines)


def documents(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file under ``root``, with the text it should have."""
    texts = {root / path: config_text(package) for package, (path, _, _) in NODES.items()}
    texts[root / DOCS_PAGE] = docs_text()
    return texts


def main(argv: list[str] | None = None) -> int:
    """The command line (the module docstring): 0 when every file is up to date or written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="regenerate the files")
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree")
    args = parser.parse_args(argv)
    stale = []
    for path, text in documents(args.root).items():
        if args.write:
            path.write_text(text, encoding="utf-8")
        elif not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
    for path in stale:
        print(f"{path}: out of date with the schemas; run `{REGENERATE}`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
