"""The shipped parameter files work with the real nodes; the launch files evaluate.

``launch``/``launch_ros`` are not on PyPI: the launch test runs where a ROS 2 install (or the
sources, see shared notes) provides them and is skipped with the reason otherwise.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
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


@pytest.mark.skipif(
    importlib.util.find_spec("launch") is None or importlib.util.find_spec("launch_ros") is None,
    reason="launch/launch_ros are not installable from PyPI; they come with a ROS 2 install")
@pytest.mark.parametrize("name", ["rb_dynamics.launch.py", "demo.launch.py"])
def test_launch_files_evaluate(name):
    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), ROOT / "launch" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    assert description.entities
