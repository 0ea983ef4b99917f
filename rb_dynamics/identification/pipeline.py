# SPDX-License-Identifier: Apache-2.0
"""The whole fit, from a recording and a URDF to the corrected model and its report.

``identify`` runs: the layout and base parameters of the URDF's model → the recording aligned
with the plan and averaged over its periods, and how it executed the plan (range and speed
covered, tracking error) → the base parameters by WLS (delay estimated) → the physically
consistent set by SDP → the validation of both on the held-out period(s), which scales the
base parameters' covariance where it contradicts the noise model.
``write_identification`` puts the corrected URDF, the overlay, ``report.json`` and the plot
into a folder, all or nothing, never over an input. Nothing is written unless the whole fit
succeeded; ``poor_fit`` says when it is too poor to use: a validation the model does not
explain, or a joint that did not execute its excitation.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rb_dynamics import __version__
from rb_dynamics.dynamics import gravity
from rb_dynamics.model import Model, load_model, write_overlay

from .base_fit import BaseFit, Validation, fit_base_parameters, scaled_by_validation, validate
from .base_parameters import BaseParameters, base_parameters
from .consistency import ConsistentFit, consistent_parameters, pseudo_inertia
from .fourier import FourierTrajectory
from .measurements import JointRecording, RecordingError
from .preprocessing import MIN_COVERAGE, Execution, PeriodicData, align, execution, periodic_data
from .regressor import ParameterLayout, body_parameters
from .results import (
    corrected_urdf,
    identified_model,
    identified_overlay,
    own_link_inertias,
    plot_validation,
)

__all__ = ["MAX_VALIDATION_RATIO", "OUTPUTS", "Identification", "identification_report",
           "identify", "poor_fit", "write_identification"]

DEFAULT_TERMS = ("armature", "viscous", "coulomb", "offset")
# the files a fit writes, by kind
OUTPUTS = {"urdf": "identified.urdf", "overlay": "overlay.yaml", "report": "report.json",
           "plot": "validation.png"}
# a joint's held-out effort RMS over its noise σ above this: the model misses something the
# arm does (a good fit is near 1; the closed-loop tests reach 1.0–1.5)
MAX_VALIDATION_RATIO = 2.0
# below these a second round (the result loaded into the controller, the plan sent again) is
# worth its time: a joint that covered less of its plan, a validation RMS/σ above
FULL_EXECUTION = 0.9
GOOD_VALIDATION = 1.3
# a delay given to the fit: efforts late by more than this share of the period are not a
# sensor's delay but a recording of another motion
MAX_DELAY_FRACTION = 0.05


@dataclass(frozen=True, eq=False)
class Identification:
    """Everything a fit found; ``model`` is the URDF's model with the consistent parameters."""

    urdf_text: str
    layout: ParameterLayout
    base: BaseParameters
    data: PeriodicData
    execution: Execution
    fit: BaseFit  # its covariance scaled by the validation (``scaled_by_validation``)
    validation: Validation
    consistent: ConsistentFit | None
    consistent_validation: Validation | None
    model: Model
    welded: list[np.ndarray]  # per body, its welded links' spatial inertia (body coordinates)
    seconds: float

    @property
    def theta(self) -> np.ndarray | None:
        return None if self.consistent is None else self.consistent.theta


