# SPDX-License-Identifier: Apache-2.0
"""Every name of the package that the repository writes down resolves: a dotted
``rb_dynamics.…`` name (a module, and the name it defines) and a path ``rb_dynamics/….py``, in
the code, the tests, the documents, the Makefile and the scripts.

Read statically (the modules' syntax trees, no import), so that it needs no ROS.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = (".py", ".md", ".rst", ".c", ".sh", ".yaml", ".cfg", ".toml", ".txt", ".xml", ".msg",
            ".srv", ".action")
# files named without a suffix of their own
NAMED = ("Makefile", ".importlinter")
# a dotted name that is a file's name (config/rb_dynamics.yaml, rb_dynamics.launch.py)
FILE_ENDINGS = {"yaml", "py", "launch", "urdf", "json", "png", "log", "xml", "md", "txt", "c",
                "xacro", "mcap", "db3"}
DOTTED = re.compile(r"(?<![\w/.-])rb_dynamics(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w.-])rb_dynamics/[\w/]+\.(?:py|c|yaml|urdf)\b")


def _repository_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    return [ROOT / name for name in listed
            if name.endswith(SUFFIXES) or Path(name).name in NAMED]


@functools.cache
def _defined(module_file: Path) -> dict[str, set[str]]:
    """The names a module defines at its top level, each with the names its class body (and
    its methods' ``self.…``) define, if it is a class."""
    tree = ast.parse(module_file.read_text())
    names: dict[str, set[str]] = {}

    def targets(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Name):
            return [node.id]
        if isinstance(node, ast.Tuple):
            return [name for element in node.elts for name in targets(element)]
        return []

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = set()
        elif isinstance(node, ast.ClassDef):
            members = set()
            for inner in ast.walk(node):
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    members.add(inner.name)
                elif isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Store):
                    members.add(inner.attr)
                elif isinstance(inner, (ast.Assign, ast.AnnAssign)):
                    for target in (inner.targets if isinstance(inner, ast.Assign)
                                   else [inner.target]):
                        members.update(targets(target))
            names[node.name] = members
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update({name: set() for name in targets(target)})
        elif isinstance(node, ast.AnnAssign):
            names.update({name: set() for name in targets(node.target)})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(alias.asname or alias.name).split(".")[0]: set()
                          for alias in node.names})
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py", base.with_suffix(".c")):
        if candidate.is_file():
            return candidate
    return None


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module of the package, or a name one defines (and, for a
    class, one of its members)."""
    parts = dotted.split(".")
    for length in range(len(parts), 0, -1):
        module = _module_file(parts[:length])
        if module is None:
            continue
        rest = parts[length:]
        if not rest or module.suffix == ".c":  # an extension module's names are C's to define
            return True
        defined = _defined(module)
        if rest[0] not in defined:
            return False
        return len(rest) == 1 or (len(rest) == 2 and rest[1] in defined[rest[0]])
    return False


def test_every_written_name_of_the_package_resolves():
    unresolved = []
    for path in _repository_files():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for match in DOTTED.finditer(line):
                name = match.group(0)
                if name.split(".")[-1] in FILE_ENDINGS or resolves(name):
                    continue
                unresolved.append(f"{path.relative_to(ROOT)}:{number}: {name}")
            for match in PATH.finditer(line):
                if not (ROOT / match.group(0)).exists():
                    unresolved.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)}")
    assert not unresolved, "names that resolve to nothing:\n" + "\n".join(unresolved)


def test_the_check_itself_tells_names_apart():
    assert resolves("rb_dynamics.dynamics.reference.rnea")
    assert resolves("rb_dynamics.ros.control_node")
    assert resolves("rb_dynamics.control.JointController")
    # written joined, so that the scan above does not read them in this file
    assert not resolves(".".join(["rb_dynamics", "codegen"]))
    assert not resolves(".".join(["rb_dynamics", "dynamics", "reference", "no_such_function"]))
