"""The shipped parameter files work with the real nodes; the launch files evaluate.

``launch``/``launch_ros`` are not on PyPI: `make setup` installs them from ../shared/vendor
(see test/ros_tools.py); without them the launch test says why it skips. The launch files are
run for real, with ``ros2 launch``, in test_ros2_launch.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import ros_tools
import yaml
from rcl_interfaces.srv import GetParameters
from ros_harness import NodeProcess, Peer

from rb_dynamics import DEFAULT_URDF

ROOT = Path(__file__).resolve().parents[1]


def _flatten(params: dict, prefix: str = "") -> dict:
    """Nested YAML blocks as ROS parameter names (constraints.names, ...)."""
    flat = {}
    for key, value in params.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@pytest.mark.parametrize("config, module, node_name", [
    ("rb_dynamics.yaml", "rb_dynamics.node", "rb_dynamics"),
    ("simulator.yaml", "rb_dynamics.sim_node", "rb_simulator"),
])
def test_config_files_are_taken_by_the_nodes(config, module, node_name):
    path = ROOT / "config" / config
    expected = _flatten(yaml.safe_load(path.read_text())[node_name]["ros__parameters"])
    node = NodeProcess(module, path, "-p", f"urdf_path:={DEFAULT_URDF}")
    peer = Peer()
    try:
        client = peer.node.create_client(GetParameters, f"{node_name}/get_parameters")
        names = sorted(expected)
        answer = peer.call(client, GetParameters.Request(names=names), timeout=20)
        for name, value in zip(names, answer.values):
            got = (value.string_value, value.double_value, value.bool_value,
                   list(value.double_array_value), list(value.string_array_value))
            want = expected[name]
            assert want in got or (isinstance(want, list) and list(map(float, want)) in got), \
                (name, want, value)
    finally:
        peer.close()
        assert node.stop() < 2.0
    assert node.proc.returncode == 0, node.output()


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
