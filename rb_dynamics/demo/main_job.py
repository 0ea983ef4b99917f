# SPDX-License-Identifier: Apache-2.0
"""The main job: the simulator and the control node in closed loop, with a report and a plot.

Starts ``rb_dynamics.ros.simulator_node`` and ``rb_dynamics.ros.control_node`` as separate
processes on loopback DDS (a random domain), sends a smooth reference trajectory, records for
``--duration`` seconds, stops everything (SIGINT, then SIGKILL if a process hangs), prints a
report and writes a PNG.

    python -m rb_dynamics.demo.main_job [--urdf PATH] [--duration 10] [--mode computed_torque]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import Model, load_model
from rb_dynamics.ros.conversions import JointLayout, from_seconds, to_seconds
from rb_dynamics.ros.environment import keep_local

SIM, CONTROL = "rb_simulator", "rb_dynamics"


@dataclass
class Recording:
    """What the main job records from the closed loop."""
    t: list[float] = field(default_factory=list)  # wall time of each joint state (s)
    q: list[list[float]] = field(default_factory=list)
    effort: list[list[float]] = field(default_factory=list)
    q_desired: list[list[float]] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)  # state received → its command received
    clock: list[tuple[float, float]] = field(default_factory=list)  # (wall, state's stamp)


# Each joint its own motion: its own period and swing, so that every curve of the plot is
# its own and the joints excite each other's dynamics (Coriolis, changing inertia)
PERIODS_S = (1.2, 1.5, 1.1, 1.3, 1.0, 1.4, 1.25, 1.15, 1.35)
SWINGS_RAD = (1.2, -1.0, 1.2, -1.0, 1.0, -1.2, 0.9, -1.0, 0.8)
# the swing's peak velocity (0.65·A·ω) stays within this share of the URDF velocity limit
VELOCITY_SHARE = 0.85
_PEAK_SPEED = 0.75 * math.sqrt(0.75)  # max of (1 − cos x) sin x / 2
# gains of both laws, per unit of inertia: computed torque's kp, kd (1/s², 1/s); the PD +
# gravity baseline uses the same times the joint's own inertia M_ii at the start
KP, KD = 400.0, 40.0
# the reference runs this long past the recorded window: the simulator steps on until it is
# stopped, and the end of a trajectory (held at rest from full speed) is no part of tracking it
REFERENCE_MARGIN_S = 1.0
# simulated s between sending the reference and its start: the control node must have taken it
# by then (a busy node takes tens of ms of wall time to read a long trajectory, and a fast
# lock-step loop runs hundreds of steps meanwhile); a reference taken after its start is joined
# mid-way, a jump the tracking figures would count
START_DELAY_S = 0.5
# The observer is not in the loop: descheduled on a busy machine it falls behind, and a queue
# as deep as a default run's messages (some 12 s at 1 kHz) lets it catch up instead of
# losing states and commands.
OBSERVED_DEPTH = 20000
# states in a row with one stamp that say the simulator is paused (a late command makes it
# send a state again, at most a few times in a row)
PAUSED_REPEATS = 20
STALL_S = 15.0  # the run is given up when no joint state came for this long (wall s)


def reference_amplitude(q0: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                        velocity_limit: np.ndarray | None = None) -> np.ndarray:
    """Per-joint swing (``SWINGS_RAD``), less where a position limit is near or where the
    swing would pass ``VELOCITY_SHARE`` of the velocity limit."""
    n = len(q0)
    swing = np.resize(np.array(SWINGS_RAD), n)
    room = np.where(swing > 0, upper - q0, q0 - lower)
    size = np.minimum(np.abs(swing), 0.9 * np.where(np.isfinite(room), room, np.inf))
    if velocity_limit is not None:
        omega = 2 * math.pi / np.resize(np.array(PERIODS_S), n)
        fastest = VELOCITY_SHARE * velocity_limit / (_PEAK_SPEED * omega)
        size = np.minimum(size, np.where(np.isfinite(fastest), fastest, np.inf))
    return np.sign(swing) * size


def reference(t: np.ndarray | float, q0: np.ndarray, amp: np.ndarray):
    """The reference q0 + A (1 − cos ω t)²/4 per joint, with its exact derivatives: it starts
    at rest with zero acceleration (no jump for the controller to catch up with)."""
    w = 2 * math.pi / np.resize(np.array(PERIODS_S), len(q0))
    t = np.asarray(t, dtype=float)[..., None]
    c, s = np.cos(w * t), np.sin(w * t)
    return (q0 + amp * (1 - c) ** 2 / 4, amp * w * (1 - c) * s / 2,
            amp * w * w * (s * s + (1 - c) * c) / 2)


def initial_configuration(model: Model) -> np.ndarray:
    """A bent, comfortable pose inside the limits: 30 % of the way from the middle."""
    lower, upper = model.position_lower, model.position_upper
    mid = np.where(np.isfinite(lower + upper), (lower + upper) / 2, 0.0)
    q0 = mid.copy()
    q0[1::2] += 0.3 * np.where(np.isfinite(upper - mid), upper - mid, 1.0)[1::2]
    return q0


def _spawn(module: str, params: dict, extra: list[str], log_dir: Path) -> subprocess.Popen:
    path = log_dir / f"{module.rsplit('.', 1)[-1]}_params.yaml"
    node_name = SIM if module.endswith("simulator_node") else CONTROL
    path.write_text(json.dumps({node_name: {"ros__parameters": params}}))
    log = open(log_dir / f"{node_name}.log", "w")  # noqa: SIM115 - the child's stdout
    return subprocess.Popen([sys.executable, "-m", module, "--ros-args", "--params-file",
                             str(path), *extra], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


STACKS_S = 0.5  # for a node that did not stop to print its threads' stacks before SIGKILL


def _stop(proc: subprocess.Popen, diagnosis: Path, timeout: float = 5.0) -> str:
    """SIGINT, and how the process ended: stopped, or killed after ``timeout`` s (then the
    state of its threads is written to ``diagnosis``)."""
    if proc.poll() is not None:
        return f"exited {proc.returncode}"
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout)
        return "stopped"
    except subprocess.TimeoutExpired:
        from rb_dynamics.ros.runtime import thread_states

        diagnosis.write_text(f"{timeout:g} s after SIGINT:\n{thread_states(proc.pid)}\n")
        proc.send_signal(signal.SIGUSR1)  # the node prints its threads' stacks to its log
        try:
            proc.wait(STACKS_S)
        except subprocess.TimeoutExpired:
            pass
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "killed"


@dataclass
class Plan:
    """What the run drives: the joints, the start pose, each joint's swing, the limits."""

    model: object
    joints: list[str]
    q0: np.ndarray
    amp: np.ndarray
    limits: np.ndarray

    @classmethod
    def of(cls, urdf: Path) -> Plan:
        model = load_model(urdf)
        joints = model.actuated_joint_names
        layout = JointLayout(model, joints, "joints", every_joint=False)
        q_index, v_index = layout.q_index, layout.v_index
        q0 = initial_configuration(model)[q_index]
        amp = reference_amplitude(q0, model.position_lower[q_index],
                                  model.position_upper[q_index], model.velocity_limit[v_index])
        return cls(model, joints, q0, amp, model.effort_limit[v_index])


