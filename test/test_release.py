# SPDX-License-Identifier: Apache-2.0
"""What a ROS release checks (REP-2004 basics): licence, headers, manifests, linters, and that
the README's workspace commands find both packages the way rosdep and colcon do."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from catkin_pkg.package import parse_package
from catkin_pkg.packages import find_packages

import rb_dynamics

ROOT = Path(__file__).resolve().parents[1]
HEADER = "# SPDX-License-Identifier: Apache-2.0"
C_HEADER = "/* SPDX-License-Identifier: Apache-2.0 */"
SOURCES = ["rb_dynamics/**/*.py", "rb_dynamics/**/*.c", "launch/*.py", "test/*.py",
           "benchmarks/*.py", "setup.py", "scripts/*.sh", ".ci/run"]


def _sources() -> list[Path]:
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    files = {p for pattern in SOURCES for p in ROOT.glob(pattern)}
    return sorted(p for p in files if str(p.relative_to(ROOT)) in tracked)


def test_every_source_file_carries_the_licence():
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "Apache License" in (ROOT / "rb_dynamics_interfaces" / "LICENSE").read_text()
    missing = []
    for path in _sources():
        head = path.read_text(errors="replace").splitlines()[:3]
        if HEADER not in head and C_HEADER not in head:
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"no SPDX header: {missing}"


def test_manifests_agree_and_name_a_maintainer():
    ours = parse_package(ROOT / "package.xml")
    interfaces = parse_package(ROOT / "rb_dynamics_interfaces" / "package.xml")
    setup = (ROOT / "setup.py").read_text()
    changelog = (ROOT / "CHANGELOG.rst").read_text()
    assert ours.version == interfaces.version == rb_dynamics.__version__
    assert f'version="{ours.version}"' in setup
    assert re.search(rf"^{re.escape(ours.version)} \(\d{{4}}-\d\d-\d\d\)$", changelog, re.M)
    for package in (ours, interfaces):
        assert package.licenses == ["Apache-2.0"]
        assert package.maintainers and "example\"" not in str(package.maintainers[0])
    depends = {d.name for d in ours.exec_depends + ours.build_export_depends}
    assert {"rclpy", "rb_dynamics_interfaces", "python3-numpy", "python3-scipy"} <= depends


def test_the_readme_workspace_commands_find_both_packages():
    """rosdep and colcon (catkin_pkg's discovery) stop at a folder with a package.xml: the
    interface package inside ours is found only when its path is named too."""
    workspace = find_packages(str(ROOT))
    assert [p.name for p in workspace.values()] == ["rb_dynamics"]
    inside = find_packages(str(ROOT / "rb_dynamics_interfaces"))
    assert [p.name for p in inside.values()] == ["rb_dynamics_interfaces"]
    readme = (ROOT / "README.md").read_text()
    both = "src/rb_dynamics src/rb_dynamics/rb_dynamics_interfaces"
    assert f"rosdep install --from-paths {both}" in readme
    assert f"colcon build --base-paths {both}" in readme


def test_ruff_is_clean():
    """The linter (requirements/dev.txt, ruff.toml: style, imports, docstrings of the
    package's public modules, classes and functions)."""
    ruff = Path(sys.prefix) / "bin" / "ruff"
    ruff = str(ruff) if ruff.exists() else shutil.which("ruff")
    result = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
