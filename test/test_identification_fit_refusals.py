# SPDX-License-Identifier: Apache-2.0
"""``rb_dynamics_identify fit`` refuses what it cannot vouch for, and writes all or nothing: a
recording with a hole inside the excitation, a URDF other than the plan's (by the model's
content, not the file's), a validation too poor to use (unless ``--accept-poor-fit``); it never
writes over an input, and a failure while writing leaves nothing behind. The bag is a
synthetic recording of the bundled arm (a perturbed model, effort noise) read by the command
itself (its main, in this process)."""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.identification import (
    JointStateBagWriter,
    ParameterLayout,
    SensorModel,
    base_parameters,
    check_plan_model,
    perturbed_model,
    plan_excitation,
    read_plan,
    synthetic_recording,
    write_plan,
)
from rb_dynamics.model import load_model
from rb_dynamics.ros.identification import main

PERIODS = 6
PERIOD = 2.0
LEAD_IN = 1.0  # s at rest before the excitation in the synthetic recording


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """plan.json of a short excitation and a recording of it (500 Hz, 6 periods)."""
    root = tmp_path_factory.mktemp("fit")
    model = load_model(DEFAULT_URDF)
    base = base_parameters(ParameterLayout(model, ()))
    plan = plan_excitation(base, period=PERIOD, harmonics=3, starts=1, evaluations=300)
    from rb_dynamics.identification import model_fingerprint

    write_plan(root / "plan.json", plan, PERIODS, LEAD_IN, str(DEFAULT_URDF),
               model_fingerprint(model))
    recording, _ = synthetic_recording(
        perturbed_model(model, np.random.default_rng(9)), plan.trajectory, PERIODS,
        SensorModel(rate=500.0, noise=0.05, noise_relative=0.01), np.random.default_rng(10),
        lead_in=LEAD_IN)
    return root / "plan.json", recording


def _bag(path: Path, recording, keep=None, effort=None) -> Path:
    keep = np.ones(len(recording.stamps), bool) if keep is None else keep
    effort = recording.effort if effort is None else effort
    with JointStateBagWriter(path, storage="mcap") as writer:
        for k in np.flatnonzero(keep):
            writer.write(recording.stamps[k] + 10.0, recording.joints, recording.position[k],
                         recording.velocity[k], effort[k])
    return path


def _fit(bag: Path, plan: Path, out: Path, *options: str, urdf: Path = Path(DEFAULT_URDF)
         ) -> int:
    return main(["fit", str(bag), "--urdf", str(urdf), "--plan", str(plan), "--out", str(out),
                 "--no-consistent", "--quiet", *options])


def test_a_hole_inside_the_excitation_is_refused_naming_where(setup, tmp_path, capsys):
    """0.6 s of states lost in the third period (300 states at 500 Hz): not interpolated."""
    plan, recording = setup
    t = recording.stamps - recording.stamps[0]
    keep = ~((t > LEAD_IN + 2.5 * PERIOD) & (t < LEAD_IN + 2.5 * PERIOD + 0.6))
    out = tmp_path / "out"
    assert _fit(_bag(tmp_path / "bag", recording, keep), plan, out) == 1
    err = capsys.readouterr().err
    assert "1 hole(s) in the recorded excitation" in err, err
    assert "the longest, 0.60" in err and "states were lost while recording" in err
    assert not out.exists()


def _other_urdf(path: Path, longer: bool) -> Path:
    """The bundled arm's URDF rewritten: comments, blank lines and numbers spelt otherwise;
    with ``longer`` also the forearm 1 cm longer (same links and joints by name)."""
    text = Path(DEFAULT_URDF).read_text()
    text = text.replace("<robot", "<!-- a copy -->\n\n<robot", 1).replace("><", ">\n  <")
    if longer:
        start = text.index('<joint name="wrist_1_joint"')
        origin = text.index("<origin", start)
        xyz = text.index('xyz="', origin) + 5
        end = text.index('"', xyz)
        numbers = [float(v) for v in text[xyz:end].split()]
        numbers[int(np.argmax(np.abs(numbers)))] *= 1.0 + 0.01 / max(np.abs(numbers))
        text = text[:xyz] + " ".join(str(float(v)) for v in numbers) + text[end:]
    path.write_text(text)
    return path


def test_a_urdf_other_than_the_plans_is_refused_by_its_content(setup, tmp_path, capsys):
    plan, recording = setup
    _, data = read_plan(plan)
    same = _other_urdf(tmp_path / "same.urdf", longer=False)
    check_plan_model(data, load_model(same.read_text()), str(same))  # the same model
    longer = _other_urdf(tmp_path / "longer.urdf", longer=True)
    assert load_model(longer.read_text()).joint_names == load_model(DEFAULT_URDF).joint_names
    out = tmp_path / "out"
    assert _fit(_bag(tmp_path / "bag", recording), plan, out, urdf=longer) == 1
    err = capsys.readouterr().err
    assert f"{longer} is not the model the plan was made for" in err, err
    assert not out.exists()


def test_a_poor_validation_is_refused_unless_accepted(setup, tmp_path, capsys):
    """The held-out period's efforts 2 N·m off (a payload put on in the last period): RMS/σ
    far above 2; refused and nothing written, or written with --accept-poor-fit."""
    plan, recording = setup
    t = recording.stamps - recording.stamps[0]
    effort = recording.effort + 2.0 * (t >= LEAD_IN + (PERIODS - 1) * PERIOD)[:, None]
    bag, out = _bag(tmp_path / "bag", recording, effort=effort), tmp_path / "out"
    assert _fit(bag, plan, out) == 1
    err = capsys.readouterr().err
    assert "the model does not explain the held-out period: validation RMS/σ above 2" in err
    assert "nothing written (--accept-poor-fit writes anyway)" in err and not out.exists()
    assert _fit(bag, plan, out, "--accept-poor-fit") == 0
    assert (out / "identified.urdf").exists() and (out / "report.json").exists()


def test_fit_never_writes_over_an_input(setup, tmp_path, capsys):
    """--out is the URDF's folder, and the URDF is called identified.urdf."""
    plan, recording = setup
    urdf = tmp_path / "robot" / "identified.urdf"
    urdf.parent.mkdir()
    urdf.write_text(Path(DEFAULT_URDF).read_text())
    before = urdf.read_bytes()
    assert _fit(_bag(tmp_path / "bag", recording), plan, urdf.parent, urdf=urdf) == 1
    err = capsys.readouterr().err
    assert "identified.urdf would replace the input" in err, err
    assert urdf.read_bytes() == before and sorted(urdf.parent.iterdir()) == [urdf]


def test_fit_writes_all_or_nothing(setup, tmp_path, capsys, monkeypatch):
    """An output's name taken by a folder: refused before anything is written. The disk full
    while the last file is written: nothing is left, not even the staging folder."""
    plan, recording = setup
    bag = _bag(tmp_path / "bag", recording)
    out = tmp_path / "out"
    (out / "report.json").mkdir(parents=True)
    assert _fit(bag, plan, out) == 1
    assert "report.json is a folder: the results need its name" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]

    from rb_dynamics.identification import pipeline

    def full_disk(*_, **__):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pipeline, "plot_validation", full_disk)
    fresh = tmp_path / "fresh"
    assert _fit(bag, plan, fresh) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert not fresh.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bag", "out"]
    monkeypatch.undo()
    assert _fit(bag, plan, fresh) == 0
    assert sorted(p.name for p in fresh.iterdir()) == [
        "identified.urdf", "overlay.yaml", "report.json", "validation.png"]
