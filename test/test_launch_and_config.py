# SPDX-License-Identifier: Apache-2.0
"""Parameters reach the real nodes; the shipped parameter files document every parameter with
its default and start the nodes; the launch files evaluate.

The parameter list comes from the nodes' own tables (``PARAMETERS`` in rb_dynamics/node.py and
sim_node.py, and the ``loop_constraints.*`` that ``ConstraintParameters`` declares); a node is
started with a value other than the default for every one of them and each is read back with
its type, so that a parameter the node ignored, or took with another type, fails.

``launch``/``launch_ros`` are not on PyPI: `make setup` installs them from ../shared/vendor
(see test/ros_tools.py); without them the launch test says why it skips. The launch files are
run for real, with ``ros2 launch``, in test_ros2_launch.py.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path
from typing import Any

import pytest
import rclpy
import ros_tools
import yaml
from rcl_interfaces.srv import GetParameters
from rclpy.parameter import parameter_value_to_python
from ros_harness import Session, control_node, parameter_value, simulator

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import load_model
from rb_dynamics.ros.constraint_parameters import PREFIX, ConstraintParameters
from rb_dynamics.ros.control_node import node
from rb_dynamics.ros.parameters import ParameterSpec
from rb_dynamics.ros.simulator_node import node as sim_node

ROOT = Path(__file__).resolve().parents[1]
JOINTS = load_model(DEFAULT_URDF).actuated_joint_names
NODES = {  # the node's own name, its table, its shipped file, how to start it
    "rb_dynamics": (node.PARAMETERS, "rb_dynamics.yaml", control_node),
    "rb_simulator": (sim_node.PARAMETERS, "simulator.yaml", simulator),
}
# Values no rule below can make up. The coupling keeps wrist_3 = 0.5 wrist_2 + 0.1, and the
# initial positions (ordered as ``joints``, reversed) keep it too.
SPECIAL: dict[str, Any] = {
    "robot_description": DEFAULT_URDF.read_text(),
    "urdf_path": str(DEFAULT_URDF),
    "joints": JOINTS[::-1],
    "initial_positions": [0.35, 0.5, 0.4, 0.3, -0.2, 0.1],
    "damping": [0.5] * len(JOINTS),
    "friction": [0.25] * len(JOINTS),
    "servo_gain_joints": ["wrist_1_joint"],
    "servo_kp": [150.0],
    "servo_kd": [6.0],
    f"{PREFIX}.names": ["grip"],
    f"{PREFIX}.solver": "rosenberg",
    f"{PREFIX}.grip.type": "joint_coupling",
    f"{PREFIX}.grip.follower": "wrist_3_joint",
    f"{PREFIX}.grip.leader": "wrist_2_joint",
    f"{PREFIX}.grip.ratio": 0.5,
    f"{PREFIX}.grip.offset": 0.1,
}


def constraint_table() -> dict[str, ParameterSpec]:
    """loop_constraints.* as ConstraintParameters declares them on a node of this process."""
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        bare = rclpy.create_node("constraint_parameters", context=context)
        ConstraintParameters(bare)
        declared = bare.get_parameters_by_prefix(PREFIX)
        types = {bool: "bool", float: "double", str: "string", list: "string[]"}
        table = {f"{PREFIX}.{key}": ParameterSpec(types[type(p.value)], p.value, "")
                 for key, p in declared.items()}
        bare.destroy_node()
        return table
    finally:
        rclpy.shutdown(context=context)


def other_value(name: str, spec: ParameterSpec) -> Any:
    """A valid value of the parameter's type other than its default."""
    if name in SPECIAL:
        return SPECIAL[name]
    if spec.type == "bool":
        return not spec.default
    if spec.choices:
        return next(c for c in spec.choices if c != spec.default)
    if spec.type == "double":
        low = -math.inf if spec.low is None else spec.low
        high = math.inf if spec.high is None else spec.high
        return next(x for x in (spec.default / 2, spec.default + 1.0) if low <= x <= high
                    and x != spec.default)
    if spec.type == "double[]" and spec.default:
        return [x / 2 for x in spec.default]
    raise AssertionError(f"{name}: no rule makes up a value; give one in SPECIAL")


def nested(flat: dict[str, Any]) -> dict[str, Any]:
    """Dotted parameter names as the nested blocks of a parameter file."""
    tree: dict[str, Any] = {}
    for name, value in flat.items():
        *blocks, key = name.split(".")
        branch = tree
        for block in blocks:
            branch = branch.setdefault(block, {})
        branch[key] = value
    return tree


