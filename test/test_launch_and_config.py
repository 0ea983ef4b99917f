# SPDX-License-Identifier: Apache-2.0
"""Each node's parameter schema is what the node declares, what its parameter file and
docs/parameters.md say, and what a parameter file sets; the launch files evaluate.

The schemas are rb_dynamics/ros/control_node/parameters.yaml and
rb_dynamics/ros/simulator_node/parameters.yaml. A node is started with a value other than the
default for every parameter (the per-joint and per-constraint ones included) and each is read
back with its type, so that a parameter the node ignored, or took with another type, fails; a
running node lists exactly the schema's parameters, with the schema's descriptors.

``launch``/``launch_ros`` are not on PyPI: `make setup` installs them from ../shared/vendor
(see test/ros_tools.py); without them the launch test says why it skips. The launch files are
run for real, with ``ros2 launch``, in test_ros2_launch.py.
"""

from __future__ import annotations

import importlib.util
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import ros_tools
import yaml
from rcl_interfaces.msg import ParameterType
from rcl_interfaces.srv import DescribeParameters, GetParameters, ListParameters
from rclpy.parameter import parameter_value_to_python
from ros_harness import Session, control_node, parameter_value, simulator

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.control import CONTROL_MODES
from rb_dynamics.dynamics import CONSTRAINT_TYPES
from rb_dynamics.dynamics.constraints import SOLVERS
from rb_dynamics.model import DynamicsOverlay, load_model, write_overlay
from rb_dynamics.model.urdf import MAX_MAGNITUDE
from rb_dynamics.ros import parameter_docs
from rb_dynamics.ros.constraint_parameters import PREFIX
from rb_dynamics.ros.parameters import ParameterSpec, Schema, SchemaError, node_schema
from rb_dynamics.ros.simulator_node import node as sim_node
from rb_dynamics.simulation import DEFAULT_BANDWIDTH, DEFAULT_DAMPING_RATIO, INTEGRATORS

ROOT = Path(__file__).resolve().parents[1]
JOINTS = load_model(DEFAULT_URDF).actuated_joint_names
# an overlay file both nodes take for the bundled arm (dynamics_overlay)
OVERLAY = Path(tempfile.mkdtemp(prefix="rb_dynamics_overlay_")) / "overlay.yaml"
write_overlay(DynamicsOverlay(joints={JOINTS[0]: {"armature": 0.01, "coulomb": 0.5}}), OVERLAY)
NODES = {  # the node's own name: its package, its shipped file, how to start it
    "rb_dynamics": ("control_node", "rb_dynamics.yaml", control_node),
    "rb_simulator": ("simulator_node", "simulator.yaml", simulator),
}
RCLPY_OWN = ("use_sim_time", "start_type_description_service")  # and qos_overrides.*
# Values no rule below can make up. The coupling keeps wrist_3 = 0.5 wrist_2 + 0.1, and the
# initial positions (ordered as ``joints``, reversed) keep it too.
SPECIAL: dict[str, Any] = {
    "robot_description": DEFAULT_URDF.read_text(),
    "urdf_path": str(DEFAULT_URDF),
    "joints": JOINTS[::-1],
    "initial_positions": [0.35, 0.5, 0.4, 0.3, -0.2, 0.1],
    "damping": [0.5] * len(JOINTS),
    "friction": [0.25] * len(JOINTS),
    "dynamics_overlay": str(OVERLAY),
    "publish_jitter": 1e-3,  # the rules' values (0, 1) are outside its bounds
    "servo_gain_joints": ["wrist_1_joint"],
    "servo_kp": [150.0],
    "servo_kd": [6.0],
    "ki": [0.5],
    "impedance.stiffness": [50.0],
    "impedance.damping": [5.0],
    "max_publish_rate": 100.0,  # a period within state_timeout (a longer one is refused)
    "payload.link": "tool0",
    "payload.com": [0.0, 0.0, 0.05],
    "payload.inertia": [0.01, 0.0, 0.0, 0.02, 0.0, 0.03],
    "contact.effort_uncertainty": [0.2],
    "contact.wrench_link": "wrist_3_link",
    "cartesian.link": "wrist_3_link",
    "cartesian.damping": [40.0, 40.0, 40.0, 0.5, 0.5, 0.5],
    "cartesian.posture": [0.3, -1.2, 1.4, -0.8, 0.9, 0.2],
    "cartesian.posture_stiffness": [1.0],
    "cartesian.posture_damping": [0.5],
    f"{PREFIX}.names": ["grip"],
    f"{PREFIX}.solver": "rosenberg",
    f"{PREFIX}.grip.type": "joint_coupling",
    f"{PREFIX}.grip.follower": "wrist_3_joint",
    f"{PREFIX}.grip.leader": "wrist_2_joint",
    f"{PREFIX}.grip.ratio": 0.5,
    f"{PREFIX}.grip.offset": 0.1,
}