def _start_nodes(urdf: Path, plan: Plan, mode: str, lockstep: bool,
                 log_dir: Path) -> tuple[subprocess.Popen, subprocess.Popen]:
    sim = _spawn("rb_dynamics.ros.simulator_node", {
        "urdf_path": str(urdf), "initial_positions": plan.q0.tolist(), "publish_rate": 1000.0,
        "time_step": 0.001, "integrator": "semi_implicit_euler", "publish_clock": True,
        "command_timeout": 0.2, "start_paused": True, "lockstep": lockstep,
        # the job measures tracking: the simulator waits for the controller rather than
        # stepping the arm limp after the default half second without commands, as long as the
        # job waits for states (a busy machine held a controller building its kernels for over
        # 5 s: the arm fell meanwhile, and the hold from where it fell never recovered)
        "lockstep_timeout": STALL_S}, [], log_dir)
    # The demo measures how exactly the law follows a fast reference. The node's soft limits
    # (ros2_control's effort-interface limiter, on by default where the URDF has a
    # <safety_controller>, as panda's has) bound the effort pushing a joint along its motion to
    # k_velocity·(v_limit − v): near the speeds this reference reaches that is less than gravity
    # asks of panda's shoulder, so the demo turns them off (docs/trajectory_controller.md).
    control = _spawn("rb_dynamics.ros.control_node", {
        "urdf_path": str(urdf), "mode": mode, "kp": [KP], "kd": [KD],
        "friction_compensation": True, "soft_limits": False, "state_timeout": 0.1,
        "use_sim_time": True}, ["-r", f"~/effort_commands:=/{SIM}/commands"], log_dir)
    return sim, control