def identify(urdf_text: str, recording: JointRecording, plan: FourierTrajectory, *,
             terms: tuple[str, ...] = DEFAULT_TERMS, held_out: int = 1,
             cutoff: float = 10.0, delay: float | None = None, consistent: bool = True,
             progress: Callable[[str], None] | None = None) -> Identification:
    """Identify the robot of ``urdf_text`` from ``recording`` of the excitation ``plan``.

    Raises ValueError for a ``cutoff`` below the plan's highest harmonic or above half the
    recording's rate, or a ``delay`` beyond ``MAX_DELAY_FRACTION`` of the period;
    ``RecordingError`` for a recording that does not hold the plan's motion (too short,
    not aligned), ``IdentificationError`` for data that cannot determine the parameters, and
    ``MissingDependency`` when the consistent set is asked for without cvxpy/clarabel.
    """
    say = progress or (lambda _: None)
    t0 = time.monotonic()
    lowest, nyquist = plan.harmonics / plan.period, 0.5 * recording.rate
    if not lowest <= cutoff < nyquist:
        raise ValueError(f"cutoff {cutoff:g} Hz: it must keep the plan's highest harmonic "
                         f"({lowest:g} Hz) and stay below half the recording's rate "
                         f"({nyquist:g} Hz)")
    if delay is not None and not abs(delay) <= MAX_DELAY_FRACTION * plan.period:
        raise ValueError(f"delay {delay:g} s: at most {MAX_DELAY_FRACTION:g} of the "
                         f"excitation's period ({MAX_DELAY_FRACTION * plan.period:g} s)")
    model = load_model(urdf_text)
    layout = ParameterLayout(model, tuple(plan.joints), terms)
    if tuple(recording.joints) != tuple(plan.joints):
        raise RecordingError(f"{recording.source}: joints {list(recording.joints)} differ from "
                             f"the plan's {list(plan.joints)}")
    say(f"model: {layout.describe()}")
    base = base_parameters(layout)
    say(f"base parameters: {base.count}")
    start, periods = align(recording, plan)
    say(f"excitation found at {start:.3f} s: {periods} whole periods of {plan.period:g} s")
    data = periodic_data(recording, plan.period, start, periods, held_out=held_out,
                         bandwidth=cutoff)
    say(f"averaged {data.periods} periods ({data.outliers} outlying samples dropped); "
        "noise σ " + ", ".join(f"{s:.3g}" for s in data.noise))
    executed = execution(data, plan)
    fit = fit_base_parameters(base, data, cutoff=cutoff, delay=delay, progress=say)
    say(f"fit: delay {fit.delay * 1e3:.2f} ms, Coulomb smoothing {fit.smoothing:g}, "
        f"condition {fit.condition:.1f}")
    own = own_link_inertias(model, urdf_text)
    welded = [I - o for I, o in zip(model.inertia, own)]
    cfit = cval = None
    theta = layout.parameters()
    if consistent:
        say("consistent parameters: semidefinite program")
        cfit = consistent_parameters(
            fit, [pseudo_inertia(body_parameters(w)) for w in welded])
        theta = cfit.theta
    say("validation on the held-out period(s)")
    validation, *rest = validate(fit, data, [fit.beta] + ([cfit.beta] if cfit else []))
    cval = rest[0] if rest else None
    fit = scaled_by_validation(fit, validation.ratio)
    return Identification(urdf_text, layout, base, data, executed, fit, validation, cfit, cval,
                          identified_model(layout, theta), welded, time.monotonic() - t0)


def _rounded(x) -> list:
    return [float(f"{v:.6g}") for v in np.ravel(x)]


def identification_report(ident: Identification, provenance: dict[str, str]) -> dict:
    """The machine-readable report (plain types, JSON-ready)."""
    fit, base, layout = ident.fit, ident.base, ident.layout
    report = {
        "format": "rb_dynamics/identification_report", "version": 1,
        "provenance": provenance, "robot": layout.model.name, "joints": list(layout.joints),
        "terms": list(layout.terms),
        "parameters": layout.n_parameters, "base_parameters": base.count,
        "periods_fitted": ident.data.periods, "periods_held_out": len(ident.data.held_out),
        "excitation_start_s": ident.data.start, "outliers_dropped": ident.data.outliers,
        "delay_s": fit.delay, "coulomb_smoothing": fit.smoothing, "condition": fit.condition,
        "noise_sigma": _rounded(fit.noise),
        "execution": {"range_covered": _rounded(ident.execution.range),
                      "peak_speed_covered": _rounded(ident.execution.speed),
                      "tracking_rms": _rounded(ident.execution.tracking),
                      "min_covered": MIN_COVERAGE},
        "validation": {"rms": _rounded(ident.validation.rms),
                       "rms_over_sigma": _rounded(ident.validation.ratio),
                       "std_scale": _rounded(np.maximum(ident.validation.ratio, 1.0))},
        "base": [{"name": name, "combination": base.combination(k), "value": float(fit.beta[k]),
                  "std": float(fit.std[k])} for k, name in enumerate(base.names())],
        "seconds": round(ident.seconds, 2),
    }
    if ident.consistent is not None:
        c = ident.consistent
        report["consistent"] = {
            "status": c.status, "chi2_increase": c.chi2_increase,
            "min_pseudo_inertia_eigenvalue": _rounded(c.min_eigenvalue),
            "validation": {"rms": _rounded(ident.consistent_validation.rms),
                           "rms_over_sigma": _rounded(ident.consistent_validation.ratio)},
            "parameters": dict(zip(layout.names, _rounded(c.theta))),
        }
    q = np.zeros((1, layout.model.nq))
    report["gravity_at_zero"] = _rounded(gravity(ident.model, q)[0][layout.v_index])
    return report


def poor_fit(ident: Identification) -> str | None:
    """Why the fit is too poor to use, or None: a joint that covered less than
    ``MIN_COVERAGE`` of its planned range or peak speed (its parameters cannot be known from
    the recording), and a joint whose held-out RMS over its noise σ is above
    ``MAX_VALIDATION_RATIO`` for the written model (the consistent set when there is one,
    else the least-squares fit)."""
    reasons = []
    names, ex = ident.layout.joints, ident.execution
    short = ex.short()
    if len(short):
        which = _coverage(names, ex, short)
        reasons.append(
            f"the excitation was not executed: below {MIN_COVERAGE:.0%} of the planned range "
            f"or peak speed for {which}: the parameters of its joints cannot be known from "
            "this recording (a controller too soft for the plan: armature in the URDF, higher "
            "gains, or a slower plan)")
    validation = ident.consistent_validation or ident.validation
    poor = np.flatnonzero(~(validation.ratio <= MAX_VALIDATION_RATIO))
    if len(poor):
        worst = ", ".join(f"{names[j]} {validation.ratio[j]:.2f}" for j in poor)
        reasons.append(
            f"the model does not explain the held-out period: validation RMS/σ above "
            f"{MAX_VALIDATION_RATIO:g} for {worst} (the arm differs from the model: unmodelled "
            "friction, a payload, a loose joint, or a recording that is not the plan's)")
    return "; ".join(reasons) or None


