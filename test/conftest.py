# SPDX-License-Identifier: Apache-2.0
"""Test session set-up: every ROS process of the suite talks only on loopback, on its own domain,
and checks message fields as Humble does.

A random ROS_DOMAIN_ID per pytest session keeps concurrent runs (and a developer's real robot
on domain 0) apart; child processes inherit these variables. Loopback is spelled the way the
installed distribution wants it (rb_dynamics.ros.environment): Jazzy warns about Humble's spelling.
"""

import ast
import functools
import gc
import os
import sys
import tempfile

# Message constructors and field assignments check their arguments, as Humble's always do (Jazzy's
# only with this variable, read when a message module is imported): a field that Humble's
# interfaces lack fails a test here rather than a node on a Humble robot.
os.environ["ROS_PYTHON_CHECK_FIELDS"] = "1"

import pytest  # noqa: E402

from rb_dynamics.ros.environment import keep_local  # noqa: E402

keep_local(os.environ, override=True)
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="rb_dynamics_ros_log_"))
# compiled kernels of this session in a fresh cache: every run exercises the compiler, and a
# developer's own cache is neither used nor filled (the nodes the tests start inherit it)
os.environ["RB_DYNAMICS_CACHE"] = tempfile.mkdtemp(prefix="rb_dynamics_kernels_")


@pytest.fixture(autouse=True)
def _no_long_pauses_in_this_process():
    """What earlier tests left alive is taken out of the cyclic garbage collector's reach
    before each test (``gc.freeze``, after a collection): a full pass would otherwise walk the
    whole session's heap, hundreds of milliseconds late in the suite, and this process
    streams the joint states and times the commands of the nodes under test (a pause here
    reads as a gap in their loop). The nodes do the same (``ros.runtime.freeze_long_lived``)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _stop_what_a_test_left_running():
    """Nodes a test started and did not close (it failed half-way) are stopped after it."""
    harness = sys.modules.get("ros_harness")
    before = set(harness.open_sessions()) if harness else set()
    yield
    harness = sys.modules.get("ros_harness")
    if harness:
        harness.abandon(harness.left_open_since(before))


def pytest_terminal_summary(terminalreporter) -> None:
    """The worst relative error against Pinocchio per quantity and model, when measured."""
    module = sys.modules.get("test_dynamics_pinocchio")
    accuracy = getattr(module, "ACCURACY", None)
    if not accuracy:
        return
    robots = sorted({robot for robot, _ in accuracy})
    quantities = sorted({quantity for _, quantity in accuracy})
    write = terminalreporter.write_line
    write("")
    write("worst relative error against Pinocchio (per quantity and model):")
    write(f"{'quantity':<28}" + "".join(f"{r:>17}" for r in robots))
    for quantity in quantities:
        cells = [accuracy.get((robot, quantity)) for robot in robots]
        write(f"{quantity:<28}" + "".join(f"{c:>17.1e}" if c is not None else f"{'-':>17}"
                                          for c in cells))


# ----------------------------------------------------------------------------- the two tiers
# A test module that talks to ROS — it imports rclpy, a message package, the package's ROS
# layer, or a helper of this folder that does — is marked ``ros``: ``make test-fast`` runs the
# others (``-m "not ros"``), the engine, control, simulation and identification without ROS.
TEST_DIR = os.path.dirname(os.path.abspath(__file__))
ROS_TOP_LEVEL = ("rclpy", "launch", "launch_ros", "rosidl_runtime_py")


def _imports(path: str) -> set[str]:
    """The modules ``path`` imports, and those it names in a string (``python -m …`` in a
    child process)."""
    with open(path) as source:
        tree = ast.parse(source.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith(("rb_dynamics.ros", "rb_dynamics.demo")):
            names.add(node.value)
    return names


@functools.cache
def talks_to_ros(path: str) -> bool:
    """Whether the test module (or helper) at ``path`` imports ROS, directly or through a
    helper module of this folder."""
    for name in _imports(path):
        top = name.split(".")[0]
        if top in ROS_TOP_LEVEL or top.endswith(("_msgs", "_srvs", "_interfaces")) \
                or name.startswith(("rb_dynamics.ros", "rb_dynamics.demo")):
            return True
        helper = os.path.join(TEST_DIR, f"{top}.py")
        if os.path.isfile(helper) and helper != path and talks_to_ros(helper):
            return True
    return False


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "ros: the test talks to ROS (nodes, DDS, messages)")


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if talks_to_ros(str(item.path)):
            item.add_marker(pytest.mark.ros)