class Observer:
    """The job's own rclpy node: records the arm, times commands, sends the reference."""

    def __init__(self, plan: Plan) -> None:
        import rclpy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray
        from std_srvs.srv import SetBool
        from trajectory_msgs.msg import JointTrajectory

        from rb_dynamics.ros.runtime import node_executor

        self.plan, self.rec = plan, Recording()
        self.last_state_time = math.nan  # when the latest state was taken (monotonic s)
        self.last_stamp = math.nan  # sim time of the latest state
        self.start_sim = math.nan  # sim time at which the reference starts
        self.duration = math.inf  # s of the reference recorded from start_sim
        self.commands_seen = 0  # effort commands the control node published
        self.repeats = 0  # states in a row with the stamp of the one before
        # a state and a command per simulated ms, off the loop: on a busy machine the
        # single-threaded executor's pass per message falls behind the loop it watches
        self.node = rclpy.create_node("rb_dynamics_main_job", start_parameter_services=False)
        self.executor = node_executor(events=True)
        self.executor.add_node(self.node)
        self.node.create_subscription(JointState, "joint_states", self._on_state,
                                      OBSERVED_DEPTH)
        self.node.create_subscription(Float64MultiArray, f"/{SIM}/commands", self._on_command,
                                      OBSERVED_DEPTH)
        self.trajectory_pub = self.node.create_publisher(JointTrajectory,
                                                         f"/{CONTROL}/joint_trajectory", 10)
        self.pause = self.node.create_client(SetBool, f"/{SIM}/pause")

    def _on_state(self, msg) -> None:
        by_name = dict(zip(msg.name, msg.position))
        if not all(n in by_name for n in self.plan.joints):
            return
        self.last_state_time = time.monotonic()
        stamp = to_seconds(msg.header.stamp)
        self.repeats = self.repeats + 1 if stamp == self.last_stamp else 0
        self.last_stamp = stamp
        self.rec.clock.append((self.last_state_time, self.last_stamp))
        t = self.last_stamp - self.start_sim
        if not 0.0 <= t <= self.duration:  # NaN before the start; after it: the margin
            return
        rec, joints = self.rec, self.plan.joints
        rec.t.append(t)
        rec.q.append([by_name[n] for n in joints])
        effort = dict(zip(msg.name, msg.effort))
        rec.effort.append([effort.get(n, 0.0) for n in joints])
        rec.q_desired.append(reference(t, self.plan.q0, self.plan.amp)[0].tolist())

    def _on_command(self, _msg) -> None:
        self.commands_seen += 1
        if not math.isnan(self.start_sim) and not math.isnan(self.last_state_time):
            self.rec.latency.append(time.monotonic() - self.last_state_time)

    def spin(self, seconds: float = 0.01) -> None:
        self.executor.spin_once(timeout_sec=seconds)

    def wait_until_up(self, processes: dict, log_dir: Path, timeout: float = 30.0) -> None:
        """Until the simulator (paused) publishes states, the control node takes the
        reference and answers the states with commands: resumed before that, the lock-step
        simulator would step without commands once its ``lockstep_timeout`` has passed, the
        arm falling limp until the first command, and the node would hold the pose it fell to."""
        deadline = time.monotonic() + timeout
        while not (self.pause.service_is_ready() and
                   self.trajectory_pub.get_subscription_count() > 0 and
                   not math.isnan(self.last_state_time) and self.commands_seen > 0):
            self.spin(0.05)
            for name, proc in processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"the {name} exited: see {log_dir}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the nodes did not come up within {timeout:.0f} s: see "
                                   f"{log_dir}")

    def hold_then_start(self, duration: float) -> None:
        """Resume the simulator, let the controller hold the start pose for one simulated
        second, then pause it, send the reference to start at a stated simulated instant
        (shared by the controller and the recording) and resume: the start is decided on the
        simulator's own time, however far behind the loop this observer runs."""
        self._set_paused(False)
        settle_until, wall_limit = self.last_stamp + 1.0, time.monotonic() + 20.0
        while self.last_stamp < settle_until and time.monotonic() < wall_limit:
            self.spin()
        self._set_paused(True)
        self.repeats = 0  # paused, the simulator publishes its state again and again
        while self.repeats < PAUSED_REPEATS:
            self.spin()
            if time.monotonic() - self.last_state_time > STALL_S:
                raise RuntimeError(f"no joint state for {STALL_S:.0f} s after the pause")
        self.start_sim, self.duration = self.last_stamp + START_DELAY_S, duration
        self.trajectory_pub.publish(reference_trajectory(
            self.plan.joints, self.plan.q0, self.plan.amp, duration + REFERENCE_MARGIN_S,
            self.start_sim))
        self._set_paused(False)

    def _set_paused(self, paused: bool) -> None:
        from std_srvs.srv import SetBool

        future = self.pause.call_async(SetBool.Request(data=paused))
        while not future.done():
            self.spin(0.05)
        if not future.result().success:
            raise RuntimeError(f"the simulator refused to {'pause' if paused else 'resume'}: "
                               f"{future.result().message}")

    def follow(self, duration: float, processes: dict, log_dir: Path, quiet: bool) -> None:
        next_line, rec = 0.0, self.rec
        while (elapsed := self.last_stamp - self.start_sim) < duration:
            self.spin()
            if not quiet and elapsed >= next_line:
                err = np.abs(np.array(rec.q[-1]) - rec.q_desired[-1]).max() if rec.q else 0.0
                print(f"\r  sim {max(elapsed, 0):5.1f}/{duration:.0f} s  states {len(rec.t):6d}"
                      f"  commands {len(rec.latency):6d}  |error| {err:.2e} rad",
                      end="", flush=True)
                next_line += 0.5
            if any(proc.poll() is not None for proc in processes.values()):
                raise RuntimeError(f"a node exited during the run: see {log_dir}")
            if time.monotonic() - self.last_state_time > STALL_S:
                raise RuntimeError(f"no joint state for {STALL_S:.0f} s: see {log_dir}")
        if not quiet:
            print()

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()


