# SPDX-License-Identifier: Apache-2.0
"""What an identification hands back: the corrected model, URDF and overlay, and plots.

- ``identified_model``: the ``Model`` with a parameter set θ (body inertias, joint terms);
- ``own_link_inertias``: each body's own link's URDF inertia in body coordinates (what is left
  when the links welded to it are taken out);
- ``corrected_urdf``: the original URDF text with each moving link's ``<inertial>`` rewritten
  and each identified joint's ``<dynamics damping friction>`` set; everything else (comments,
  other elements, attribute order) is kept;
- ``identified_overlay``: the ``DynamicsOverlay`` of the joint terms (armature, viscous,
  Coulomb, Stribeck, offset), the base parameters' covariance and the provenance;
- ``plot_validation``: per joint, recorded against predicted efforts on a held-out period,
  and the residual (matplotlib, Agg backend).
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from rb_dynamics.model import DynamicsOverlay, Model, mcI, rpy_to_matrix

from .base_fit import BaseFit, Validation
from .regressor import ParameterLayout, spatial_inertia_from_parameters

__all__ = [
    "corrected_urdf",
    "identified_model",
    "identified_overlay",
    "own_link_inertias",
    "plot_validation",
]

_OVERLAY_TERMS = {"armature": "armature", "viscous": "viscous", "coulomb": "coulomb",
                  "stribeck": "stribeck", "offset": "offset"}
_MODEL_FIELDS = {"armature": "armature", "viscous": "damping", "coulomb": "friction",
                 "stribeck": "stribeck_friction", "offset": "effort_offset"}


def identified_model(layout: ParameterLayout, theta: np.ndarray) -> Model:
    """``layout.model`` with θ's body inertias and joint terms (Stribeck at the layout's v_s)."""
    model = layout.model
    inertia = [spatial_inertia_from_parameters(theta[10 * b:10 * b + 10])
               for b in range(model.n_bodies)]
    changes = {f: np.array(getattr(model, f), dtype=float) for f in _MODEL_FIELDS.values()}
    changes["stribeck_velocity"] = np.array(model.stribeck_velocity, dtype=float)
    for term in layout.terms:
        changes[_MODEL_FIELDS[term]][layout.v_index] = theta[layout.term_slice(term)]
        if term == "stribeck":
            changes["stribeck_velocity"][layout.v_index] = layout.stribeck_velocity
    return dataclasses.replace(model, inertia=inertia, **changes)


def _numbers(text: str | None, default: tuple[float, ...]) -> np.ndarray:
    return np.array([float(v) for v in text.split()]) if text else np.array(default)


def _link_inertia(link: ET.Element) -> np.ndarray:
    """A <link>'s spatial inertia in its frame (zero without <inertial>)."""
    inertial = link.find("inertial")
    if inertial is None:
        return np.zeros((6, 6))
    mass = inertial.find("mass")
    m = float(mass.get("value", 0.0)) if mass is not None else 0.0
    origin = inertial.find("origin")
    xyz = _numbers(origin.get("xyz") if origin is not None else None, (0.0, 0.0, 0.0))
    rpy = _numbers(origin.get("rpy") if origin is not None else None, (0.0, 0.0, 0.0))
    ie = inertial.find("inertia")
    v = {k: float(ie.get(k, 0.0)) if ie is not None else 0.0
         for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
    I = np.array([[v["ixx"], v["ixy"], v["ixz"]], [v["ixy"], v["iyy"], v["iyz"]],
                  [v["ixz"], v["iyz"], v["izz"]]])
    R = rpy_to_matrix(rpy)
    return mcI(m, xyz, R @ I @ R.T)


def _parse(urdf_text: str) -> ET.Element:
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True, insert_pis=True))
    return ET.fromstring(urdf_text, parser=parser)


def own_link_inertias(model: Model, urdf_text: str) -> list[np.ndarray]:
    """Per body, its own link's URDF spatial inertia in body coordinates."""
    links = {link.get("name"): link for link in _parse(urdf_text).findall("link")}
    out = []
    for name in model.body_names:
        X = model.frames[name].X_from_body
        out.append(X.T @ _link_inertia(links[name]) @ X)
    return out


