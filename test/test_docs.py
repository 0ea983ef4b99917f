# SPDX-License-Identifier: Apache-2.0
"""The documents hold: the README is a front page, every relative link reaches its file (and
heading), every Python block compiles and every ROS-free one runs as written, and the layout page
names every module. No ROS needed.

Convention for Python blocks (docs/testing.md): a block that imports no ROS package (``rclpy``,
``launch``, a ``*_msgs``, ``*_srvs`` or ``*_interfaces`` package) is complete and runs; a block
that imports one shows a ROS client and is only compiled.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~)(.*)$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target), text may span lines
INLINE_CODE = re.compile(r"`[^`\n]*`")
ROS_MODULES = {"rclpy", "launch", "launch_ros", "ament_index_python"}
ROS_SUFFIXES = ("_msgs", "_srvs", "_interfaces")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _split(text: str) -> tuple[str, list[tuple[str, str, int]]]:
    """The prose of a Markdown document (code blocks blanked, line numbers kept) and its fenced
    blocks as (language, code, first line)."""
    prose, blocks, block = [], [], None
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line.strip())
        if block is None and fence:
            block = (fence.group(2).strip(), [], number + 1)
            prose.append("")
        elif block is not None and line.strip() in ("```", "~~~"):
            blocks.append((block[0], "\n".join(block[1]), block[2]))
            block = None
            prose.append("")
        elif block is not None:
            block[1].append(line)
            prose.append("")
        else:
            prose.append(line)
    assert block is None, f"a code block opened at line {block[2] - 1} is never closed"
    return "\n".join(prose), blocks


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    prose, _ = _split(path.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", prose, re.M)}


def _links(path: Path) -> list[tuple[str, int]]:
    prose, _ = _split(path.read_text())
    prose = INLINE_CODE.sub(lambda m: " " * len(m.group(0)), prose)
    return [(m.group(1), prose.count("\n", 0, m.start()) + 1) for m in LINK.finditer(prose)]


def _python_blocks() -> list[tuple[str, str]]:
    return [(f"{_name(path)}:{line}", code) for path in DOCUMENTS
            for language, code, line in _split(path.read_text())[1] if language == "python"]


def _imports_ros(tree: ast.AST) -> bool:
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module.split(".")[0])
    return any(m in ROS_MODULES or m.endswith(ROS_SUFFIXES) for m in modules)


def test_the_readme_is_a_front_page():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


def test_the_readme_keeps_the_two_commands():
    """CI runs the README's test command (.ci/run: make test)."""
    _, blocks = _split(README.read_text())
    commands = [line.split("#")[0].strip() for language, code, _ in blocks if language == "bash"
                for line in code.splitlines()]
    assert "make run" in commands and "make test" in commands
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_every_relative_link_resolves(path):
    broken = []
    for target, line in _links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / file_part).resolve() if file_part else path
        if not destination.exists():
            broken.append(f"line {line}: {target} (no such file)")
        elif ROOT not in destination.parents and destination != ROOT:
            broken.append(f"line {line}: {target} (outside the repository)")
        elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
            broken.append(f"line {line}: {target} (no heading #{anchor} in {destination.name})")
    assert not broken, f"{_name(path)}:\n" + "\n".join(broken)


def test_python_blocks_exist_and_some_run():
    blocks = _python_blocks()
    assert blocks, "no Python block in the documents"
    assert any(not _imports_ros(ast.parse(code)) for _, code in blocks), \
        "no ROS-free Python block: the engine's own example is missing"


@pytest.mark.parametrize("where, code", _python_blocks(), ids=[w for w, _ in _python_blocks()])
def test_python_block_compiles_and_the_ros_free_ones_run(where, code, monkeypatch, tmp_path):
    compiled = compile(code, where, "exec")
    if _imports_ros(ast.parse(code)):
        return
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compiled, {"__name__": "__main__"})


def _layout_entries() -> set[str]:
    """Paths named by the tree in docs/layout.md (indentation gives the folder)."""
    _, blocks = _split((ROOT / "docs" / "layout.md").read_text())
    tree = next(code for language, code, _ in blocks if "rb_dynamics/" in code)
    entries, stack = set(), []
    for line in tree.splitlines():
        if not line.strip():
            continue
        indent = (len(line) - len(line.lstrip())) // 2
        name = line.split()[0]
        stack = stack[:indent] + [name.rstrip("/")]
        entries.add("/".join(stack))
    return entries


def _is_module(path: str) -> bool:
    return path.endswith((".py", ".c")) and not Path(path).name.startswith("__")


def test_the_layout_page_names_every_module_and_no_other():
    listed = {e for e in _layout_entries() if e.startswith("rb_dynamics/") and _is_module(e)}
    modules = {_name(p) for p in (ROOT / "rb_dynamics").rglob("*") if _is_module(p.name)}
    missing, stale = sorted(modules - listed), sorted(listed - modules)
    assert not missing, f"docs/layout.md does not name {missing}: one line each, what it holds"
    assert not stale, f"docs/layout.md names {stale}, which do not exist"


HISTORY = re.compile(r"\b(as before|used to|no longer|formerly|(issue|issues) \d+)\b", re.I)


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_the_documents_describe_what_is(path):
    """History belongs in CHANGELOG.rst and git, not in the documents."""
    prose, _ = _split(path.read_text())
    found = [f"line {prose.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
             for m in HISTORY.finditer(prose)]
    assert not found, f"{_name(path)}: " + "; ".join(found)