def reference_trajectory(joints: list[str], q0: np.ndarray, amp: np.ndarray, duration: float,
                         start: float = 0.0):
    """``reference`` as a JointTrajectory: waypoints every 20 ms with exact derivatives (the
    controller's quintic segments follow the motion to ~1e-7 rad), stamped to start at
    ``start`` (s; 0: when it arrives)."""
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    times = np.arange(0.0, duration + 1e-9, 0.02)
    q_ref, v_ref, a_ref = reference(times, q0, amp)
    msg = JointTrajectory(joint_names=list(joints))
    for t, q, v, a in zip(times, q_ref, v_ref, a_ref):
        point = JointTrajectoryPoint(positions=q.tolist(), velocities=v.tolist(),
                                     accelerations=a.tolist())
        from_seconds(t, point.time_from_start)
        msg.points.append(point)
    from_seconds(start, msg.header.stamp)
    return msg


def run(urdf: Path, duration: float, mode: str, out_dir: Path, quiet: bool = False,
        lockstep: bool = True) -> dict:
    """Simulator and control node in closed loop over DDS for ``duration`` s; the report."""
    import rclpy

    keep_local()  # loopback only, a random domain, spelled for the distribution in use
    out_dir.mkdir(parents=True, exist_ok=True)
    log_dir = Path(tempfile.mkdtemp(prefix="rb_dynamics_main_job_"))
    os.environ.setdefault("ROS_LOG_DIR", str(log_dir / "ros"))
    plan = Plan.of(urdf)
    sim, control = _start_nodes(urdf, plan, mode, lockstep, log_dir)
    processes = {"simulator": sim, "control node": control}
    rclpy.init()
    observer = Observer(plan)
    report: dict = {"robot": plan.model.name, "urdf": str(urdf), "mode": mode,
                    "duration_s": duration, "joints": plan.joints, "lockstep": lockstep}
    try:
        observer.wait_until_up(processes, log_dir)
        observer.hold_then_start(duration)
        observer.follow(duration, processes, log_dir, quiet)
    finally:
        # the controller first, as on an arm (its stop command reaches a simulator that runs)
        report["shutdown"] = {
            name: _stop(processes[name], log_dir / f"{name.replace(' ', '_')}_stop.log")
            for name in ("control node", "simulator")}
        report["logs"] = str(log_dir)
        observer.close()
        rclpy.shutdown()
    rec, joints = observer.rec, plan.joints
    report.update(_figures(rec, joints, plan.limits))
    baseline = pd_gravity_baseline(plan.model, joints, plan.q0, plan.amp, duration)
    report["pd_gravity_rms_error_rad"] = dict(zip(joints, np.sqrt(
        (baseline.error ** 2).mean(axis=0)).tolist()))
    report["log_dir"] = str(log_dir)
    report["plot"] = str(_plot(rec, joints, plan.limits, baseline, out_dir / "main_job.png"))
    (out_dir / "main_job_report.json").write_text(json.dumps(report, indent=2))
    return report


