# SPDX-License-Identifier: Apache-2.0
"""The main job end to end: simulator and control node in separate processes, over DDS."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest
from pin_oracle import REAL_ROBOTS, robots_dir


def _run(tmp_path: Path, *args: str, timeout: float = 120.0) -> dict:
    out = subprocess.run([sys.executable, "-m", "rb_dynamics.demo.main_job", "--quiet",
                          "--out", str(tmp_path), *args],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "command latency" in out.stdout and "real-time factor" in out.stdout
    report = json.loads((tmp_path / "main_job_report.json").read_text())
    assert report["shutdown"] == {"simulator": "stopped", "control node": "stopped"}, \
        "\n".join(f"--- {log.name}:\n{log.read_text(errors='replace')[-6000:]}"
                  for log in sorted(Path(report["logs"]).glob("*.log")))
    # no process of the run is left behind (their command lines name the run's log folder)
    leftovers = [p for p in Path("/proc").glob("[0-9]*/cmdline")
                 if report["log_dir"] in p.read_bytes().decode(errors="replace")]
    assert not leftovers
    image = matplotlib.image.imread(report["plot"])
    assert image.shape[0] > 300 and image.shape[1] > 300
    return report


def test_main_job_on_the_bundled_arm(tmp_path):
    report = _run(tmp_path, "--duration", "3")
    assert report["robot"] == "default_arm"
    assert max(report["rms_error_rad"].values()) < 5e-3
    assert max(report["max_effort_over_limit"].values()) <= 1.0
    assert max(report["max_effort_over_limit"].values()) >= 0.2  # a demanding motion
    # what computed torque buys: PD + gravity with the same gains tracks far worse
    for joint, error in report["rms_error_rad"].items():
        assert report["pd_gravity_rms_error_rad"][joint] > 5 * error, report
    assert report["commands_recorded"] > 1000
    assert report["latency_ms"]["median"] < 5.0


@pytest.mark.parametrize("robot", ["panda"])
def test_closed_loop_tracks_a_smooth_trajectory_across_processes(tmp_path, robot):
    """Computed torque over topics on panda, a 5 s trajectory, RMS error ≤ 1e-3 rad."""
    urdf = Path(robots_dir(), REAL_ROBOTS[robot][0])
    report = _run(tmp_path, "--urdf", str(urdf), "--duration", "5")
    assert max(report["rms_error_rad"].values()) <= 1e-3, report["rms_error_rad"]