def corrected_urdf(urdf_text: str, layout: ParameterLayout, theta: np.ndarray,
                   welded: list[np.ndarray]) -> str:
    """The URDF with each body's own link carrying θ's body inertia less ``welded`` (per body,
    the spatial inertia of its welded links, body coordinates), and the identified joints'
    ``<dynamics damping= friction=>`` from θ's viscous and Coulomb terms."""
    root = _parse(urdf_text)
    links = {link.get("name"): link for link in root.findall("link")}
    model = layout.model
    for b, name in enumerate(model.body_names):
        X = model.frames[name].X_from_body  # body → link
        Xinv = np.linalg.inv(X)
        own = Xinv.T @ (spatial_inertia_from_parameters(theta[10 * b:10 * b + 10])
                        - welded[b]) @ Xinv
        _set_inertial(links[name], own)
    joints = {j.get("name"): j for j in root.findall("joint")}
    values = {term: theta[layout.term_slice(term)] for term in layout.terms}
    for k, name in enumerate(layout.joints):
        if "viscous" not in values and "coulomb" not in values:
            break
        dyn = joints[name].find("dynamics")
        if dyn is None:
            dyn = ET.SubElement(joints[name], "dynamics")
        if "viscous" in values:
            dyn.set("damping", f"{values['viscous'][k]:.9g}")
        if "coulomb" in values:
            dyn.set("friction", f"{values['coulomb'][k]:.9g}")
    ET.indent(root, space="  ")
    return '<?xml version="1.0"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _set_inertial(link: ET.Element, I: np.ndarray) -> None:
    m = I[5, 5]
    c = np.array([I[2, 4], I[0, 5], I[1, 3]]) / m if m > 0 else np.zeros(3)
    Ic = I[:3, :3] - m * (np.dot(c, c) * np.eye(3) - np.outer(c, c))
    old = link.find("inertial")
    index = list(link).index(old) if old is not None else 0
    if old is not None:
        link.remove(old)
    inertial = ET.Element("inertial")
    ET.SubElement(inertial, "origin", xyz=" ".join(f"{v:.9g}" for v in c), rpy="0 0 0")
    ET.SubElement(inertial, "mass", value=f"{m:.9g}")
    ET.SubElement(inertial, "inertia", ixx=f"{Ic[0, 0]:.9g}", ixy=f"{Ic[0, 1]:.9g}",
                  ixz=f"{Ic[0, 2]:.9g}", iyy=f"{Ic[1, 1]:.9g}", iyz=f"{Ic[1, 2]:.9g}",
                  izz=f"{Ic[2, 2]:.9g}")
    link.insert(index, inertial)


def identified_overlay(layout: ParameterLayout, theta: np.ndarray, fit: BaseFit,
                       provenance: dict[str, str]) -> DynamicsOverlay:
    """The overlay of θ's joint terms, with the base parameters' covariance (named by each
    base parameter's leading parameter) and ``provenance``."""
    joints: dict[str, dict[str, float]] = {name: {} for name in layout.joints}
    for term in layout.terms:
        for name, value in zip(layout.joints, theta[layout.term_slice(term)]):
            joints[name][_OVERLAY_TERMS[term]] = float(value)
            if term == "stribeck":
                joints[name]["stribeck_velocity"] = layout.stribeck_velocity
    return DynamicsOverlay(joints=joints, robot=layout.model.name,
                           covariance_names=fit.base.names(), covariance=fit.covariance,
                           provenance=provenance)


def plot_validation(validation: Validation, joints: tuple[str, ...], path: Path,
                    consistent: Validation | None = None, title: str = "") -> None:
    """One row per joint: recorded and predicted efforts over a held-out period, and the
    residual; written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(joints)
    fig, axes = plt.subplots(n, 2, figsize=(12, 1.9 * n + 0.8), sharex=True, squeeze=False)
    t = validation.phase
    for j, name in enumerate(joints):
        ax, res = axes[j]
        ax.plot(t, validation.measured[:, j], color="0.65", lw=0.5, label="recorded")
        ax.plot(t, validation.predicted[:, j], color="C0", lw=1.0, label="identified (WLS)")
        if consistent is not None:
            ax.plot(t, consistent.predicted[:, j], color="C3", lw=0.8, ls="--",
                    label="consistent (SDP)")
        ax.set_ylabel(f"{name}\nN·m", fontsize=8)
        residual = validation.measured[:, j] - validation.predicted[:, j]
        res.plot(t, residual, color="C2", lw=0.4)
        res.set_ylabel(f"residual\nRMS {validation.rms[j]:.3g}", fontsize=8)
    axes[0, 0].legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("time in the held-out period (s)")
    axes[-1, 1].set_xlabel("time in the held-out period (s)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
