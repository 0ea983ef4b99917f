# SPDX-License-Identifier: Apache-2.0
"""No import circles among the package's modules, which the layers of ``.importlinter`` do not
see (they only order the subpackages).

The graph is grimp's (PyPI grimp, import-linter's graph) of every import statement in
``rb_dynamics``: at module level, in functions and under ``TYPE_CHECKING`` alike, since each
says that one module needs another. A package is a node of its own, its ``__init__``: a package
face that re-exports its modules while one of them imports the face (``from . import name`` of
a name that is not a module, ``from rb_dynamics.dynamics import name``) is a circle. So is a
C extension imported as ``from . import _ext``: grimp sees no module ``_ext`` and counts the
import as one of the package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def _circles(graph) -> list[list[str]]:
    """The graph's circles: its strongly connected components of more than one module, each
    sorted, found as a module's upstream (what it imports, at any depth) ∩ its downstream
    (what imports it, at any depth)."""
    circles, seen = [], set()
    for module in sorted(graph.modules):
        if module in seen:
            continue
        around = graph.find_upstream_modules(module) & graph.find_downstream_modules(module)
        if around:
            circle = sorted(around | {module})
            circles.append(circle)
            seen.update(circle)
    return circles


def _describe(graph, circle: list[str]) -> str:
    """A circle and the import statements that close it (importer:line: statement)."""
    lines = [" ↔ ".join(circle)]
    for importer in circle:
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported in circle:
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    lines.append(f"    {importer}:{detail['line_number']}: "
                                 f"{detail['line_contents']}")
    return "\n".join(lines)


def test_the_graph_is_this_checkout():
    """grimp finds the package by import: the graph must be of these files, not an install."""
    spec = importlib.util.find_spec("rb_dynamics")
    assert Path(spec.origin).resolve().parent == ROOT / "rb_dynamics"


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph("rb_dynamics", cache_dir=None)
    circles = _circles(graph)
    assert not circles, f"{len(circles)} import circle(s):\n" + \
        "\n".join(_describe(graph, circle) for circle in circles)
