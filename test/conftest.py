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
# Parallel workers (pytest-xdist, ``make test``) each get their own domain, spread from the one
# the controlling process drew: two workers starting nodes of the same names on one domain would
# answer each other's tests.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    _first_domain = int(os.environ.setdefault("RB_DYNAMICS_TEST_DOMAIN",
                                              os.environ["ROS_DOMAIN_ID"]))
    _index, _count = int(_WORKER.removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ["ROS_DOMAIN_ID"] = str(50 + (_first_domain - 50 + _index * (151 // _count)) % 151)
else:
    os.environ["RB_DYNAMICS_TEST_DOMAIN"] = os.environ["ROS_DOMAIN_ID"]
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


def _accuracy_measured_here() -> dict:
    """The worst relative errors against Pinocchio this process measured, {(robot, quantity):
    error} (empty when test_dynamics_pinocchio did not run here)."""
    return dict(getattr(sys.modules.get("test_dynamics_pinocchio"), "ACCURACY", None) or {})


ACCURACY_FROM_WORKERS: dict = {}  # what parallel workers measured (they send it when done)


def pytest_sessionfinish(session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)  # on an xdist worker
    if workeroutput is not None:
        workeroutput["accuracy"] = [[*key, error] for key, error in
                                    _accuracy_measured_here().items()]


@pytest.hookimpl(optionalhook=True)  # an xdist hook: a run without xdist never calls it
def pytest_testnodedown(node, error) -> None:
    """(pytest-xdist, in the controlling process) a worker is done: keep its errors."""
    for robot, quantity, value in getattr(node, "workeroutput", {}).get("accuracy", []):
        key = (robot, quantity)
        ACCURACY_FROM_WORKERS[key] = max(ACCURACY_FROM_WORKERS.get(key, 0.0), value)


def pytest_terminal_summary(terminalreporter) -> None:
    """The worst relative error against Pinocchio per quantity and model, when measured."""
    accuracy = _accuracy_measured_here() or ACCURACY_FROM_WORKERS
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
    config.addinivalue_line(
        "markers", "alone: the test measures a pace against a baseline taken in the same run, "
        "which assumes the load does not change meanwhile, or bounds a latency that the other "
        "tests' closed loops beside it would stretch: make test runs these after the others, "
        "with no other test beside them")


# The modules whose tests run longest (closed loops of simulated seconds, cold builds of large
# kernels), longest first: ``make test`` hands whole modules to its workers in collection order
# (``--dist loadfile --no-loadscope-reorder``), and a long module started last would leave one
# worker running alone at the end.
LONGEST_FIRST = (
    "test_payload_closed_loop", "test_hardening", "test_identification_cli",
    "test_identification_mujoco", "test_jtc_parity",
    "test_trajectory_controller_cli", "test_cartesian_ros", "test_drives", "test_dynamics_physics",
    "test_constraints_ros", "test_main_job", "test_drives_mujoco", "test_trajectory_action",
    "test_contact_ros", "test_stop_command_sim",
)


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if talks_to_ros(str(item.path)):
            item.add_marker(pytest.mark.ros)
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # (stable: others keep order)
