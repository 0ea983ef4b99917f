# SPDX-License-Identifier: Apache-2.0
"""The identification extra's packages, imported only where they are needed.

``rosbags`` (reading and writing bags), ``cvxpy`` and ``clarabel`` (the consistent parameter
set) are not needed by the engine, the control node or the simulator: ``pip install
rb_dynamics[identification]`` (or ``make setup``) installs them. ``require`` imports one or
raises ``MissingDependency`` naming the package and what needs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["IDENTIFICATION_EXTRA", "MissingDependency", "require"]

IDENTIFICATION_EXTRA = ("rosbags", "cvxpy", "clarabel")


class MissingDependency(ImportError):
    """A package of the identification extra is not installed; the message says what to do."""


def require(package: str, purpose: str) -> ModuleType:
    """The module ``package``, or ``MissingDependency`` naming it and ``purpose``."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise MissingDependency(
            f"{purpose} needs the Python package {package!r}, which is not installed: "
            f"pip install {' '.join(IDENTIFICATION_EXTRA)}  (or pip install "
            f"'rb_dynamics[identification]'; in this repository: make setup) [{exc}]"
        ) from None
