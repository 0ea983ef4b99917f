# SPDX-License-Identifier: Apache-2.0
"""The ``ros2`` CLI against the real nodes: ``ros2 param set/get`` as the README says, and
``ros2 param dump`` giving a parameter file that starts an identical node.

Every verb runs with ``--no-daemon``, and the module checks that no ros2 daemon of this
session's domain is left running. Skipped, with the reason, only where the ros2 CLI is not
installed (see test/ros_tools.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import ros_tools
import yaml
from rcl_interfaces.srv import ListParameters
from ros_harness import Session

from rb_dynamics import DEFAULT_URDF

pytestmark = pytest.mark.skipif(ros_tools.MISSING is not None, reason=str(ros_tools.MISSING))

NODES = {"rb_dynamics": "rb_dynamics.ros.control_node",
         "rb_simulator": "rb_dynamics.ros.simulator_node"}


def _daemons() -> dict[int, str]:
    """ros2 CLI daemons of this session's ROS_DOMAIN_ID still running."""
    domain = os.environ["ROS_DOMAIN_ID"]
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in args]
        if any("_ros2_daemon" in a for a in text) and domain in text:
            found[int(entry)] = " ".join(text)
    return found


@pytest.fixture(scope="module", autouse=True)
def no_daemon_left():
    yield
    ros_tools.stop_daemon()
    assert not _daemons()


def _start(directory: Path, name: str, params_file: Path | None = None, *extra: str
           ) -> Session:
    """The node under its own name (the CLI calls it so), once it answers parameter requests
    (seen from the test's own peer: a CLI that then cannot find it is told apart from a node
    that never came up)."""
    args = extra if params_file is not None else ("-p", f"urdf_path:={DEFAULT_URDF}", *extra)
    session = Session(NODES[name], directory, params_file, *args)
    try:
        session.peer.ready(session.client(ListParameters, "~/list_parameters"), 60.0)
    except TimeoutError as error:
        session.close()
        raise AssertionError(f"{error}\n{session.output()}") from None
    return session


def _param(verb: str, node: str, *args: str) -> ros_tools.Result:
    # --timeout: how long the CLI waits for the node to appear (it is starting meanwhile)
    return ros_tools.ros2("param", verb, f"/{node}", *args, "--no-daemon", "--timeout", "30")


def test_param_set_then_get_as_in_the_readme(tmp_path):
    node = _start(tmp_path, "rb_dynamics")
    try:
        result = _param("set", "rb_dynamics", "mode", "computed_torque")
        assert result.returncode == 0 and "Set parameter successful" in result.stdout, \
            f"{result}\n{node.output()}"
        after = _param("get", "rb_dynamics", "mode")
        assert after.returncode == 0, str(after)
        assert after.stdout.strip() == "String value is: computed_torque", str(after)
        # a refused value is reported with the node's reason and changes nothing (the CLI
        # exits 0 all the same: the answer is on stderr)
        refused = _param("set", "rb_dynamics", "mode", "admittance")
        assert "Setting parameter failed" in refused.stderr and "mode" in refused.stderr, \
            str(refused)
        again = _param("get", "rb_dynamics", "mode")
        assert again.stdout.strip() == "String value is: computed_torque", str(again)
        gains = _param("set", "rb_dynamics", "kp", "[50.0, 60.0, 70.0, 80.0, 90.0, 100.0]")
        assert "Set parameter successful" in gains.stdout, str(gains)
        kp = _param("get", "rb_dynamics", "kp")
        assert kp.stdout.strip() == "Double values are: [50.0, 60.0, 70.0, 80.0, 90.0, 100.0]", \
            str(kp)
    finally:
        node.close()


def _dump(name: str, node: Session) -> dict:
    result = _param("dump", name)
    assert result.returncode == 0, f"{result}\n{node.output()}"
    dumped = yaml.safe_load(result.stdout)
    assert list(dumped) == [f"/{name}"], str(result)
    return dumped[f"/{name}"]["ros__parameters"]


@pytest.mark.parametrize("name, start, changes", [
    ("rb_dynamics", {}, {"mode": "computed_torque", "kp": "[40.0]", "effort_scale": "0.5"}),
    ("rb_simulator", {"integrator": "rk4", "real_time_factor": "0.5",
                      "initial_positions": "[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]"}, {}),
])
def test_param_dump_starts_an_identical_node(tmp_path, name, start, changes):
    """Values given at start (-p) and changed at run time (ros2 param set) are dumped, and a
    node started from the dump (--params-file) has every parameter the same."""
    first = _start(tmp_path, name, None,
                   *[a for k, v in start.items() for a in ("-p", f"{k}:={v}")])
    try:
        for parameter, value in changes.items():
            result = _param("set", name, parameter, value)
            assert "Set parameter successful" in result.stdout, f"{result}\n{first.output()}"
        dumped = _dump(name, first)
    finally:
        first.close()
    assert dumped, "ros2 param dump gave no parameters"
    assert dumped["urdf_path"] == str(DEFAULT_URDF)
    for parameter, value in {**start, **changes}.items():
        assert dumped[parameter] == yaml.safe_load(value), (parameter, dumped[parameter])
    params_file = tmp_path / f"{name}.yaml"
    params_file.write_text(yaml.safe_dump({f"/{name}": {"ros__parameters": dumped}}))
    second = _start(tmp_path, name, params_file)
    try:
        assert _dump(name, second) == dumped, second.output()
    finally:
        second.close()
