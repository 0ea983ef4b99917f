# SPDX-License-Identifier: Apache-2.0
"""The simulator and the control node in closed loop, for the payload tests (and the figures of
docs/payload.md): a payload the control node is not told about, identification poses, the
steady-state error (sag) at a held pose.

As in rb_dynamics/demo/main_job.py: the simulator steps once per command (lockstep) and publishes
/clock; the control node runs on that clock (use_sim_time), in computed torque, holding the
measured position until a trajectory comes, its efforts remapped to the simulator's commands.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
from ros_harness import Session, close_all
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rb_dynamics.identification import suggest_identification_poses
from rb_dynamics.model import Model, load_model
from rb_dynamics_interfaces.srv import IdentifyPayload, SetPayload

SIM, CONTROL = "rb_simulator", "rb_dynamics"


def set_payload_request(link: str, mass: float, com, inertia=None) -> SetPayload.Request:
    request = SetPayload.Request(link=link, mass=float(mass))
    request.com.x, request.com.y, request.com.z = (float(c) for c in com)
    if inertia is not None:
        request.inertia = np.asarray(inertia, dtype=float).reshape(-1).tolist()
    return request


def identification_poses(model: Model, q0: np.ndarray, count: int, spread: float,
                         rng: np.random.Generator, fixed=()) -> np.ndarray:
    """``count`` D-optimal poses within ``spread`` rad of ``q0`` (joints in ``fixed`` stay),
    ordered by a nearest-neighbour tour from ``q0``."""
    lower = np.maximum(model.position_lower, q0 - spread)
    upper = np.minimum(model.position_upper, q0 + spread)
    for k in fixed:
        lower[k] = upper[k] = q0[k]
    boxed = dataclasses.replace(model, position_lower=lower, position_upper=upper)
    poses = list(suggest_identification_poses(boxed, count=count, rng=rng))
    tour, here = [], q0
    while poses:
        k = int(np.argmin([np.abs(p - here).max() for p in poses]))
        here = poses.pop(k)
        tour.append(here)
    return np.array(tour)


def _duration(t: float):
    sec = int(math.floor(t))
    return sec, int(round((t - sec) * 1e9))


class ClosedLoop:
    """Simulator + control node sessions (under the nodes' own names) with one peer, which
    listens to joint_states."""

    def __init__(self, tmp_path: Path, urdf: Path, q0: np.ndarray, effort_noise: float,
                 kp=(400.0,), lockstep: bool = True, publish_rate: float = 1000.0,
                 mode: str = "computed_torque", sim_params: dict | None = None,
                 control_params: dict | None = None):
        """``kp`` per joint (1/s²; kd = 2√kp, critically damped) or one for all. The simulated
        joints have their URDF damping but no Coulomb friction: the simulator's smoothed
        Coulomb model (no stiction) makes a soft joint creep to rest for seconds.
        ``sim_params`` and ``control_params``: more parameters of each node (they win)."""
        self.model = load_model(urdf)
        self.joints = self.model.actuated_joint_names
        self.q_index = [self.model.joint_q_index[self.model.joint_index(n)] for n in self.joints]
        self.q0 = np.asarray(q0, dtype=float)
        self.sim = Session("rb_dynamics.ros.simulator_node", tmp_path, {
            "urdf_path": str(urdf), "initial_positions": self.q0.tolist(),
            "publish_rate": publish_rate, "time_step": 0.001, "publish_clock": lockstep,
            "command_timeout": 0.2, "start_paused": True, "lockstep": lockstep,
            "lockstep_timeout": 5.0,
            "effort_noise": float(effort_noise), "friction": [0.0] * self.model.nv,
            **(sim_params or {})})
        kp = [float(k) for k in kp]
        self.control = Session("rb_dynamics.ros.control_node", tmp_path, {
            "urdf_path": str(urdf), "mode": mode, "kp": kp,
            "kd": [2.0 * math.sqrt(k) for k in kp], "state_timeout": 0.1,
            "use_sim_time": lockstep, **(control_params or {})}, "-r",
            f"~/effort_commands:=/{SIM}/commands",
            peer=self.sim.peer)
        self.peer = self.sim.peer
        n = self.peer.node
        self.t: list[float] = []
        self.q: list[np.ndarray] = []
        n.create_subscription(JointState, "joint_states", self._on_state, 10)
        self.trajectory_pub = n.create_publisher(JointTrajectory,
                                                 f"/{CONTROL}/joint_trajectory", 10)
        self.pause = n.create_client(SetBool, f"/{SIM}/pause")
        self.sim_payload = n.create_client(SetPayload, f"/{SIM}/set_payload")
        self.control_payload = n.create_client(SetPayload, f"/{CONTROL}/set_payload")
        self.identify = n.create_client(IdentifyPayload, f"/{CONTROL}/identify_payload")

    def _on_state(self, msg: JointState) -> None:
        by_name = dict(zip(msg.name, msg.position))
        self.t.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)
        self.q.append(np.array([by_name[n] for n in self.joints]))

    def close(self) -> None:
        """Stop both nodes; each must stop cleanly (``Session.close``)."""
        close_all(self.control, self.sim)

    def logs(self) -> str:
        return (f"--- simulator:\n{self.sim.output()[-3000:]}\n--- control node:\n"
                f"{self.control.output()[-3000:]}")

    @property
    def now(self) -> float:
        return self.t[-1] if self.t else math.nan

    def start(self, timeout: float = 60.0) -> None:
        """Wait until both nodes are up and the loop is closed, then run."""
        ready = self.peer.wait_for(
            lambda: self.pause.service_is_ready() and self.t
            and self.trajectory_pub.get_subscription_count() > 0
            and self.control_payload.service_is_ready()
            # the loop: the control node hears the states, the simulator its commands
            and self.peer.node.count_subscribers("/joint_states") >= 2
            and self.peer.node.count_publishers(f"/{SIM}/commands") > 0, timeout)
        assert ready, self.logs()
        assert self.peer.call(self.pause, SetBool.Request(data=False)).success

    def run_for(self, seconds: float, stall: float = 20.0) -> None:
        """Let ``seconds`` of simulated time pass, however slowly this machine runs the loop;
        fails when simulated time stops (no progress for ``stall`` s of wall time)."""
        self.peer.run_sim_time(lambda: self.now, seconds, stall, self.logs)

    def mean_position(self, seconds: float) -> np.ndarray:
        """Mean measured position (actuated joints) over the last ``seconds``."""
        t = np.array(self.t)
        return np.array(self.q)[t >= t[-1] - seconds].mean(axis=0)

    def visit(self, poses: np.ndarray, hold: float, speed: float = 0.8) -> float:
        """Send a trajectory through ``poses`` (rest to rest, quintic, peak speed about
        ``speed`` rad/s), holding each for ``hold`` s; returns its duration."""
        msg = JointTrajectory(joint_names=self.joints)
        t, here = 0.0, self.mean_position(0.05)
        zero = [0.0] * len(self.joints)
        for pose in poses:
            pose = pose[self.q_index]
            t += max(1.0, 1.875 * np.abs(pose - here).max() / speed)  # quintic peak 1.875 Δ/T
            for stay in (0.0, hold):
                point = JointTrajectoryPoint(positions=pose.tolist(), velocities=zero,
                                             accelerations=zero)
                point.time_from_start.sec, point.time_from_start.nanosec = _duration(t + stay)
                msg.points.append(point)
            t += hold
            here = pose
        start = self.now + 0.05
        msg.header.stamp.sec, msg.header.stamp.nanosec = _duration(start)
        self.trajectory_pub.publish(msg)
        return t + 0.05
