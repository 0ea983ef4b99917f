# SPDX-License-Identifier: Apache-2.0
"""The package's shape is a test: the layers of ``.importlinter`` (PyPI import-linter), no ROS
below ``ros/``, modules and classes small enough to read, one clamp of an effort to its
limits, and one owner of a controller's state."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rb_dynamics"
ROS_LAYERS = ("ros", "demo")  # the only subpackages that may import ROS
# Bounds that flag a module or a class doing several jobs, not sizes to squeeze code into: a
# file is as long as its concept (the longest, one algorithm family or one node part, sit near
# 600), and the controller, which owns the reference and offers every operation on it, near 450
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 500
# the one place an effort is clamped to ±(its limit): a clamp elsewhere whose text names an
# effort (``effort``, ``tau``), or any clamp in control/ and simulation/ but these functions'
# (which bound something else), is that clamp written again
EFFORT_CLAMP = PACKAGE / "model" / "effort_clamp.py"
EFFORT_WORDS = re.compile(r"effort|\btau", re.IGNORECASE)
OTHER_CLAMPS = {
    "control/cartesian.py": {"critical_damping", "gain_problem"},  # eigenvalues ≥ 0
    "control/law.py": {"integrate"},  # the integral term to ±i_clamp
    "control/limits.py": {"velocity_bounds"},  # velocities to ±(velocity limit)
    # commands to the block's ranges (and what a command leaves unset, at start)
    "simulation/joint_drives.py": {"__init__", "hold", "command", "command_efforts"},
}


# the controller's state is written by its own methods only (JTC's shape: the parts of a node
# ask, the controller does); a write is an assignment to an attribute reached through a name
# or attribute that says "controller" (controller.trajectory, goal.controller.x,
# controller.law.payload, self._controller.q)
CONTROLLER_MODULE = PACKAGE / "control" / "joint_controller.py"


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _is_ros(module: str) -> bool:
    top = module.split(".")[0]
    return top in ("rclpy", "launch", "launch_ros", "rosidl_runtime_py") or \
        top.endswith(("_msgs", "_interfaces"))


def test_the_import_contracts_hold():
    linter = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if linter is None:
        pytest.fail("lint-imports (PyPI import-linter, requirements/dev.txt) is not installed")
    out = subprocess.run([linter, str(ROOT / ".importlinter"), "--no-cache"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_nothing_below_ros_imports_ros():
    """Wider than the contract's list: any ``*_msgs`` or ``*_interfaces`` package counts."""
    offenders = []
    for path in _modules():
        layer = path.relative_to(PACKAGE).parts[0]
        if layer in ROS_LAYERS:
            continue
        ros = sorted(m for m in _imported(ast.parse(path.read_text())) if _is_ros(m))
        if ros:
            offenders.append(f"{path.relative_to(ROOT)}: {', '.join(ros)}")
    assert not offenders, "\n".join(offenders)


def test_every_subpackage_says_what_it_holds():
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.split()) >= 8, f"{init.relative_to(ROOT)} has no docstring"


def test_modules_and_classes_are_small_enough_to_read():
    too_long = []
    for path in _modules():
        text = path.read_text()
        lines = text.count("\n") + 1
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_CLASS_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}: class {node.name} {length} lines")
    assert not too_long, "\n".join(too_long)


def _clamps(tree: ast.Module) -> list[tuple[str, ast.Call]]:
    """(the enclosing function's name, the call) for each ``clip`` call (``np.clip``,
    ``array.clip``) and ``minimum(maximum(…))`` nested either way round: how NumPy clamps."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            inner = node.args[0] if node.args else None
            nested = {"minimum": "maximum", "maximum": "minimum"}.get(node.func.attr)
            if node.func.attr == "clip" or (
                    nested and isinstance(inner, ast.Call)
                    and isinstance(inner.func, ast.Attribute) and inner.func.attr == nested):
                found.append((function, node))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "")
    return found


def test_an_effort_is_clamped_in_one_place():
    """Efforts are bounded by ``rb_dynamics.model.clamp_effort`` only."""
    offenders = []
    for path in _modules():
        if path == EFFORT_CLAMP:
            continue
        text, where = path.read_text(), path.relative_to(PACKAGE).as_posix()
        effort_layer = where.startswith(("control/", "simulation/"))
        for function, call in _clamps(ast.parse(text)):
            segment = ast.get_source_segment(text, call) or ""
            if EFFORT_WORDS.search(segment) or (
                    effort_layer and function not in OTHER_CLAMPS.get(where, ())):
                offenders.append(f"{where}:{call.lineno} in {function}: {segment}")
    assert not offenders, "clamp_effort, not a clamp of its own:\n" + "\n".join(offenders)


def _is_a_controller(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and "controller" in node.attr.lower()) or \
        (isinstance(node, ast.Name) and "controller" in node.id.lower())


def _through_a_controller(node: ast.expr) -> bool:
    while not _is_a_controller(node) and isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return _is_a_controller(node)


def _outside_the_controller(find) -> list[str]:
    """"module:line: code" for each node ``find(tree)`` returns in the modules but the
    controller's own."""
    return [f"{path.relative_to(PACKAGE).as_posix()}:{found.lineno}: {ast.unparse(found)}"
            for path in _modules() if path != CONTROLLER_MODULE
            for found in find(ast.parse(path.read_text()))]


