# SPDX-License-Identifier: Apache-2.0
"""``rb_dynamics_identify run``: identification in rounds, on the arm as it is driven.

One round sends the plan's excitation to the controller while a ``record`` process records
the joint states, fits the recording, and loads the result into the controller: the
identified URDF on its description topic, the overlay (armature, friction, offsets) through
its ``~/set_dynamics_overlay``. The next round excites the arm again under the identified
model. Why rounds: computed torque on a URDF without armature gives a light geared joint a few
per cent of its gains, so a first round does not execute the plan and knows that joint least;
with the identified armature the next round does (docs/identification.md).

Rounds go on while the fit says a further one would do better (``next_round_reason``: a joint
that did not cover the plan, or a validation RMS/σ above 1.3) and the worst joint's validation
RMS/σ still drops by ``min_improvement``, at most ``rounds``. The best round is the result,
and the controller holds it when the run ends: among the fits that are not poor (else among
all), one for which no further round is due, then the lowest worst RMS/σ. ``rounds.json``
lists every round's figures.

That the controller took the result is checked, not assumed: its ``~/inverse_dynamics`` must
answer as the identified model does (a node given its description as a parameter, or carrying
a payload, does not, and the run stops saying so). Its collision thresholds then take the
identified model's effort uncertainty: ``contact.effort_uncertainty`` is set to the fit's
validation RMS per joint (what the identified model leaves unexplained on a held-out period,
noise included), so that contact detection on the identified arm is as sensitive as its model
is good.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .exit_codes import EXIT_INPUT, EXIT_OK, EXIT_ROS

__all__ = ["LoadError", "Round", "load_into_controller", "run_rounds"]

RECORDER_START_S = 60.0  # s for the recorder to take its first joint state
LOAD_TIMEOUT_S = 60.0  # s for the controller to answer with the identified model
MATCH_TOLERANCE = 1e-6  # relative: the controller's inverse dynamics against the identified


class LoadError(RuntimeError):
    """The controller did not take the identified model (the message says what it answered)."""


@dataclass
class Round:
    """One round's figures (``rounds.json``)."""
    number: int
    folder: str
    worst_rms_over_sigma: float  # validation RMS/σ of the worst joint (the consistent fit's)
    range_covered: dict[str, float]  # share of each joint's planned range that was executed
    speed_covered: dict[str, float]  # share of its planned peak speed
    poor: str | None  # why the fit is not to be trusted (``poor_fit``), or None
    next: str | None  # why a further round would do better (``next_round_reason``), or None


