# SPDX-License-Identifier: Apache-2.0
"""Humble's interfaces for a process of this venv: control_msgs 4.8.0 (Humble's, from
``../shared/vendor/ros-humble-control-msgs``) built by scripts/setup_env.sh into
``$VENV/opt/humble``, put first on the paths, and ``ROS_PYTHON_CHECK_FIELDS=1`` (Humble's
generated classes always refuse a constructor argument that is not a field; Jazzy's do so only
with that variable)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

PREFIX = Path(sys.prefix) / "opt" / "humble"
SITE = PREFIX / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
MISSING = None if (SITE / "control_msgs").is_dir() else (
    f"Humble's control_msgs are not built in {PREFIX} (make setup builds them from "
    "../shared/vendor/ros-humble-control-msgs)")


def _first(path: Path, value: str | None) -> str:
    return f"{path}{os.pathsep}{value}" if value else str(path)


def humble_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with Humble's control_msgs first."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = _first(SITE, env.get("PYTHONPATH"))
    env["LD_LIBRARY_PATH"] = _first(PREFIX / "lib", env.get("LD_LIBRARY_PATH"))
    env["AMENT_PREFIX_PATH"] = _first(PREFIX, env.get("AMENT_PREFIX_PATH"))
    env["ROS_PYTHON_CHECK_FIELDS"] = "1"
    return env
