"""Between ROS messages and the model's joint vectors: by joint name, checked, rclpy-free.

Nothing here imports rclpy or message packages: messages are read through their fields
(``msg.name``, ``wrench.force.x``), so every function is testable with plain Python values.
Errors are ``ConversionError`` (a ``ValueError``) whose message names the offending field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "ConversionError",
    "clamp_efforts",
    "missing_joints",
    "named_state",
    "optional_by_name",
    "values_by_name",
    "wrench_to_array",
    "wrenches_by_link",
]


class ConversionError(ValueError):
    """Input that cannot be mapped onto the model; the message names the field."""


def _as_finite(values: Sequence[float], field: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise ConversionError(f"{field}: not an array of numbers") from None
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ConversionError(f"{field}[{bad}] is {arr[bad]} (NaN or inf)")
    return arr


def _check_names(names: Sequence[str], field: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConversionError(f"{field}: joint {name!r} appears twice")
        seen.add(name)


def missing_joints(joints: Sequence[str], names: Sequence[str]) -> list[str]:
    """The entries of ``joints`` that ``names`` does not mention, in ``joints`` order."""
    present = set(names)
    return [j for j in joints if j not in present]


def values_by_name(
    joints: Sequence[str],
    names: Sequence[str],
    values: Sequence[float],
    field: str,
    *,
    names_field: str = "name",
    allow_extra: bool = True,
) -> np.ndarray:
    """``values`` (one per entry of ``names``) reordered as ``joints``.

    Every joint must be named once; names that are not in ``joints`` are ignored when
    ``allow_extra`` (a JointState from a driver with grippers, mimic joints, ...) and an error
    otherwise (a service request with a typo).
    """
    if len(values) != len(names):
        raise ConversionError(
            f"{field} has {len(values)} values but {names_field} has {len(names)} names")
    _check_names(names, names_field)
    arr = _as_finite(values, field)
    index = {name: k for k, name in enumerate(names)}
    if not allow_extra:
        known = set(joints)
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConversionError(
                f"{names_field}: unknown joints {unknown}; the model's joints are {list(joints)}")
    missing = missing_joints(joints, names)
    if missing:
        raise ConversionError(f"{names_field}: missing joints {missing}")
    return np.array([arr[index[j]] for j in joints], dtype=float)


def optional_by_name(
    joints: Sequence[str],
    names: Sequence[str],
    values: Sequence[float],
    field: str,
    *,
    names_field: str = "joint_names",
    allow_extra: bool = False,
) -> np.ndarray:
    """Like ``values_by_name``, but an empty ``values`` means zeros."""
    if len(values) == 0:
        return np.zeros(len(joints))
    return values_by_name(joints, names, values, field, names_field=names_field,
                          allow_extra=allow_extra)


def named_state(
    joints: Sequence[str],
    request: Any,
    fields: Sequence[str],
) -> list[np.ndarray]:
    """Vectors in ``joints`` order from a request with ``joint_names`` and array ``fields``.

    The first field (positions) is required; the others may be empty (zeros). Unknown joint
    names are an error: a request names exactly the model's joints, in any order.
    """
    names = list(request.joint_names)
    out = [values_by_name(joints, names, list(getattr(request, fields[0])), fields[0],
                          names_field="joint_names", allow_extra=False)]
    for field in fields[1:]:
        out.append(optional_by_name(joints, names, list(getattr(request, field)), field))
    return out


def wrench_to_array(wrench: Any) -> np.ndarray:
    """A geometry_msgs/Wrench as [fx, fy, fz, tx, ty, tz]."""
    f, t = wrench.force, wrench.torque
    return np.array([f.x, f.y, f.z, t.x, t.y, t.z], dtype=float)


def wrenches_by_link(
    links: Sequence[str],
    wrenches: Sequence[Any],
    known_links: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """``{link: [f; τ]}`` from parallel lists of link names and geometry_msgs/Wrench.

    Wrenches on the same link add up. ``known_links`` (when given) rejects unknown names here,
    with the field named, rather than deep inside the dynamics.
    """
    if len(links) != len(wrenches):
        raise ConversionError(
            f"wrenches has {len(wrenches)} entries but wrench_links has {len(links)}")
    known = set(known_links) if known_links is not None else None
    out: dict[str, np.ndarray] = {}
    for k, (link, wrench) in enumerate(zip(links, wrenches)):
        if known is not None and link not in known:
            raise ConversionError(f"wrench_links[{k}]: unknown link {link!r}")
        value = _as_finite(wrench_to_array(wrench), f"wrenches[{k}]")
        out[link] = out[link] + value if link in out else value
    return out


def clamp_efforts(tau: np.ndarray, limits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``tau`` clipped to ±``limits`` (inf: no clamp), and a mask of the clipped entries."""
    limits = np.asarray(limits, dtype=float)
    clamped = np.clip(tau, -limits, limits)
    return clamped, clamped != tau