def _coverage(names: Sequence[str], ex, joints) -> str:
    """"name (range r%, speed s%)" for each of ``joints`` (indices), comma-separated."""
    return ", ".join(f"{names[j]} (range {ex.range[j]:.0%}, speed {ex.speed[j]:.0%})"
                     for j in joints)


def next_round(ident: Identification) -> str | None:
    """Why a second round would do better and how to run it, or None (``next_round_reason``)."""
    why = next_round_reason(ident)
    if why is None:
        return None
    return (f"{why}. A second round does better: load the result into the controller "
            "(urdf_path: identified.urdf, dynamics_overlay: overlay.yaml), send the plan "
            "again, record, and fit the new recording (`rb_dynamics_identify run` does the "
            "rounds; docs/identification.md, 'When the arm does not follow the plan')")


def next_round_reason(ident: Identification) -> str | None:
    """Why a second round would do better, or None: joints that covered less than
    ``FULL_EXECUTION`` of their planned range or peak speed (the controller's model, not the
    plan, shaped the motion), or whose validation RMS/σ is above ``GOOD_VALIDATION``."""
    names, ex = ident.layout.joints, ident.execution
    validation = ident.consistent_validation or ident.validation
    short = [j for j in range(len(names))
             if not (ex.range[j] >= FULL_EXECUTION and ex.speed[j] >= FULL_EXECUTION)]
    loose = [f"{names[j]} {validation.ratio[j]:.2f}" for j in range(len(names))
             if not validation.ratio[j] <= GOOD_VALIDATION]
    if not short and not loose:
        return None
    return "; ".join(
        ([f"the plan was not executed in full: {_coverage(names, ex, short)}"] if short
         else [])
        + ([f"validation RMS/σ above {GOOD_VALIDATION:g}: {', '.join(loose)}"] if loose
           else []))


def write_identification(ident: Identification, out: Path, provenance: dict[str, str],
                         inputs: Sequence[Path] = ()) -> dict[str, Path]:
    """Write ``identified.urdf``, ``overlay.yaml``, ``report.json`` and ``validation.png``
    into ``out``, all or nothing: into a new folder beside ``out`` first, which then becomes
    ``out`` (or whose files replace those of an existing ``out``). ValueError before anything
    is written when ``check_outputs`` refuses ``out``. Returns the paths by kind."""
    out = Path(out)
    paths = check_outputs(out, inputs)
    provenance = dict(provenance, created=datetime.datetime.now(datetime.timezone.utc)
                      .isoformat(timespec="seconds"), tool=f"rb_dynamics {__version__}")
    theta = ident.theta if ident.theta is not None else ident.layout.parameters(ident.model)
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        new = {kind: staging / name for kind, name in OUTPUTS.items()}
        new["urdf"].write_text(corrected_urdf(ident.urdf_text, ident.layout, theta,
                                              ident.welded), encoding="utf-8")
        write_overlay(identified_overlay(ident.layout, theta, ident.fit, provenance),
                      new["overlay"])
        new["report"].write_text(json.dumps(identification_report(ident, provenance),
                                            indent=1), encoding="utf-8")
        plot_validation(ident.validation, ident.layout.joints, new["plot"],
                        ident.consistent_validation,
                        title=f"{ident.layout.model.name}: a held-out period")
        if out.exists():
            for kind, path in paths.items():
                os.replace(new[kind], path)
        else:
            umask = os.umask(0)
            os.umask(umask)
            staging.chmod(0o777 & ~umask)  # mkdtemp's folder is the owner's only
            staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return paths


def check_outputs(out: Path, inputs: Sequence[Path] = ()) -> dict[str, Path]:
    """The paths ``write_identification`` writes into ``out``, by kind; ValueError when it
    could not: ``out`` is not a folder, an output's name there is a folder, or an output would
    replace one of ``inputs`` (files, or the files inside folders such as a bag)."""
    paths = {kind: out / name for kind, name in OUTPUTS.items()}
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    folders = [str(path) for path in paths.values() if path.is_dir()]
    if folders:
        raise ValueError(f"{folders[0]} is a folder: the results need its name")
    existing = [path for path in paths.values() if path.exists()]
    for given in map(Path, inputs) if existing else ():
        files = [f for f in given.rglob("*") if f.is_file()] if given.is_dir() else [given]
        for path in existing:
            if any(f.exists() and os.path.samefile(path, f) for f in files):
                raise ValueError(f"--out {out}: {path.name} would replace the input {given}; "
                                 "write the results into another folder")
    return paths
