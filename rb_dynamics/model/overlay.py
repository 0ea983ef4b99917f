# SPDX-License-Identifier: Apache-2.0
"""A dynamics overlay: what a robot description leaves out about its joints, kept beside it.

A URDF has no rotor inertia, at most one viscous and one Coulomb coefficient per joint, and
nothing of the effort sensor; identification (``rb_dynamics.identification``) measures them.
An overlay holds them per joint, by name, and ``apply_overlay`` makes the ``Model`` that
carries them. Each joint entry may give any of:

============== ============================================ ===========================
key            meaning                                      unit (revolute; prismatic)
============== ============================================ ===========================
armature       rotor inertia reflected to the joint, added  kg·m²; kg
               to the diagonal of M(q)
viscous        viscous friction coefficient (the URDF's     N·m·s/rad; N·s/m
               ``<dynamics damping>``)
coulomb        Coulomb friction (the URDF's ``<dynamics     N·m; N
               friction>``), smoothed as tanh(q̇/ε)
stribeck       breakaway effort above Coulomb at rest       N·m; N
stribeck_velocity  the speed at which it has decayed to 1/e rad/s; m/s
offset         effort sensor offset: measured = true +      N·m; N
               offset (a measurement bias, never commanded)
============== ============================================ ===========================

A joint's friction effort is then ``viscous·q̇ + (coulomb + stribeck·exp(−(q̇/v_s)²))·
tanh(q̇/ε)`` with ε = ``COULOMB_SMOOTHING``. A key that is absent keeps the model's value; the
overlay's values replace the URDF's, they do not add to them.

The file is YAML::

    format: rb_dynamics/dynamics_overlay
    version: 1
    robot: my_arm                     # the model's name (checked only as a warning)
    joints:
      shoulder_pan_joint: {armature: 0.12, viscous: 0.8, coulomb: 1.9, offset: 0.02}
    covariance:                       # optional: of the identified parameters
      parameters: [shoulder_pan_joint.armature, ...]
      matrix: [[...], ...]
    provenance: {bag: ..., urdf: ..., created: ...}   # optional, free text

A value written as YAML 1.2 writes numbers (``1.0e6``, which YAML 1.1 reads as a string) is
read as that number. Whether the values fit the robot (friction within the effort limits, an
armature within reason) is checked where the robot's dynamics are known
(``rb_dynamics.control.overlay_checks``).

Errors: ``OverlayError`` (a ``ValueError``) naming the file, joint and key: unknown keys or
joints, negative or non-finite values, a Stribeck velocity in (0, 1e-6), a covariance of the
wrong shape.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .checks import plain_yaml, read_text_file
from .tree import Model
from .xml_reading import MAX_MAGNITUDE

__all__ = [
    "OVERLAY_FORMAT",
    "OVERLAY_KEYS",
    "DynamicsOverlay",
    "OverlayError",
    "apply_overlay",
    "only_joint_dynamics_differ",
    "read_overlay",
    "write_overlay",
]

OVERLAY_FORMAT = "rb_dynamics/dynamics_overlay"
OVERLAY_VERSION = 1
# overlay key → Model field (one value per joint coordinate)
OVERLAY_KEYS = {
    "armature": "armature",
    "viscous": "damping",
    "coulomb": "friction",
    "stribeck": "stribeck_friction",
    "stribeck_velocity": "stribeck_velocity",
    "offset": "effort_offset",
}
# the keys of the friction law: a joint an overlay gives one of them has identified friction
# (``Model.identified_friction``)
FRICTION_KEYS = frozenset({"viscous", "coulomb", "stribeck", "stribeck_velocity"})
_SIGNED = ("offset",)  # the one key that may be negative
MAX_OVERLAY_BYTES = 10_000_000
MAX_OVERLAY_DEPTH = 32  # levels of YAML nesting (an overlay has five)
MIN_STRIBECK_VELOCITY = 1e-6  # rad/s or m/s; 0 is allowed: no Stribeck term
# a number as YAML 1.2 writes it; YAML 1.1 (PyYAML) takes 1.0e6 and 1e6, without a dot or an
# exponent sign, for strings
_YAML_1_2_NUMBER = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


class OverlayError(ValueError):
    """An overlay that cannot be read or applied; the message names the place."""


@dataclasses.dataclass
class DynamicsOverlay:
    """Per-joint values (joint → key → value, keys of ``OVERLAY_KEYS``), and what came with
    them: the covariance of identified parameters (names, matrix) and free-text provenance."""

    joints: dict[str, dict[str, float]]
    robot: str = ""
    covariance_names: list[str] = dataclasses.field(default_factory=list)
    covariance: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0)))
    provenance: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.joints = {str(j): _joint_values(str(j), values, "overlay")
                       for j, values in _mapping(self.joints, "overlay: joints").items()}
        self.covariance = np.asarray(self.covariance, dtype=float)
        n = len(self.covariance_names)
        if self.covariance.shape != (n, n) or not np.all(np.isfinite(self.covariance)):
            raise OverlayError(f"overlay: covariance must be a finite {n}×{n} matrix (one row "
                               f"per name), got shape {self.covariance.shape}")

    @classmethod
    def from_model(cls, model: Model, **kwargs: Any) -> DynamicsOverlay:
        """The values ``model`` carries, for each of its 1-DoF joints."""
        joints = {}
        for name, vi in zip(model.actuated_joint_names, model.velocity_indices(
                model.actuated_joint_names)):
            joints[name] = {key: float(getattr(model, field)[vi])
                            for key, field in OVERLAY_KEYS.items()}
        return cls(joints=joints, robot=model.name, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The file's content (plain Python types, YAML-ready)."""
        out: dict[str, Any] = {"format": OVERLAY_FORMAT, "version": OVERLAY_VERSION,
                               "robot": self.robot,
                               "joints": {j: dict(v) for j, v in self.joints.items()}}
        if self.covariance_names:
            out["covariance"] = {"parameters": list(self.covariance_names),
                                 "matrix": self.covariance.tolist()}
        if self.provenance:
            out["provenance"] = {str(k): str(v) for k, v in self.provenance.items()}
        return out


