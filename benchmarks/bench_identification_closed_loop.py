# SPDX-License-Identifier: Apache-2.0
"""Computed-torque tracking with the identified model against the URDF's, in closed loop.

The simulator plays the true arm (the bundled arm's inertias perturbed ±30 %, armature,
friction and effort offsets from published ranges in its dynamics overlay, a 17-bit encoder);
the arm is identified from a recording of it (in-process, as ``bench_identification.py``:
1 kHz with jitter, efforts 2 ms late, noise 0.05 N·m + 1 %); then the control node, in computed
torque with the same gains, follows the planned excitation twice through its
FollowJointTrajectory action: on the URDF alone, and on the identified URDF with the identified
overlay (``dynamics_overlay``). Printed: the tracking RMS per joint (``~/controller_state``'s
position error over the goal) of both, and their ratio, per seed.

    .venv/bin/python benchmarks/bench_identification_closed_loop.py [--seeds 2]
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))

import numpy as np  # noqa: E402
import yaml  # noqa: E402
from ros_harness import Session, close_all  # noqa: E402

from rb_dynamics import DEFAULT_URDF  # noqa: E402
from rb_dynamics.identification import (  # noqa: E402
    ParameterLayout,
    SensorModel,
    base_parameters,
    corrected_urdf,
    excitation_goal,
    identify,
    own_link_inertias,
    perturbed_model,
    plan_excitation,
    synthetic_recording,
    write_identification,
)
from rb_dynamics.model import DynamicsOverlay, load_model, write_overlay  # noqa: E402

KP = [400.0, 400.0, 400.0, 2500.0, 1e4, 4e4]  # 1/s², kd = 2√kp
SENSOR = SensorModel(rate=1000.0, jitter=2e-4, delay=0.002, noise=0.05, noise_relative=0.01)


def _tracking(tmp: Path, true_urdf: Path, true_overlay: Path, urdf: Path, overlay: str,
              goal: dict, start: np.ndarray, label: str) -> np.ndarray:
    """RMS position error per joint while the node follows ``goal`` on ``urdf``/``overlay``."""
    import rclpy  # noqa: F401  (the harness's nodes)
    from control_msgs.action import FollowJointTrajectory
    from control_msgs.msg import JointTrajectoryControllerState
    from rclpy.action import ActionClient
    from rosidl_runtime_py.set_message import set_message_fields
    from std_srvs.srv import SetBool

    sim = Session("rb_dynamics.ros.simulator_node", tmp, {
        "urdf_path": str(true_urdf), "dynamics_overlay": str(true_overlay),
        "initial_positions": start.tolist(), "publish_rate": 1000.0, "time_step": 0.001,
        "publish_clock": True, "command_timeout": 0.2, "start_paused": True, "lockstep": True,
        "lockstep_timeout": 5.0, "encoder_resolution": 2 * math.pi / 2 ** 17})
    control = Session("rb_dynamics.ros.control_node", tmp, {
        "urdf_path": str(urdf), "dynamics_overlay": overlay, "mode": "computed_torque",
        "kp": KP, "kd": [2.0 * math.sqrt(k) for k in KP], "state_timeout": 0.1,
        "use_sim_time": True}, "-r", "~/effort_commands:=/rb_simulator/commands",
        peer=sim.peer)
    errors: list[np.ndarray] = []
    try:
        node = sim.peer.node
        pause = node.create_client(SetBool, "/rb_simulator/pause")
        node.create_subscription(JointTrajectoryControllerState, "/rb_dynamics/controller_state",
                                 lambda m: errors.append(np.array(m.error.positions)), 100)
        client = ActionClient(node, FollowJointTrajectory, "/rb_dynamics/follow_joint_trajectory")
        assert sim.peer.wait_for(lambda: pause.service_is_ready() and client.server_is_ready(),
                                 60.0), control.output()[-2000:]
        states = sim.received(__import__("sensor_msgs.msg").msg.JointState, "/joint_states")
        assert sim.peer.call(pause, SetBool.Request(data=False)).success
        assert sim.peer.wait_for(lambda: len(states) > 3000, 120.0)  # settled at the start
        msg = FollowJointTrajectory.Goal()
        set_message_fields(msg, copy.deepcopy(goal))  # it turns the dicts into messages
        sent = client.send_goal_async(msg)
        assert sim.peer.wait_for(sent.done, 30.0)
        handle = sent.result()
        assert handle.accepted, control.output()[-2000:]
        errors.clear()
        result = handle.get_result_async()
        assert sim.peer.wait_for(result.done, 600.0), control.output()[-2000:]
        code = result.result().result.error_code
    finally:
        close_all(control, sim)
    rms = np.sqrt(np.mean(np.array(errors) ** 2, axis=0))
    print(f"    {label}: goal error_code {code}, {len(errors)} controller states, tracking RMS "
          f"(rad) {np.array2string(rms, precision=2, floatmode='maxprec')}", flush=True)
    return rms


def run(seed: int, period: float, periods: int, budget: float) -> float:
    text = Path(DEFAULT_URDF).read_text()
    model = load_model(text)
    layout = ParameterLayout(model, ())
    base = base_parameters(layout)
    plan = plan_excitation(base, period=period, time_budget=budget)
    tmp = Path(tempfile.mkdtemp(prefix="rb_ident_closed_loop_"))
    rng = np.random.default_rng(seed)
    true = perturbed_model(model, rng)
    welded = [I - own for I, own in zip(model.inertia, own_link_inertias(model, text))]
    inertial = ParameterLayout(model, (), ())
    true_urdf, true_overlay = tmp / "true.urdf", tmp / "true_overlay.yaml"
    true_urdf.write_text(corrected_urdf(text, inertial, inertial.parameters(true), welded))
    write_overlay(DynamicsOverlay.from_model(true), true_overlay)
    recording, _ = synthetic_recording(true, plan.trajectory, 5, SENSOR, rng)
    ident = identify(text, recording, plan.trajectory)
    paths = write_identification(ident, tmp / "identified", {"bag": "synthetic"})
    goal = excitation_goal(plan.trajectory, periods, lead_in=3.0)
    (tmp / "goal.yaml").write_text(yaml.safe_dump(goal))
    start = plan.trajectory.evaluate(np.zeros(1))[0][0]
    print(f"  seed {seed}: plan condition {plan.condition:.1f}, identified (validation RMS/σ "
          f"max {ident.validation.ratio.max():.3f})", flush=True)
    urdf_rms = _tracking(tmp, true_urdf, true_overlay, Path(DEFAULT_URDF), "", goal, start,
                         "URDF          ")
    ident_rms = _tracking(tmp, true_urdf, true_overlay, paths["urdf"], str(paths["overlay"]),
                          goal, start, "identified    ")
    ratio = float(np.sqrt(np.mean(urdf_rms ** 2)) / np.sqrt(np.mean(ident_rms ** 2)))
    print(f"    URDF RMS / identified RMS (all joints): {ratio:.1f}; per joint "
          f"{np.array2string(urdf_rms / ident_rms, precision=1)}", flush=True)
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--period", type=float, default=10.0)
    parser.add_argument("--periods", type=int, default=1, help="periods tracked")
    parser.add_argument("--plan-budget", type=float, default=20.0)
    args = parser.parse_args()
    from rb_dynamics.ros.environment import keep_local

    keep_local()
    t0 = time.monotonic()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    ratios = [run(seed, args.period, args.periods, args.plan_budget) for seed in seeds]
    print(f"tracking RMS ratio URDF/identified over {args.seeds} seeds: median "
          f"{np.median(ratios):.1f}, worst {min(ratios):.1f} ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
