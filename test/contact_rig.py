# SPDX-License-Identifier: Apache-2.0
"""An in-process closed loop for the contact tests and benchmarks/bench_contact.py, no ROS: the
simulator (``simulation.Simulator`` on C kernels, 1 ms semi-implicit Euler, the node's), the
control law (computed torque along the main job's fast motion: each joint its own period and
swing, up to 85 % of its velocity limit), Gaussian noise on the measured efforts, the momentum
observer and the collision detector on the control side, and pushes on a link (the simulator's
external wrench). The simulator's model may differ from the controller's (``perturb``).

The efforts the observer reads are the simulator's applied efforts (each held over the step
before the state that reports it: ``effort_timing="held"``) plus the noise; the truth it is
compared with is Jᵀ F of the simulator's wrench at each state.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np
from pin_oracle import REAL_ROBOTS, robots_dir

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.control import CollisionDetector, ControlLaw, MomentumObserver
from rb_dynamics.demo.main_job import KD, KP, initial_configuration, reference, reference_amplitude
from rb_dynamics.dynamics import LinkWrench, default_payload_link, link_pose, make_dynamics
from rb_dynamics.model import Model, load_model
from rb_dynamics.simulation import Simulator

NOISE = 0.05  # N·m, σ of the measured efforts' noise (the issue's)
DT = 1e-3


def arm_path(robot: str) -> str:
    return str(DEFAULT_URDF) if robot == "default_arm" else \
        f"{robots_dir()}/{REAL_ROBOTS[robot][0]}"


def perturb(model: Model, fraction: float, rng: np.random.Generator) -> Model:
    """``model`` with each body's inertial parameters off by up to ±``fraction``: its mass,
    first moment and rotational inertia scaled by independent factors in [1 − f, 1 + f] (a
    physically consistent inertia: the scaled rotational inertia about the COM stays positive)."""
    inertia = []
    for I6 in model.inertia:
        m = I6[5, 5]
        if m <= 0:
            inertia.append(I6.copy())
            continue
        c = np.array([I6[2, 4], I6[0, 5], I6[1, 3]]) / m
        C = np.array([[0, -c[2], c[1]], [c[2], 0, -c[0]], [-c[1], c[0], 0]])
        I_com = I6[:3, :3] - m * C @ C.T
        m2 = m * rng.uniform(1 - fraction, 1 + fraction)
        c2 = c * rng.uniform(1 - fraction, 1 + fraction, 3)
        I2 = I_com * rng.uniform(1 - fraction, 1 + fraction)
        C2 = np.array([[0, -c2[2], c2[1]], [c2[2], 0, -c2[0]], [-c2[1], c2[0], 0]])
        out = np.zeros((6, 6))
        out[:3, :3] = I2 + m2 * C2 @ C2.T
        out[:3, 3:] = m2 * C2
        out[3:, :3] = m2 * C2.T
        out[3:, 3:] = m2 * np.eye(3)
        inertia.append(out)
    return dataclasses.replace(model, inertia=inertia)


@dataclass
class Push:
    """A force (N) on ``link``'s origin from ``start`` for ``duration`` s, fixed in the world's
    axes (a hand pushing in one direction; the simulator takes it in the link's axes, turned
    at every state)."""

    link: str
    force: np.ndarray
    start: float
    duration: float


@dataclass
class Run:
    """What one closed-loop run recorded (one row per state)."""

    joints: list[str]
    t: np.ndarray
    q: np.ndarray
    estimate: np.ndarray  # r, model order
    truth: np.ndarray  # Jᵀ F of the simulator's wrench
    force: np.ndarray  # the push in the link's axes at each state (zeros without one)
    detections: list = field(default_factory=list)  # Collision
    observer_seconds: float = 0.0  # time in observer + detector over the run
    law_seconds: float = 0.0  # time in the control law over the run
    states: int = 0
    largest: np.ndarray | None = None  # max |r| per joint over the run


class ContactRig:
    """The closed loop of one arm (see the module docstring)."""

    def __init__(self, robot: str = "default_arm", *, plant: Model | None = None,
                 gains: float = 200.0, thresholds=2.0, noise: float = NOISE, seed: int = 0,
                 link: str | None = None, speed: float = 1.0, substeps: int = 4) -> None:
        self.model = load_model(arm_path(robot))
        self.plant = plant if plant is not None else self.model
        self.joints = self.model.actuated_joint_names
        self.dyn = make_dynamics(self.model, "c")
        self.sim_dyn = self.dyn if plant is None else make_dynamics(self.plant, "c")
        self.law = ControlLaw(self.dyn, "computed_torque", kp=np.full(self.model.nv, KP),
                              kd=np.full(self.model.nv, KD))
        self.q0 = initial_configuration(self.model)
        self.amp = speed * reference_amplitude(self.q0, self.model.position_lower,
                                               self.model.position_upper,
                                               self.model.velocity_limit)
        self.link = link or default_payload_link(self.model)
        self.wrench_map = LinkWrench(self.model, self.link)
        self.gains, self.thresholds = gains, thresholds
        self.noise, self.rng = noise, np.random.default_rng(seed)
        self.substeps = substeps

    def observer(self) -> MomentumObserver:
        return MomentumObserver(self.dyn, self.gains)

    def detector(self) -> CollisionDetector:
        return CollisionDetector(self.joints, self.model.velocity_indices(self.joints),
                                 self.thresholds, latch=False)

    def run(self, duration: float, pushes: list[Push] = (), record: bool = True,
            keep_largest: bool = True) -> Run:
        """``duration`` s of the fast motion from its start, under ``pushes``. The physics takes
        ``substeps`` steps per state period (each command held over them): semi-implicit Euler
        at 1 ms is first order, and its momentum error (~0.1 N·m in fast motion) would be
        the figure measured rather than the observer's."""
        sim = Simulator(self.sim_dyn, DT / self.substeps, q0=self.q0, command_timeout=1.0)
        observer, detector = self.observer(), self.detector()
        detector.watch(observer)
        steps = int(round(duration / DT))
        n = self.model.nv
        rows = steps + 1 if record else 1
        out = Run(self.joints, np.zeros(rows), np.zeros((rows, n)), np.zeros((rows, n)),
                  np.zeros((rows, n)), np.zeros((rows, 3)), largest=np.zeros(n))
        for k in range(steps + 1):
            t = k * DT
            q, v = sim.q, sim.v
            measured = sim.applied_effort + self.rng.normal(0.0, self.noise, n)
            started = time.perf_counter()
            if observer.update(t, q, v, measured) and detector.needed(observer.over):
                hit = detector.check(t, observer.estimate)
                if hit is not None:
                    out.detections.append(hit)
            out.observer_seconds += time.perf_counter() - started
            out.states += 1
            if keep_largest:
                np.maximum(out.largest, np.abs(observer.estimate), out=out.largest)
            push = next((p for p in pushes if p.start <= t + 1e-9 < p.start + p.duration), None)
            force = np.zeros(3)
            if push is None:
                if sim.wrench is not None:
                    sim.set_external_wrench(None)
            else:
                force = link_pose(self.model, q, push.link)[:3, :3].T @ push.force
                sim.set_external_wrench(push.link, np.r_[force, 0.0, 0.0, 0.0])
            if record:
                out.t[k], out.q[k], out.estimate[k] = t, q, observer.estimate
                out.truth[k], out.force[k] = sim.external_effort(), force
            if k == steps:
                break
            q_d, v_d, a_d = reference(t, self.q0, self.amp)
            started = time.perf_counter()
            tau, _ = self.law.effort(q, v, q_d, v_d, a_d)
            out.law_seconds += time.perf_counter() - started
            sim.set_command(tau)  # clamped to the plant's effort limits
            sim.advance(DT)
            sim.time = (k + 1) * DT  # no drift of the held command's timeout
        return out