def schema_of(node_name: str) -> Schema:
    return node_schema(NODES[node_name][0])


def declared(schema: Schema, values: dict[str, Any]) -> dict[str, ParameterSpec]:
    """Every parameter a node of ``schema`` declares itself when started with ``values``: the
    schema's own and its maps' for each key (the joints: ``joints``, else the URDF's, none on a
    floating base, which has no controller; a constraint: its type and the keys the type
    takes)."""
    specs = schema.select()
    for owner in schema.maps.values():
        keys = values.get(owner.keys_from, [])
        if owner.keys_from == "joints":
            keys = [] if values.get("floating_base") else keys or JOINTS
        for key in keys:
            kind = values.get(f"{owner.prefix}.{key}.type")
            taken = ("type", *sum(CONSTRAINT_TYPES[kind], ())) if owner.prefix == PREFIX \
                else tuple(owner.entries)
            specs.update({f"{owner.prefix}.{key}.{entry}": owner.entries[entry]
                          for entry in taken})
    return specs


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
    if spec.type == "double_array" and spec.default:
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
    value of that type (waiting for those the node declares once its model is loaded)."""
    names = sorted(expected)
    deadline = time.monotonic() + 20.0
    while True:
        answer = session.call(GetParameters, "~/get_parameters",
                              GetParameters.Request(names=names), timeout=30)
        assert len(answer.values) == len(names), session.output()
        unset = any(v.type == ParameterType.PARAMETER_NOT_SET for v in answer.values)
        if not unset or time.monotonic() > deadline:
            break
        session.wait_for(lambda: False, 0.2)
    for name, got in zip(names, answer.values):
        want = parameter_value(expected[name])
        assert got.type == want.type, (name, got, expected[name])
        assert same(parameter_value_to_python(got), parameter_value_to_python(want)), \
            (name, got, expected[name])


@pytest.mark.parametrize("node_name", list(NODES))
def test_every_parameter_is_taken_from_a_params_file(tmp_path, node_name):
    schema, start = schema_of(node_name), NODES[node_name][2]
    values = {name: other_value(name, spec) for name, spec in schema.select().items()}
    table = declared(schema, {**values, **SPECIAL})  # the maps' keys as the values say
    values = {name: other_value(name, spec) for name, spec in table.items()}
    for name, spec in table.items():
        assert not same(values[name], spec.default), name
    session = start(tmp_path, nested(values))
    try:
        read_back(session, values)
        assert session.process.proc.poll() is None, session.output()
    finally:
        session.close()


@pytest.mark.parametrize("node_name", list(NODES))
def test_a_running_node_lists_the_schema_parameters_with_their_descriptors(tmp_path, node_name):
    schema, start = schema_of(node_name), NODES[node_name][2]
    values = {"urdf_path": str(DEFAULT_URDF),
              **{k: v for k, v in SPECIAL.items() if k.startswith(PREFIX)}}
    expected = declared(schema, values)
    # the per-joint ones, which the other test's floating base has none of, from the file too
    tolerances = {name: 0.01 * (k + 1) for k, name in enumerate(expected)
                  if name.startswith("constraints.") and name.count(".") == 2}
    session = start(tmp_path, nested({**values, **tolerances}))
    try:
        read_back(session, tolerances)
        def listed() -> set[str]:
            return set(session.call(ListParameters, "~/list_parameters",
                                    ListParameters.Request()).result.names)

        assert session.wait_for(lambda: set(expected) <= listed(), 20.0), \
            (sorted(set(expected) - listed()), session.output())
        by_rclpy = {name for name, spec in schema.parameters.items() if spec.declared_by_rclpy}
        extra = listed() - set(expected) - by_rclpy
        assert by_rclpy <= listed()
        assert all(n in RCLPY_OWN or n.startswith("qos_overrides.") for n in extra), extra
        names = sorted(expected)
        answer = session.call(DescribeParameters, "~/describe_parameters",
                              DescribeParameters.Request(names=names))
        for name, got in zip(names, answer.descriptors):
            want = expected[name].descriptor()
            fields = ("description", "additional_constraints", "read_only", "dynamic_typing",
                      "floating_point_range", "integer_range") + (("type",) if want.type else ())
            assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields], \
                (name, got, want)
    finally:
        session.close()


@pytest.mark.parametrize("node_name", list(NODES))
def test_the_config_files_list_every_parameter_with_its_default(node_name):
    schema, config = schema_of(node_name), NODES[node_name][1]
    listed = flatten(yaml.safe_load((ROOT / "config" / config).read_text())[node_name]
                     ["ros__parameters"])
    wanted = {name: spec.default for name, spec in schema.parameters.items()
              if not spec.commented_in_config}
    assert listed.keys() == wanted.keys()
    for name, value in listed.items():
        assert same(value, wanted[name]), (name, value, wanted[name])


def test_the_generated_files_match_the_schemas():
    """config/*.yaml and docs/parameters.md are what the schemas generate."""
    for path, text in parameter_docs.documents(ROOT).items():
        assert path.read_text(encoding="utf-8") == text, \
            f"{path} is out of date: run `{parameter_docs.REGENERATE}`"


def test_the_schemas_agree_with_the_code():
    """The choices, defaults and bounds the schemas copy from the code, and the block both
    nodes share."""
    control, sim = node_schema("control_node"), node_schema("simulator_node")
    assert control.parameters["mode"].choices == CONTROL_MODES
    assert sim.parameters["integrator"].choices == INTEGRATORS
    assert sim.parameters["servo_bandwidth"].default == DEFAULT_BANDWIDTH
    assert sim.parameters["servo_damping_ratio"].default == DEFAULT_DAMPING_RATIO
    assert control.parameters["payload.mass"].high == MAX_MAGNITUDE
    assert f"within {sim_node.LOCKSTEP_RESEND_S} s" in sim.parameters["lockstep"].description
    for schema in (control, sim):
        constraint = schema.maps[PREFIX]
        assert constraint.entries["type"].choices == ("", *CONSTRAINT_TYPES)
        keys = {key for required, optional in CONSTRAINT_TYPES.values()
                for key in (*required, *optional)}
        assert set(constraint.entries) == {"type", *keys}
        assert schema.parameters[f"{PREFIX}.solver"].choices == tuple(SOLVERS)
    assert control.select(f"{PREFIX}.*") == sim.select(f"{PREFIX}.*")
    assert control.maps[PREFIX] == sim.maps[PREFIX]
    # the example of docs/parameters.md: each constraint with the keys of its type
    example = yaml.safe_load(parameter_docs.CONSTRAINTS_EXAMPLE)[PREFIX]
    for name in example["names"]:
        block = example[name]
        assert block.keys() - {"type"} <= set(sum(CONSTRAINT_TYPES[block["type"]], ())), name


def test_a_schema_reads_its_maps_and_refuses_what_does_not_say_what_a_parameter_is(tmp_path):
    def load(body: dict) -> Schema:
        path = tmp_path / "parameters.yaml"
        path.write_text(yaml.safe_dump({"node": body}, sort_keys=False))
        return Schema.from_file(path)

    number = {"type": "double", "default_value": 0.5, "description": "a number"}
    names = {"type": "string_array", "default_value": [], "description": "the keys"}
    schema = load({"keys": names, "block": {"x": number, "__map_keys": {"gain": number}}})
    assert list(schema.parameters) == ["keys", "block.x"]
    assert schema.maps["block"].specs("k") == {"block.k.gain": ParameterSpec(**{
        "type": "double", "default": 0.5, "description": "a number"})}
    assert schema.maps["block"].spec_of("block.k.gain") is not None
    assert schema.maps["block"].spec_of("block.x") is None
    for body, why in (
            ({"p": {**number, "default_value": 1}}, "not written as a double"),  # rclpy: int
            ({"p": {**number, "unit": "m"}}, "no other key"),
            ({"p": {**number, "validation": {"bounds<>": [1.0, 2.0]}}}, r"must be in \[1, 2\]"),
            ({"p": {**number, "validation": {"gt<>": [0.0]}}}, "not known"),
            ({"p": {**number, "type": "float"}}, "needs type"),
            ({"p": number, "b": {"__map_p": {"gain": number}}}, "not a string_array")):
        with pytest.raises(SchemaError, match=why):
            load(body)


@pytest.mark.parametrize("node_name", list(NODES))
def test_config_files_are_taken_by_the_nodes(tmp_path, node_name):
    config, start = NODES[node_name][1:]
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