def _mapping(value: Any, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise OverlayError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


def _joint_values(joint: str, values: Any, where: str) -> dict[str, float]:
    out = {}
    for key, value in _mapping(values, f"{where}: joint {joint!r}").items():
        if key not in OVERLAY_KEYS:
            raise OverlayError(f"{where}: joint {joint!r}: unknown key {key!r} (keys: "
                               f"{', '.join(OVERLAY_KEYS)})")
        if isinstance(value, str) and _YAML_1_2_NUMBER.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads 1.0e6 (no exponent sign) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OverlayError(f"{where}: joint {joint!r}: {key} must be a number, got "
                               f"{value!r}")
        value = float(value)
        if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
            raise OverlayError(f"{where}: joint {joint!r}: {key} {value!r} is not a finite "
                               f"number within ±{MAX_MAGNITUDE:g}")
        if value < 0 and key not in _SIGNED:
            raise OverlayError(f"{where}: joint {joint!r}: {key} {value!r} is negative")
        if key == "stribeck_velocity" and 0 < value < MIN_STRIBECK_VELOCITY:
            # the friction law divides by v_s²: a tinier one overflows it to NaN at rest
            raise OverlayError(f"{where}: joint {joint!r}: stribeck_velocity {value!r} is "
                               f"below {MIN_STRIBECK_VELOCITY:g} (0: no Stribeck term)")
        out[key] = value
    return out


def read_overlay(source: str | Path) -> DynamicsOverlay:
    """An overlay from a YAML file (a path) or YAML text (a string holding a newline).

    Raises ``OverlayError`` naming the file and the place for anything it cannot take (a file
    that is not a regular one or is over ``MAX_OVERLAY_BYTES``, YAML aliases, nesting too deep),
    and ``OSError`` for a file it cannot open.
    """
    text, where = (source, "overlay text") if isinstance(source, str) and "\n" in source \
        else (None, str(source))
    if text is None:
        text = read_text_file(source, MAX_OVERLAY_BYTES, "overlay file", OverlayError)
    data = _mapping(plain_yaml(text, where, MAX_OVERLAY_DEPTH, OverlayError), where)
    if data.get("format") != OVERLAY_FORMAT or data.get("version") != OVERLAY_VERSION:
        raise OverlayError(f"{where}: not a dynamics overlay (want format: {OVERLAY_FORMAT}, "
                           f"version: {OVERLAY_VERSION})")
    unknown = set(data) - {"format", "version", "robot", "joints", "covariance", "provenance"}
    if unknown:
        raise OverlayError(f"{where}: unknown keys {sorted(map(str, unknown))}")
    covariance = _mapping(data.get("covariance") or {}, f"{where}: covariance")
    try:
        return DynamicsOverlay(
            joints={str(j): _joint_values(str(j), v, where)
                    for j, v in _mapping(data.get("joints") or {}, f"{where}: joints").items()},
            robot=str(data.get("robot") or ""),
            covariance_names=[str(n) for n in covariance.get("parameters") or []],
            covariance=np.asarray(covariance.get("matrix") or np.zeros((0, 0)), dtype=float),
            provenance={str(k): str(v) for k, v in
                        _mapping(data.get("provenance") or {}, f"{where}: provenance").items()})
    except OverlayError:
        raise  # names the place already
    except (TypeError, ValueError) as exc:
        raise OverlayError(f"{where}: {exc}") from None


def write_overlay(overlay: DynamicsOverlay, path: str | Path) -> None:
    """Write ``overlay`` as YAML to ``path`` (the joints in their order, keys as given)."""
    import yaml

    Path(path).write_text(yaml.safe_dump(overlay.to_dict(), sort_keys=False), encoding="utf-8")


def apply_overlay(model: Model, overlay: DynamicsOverlay) -> Model:
    """A new ``Model``: ``model`` with the overlay's values on the joints it names (the
    others keep theirs). Raises ``OverlayError`` naming joints that are not 1-DoF joints of
    the model."""
    names = list(overlay.joints)
    try:
        indices = model.velocity_indices(names)
    except ValueError as exc:
        raise OverlayError(f"overlay for robot {overlay.robot or '?'!r}: {exc}") from None
    changes = {field: np.array(getattr(model, field), dtype=float)
               for field in OVERLAY_KEYS.values()}
    identified = np.array(model.identified_friction, dtype=bool)
    for name, vi in zip(names, indices):
        for key, value in overlay.joints[name].items():
            changes[OVERLAY_KEYS[key]][vi] = value
        identified[vi] |= bool(FRICTION_KEYS & set(overlay.joints[name]))
    return dataclasses.replace(model, **changes, identified_friction=identified)


def only_joint_dynamics_differ(model: Model, base: Model) -> bool:
    """Whether ``model`` is ``base`` with other joint dynamics, as an overlay makes it: the
    same joints, tree, link inertias and effort limits."""
    return (model.joint_names == base.joint_names and model.parent == base.parent
            and all(np.array_equal(a, b) for a, b in zip(model.X_tree + model.inertia,
                                                         base.X_tree + base.inertia))
            and np.array_equal(model.effort_limit, base.effort_limit))
