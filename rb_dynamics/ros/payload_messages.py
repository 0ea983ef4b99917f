# SPDX-License-Identifier: Apache-2.0
"""Payloads in and out of rb_dynamics_interfaces messages, shared by the control node's and the
simulator's payload services: a checked ``Payload`` from a message's fields, a Payload message,
a one-line description.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from geometry_msgs.msg import Vector3

from rb_dynamics.dynamics import Payload, PayloadEffort
from rb_dynamics.model import Model
from rb_dynamics_interfaces.msg import Payload as PayloadMsg

__all__ = ["describe", "inertia_matrix", "payload_from_fields", "payload_message"]


def inertia_matrix(values: Any, field: str) -> np.ndarray:
    """3×3 from 6 values (URDF order ixx ixy ixz iyy iyz izz), 9 (row-major) or none (zero);
    ValueError naming ``field`` for any other count."""
    values = np.asarray(values, dtype=float).reshape(-1)
    if values.size == 0:
        return np.zeros((3, 3))
    if values.size == 6:
        xx, xy, xz, yy, yz, zz = values
        return np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    if values.size == 9:
        return values.reshape(3, 3)
    raise ValueError(f"{field}: 6 values (ixx ixy ixz iyy iyz izz) or 9 (row-major), "
                     f"got {values.size}")


def payload_from_fields(model: Model, default_link: str, link: str, mass: float, com: Any,
                        inertia: Any, prefix: str = "") -> tuple[Payload, PayloadEffort]:
    """A checked Payload on ``model`` from a message's fields (``link`` '' = ``default_link``;
    ``com`` a geometry_msgs/Vector3 or 3 numbers, m; ``inertia`` as ``inertia_matrix``), and
    its effort on ``model``. ValueError naming the field, ``prefix`` first."""
    link = link or default_link
    com = [com.x, com.y, com.z] if isinstance(com, Vector3) else com
    try:
        payload = Payload(link, mass, com, inertia_matrix(inertia, f"{prefix}inertia"))
        return payload, PayloadEffort(model, payload)  # PayloadEffort: the link exists, moves
    except ValueError as exc:  # "payload mass must be ..." → "<prefix>mass must be ..."
        text = str(exc)
        if text.startswith("payload "):
            raise ValueError(prefix + text.removeprefix("payload ")) from None
        raise ValueError(f"{prefix}link: {text}" if prefix else text) from None


def payload_message(payload: Payload | None, link: str = "") -> PayloadMsg:
    """``payload`` as a rb_dynamics_interfaces/Payload (None: an empty one on ``link``)."""
    if payload is None:
        return PayloadMsg(link=link)
    x, y, z = payload.com.tolist()
    return PayloadMsg(link=payload.link, mass=payload.mass, com=Vector3(x=x, y=y, z=z),
                      inertia=payload.inertia.reshape(-1).tolist())


def describe(payload: Payload | None) -> str:
    """One line for logs and answers: mass, link, COM, inertia diagonal (or "none")."""
    if payload is None or payload.is_empty:
        return "none"
    com = ", ".join(f"{c:.4g}" for c in payload.com)
    inertia = "" if not payload.inertia.any() else \
        f", inertia diag [{', '.join(f'{x:.3g}' for x in np.diag(payload.inertia))}] kg·m²"
    return f"{payload.mass:.4g} kg on {payload.link}, COM [{com}] m{inertia}"