def flatten(params: dict, prefix: str = "") -> dict:
    """Nested YAML blocks as ROS parameter names (loop_constraints.names, ...)."""
    flat = {}
    for key, value in params.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def same(a: Any, b: Any) -> bool:
    """Equal and of the same type (1 is not 1.0, False is not 0.0), lists item by item."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def read_back(session: Session, expected: dict[str, Any]) -> None:
    """Every parameter of ``expected`` as the node holds it: same ParameterValue type, same
    value of that type."""
    names = sorted(expected)
    answer = session.call(GetParameters, "~/get_parameters", GetParameters.Request(names=names),
                          timeout=30)
    assert len(answer.values) == len(names), session.output()
    for name, got in zip(names, answer.values):
        want = parameter_value(expected[name])
        assert got.type == want.type, (name, got, expected[name])
        assert same(parameter_value_to_python(got), parameter_value_to_python(want)), \
            (name, got, expected[name])


@pytest.mark.parametrize("node_name", list(NODES))
def test_every_parameter_is_taken_from_a_params_file(tmp_path, node_name):
    table, _, start = NODES[node_name]
    table = {**table, **constraint_table()}
    values = {name: other_value(name, spec) for name, spec in table.items()}
    for name, spec in table.items():
        assert not same(values[name], spec.default), name
    values.update({k: v for k, v in SPECIAL.items() if k.startswith(f"{PREFIX}.grip.")})
    session = start(tmp_path, nested(values))
    try:
        read_back(session, values)
        assert session.process.proc.poll() is None, session.output()
    finally:
        session.close()


def documented(path: Path, node_name: str) -> dict[str, Any]:
    """The parameters a shipped file sets, and those it shows commented out (``# name: value``
    at the top level of the block: what a user uncomments)."""
    text = path.read_text()
    listed = flatten(yaml.safe_load(text)[node_name]["ros__parameters"])
    for indent, name, value in re.findall(r"^( *)# (\w+): (\S+)", text, re.MULTILINE):
        if len(indent) == 4 and name not in listed:
            listed[name] = yaml.safe_load(value)
    return listed


@pytest.mark.parametrize("node_name", list(NODES))
def test_the_config_files_document_every_parameter_with_its_default(node_name):
    table, config, _ = NODES[node_name]
    listed = documented(ROOT / "config" / config, node_name)
    for name, spec in {**table, **constraint_table()}.items():
        assert name in listed, f"config/{config} does not list {name}"
        assert same(listed[name], spec.default), (name, listed[name], spec.default)


@pytest.mark.parametrize("node_name", list(NODES))
def test_config_files_are_taken_by_the_nodes(tmp_path, node_name):
    _, config, start = NODES[node_name]
    path = ROOT / "config" / config
    expected = flatten(yaml.safe_load(path.read_text())[node_name]["ros__parameters"])
    expected["urdf_path"] = str(DEFAULT_URDF)
    # the file is for the node's own name: no renaming here
    session = start(tmp_path, path, "-p", f"urdf_path:={DEFAULT_URDF}", name=None)
    try:
        read_back(session, {k: v for k, v in expected.items() if v != []})
        # an empty list in a file reaches rclpy untyped: the node keeps its default, []
        empty = sorted(k for k, v in expected.items() if v == [])
        answer = session.call(GetParameters, "~/get_parameters",
                              GetParameters.Request(names=empty))
        assert [parameter_value_to_python(v) for v in answer.values] == [[]] * len(empty)
    finally:
        session.close()


@pytest.mark.skipif(ros_tools.MISSING is not None, reason=str(ros_tools.MISSING))
@pytest.mark.parametrize("name, nodes", [
    ("rb_dynamics.launch.py", {"rb_dynamics_node"}),
    ("demo.launch.py", {"rb_simulator", "rb_dynamics_node", "rb_reference"}),
])
def test_launch_files_evaluate(name, nodes):
    from launch.actions import DeclareLaunchArgument
    from launch_ros.actions import Node

    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), ROOT / "launch" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    arguments = [e for e in description.entities if isinstance(e, DeclareLaunchArgument)]
    assert "description_file" in {a.name for a in arguments}
    assert all(a.description for a in arguments if a.name == "description_file")
    assert {e.node_executable for e in description.entities if isinstance(e, Node)} == nodes