def _controller_writes(tree: ast.Module) -> list[ast.Attribute]:
    writes = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        while targets:
            target = targets.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                targets.extend(target.elts)
                continue
            if isinstance(target, ast.Subscript):  # controller.q[0] = … writes controller.q
                target = target.value
            if isinstance(target, ast.Attribute) and _through_a_controller(target.value):
                writes.append(target)
    return writes


def test_only_the_controller_writes_its_state():
    """``JointController`` owns its reference, settings and law: the node's parts call its
    operations (follow, hold, configure, …), none assigns its fields."""
    offenders = _outside_the_controller(_controller_writes)
    assert not offenders, "written from outside JointController:\n" + "\n".join(offenders)


def test_the_controller_write_check_tells_writes_apart():
    """What counts as a write of the controller's state, and what does not."""
    code = """
controller.trajectory = None
goal.controller.trajectory, x = sampler, 1
self._controller.law.payload = effort
controller.q[0] += 1.0
self.controller = controller
trajectory = controller.trajectory
controller.follow(sampler)
"""
    written = [ast.unparse(w) for w in _controller_writes(ast.parse(code))]
    assert sorted(written) == sorted(["controller.trajectory", "goal.controller.trajectory",
                                      "self._controller.law.payload", "controller.q"])


# what the node's parts may ask of the objects a controller holds: questions, no changes
CONTROLLER_QUERIES = {"model_order", "gravity", "gravity_effort", "joint_effort",
                      "neutral_configuration", "copy"}


def _calls_on_controller_parts(tree: ast.Module) -> list[ast.Attribute]:
    """Calls of a method of an object the controller holds (``controller.law.x.f()``),
    questions (``CONTROLLER_QUERIES``) excepted: the controller's own operations say what
    may change."""
    return [node.func for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and _through_a_controller(node.func.value)
            and not _is_a_controller(node.func.value)
            and node.func.attr not in CONTROLLER_QUERIES]


def test_the_controllers_parts_are_changed_through_its_operations():
    offenders = _outside_the_controller(_calls_on_controller_parts)
    assert not offenders, "a controller's part changed from outside it:\n" + "\n".join(offenders)


def test_the_part_call_check_tells_operations_from_reaches():
    code = """
controller.law.cartesian.set_target(T)
self.loop.controller.state_reader.missing_velocity.estimator.reset()
controller.set_cartesian_target(T)
self.loop.controller.hold()
controller.law.dynamics.gravity(q)
"""
    found = [ast.unparse(c) for c in _calls_on_controller_parts(ast.parse(code))]
    assert found == ["controller.law.cartesian.set_target",
                     "self.loop.controller.state_reader.missing_velocity.estimator.reset"]


# rclpy's private API is reached in one module; elsewhere a private name (``_x``) is only one
# the package defines itself (or ``os._exit``, documented)
RCLPY_PRIVATE = PACKAGE / "ros" / "rclpy_private.py"
PUBLIC_UNDERSCORED = {"_exit"}


def _private_uses(tree: ast.Module, ours: set[str]) -> list[tuple[int, str]]:
    """Private names of other libraries ``tree`` reaches: ``from lib import _x``,
    ``obj._x`` and ``getattr(obj, "_x")`` where ``_x`` is not in ``ours``."""
    uses = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                not (node.module or "").startswith("rb_dynamics"):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
                "getattr", "hasattr", "setattr") and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            names = [node.args[1].value]
        uses += [(node.lineno, name) for name in names
                 if name.startswith("_") and not name.startswith("__")
                 and name not in ours and name not in PUBLIC_UNDERSCORED]
    return uses


def _defined(trees: list[ast.Module]) -> set[str]:
    """Every name the package binds: functions, classes, arguments, variables, attributes."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == \
                    "__setattr__" and len(node.args) >= 2 and \
                    isinstance(node.args[1], ast.Constant):
                names.add(node.args[1].value)  # object.__setattr__(self, "_x", …)
    return names


def test_rclpy_private_api_is_reached_in_one_module():
    trees = {path: ast.parse(path.read_text()) for path in _modules()}
    ours = _defined([tree for path, tree in trees.items() if path != RCLPY_PRIVATE])
    offenders = [f"{path.relative_to(PACKAGE).as_posix()}:{line}: {name}"
                 for path, tree in trees.items() if path != RCLPY_PRIVATE
                 for line, name in _private_uses(tree, ours)]
    assert not offenders, ("another library's private names outside ros/rclpy_private.py:\n"
                           + "\n".join(offenders))


def test_the_private_use_check_tells_uses_apart():
    code = """
from rclpy.qos_overriding_options import _declare_qos_parameters
from .mine import _helper
machine = node._state_machine
service = getattr(node, "_service_change_state", None)
self._mine = 1
value = self._mine
os._exit(0)
"""
    tree = ast.parse(code)
    used = [name for _, name in _private_uses(tree, _defined([tree]))]
    assert used == ["_declare_qos_parameters", "_state_machine", "_service_change_state"], used