def run_rounds(out: Path, *, rounds: int, min_improvement: float, plan_folder: Path,
               send: Callable[[Path], int], fit: Callable[[Path, Path], object],
               load: Callable[[Path], None], record_command: list[str],
               say: Callable[[str], None]) -> int:
    """Rounds into ``out/round1``, ``out/round2``, ...: each records (``record_command`` +
    ``--out <bag>``, a process of its own), ``send``s the plan, stops the recorder, ``fit``s
    (bag, folder) → the Identification, and unless it is the last, ``load``s the folder into
    the controller; at the end the best round's folder is loaded. Returns the exit code: 0
    with a best round whose fit is not poor, 1 when every round's fit is poor (written; the
    warning says why), 4 on a ROS failure."""
    from rb_dynamics.identification import next_round_reason, poor_fit

    done: list[Round] = []
    loaded = None  # the folder whose result the controller holds
    for number in range(1, rounds + 1):
        folder = out / f"round{number}"
        say(f"round {number}: recording and sending {plan_folder / 'excitation.yaml'}")
        code = _record_while(record_command + ["--out", str(folder / "bag")],
                             lambda: send(plan_folder / "excitation.yaml"), say)
        if code != EXIT_OK:
            return code
        ident = fit(folder / "bag", folder)
        validation = ident.consistent_validation or ident.validation
        joints, ex = ident.layout.joints, ident.execution
        current = Round(number, str(folder), float(np.max(validation.ratio)),
                        dict(zip(joints, map(float, ex.range))),
                        dict(zip(joints, map(float, ex.speed))),
                        poor_fit(ident), next_round_reason(ident))
        done.append(current)
        print(f"round {number}: worst validation RMS/σ {current.worst_rms_over_sigma:.3f}; "
              f"least range covered {min(current.range_covered.values()):.0%}, least speed "
              f"{min(current.speed_covered.values()):.0%}" +
              (f"; poor: {current.poor}" if current.poor else "") +
              (f"; a further round would do better: {current.next}" if current.next else
               "; no further round due"), flush=True)
        improved = len(done) == 1 or (current.worst_rms_over_sigma <
                                      (1.0 - min_improvement) * done[-2].worst_rms_over_sigma)
        if current.next is None or not improved or number == rounds:
            break
        say(f"round {number}: loading {folder} into the controller")
        load(folder)
        loaded = folder
    trusted = [r for r in done if r.poor is None]
    # a fit of a plan executed in full with a validation at the noise (no further round due)
    # before one of a motion the controller could not execute, however close their RMS/σ
    best = min(trusted or done, key=lambda r: (r.next is not None, r.worst_rms_over_sigma))
    if Path(best.folder) != loaded:
        say(f"loading the best round's result ({best.folder}) into the controller")
        load(Path(best.folder))
    (out / "rounds.json").write_text(json.dumps(
        {"best": best.number, "rounds": [asdict(r) for r in done]}, indent=2))
    print(f"best: round {best.number} ({best.folder}: identified.urdf, overlay.yaml); "
          f"rounds: {out / 'rounds.json'}")
    if not trusted:
        print(f"rb_dynamics_identify run: warning: every round's fit is poor; the best: "
              f"{best.poor}", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK


def _record_while(command: list[str], action: Callable[[], int],
                  say: Callable[[str], None]) -> int:
    """Run ``action`` while a recorder process (``command``) records; stop it with SIGINT
    after. The action starts once the recorder took its first message."""
    recorder = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    lines: list[str] = []
    started = threading.Event()

    def read_progress() -> None:
        for line in recorder.stderr:
            lines.append(line)
            if "recording " in line:
                started.set()

    reader = threading.Thread(target=read_progress, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + RECORDER_START_S
        while not started.wait(0.1):
            if recorder.poll() is not None or time.monotonic() > deadline:
                print(f"rb_dynamics_identify run: the recorder did not start: "
                      f"{''.join(lines[-5:]) or 'no output'}", file=sys.stderr)
                return EXIT_ROS
        code = action()
    finally:
        if recorder.poll() is None:
            recorder.send_signal(signal.SIGINT)
        try:
            stdout, _ = recorder.communicate(timeout=60.0)
        except subprocess.TimeoutExpired:
            recorder.kill()
            stdout, _ = recorder.communicate()
        reader.join(timeout=5.0)
    for line in stdout.splitlines():
        say(line)
    if code == EXIT_OK and recorder.returncode != EXIT_OK:
        print(f"rb_dynamics_identify run: the recorder failed: {stdout.strip()}",
              file=sys.stderr)
        return EXIT_ROS
    return code


def load_into_controller(folder: Path, *, node: str, description_topic: str,
                         say: Callable[[str], None], timeout: float = LOAD_TIMEOUT_S) -> None:
    """Give the controller ``node`` (its full name, e.g. "/rb_dynamics") the identification in
    ``folder``: once someone subscribes to ``description_topic``, the overlay through
    ``<node>/set_dynamics_overlay`` (as text: the node may run on another machine), then
    ``identified.urdf`` on the topic (latched, as robot_state_publisher offers it); returns
    once the node's ``~/inverse_dynamics`` answers as the identified model does. LoadError
    otherwise (after ``timeout`` s)."""
    import rclpy
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from rb_dynamics.model import load_model, read_overlay
    from rb_dynamics_interfaces.srv import InverseDynamics, SetDynamicsOverlay

    urdf_text = (folder / "identified.urdf").read_text()
    overlay_text = (folder / "overlay.yaml").read_text()
    model = load_model(urdf_text)
    expected = _expected_answer(model, read_overlay(folder / "overlay.yaml"))
    rclpy.init()
    ros = rclpy.create_node("rb_dynamics_identify_run")
    try:
        deadline = time.monotonic() + timeout
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        publisher = ros.create_publisher(String, description_topic, latched)
        while publisher.get_subscription_count() == 0:  # before anything changes
            if time.monotonic() > deadline:
                raise LoadError(f"nobody subscribes to {description_topic}: is {node} running, "
                                "and without the robot_description parameter (a node given "
                                "it takes no other description)?")
            rclpy.spin_once(ros, timeout_sec=0.05)
        overlay_client = ros.create_client(SetDynamicsOverlay, f"{node}/set_dynamics_overlay")
        answer = _call(ros, overlay_client, SetDynamicsOverlay.Request(overlay=overlay_text),
                       deadline)
        if not answer.success:
            raise LoadError(f"{node} refused the overlay: {answer.message}")
        publisher.publish(String(data=urdf_text))
        say(f"published {folder / 'identified.urdf'} on {description_topic}")
        client = ros.create_client(InverseDynamics, f"{node}/inverse_dynamics")
        names, request, efforts, gravity = expected
        want = np.column_stack([efforts, gravity])
        while True:
            answer = _call(ros, client, request, deadline)
            if answer.success and list(answer.joint_names) == names:
                mine = np.column_stack([answer.efforts, answer.gravity])
                if np.abs(mine - want).max() <= MATCH_TOLERANCE * max(1.0, np.abs(want).max()):
                    break
            if time.monotonic() > deadline:
                said = (f"its inverse dynamics {list(answer.efforts)}, the model's "
                        f"{efforts.tolist()}" if answer.success else answer.message)
                raise LoadError(
                    f"{node} does not answer as the identified model after "
                    f"{timeout:g} s ({said}): a node given its description as the "
                    "robot_description parameter does not take the topic's, and a payload "
                    "changes its answers")
            rclpy.spin_once(ros, timeout_sec=0.2)
        _set_effort_uncertainty(ros, node, list(model.actuated_joint_names),
                                effort_uncertainty(folder), deadline, say)
    finally:
        ros.destroy_node()
        rclpy.try_shutdown()


def effort_uncertainty(folder: Path) -> dict[str, float]:
    """Per identified joint, the identified model's effort uncertainty (1σ, N·m or N): the
    validation RMS in ``folder``'s ``report.json`` of the fit the URDF carries (the consistent
    one when there is one)."""
    report = json.loads((folder / "report.json").read_text())
    validation = (report.get("consistent") or report)["validation"]
    return dict(zip(report["joints"], (float(x) for x in validation["rms"])))


def _set_effort_uncertainty(ros, node: str, joints: list[str], sigma: dict[str, float],
                            deadline: float, say: Callable[[str], None]) -> None:
    """``contact.effort_uncertainty`` of ``node``: ``sigma`` for each of its commanded joints
    (its ``joints`` parameter; when empty, ``joints``: the model's actuated joints), 0 for a
    joint the identification did not cover. LoadError when the node refuses it."""
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import GetParameters, SetParameters

    got = _call(ros, ros.create_client(GetParameters, f"{node}/get_parameters"),
                GetParameters.Request(names=["joints"]), deadline)
    commanded = list(got.values[0].string_array_value) if got.values else []
    order = commanded or joints
    values = [sigma.get(j, 0.0) for j in order]
    parameter = Parameter(name="contact.effort_uncertainty", value=ParameterValue(
        type=ParameterType.PARAMETER_DOUBLE_ARRAY, double_array_value=values))
    answer = _call(ros, ros.create_client(SetParameters, f"{node}/set_parameters"),
                   SetParameters.Request(parameters=[parameter]), deadline)
    if not answer.results or not answer.results[0].successful:
        reason = answer.results[0].reason if answer.results else "no answer"
        raise LoadError(f"{node} refused contact.effort_uncertainty {values}: {reason}")
    say("contact.effort_uncertainty (the validation RMS): " +
        ", ".join(f"{j} {v:.3g}" for j, v in zip(order, values)))


def _expected_answer(model, overlay):
    """The request the controller is asked, and what the identified model answers: the
    1-DoF joints at the middle of their ranges (0.3 where unlimited), at rest, accelerating at
    1 rad/s² (the armature shows in the efforts, the inertials in both)."""
    from rb_dynamics.dynamics import ReferenceDynamics
    from rb_dynamics.model import ONE_DOF_KINDS, apply_overlay
    from rb_dynamics.ros.conversions import JointLayout
    from rb_dynamics_interfaces.srv import InverseDynamics

    model = apply_overlay(model, overlay)
    q = model.neutral_configuration()
    lower, upper = model.position_lower, model.position_upper
    for j, kind in enumerate(model.joint_kinds):
        if kind in ONE_DOF_KINDS:
            i = model.joint_q_index[j]
            bounded = np.isfinite(lower[i]) and np.isfinite(upper[i])
            q[i] = 0.5 * (lower[i] + upper[i]) if bounded else 0.3
    dynamics = ReferenceDynamics(model)
    a = np.ones(model.nv)
    layout = JointLayout(model, model.joint_names)
    efforts = dynamics.rnea(q, np.zeros(model.nv), a)[layout.v_index]
    gravity = dynamics.gravity(q)[layout.v_index]
    request = InverseDynamics.Request(
        joint_names=layout.names, positions=q[layout.q_index].tolist(),
        velocities=[0.0] * model.nv, accelerations=a[layout.v_index].tolist())
    return layout.names, request, efforts, gravity


def _call(ros, client, request, deadline: float):
    """The answer to ``request`` (sent again every 5 s: a response sent before the server
    matched this client is lost); LoadError at ``deadline``."""
    import rclpy

    while not client.wait_for_service(timeout_sec=0.1):
        if time.monotonic() > deadline:
            raise LoadError(f"no service {client.srv_name}: is the controller running?")
    while time.monotonic() < deadline:
        future, resend = client.call_async(request), time.monotonic() + 5.0
        while not future.done() and time.monotonic() < min(resend, deadline):
            rclpy.spin_once(ros, timeout_sec=0.05)
        if future.done():
            return future.result()
    raise LoadError(f"{client.srv_name} did not answer")