@dataclass
class Baseline:
    """The PD + gravity baseline's tracking error over time."""
    t: np.ndarray
    error: np.ndarray  # q − q_d per joint


def pd_gravity_baseline(model, joints: list[str], q0: np.ndarray, amp: np.ndarray,
                        duration: float, dt: float = 1e-3) -> Baseline:
    """What the same reference gives without the dynamics model beyond gravity: τ = g(q) +
    K_p (q_d − q) + K_d (q̇_d − q̇), K = M_ii(q0)·(KP, KD), on the same simulator (in-process,
    one command per 1 ms step, like the lock-step run; same URDF losses, compensated)."""
    from rb_dynamics.dynamics import friction_effort, make_dynamics
    from rb_dynamics.simulation import Simulator

    dyn = make_dynamics(model)
    layout = JointLayout(model, joints, "joints", every_joint=False)
    index = layout.v_index
    q_start = model.neutral_configuration()
    q_start[layout.q_index] = q0
    sim = Simulator(dyn, dt, "semi_implicit_euler", q0=q_start, command_timeout=math.inf)
    inertia = np.diag(dyn.crba(q_start))[index]
    kp, kd = inertia * KP, inertia * KD
    steps = round(duration / dt)
    errors = np.empty((steps, len(joints)))
    for k in range(steps):
        q_d, v_d, _ = reference(k * dt, q0, amp)
        q, v = sim.q[index], sim.v[index]
        tau = dyn.gravity(sim.q) + friction_effort(model, _spread(model, index, v_d))
        tau[index] += kp * (q_d - q) + kd * (v_d - v)
        sim.set_command(tau)
        errors[k] = q - q_d
        sim.advance(dt)
    return Baseline(np.arange(steps) * dt, errors)


def _spread(model, index: np.ndarray, values: np.ndarray) -> np.ndarray:
    full = np.zeros(model.nv)
    full[index] = values
    return full


def _figures(rec: Recording, joints: list[str], limits: np.ndarray) -> dict:
    if len(rec.t) < 10:
        raise RuntimeError("too few joint states were recorded")
    q, qd = np.array(rec.q), np.array(rec.q_desired)
    error = q - qd
    effort = np.abs(np.array(rec.effort))
    latency = np.array(rec.latency) * 1e3 if rec.latency else np.array([math.nan])
    wall = np.array([c[0] for c in rec.clock])
    simt = np.array([c[1] for c in rec.clock])
    rtf = float((simt[-1] - simt[0]) / (wall[-1] - wall[0])) if len(wall) > 10 else math.nan
    return {
        "states_recorded": len(rec.t),
        "commands_recorded": len(rec.latency),
        "rms_error_rad": dict(zip(joints, np.sqrt((error**2).mean(axis=0)).tolist())),
        "max_error_rad": dict(zip(joints, np.abs(error).max(axis=0).tolist())),
        "max_effort_over_limit": dict(zip(joints, (effort.max(axis=0) / limits).tolist())),
        "latency_ms": {"median": float(np.median(latency)),
                       "p99": float(np.percentile(latency, 99))},
        "real_time_factor": rtf,
    }


