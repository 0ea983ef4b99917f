# SPDX-License-Identifier: Apache-2.0
"""The whole fit, from a recording and a URDF to the corrected model and its report.

``identify`` runs: the layout and base parameters of the URDF's model → the recording aligned
with the plan and averaged over its periods → the base parameters by WLS (delay estimated) →
the physically consistent set by SDP → the validation of both on the held-out period(s).
``write_identification`` puts the corrected URDF, the overlay, ``report.json`` and the plot
into a folder. Nothing is written unless the whole fit succeeded.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rb_dynamics import __version__
from rb_dynamics.dynamics import gravity
from rb_dynamics.model import Model, load_model, write_overlay

from .base_fit import BaseFit, Validation, fit_base_parameters, validate
from .base_parameters import BaseParameters, base_parameters
from .consistency import ConsistentFit, consistent_parameters, pseudo_inertia
from .fourier import FourierTrajectory
from .measurements import JointRecording, RecordingError
from .preprocessing import PeriodicData, align, periodic_data
from .regressor import ParameterLayout, body_parameters
from .results import (
    corrected_urdf,
    identified_model,
    identified_overlay,
    own_link_inertias,
    plot_validation,
)

__all__ = ["Identification", "identify", "identification_report", "write_identification"]

DEFAULT_TERMS = ("armature", "viscous", "coulomb", "offset")


@dataclass(frozen=True, eq=False)
class Identification:
    """Everything a fit found; ``model`` is the URDF's model with the consistent parameters."""

    urdf_text: str
    layout: ParameterLayout
    base: BaseParameters
    data: PeriodicData
    fit: BaseFit
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

    Raises ``RecordingError`` for a recording that does not hold the plan's motion (too short,
    not aligned), ``IdentificationError`` for data that cannot determine the parameters, and
    ``MissingDependency`` when the consistent set is asked for without cvxpy/clarabel.
    """
    say = progress or (lambda _: None)
    t0 = time.monotonic()
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
    fit = fit_base_parameters(base, data, cutoff=cutoff, delay=delay, progress=say)
    say(f"fit: delay {fit.delay * 1e3:.2f} ms, condition {fit.condition:.1f}")
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
    return Identification(urdf_text, layout, base, data, fit, validation, cfit, cval,
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
        "delay_s": fit.delay, "condition": fit.condition, "noise_sigma": _rounded(fit.noise),
        "validation": {"rms": _rounded(ident.validation.rms),
                       "rms_over_sigma": _rounded(ident.validation.ratio)},
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


def write_identification(ident: Identification, out: Path, provenance: dict[str, str]
                         ) -> dict[str, Path]:
    """Write ``identified.urdf``, ``overlay.yaml``, ``report.json`` and ``validation.png``
    into ``out`` (created). Returns the paths by kind."""
    out.mkdir(parents=True, exist_ok=True)
    provenance = dict(provenance, created=datetime.datetime.now(datetime.timezone.utc)
                      .isoformat(timespec="seconds"), tool=f"rb_dynamics {__version__}")
    theta = ident.theta if ident.theta is not None else ident.layout.parameters(ident.model)
    paths = {"urdf": out / "identified.urdf", "overlay": out / "overlay.yaml",
             "report": out / "report.json", "plot": out / "validation.png"}
    paths["urdf"].write_text(corrected_urdf(ident.urdf_text, ident.layout, theta, ident.welded),
                             encoding="utf-8")
    write_overlay(identified_overlay(ident.layout, theta, ident.fit, provenance),
                  paths["overlay"])
    paths["report"].write_text(json.dumps(identification_report(ident, provenance), indent=1),
                               encoding="utf-8")
    plot_validation(ident.validation, ident.layout.joints, paths["plot"],
                    ident.consistent_validation,
                    title=f"{ident.layout.model.name}: a held-out period")
    return paths