def steady_error(run: Run, push: Push, settle: float) -> tuple[float, np.ndarray]:
    """The worst relative error ‖r − Jᵀ F‖ / ‖Jᵀ F‖ over the push after ``settle`` s (10/K),
    and the states it is taken over (a mask)."""
    mask = (run.t >= push.start + settle) & (run.t < push.start + push.duration - 1e-9)
    errors = np.linalg.norm(run.estimate[mask] - run.truth[mask], axis=1) \
        / np.linalg.norm(run.truth[mask], axis=1)
    return float(errors.max()), mask


def wrench_errors(rig: ContactRig, run: Run, mask: np.ndarray, min_condition: float = 0.01,
                  force_only: bool = False) -> tuple[float, float, int]:
    """(worst relative magnitude error, worst angle in degrees, states without an estimate) of
    the estimated force (``LinkWrench.estimate`` of r) against the push over ``mask``."""
    magnitude, angle, missing = 0.0, 0.0, 0
    for q, r, force in zip(run.q[mask], run.estimate[mask], run.force[mask]):
        wrench, _ = rig.wrench_map.estimate(q, r, min_condition, force_only)
        if wrench is None:
            missing += 1
            continue
        f = wrench[:3]
        magnitude = max(magnitude, abs(np.linalg.norm(f) / np.linalg.norm(force) - 1.0))
        cosine = f @ force / (np.linalg.norm(f) * np.linalg.norm(force))
        angle = max(angle, math.degrees(math.acos(min(1.0, max(-1.0, cosine)))))
    return magnitude, angle, missing
