# SPDX-License-Identifier: Apache-2.0
"""An excitation plan on disk: the trajectory goal a controller executes, and the plan itself.

- ``excitation_goal``: a ``control_msgs/action/FollowJointTrajectory`` goal as plain data (the
  YAML that ``ros2 action send_goal`` takes): a point at ``lead_in`` s at the trajectory's start
  at rest (the controller gets there from wherever the arm is), then ``periods`` periods sampled
  every ``step`` s with positions, velocities and accelerations (quintic segments between
  them reproduce the series), then a second at rest where it started;
- ``write_plan`` / ``read_plan``: ``plan.json``: the Fourier coefficients, the lead-in and
  period count, the report (condition number, peak efforts against their limits) and the
  model's fingerprint; ``rb_dynamics_identify fit`` reads it to find the excitation in a
  recording, and ``check_plan_model`` refuses a URDF other than the plan's;
- ``model_fingerprint``: a hash of what the dynamics see of a model — its tree, joint types and
  axes, joint placements and inertias, numbers to 9 digits — not of the file's text: a URDF
  rewritten with other whitespace, comments or number spelling keeps it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from rb_dynamics.model import Model, read_text_file

from .excitation import ExcitationPlan
from .fourier import FourierTrajectory

__all__ = ["GOAL_STEP", "PLAN_FORMAT", "check_plan_model", "excitation_goal", "goal_points",
           "model_fingerprint", "plan_report", "read_plan", "write_plan"]

PLAN_FORMAT = "rb_dynamics/excitation_plan"
MAX_PLAN_BYTES = 10_000_000  # 100 harmonics on 100 joints is under 1 MB
GOAL_STEP = 0.05  # s between the goal's points


def _duration(seconds: float) -> dict:
    sec = int(np.floor(seconds))
    return {"sec": sec, "nanosec": int(round((seconds - sec) * 1e9)) % 1_000_000_000}


def goal_points(periods: int, period: float, step: float = GOAL_STEP, hold: float = 1.0) -> int:
    """How many points ``excitation_goal`` gives (computed before anything is allocated)."""
    return int(round(periods * period / step)) + 1 + (hold > 0)


def excitation_goal(trajectory: FourierTrajectory, periods: int, lead_in: float = 5.0,
                    step: float = GOAL_STEP, hold: float = 1.0) -> dict:
    """The FollowJointTrajectory goal (plain data) of ``periods`` periods after ``lead_in``,
    then ``hold`` s at rest where it started (the last period ends inside the goal, before a
    controller's end-of-goal behaviour)."""
    n_steps = int(round(periods * trajectory.period / step))
    t = np.arange(n_steps + 1) * step
    q, qd, qdd = trajectory.evaluate(t)
    qd[-1] = qdd[-1] = 0.0  # exactly at rest at the end (the series is, to rounding)
    points = [{"positions": _round(q[k]), "velocities": _round(qd[k]),
               "accelerations": _round(qdd[k]), "time_from_start": _duration(lead_in + t[k])}
              for k in range(len(t))]
    if hold > 0:
        # copies, not the same lists: YAML would write those as aliases, which send refuses
        points.append({key: list(value) if isinstance(value, list) else value
                       for key, value in points[-1].items()}
                      | {"time_from_start": _duration(lead_in + t[-1] + hold)})
    return {"trajectory": {"joint_names": list(trajectory.joints), "points": points}}


def _round(x: np.ndarray) -> list[float]:
    return [float(f"{v:.10g}") for v in x]


def plan_report(plan: ExcitationPlan) -> dict:
    """The plan's figures: condition number, and per joint the peaks against the limits."""
    lim = plan.limits
    joints = {}
    for j, name in enumerate(plan.trajectory.joints):
        joints[name] = {
            "position": _round(plan.peak_position[j]),
            "position_bounds": _round(np.array([lim.lower[j], lim.upper[j]])),
            "velocity": float(plan.peak_velocity[j]), "velocity_bound": float(lim.velocity[j]),
            "acceleration": float(plan.peak_acceleration[j]),
            "acceleration_bound": float(lim.acceleration[j]),
            "effort": float(plan.peak_effort[j]), "effort_bound": float(lim.effort[j])}
    # no wall time: the same command makes the same file
    return {"condition": plan.condition, "evaluations": plan.evaluations,
            "cut_by_time": plan.cut_by_time, "joints": joints}


def model_fingerprint(model: Model) -> str:
    """SHA-256 (hex) of ``model``'s kinematic and inertial content: per body its name, joint
    name, parent, joint type and axis, joint placement X_T and spatial inertia (9 significant
    digits, −0 as 0)."""
    digest = hashlib.sha256()
    for b in range(model.n_bodies):
        numbers = np.concatenate([model.joint[b].axis, np.ravel(model.X_tree[b]),
                                  np.ravel(model.inertia[b])]) + 0.0
        digest.update(f"{model.body_names[b]}|{model.body_joint_names[b]}|{model.parent[b]}|"
                      f"{model.joint[b].kind}|".encode())
        digest.update(" ".join(f"{v:.9g}" for v in numbers).encode() + b"\n")
    return digest.hexdigest()


def write_plan(path: Path, plan: ExcitationPlan, periods: int, lead_in: float,
               urdf: str, fingerprint: str) -> None:
    """``plan.json``: the trajectory's coefficients, lead-in, periods, the report and the
    fingerprint of the model it was planned for (``model_fingerprint``)."""
    data = {"format": PLAN_FORMAT, "version": 2, "urdf": urdf, "model": fingerprint,
            "lead_in": lead_in, "periods": periods, "fourier": plan.trajectory.to_dict(),
            "report": plan_report(plan)}
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def check_plan_model(plan: dict, model: Model, urdf: str) -> None:
    """ValueError when ``model`` (read from ``urdf``) is not the model ``plan`` (plan.json's
    content) was made for: its fingerprint differs, or the plan holds none."""
    planned = plan.get("model")
    if not isinstance(planned, str):
        raise ValueError(f"the plan holds no model fingerprint (made by an older "
                         f"rb_dynamics_identify): plan again from {urdf}")
    if planned != model_fingerprint(model):
        raise ValueError(f"{urdf} is not the model the plan was made for (its links, joints "
                         f"or inertias differ from those of {plan.get('urdf', 'the plan')}'s "
                         "model): fit with the URDF the plan was made from, or plan again")


def read_plan(path: str | Path) -> tuple[FourierTrajectory, dict]:
    """The trajectory of a ``plan.json`` and the whole file's content; ValueError naming the
    file when it is not one (or not a regular file, or over ``MAX_PLAN_BYTES``)."""
    path = Path(path)
    try:
        data = json.loads(read_text_file(path, MAX_PLAN_BYTES, "plan file"))
        if data.get("format") != PLAN_FORMAT:
            raise ValueError(f"not an excitation plan (format {data.get('format')!r})")
        return FourierTrajectory.from_dict(data["fourier"]), data
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: cannot read the excitation plan: {exc}") from None
