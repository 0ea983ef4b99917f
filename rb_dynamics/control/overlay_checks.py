# SPDX-License-Identifier: Apache-2.0
"""A dynamics overlay checked against the robot it is for, and against the command it changes.

``rb_dynamics.model.overlay`` reads any non-negative finite number; what the robot can be is
judged here, where its dynamics and limits are known (``overlay_problem``):

- friction: the most a joint's friction can take from its drive within the velocity limit,
  coulomb + stribeck + viscous × the velocity limit (the law's tanh and exp are at most 1), is
  at most the joint's URDF effort limit. A drive that loses more than its whole effort to
  friction could not move the joint, and compensating such friction commands the limit at the
  sign of a velocity measurement's noise (tanh(q̇/ε) of a 1e6 N·m Coulomb term swung an arm
  against its reference).
- armature: a rotor's inertia reflected through its gear, N² J_rotor, is commonly 1–1000 ×
  the links a wrist joint moves (a light wrist link, or a vendor URDF's placeholder inertia,
  beside a geared motor), so the joint's own links are no scale for it; the arm is: at most
  ``ARMATURE_FACTOR`` × the largest diagonal of M(q = 0) over the whole model (without the
  overlay), the heaviest joint's inertia. A larger one is a unit mistake (g·mm² for kg·m²:
  10⁶) or a typo; computed torque would multiply every commanded acceleration by it.

A swap at run time is also checked against the command it makes (``command_step``): the law's
effort at the controller's last state and reference with the new dynamics against the old
one; a change of more than ``MAX_COMMAND_STEP`` × the joint's effort limit in one command is
refused (not ramped: the overlay is applied when the arm is closer to rest, where armature and
friction compensation change the command little).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rb_dynamics.dynamics import Dynamics
from rb_dynamics.dynamics import reference as dynamics
from rb_dynamics.model import DynamicsOverlay, Model

from .stability import reference_configuration

__all__ = ["ARMATURE_FACTOR", "MAX_COMMAND_STEP", "command_step_problem", "overlay_problem"]

ARMATURE_FACTOR = 1e3  # × the largest diagonal of M(0) over the whole model
MAX_COMMAND_STEP = 0.5  # × the joint's effort limit: the most one swap may move a command by


def _largest_inertia(model: Model) -> float:
    """The largest diagonal of M at the reference configuration: the inertia the heaviest
    joint moves."""
    return float(np.max(np.diag(dynamics.crba(model, reference_configuration(model))),
                        initial=0.0))


def overlay_problem(bare: Model, overlaid: Model, overlay: DynamicsOverlay) -> str | None:
    """Why ``overlay`` (applied to ``bare``, the description's model, giving ``overlaid``)
    describes no robot ``bare`` can be (module docstring), naming the joint, the key, the
    value and the bound; None when every joint it names is plausible."""
    names = list(overlay.joints)
    indices = overlaid.velocity_indices(names)
    largest = None
    for name, j in zip(names, indices):
        values = overlay.joints[name]
        limit = float(overlaid.effort_limit[j])
        speed = float(overlaid.velocity_limit[j])
        speed = speed if np.isfinite(speed) and speed > 0.0 else 0.0
        coulomb, stribeck = float(overlaid.friction[j]), float(overlaid.stribeck_friction[j])
        viscous = float(overlaid.damping[j])
        peak = coulomb + stribeck + viscous * speed
        if {"coulomb", "stribeck", "viscous"} & set(values) and np.isfinite(limit) \
                and limit > 0.0 and peak > limit:
            return (f"joint {name!r}: friction up to {peak:.6g} (coulomb {coulomb:g} + "
                    f"stribeck {stribeck:g} + viscous {viscous:g} × the velocity limit "
                    f"{speed:g}) is beyond its effort limit {limit:g}: no drive could move it")
        if "armature" in values:
            if largest is None:
                largest = _largest_inertia(bare)
            if largest > 0.0 and values["armature"] > ARMATURE_FACTOR * largest:
                return (f"joint {name!r}: armature {values['armature']:g} is beyond "
                        f"{ARMATURE_FACTOR:g} × the largest inertia of M at q = 0 "
                        f"({largest:.4g}): {ARMATURE_FACTOR * largest:.6g} at most")
    return None


def command_step_problem(controller: Any, new: Dynamics) -> str | None:
    """Why swapping ``controller``'s dynamics for ``new`` would move its command by more than
    ``MAX_COMMAND_STEP`` × a commanded joint's effort limit: the law at the last measured state
    and the last reference (feed-forward and the integral term as they stand: the same on both
    sides), old dynamics against new; None when it would not, or before a first command."""
    law, q, v = controller.law, controller.q, controller.v
    reference = controller.last_reference
    if q is None or (reference is None and law.mode != "gravity_compensation"):
        return None
    old = law.dynamics
    try:
        before, _ = law.effort(q, v, *(reference or ()))
        law.dynamics = new
        after, _ = law.effort(q, v, *(reference or ()))
    finally:
        law.dynamics = old
    index = controller.index
    step = np.abs(after - before)[index]
    bound = MAX_COMMAND_STEP * new.model.effort_limit[index]
    over = step > bound
    if not over.any():
        return None
    k = int(np.argmax(over))
    return (f"it would move the command on {controller.joints[k]} by {step[k]:.6g} in one "
            f"step, more than {MAX_COMMAND_STEP:g} × its effort limit ({bound[k]:.6g}); "
            "apply it with the arm closer to rest")