def _plot(rec: Recording, joints: list[str], limits: np.ndarray, baseline: Baseline,
          path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.array(rec.t)
    q, qd, effort = np.array(rec.q), np.array(rec.q_desired), np.array(rec.effort)
    fig, axes = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    colors = plt.cm.tab10(np.arange(len(joints)) % 10)
    for k, name in enumerate(joints):
        axes[0].plot(t, qd[:, k], "--", color=colors[k], lw=1)
        axes[0].plot(t, q[:, k], color=colors[k], lw=1.5, label=name)
        axes[1].plot(t, effort[:, k] / limits[k], color=colors[k], lw=1)
        axes[2].semilogy(t, np.abs(q[:, k] - qd[:, k]) + 1e-12, color=colors[k], lw=1)
        axes[2].semilogy(baseline.t, np.abs(baseline.error[:, k]) + 1e-12, ":",
                         color=colors[k], lw=1)
    axes[0].set_ylabel("position (rad)\nsolid: measured, dashed: desired")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", fontsize=8,
               ncol=min(len(joints), 5), bbox_to_anchor=(0.5, 0.945))
    for level in (1.0, -1.0):
        axes[1].axhline(level, color="k", lw=0.8)
    axes[1].set_ylabel("effort / URDF limit")
    axes[2].set_ylabel("|q − q_d| (rad)\nsolid: computed torque\ndotted: PD + gravity")
    axes[2].set_xlabel("time (s)")
    fig.suptitle("rb_dynamics main job: computed torque on the simulator over DDS\n"
                 "(tracking error: solid; PD + gravity compensation, same gains: dotted)")
    fig.tight_layout(rect=(0, 0, 1, 0.91))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def print_report(report: dict) -> None:
    """The run's figures, one line per joint."""
    joints = report["joints"]
    print(f"\nrb_dynamics main job — {report['robot']} ({len(joints)} joints), mode "
          f"{report['mode']}, {report['duration_s']:.1f} s")
    print(f"{'joint':<24}{'RMS err (rad)':>15}{'max err (rad)':>15}{'max |τ|/limit':>15}"
          f"{'PD+g RMS err':>15}")
    for name in joints:
        print(f"{name:<24}{report['rms_error_rad'][name]:>15.2e}"
              f"{report['max_error_rad'][name]:>15.2e}"
              f"{report['max_effort_over_limit'][name]:>15.3f}"
              f"{report['pd_gravity_rms_error_rad'][name]:>15.2e}")
    print("(PD+g: PD + gravity compensation with the same gains per unit inertia, same "
          "reference, same simulator, in-process)")
    lat = report["latency_ms"]
    print(f"command latency (state → command, ms): median {lat['median']:.3f}, "
          f"p99 {lat['p99']:.3f}")
    print(f"simulator real-time factor: {report['real_time_factor']:.3f}")
    print(f"states {report['states_recorded']}, commands {report['commands_recorded']}; "
          f"shutdown: {report['shutdown']}")
    print(f"plot: {report['plot']}")


def main(argv: list[str] | None = None) -> int:
    """``rb_dynamics_main_job``: run, report, plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urdf", type=Path, default=DEFAULT_URDF, help="robot description")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of motion")
    parser.add_argument("--mode", default="computed_torque",
                        choices=["computed_torque", "gravity_compensation"])
    parser.add_argument("--out", type=Path, default=Path("build"),
                        help="folder for main_job.png and main_job_report.json")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.add_argument("--free-running", action="store_true",
                        help="simulator paced by the wall clock instead of one step per command")
    args = parser.parse_args(argv)
    try:
        report = run(args.urdf, args.duration, args.mode, args.out, args.quiet,
                     lockstep=not args.free_running)
    except RuntimeError as exc:
        print(f"main job failed: {exc}", file=sys.stderr)
        return 1
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
