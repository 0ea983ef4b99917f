# SPDX-License-Identifier: Apache-2.0
"""``rb_dynamics_identify``: identify a whole arm from the command line.

Subcommands (each has ``--help``):

- ``plan``: URDF in → ``excitation.yaml`` (the FollowJointTrajectory goal) and ``plan.json``
  (its coefficients and report) in ``--out``;
- ``send``: ``excitation.yaml`` as a goal to a FollowJointTrajectory action server (the control
  node's ``~/follow_joint_trajectory``), waiting for its result;
- ``record``: ``sensor_msgs/JointState`` on a topic into a new rosbag2 (MCAP or SQLite3);
- ``fit``: a bag (or a folder of bags), the URDF and ``plan.json`` → ``--out`` receives
  ``identified.urdf``, ``overlay.yaml``, ``report.json``, ``validation.png``;
- ``run``: ``plan``, then rounds of ``send`` + ``record``, ``fit`` and loading the result into
  the controller while the fit improves (``rounds``).

``plan`` and ``fit`` need no ROS; ``send`` and ``record`` (``ros_commands``) need rclpy: this
module parses their options and calls them. Progress goes to stderr, results to stdout. Exit
codes: ``exit_codes``.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .exit_codes import EXIT_INPUT, EXIT_MISSING, EXIT_OK, EXIT_ROS
from .ros_commands import DEFAULT_GOAL_TOLERANCE, DEFAULT_PATH_TOLERANCE

# BLAS threads fight over a shared 2-core machine and slow small factorisations 100-fold;
# one thread per process is the fast choice for these sizes (set before numpy loads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


class Progress:
    """Lines on stderr, each with the seconds since the command started."""

    def __init__(self, quiet: bool = False):
        self.start, self.quiet = time.monotonic(), quiet

    def __call__(self, line: str) -> None:
        if not self.quiet:
            print(f"[{time.monotonic() - self.start:6.1f} s] {line}", file=sys.stderr, flush=True)


def _number(low: float, high: float | Callable[[], float] = math.inf, *,
            integer: bool = False, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] ((low, high] when ``low_open``;
    ``high`` may be a function, called when a value is converted); the usage error names the
    option and the value."""

    def convert(text: str) -> float:
        high_value = high() if callable(high) else high
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            kind = "an integer" if integer else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        inside = (value > low if low_open else value >= low) and value <= high_value
        if not (math.isfinite(value) and inside):
            bounds = f"{'(' if low_open else '['}{low:g}, {high_value:g}]"
            raise argparse.ArgumentTypeError(f"{text!r} is outside {bounds}")
        return value

    return convert


def _max_harmonics() -> int:
    from rb_dynamics.identification import MAX_HARMONICS  # numpy and scipy: only when needed

    return MAX_HARMONICS


POSITIVE = _number(0.0, low_open=True)
HARMONICS = _number(2, _max_harmonics, integer=True)
# the fit averages MIN_FIT_PERIODS (2) periods and validates on one more
PERIODS = _number(3, 10_000, integer=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rb_dynamics_identify",
        description="Identify a robot arm's dynamics: plan an excitation, send it, record it, "
                    "fit base parameters, friction and armature, write a corrected URDF and "
                    "overlay. Exit codes: 0 ok, 1 bad input, 2 usage, 3 missing package, "
                    "4 ROS failure.")
    sub = parser.add_subparsers(dest="command", required=True)

    plan = sub.add_parser("plan", help="plan an excitation trajectory for a URDF")
    plan.add_argument("--urdf", required=True, help="the robot's URDF file")
    plan.add_argument("--out", required=True, type=Path, help="folder for excitation.yaml, "
                      "plan.json")
    _plan_options(plan)
    _common(plan)

    fit = sub.add_parser("fit", help="fit the dynamics to a recorded excitation")
    fit.add_argument("bag", type=Path, help="a rosbag2 (folder or .mcap/.db3) or a folder of "
                     "them")
    fit.add_argument("--urdf", required=True, help="the URDF the plan was made from")
    fit.add_argument("--plan", required=True, type=Path, help="plan.json from `plan`")
    fit.add_argument("--out", required=True, type=Path, help="folder for the results")
    fit.add_argument("--topic", default="/joint_states")
    fit.add_argument("--accept-poor-fit", action="store_true", help="write the results even "
                     "when a joint's validation RMS/σ is above 2, or a joint covered less than "
                     "half its planned range or peak speed (a warning names it)")
    _fit_options(fit)
    _common(fit)

    send = sub.add_parser("send", help="send excitation.yaml to a FollowJointTrajectory server")
    send.add_argument("goal", type=Path, help="excitation.yaml from `plan`")
    _send_options(send)
    _common(send)

    record = sub.add_parser("record", help="record joint states into a rosbag2")
    record.add_argument("--out", required=True, type=Path, help="the new bag's folder")
    record.add_argument("--topic", default="/joint_states")
    record.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    record.add_argument("--duration", type=POSITIVE, help="s to record after the first "
                        "message (default: until Ctrl-C)")
    record.add_argument("--wait", type=POSITIVE, default=30.0, help="s to wait for a first "
                        "message (30)")
    _common(record)

    run = sub.add_parser("run", help="identify in rounds: plan, then send and record, fit, "
                         "load the result into the controller and excite again while the fit "
                         "improves")
    run.add_argument("--urdf", required=True, help="the robot's URDF file (the controller's)")
    run.add_argument("--out", required=True, type=Path, help="folder for plan/, round1/, "
                     "round2/, ... and rounds.json")
    run.add_argument("--rounds", type=_number(1, 20, integer=True), default=3,
                     help="rounds at most (3)")
    run.add_argument("--min-improvement", type=_number(0.0, 0.99), default=0.1,
                     help="a further round only while the worst joint's validation RMS/σ "
                     "drops by this fraction (0.1)")
    run.add_argument("--node", default="/rb_dynamics", help="the control node (its full "
                     "name): its ~/set_dynamics_overlay and ~/inverse_dynamics")
    run.add_argument("--description-topic", default="/robot_description",
                     help="where the control node takes its description from")
    run.add_argument("--topic", default="/joint_states")
    run.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    _plan_options(run)
    _send_options(run)
    _fit_options(run)
    _common(run)
    return parser


def _plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--joints", nargs="+", help="joints to excite (default: every 1-DoF "
                   "joint; name them on a robot with a gripper)")
    p.add_argument("--period", type=POSITIVE, default=10.0, help="base period, s (10)")
    p.add_argument("--harmonics", type=HARMONICS, default=5, help="harmonics per joint "
                   "(5; 2 to 29)")
    p.add_argument("--periods", type=PERIODS, default=5, help="periods in the goal (5: "
                   "four to fit, one to validate; at least 3, and the goal at most "
                   "10,000 points of 50 ms)")
    p.add_argument("--lead-in", type=POSITIVE, default=5.0, help="s to reach the start (5)")
    p.add_argument("--margin", type=_number(0.0, 0.49), default=0.1, help="fraction kept "
                   "off every limit (0.1)")
    p.add_argument("--acceleration", type=POSITIVE, help="acceleration bound, rad/s² "
                   "(default: twice each joint's velocity limit per second)")
    p.add_argument("--evaluations", type=_number(32, 10_000_000, integer=True),
                   default=6000, help="length of the search, in evaluations of the "
                   "objective (6000, ~35 s for a 7-joint arm): the same plan for the same "
                   "--seed on any machine")
    p.add_argument("--time-budget", type=POSITIVE, default=600.0, help="s of search at "
                   "most (600); a search it cuts short says so, and its plan depends on "
                   "the machine's speed")
    p.add_argument("--seed", type=int, default=0)


def _fit_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stribeck", action="store_true", help="also fit Stribeck friction")
    p.add_argument("--no-consistent", action="store_true", help="skip the consistent "
                   "(SDP) parameter set")
    p.add_argument("--delay", type=_number(-1.0, 1.0), help="the effort delay, s "
                   "(default: estimated)")
    p.add_argument("--cutoff", type=POSITIVE, default=10.0, help="low-pass, Hz (10; below "
                   "half the recording's rate)")


def _send_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--action", default="/rb_dynamics/follow_joint_trajectory")
    p.add_argument("--timeout", type=POSITIVE, default=10.0, help="s to wait for the "
                   "server, and for the result beyond the goal's duration (10)")
    p.add_argument("--path-tolerance", type=_number(0.0), default=DEFAULT_PATH_TOLERANCE,
                   help="rad (m): the server aborts the goal when a joint is further from "
                   f"the plan; given to a goal without tolerances; 0: none "
                   f"({DEFAULT_PATH_TOLERANCE:g})")
    p.add_argument("--goal-tolerance", type=_number(0.0), default=DEFAULT_GOAL_TOLERANCE,
                   help="rad (m) from the plan's last point, 2 s after its end; given to "
                   f"a goal without tolerances; 0: none ({DEFAULT_GOAL_TOLERANCE:g})")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def _plan(args, say: Progress) -> int:
    from rb_dynamics.control import MAX_TRAJECTORY_POINTS
    from rb_dynamics.identification import (
        GOAL_STEP,
        MAX_CONDITION_FIT,
        ParameterLayout,
        base_parameters,
        excitation_goal,
        goal_points,
        model_fingerprint,
        plan_excitation,
        write_plan,
    )
    from rb_dynamics.model import load_model, read_source

    points = goal_points(args.periods, args.period)
    if points > MAX_TRAJECTORY_POINTS:
        raise ValueError(f"--periods {args.periods} × --period {args.period:g} s is a goal of "
                         f"{points} points (one per {GOAL_STEP * 1e3:g} ms); a controller takes "
                         f"at most {MAX_TRAJECTORY_POINTS}")
    urdf_text = read_source(Path(args.urdf))
    model = load_model(urdf_text)
    layout = ParameterLayout(model, tuple(args.joints or ()))
    say(f"model: {layout.describe()}")
    base = base_parameters(layout)
    say(f"base parameters: {base.count}; searching ({args.evaluations} evaluations, at most "
        f"{args.time_budget:g} s)")
    plan = plan_excitation(base, period=args.period, harmonics=args.harmonics,
                           margin=args.margin, acceleration=args.acceleration, seed=args.seed,
                           evaluations=args.evaluations, time_budget=args.time_budget,
                           progress=say)
    say(f"search: {plan.evaluations} evaluations in {plan.seconds:.1f} s")
    if not plan.condition <= MAX_CONDITION_FIT:
        raise ValueError(f"the best excitation found leaves the base parameters' condition "
                         f"number at {plan.condition:.3g}, above the {MAX_CONDITION_FIT:g} a fit "
                         "accepts: nothing written (more --harmonics, a longer --period or "
                         "--time-budget, or fewer --joints)")
    import yaml

    args.out.mkdir(parents=True, exist_ok=True)
    goal = excitation_goal(plan.trajectory, args.periods, args.lead_in)
    (args.out / "excitation.yaml").write_text(yaml.safe_dump(goal, sort_keys=False,
                                                             default_flow_style=None))
    write_plan(args.out / "plan.json", plan, args.periods, args.lead_in,
               str(Path(args.urdf).resolve()), model_fingerprint(model))
    print(f"condition number {plan.condition:.1f}; trajectory {args.lead_in:g} s lead-in + "
          f"{args.periods} × {args.period:g} s")
    print(f"{'joint':24s} {'|q̇| max/bound':>15s} {'|q̈| max/bound':>15s} "
          f"{'|τ| max/limit (URDF)':>22s}")
    lim = plan.limits
    for j, name in enumerate(plan.trajectory.joints):
        print(f"{name:24s} {plan.peak_velocity[j]:7.2f}/{lim.velocity[j]:<7.2f} "
              f"{plan.peak_acceleration[j]:7.2f}/{lim.acceleration[j]:<7.2f} "
              f"{plan.peak_effort[j]:10.2f}/{lim.effort[j]:<10.2f}")
    print(f"wrote {args.out / 'excitation.yaml'} and {args.out / 'plan.json'}")
    return EXIT_OK


def _fit(args, say: Progress) -> int:
    return _fit_and_write(args, say)[0]


def _fit_and_write(args, say: Progress, advise: bool = True) -> tuple[int, Any]:
    """Fit, print the figures and write the results (unless the fit is poor and
    ``args.accept_poor_fit`` is not given), and with ``advise`` what a further round would
    do: the exit code and the Identification."""
    from rb_dynamics.identification import (
        check_outputs,
        check_plan_model,
        identify,
        next_round,
        poor_fit,
        read_joint_states,
        read_plan,
        write_identification,
    )
    from rb_dynamics.model import load_model, read_source

    urdf_text = read_source(Path(args.urdf))
    trajectory, plan_data = read_plan(args.plan)
    check_plan_model(plan_data, load_model(urdf_text), args.urdf)
    inputs = (args.bag, Path(args.urdf), args.plan)
    check_outputs(args.out, inputs)  # at once, not after the fit
    say(f"reading {args.bag}")
    recording = read_joint_states(args.bag, trajectory.joints, args.topic)
    say(f"{len(recording.stamps)} joint states over {recording.duration:.1f} s "
        f"({recording.rate:.0f} Hz)")
    terms = ("armature", "viscous", "coulomb", "stribeck", "offset") if args.stribeck else \
        ("armature", "viscous", "coulomb", "offset")
    ident = identify(urdf_text, recording, trajectory, terms=terms, cutoff=args.cutoff,
                     delay=args.delay, consistent=not args.no_consistent, progress=say)
    v = ident.validation
    c = ident.consistent_validation
    print(f"base parameters {ident.base.count}, condition {ident.fit.condition:.1f}, delay "
          f"{ident.fit.delay * 1e3:.2f} ms, {ident.data.periods} periods fitted, "
          f"{len(ident.data.held_out)} held out; fit {ident.seconds:.1f} s")
    ex = ident.execution
    print(f"{'joint':24s} {'range':>6s} {'speed':>6s} {'track RMS':>9s} {'noise σ':>9s} "
          f"{'val RMS':>9s} {'RMS/σ':>7s}" + (f" {'consistent RMS/σ':>17s}" if c is not None
                                               else ""))
    for j, name in enumerate(ident.layout.joints):
        print(f"{name:24s} {ex.range[j]:6.0%} {ex.speed[j]:6.0%} {ex.tracking[j]:9.4f} "
              f"{ident.fit.noise[j]:9.4f} {v.rms[j]:9.4f} {v.ratio[j]:7.3f}"
              + (f" {c.ratio[j]:17.3f}" if c is not None else ""))
    print("range, speed: the recorded range and peak speed over the plan's; parameter σ scaled "
          "by max(1, RMS/σ) of their joints")
    poor = poor_fit(ident)
    if poor is not None and not args.accept_poor_fit:
        print(f"rb_dynamics_identify fit: {poor}; nothing written (--accept-poor-fit writes "
              "anyway)", file=sys.stderr)
        return EXIT_INPUT, ident
    paths = write_identification(ident, args.out, {
        "bag": str(args.bag.resolve()), "urdf": str(Path(args.urdf).resolve()),
        "plan": str(args.plan.resolve())}, inputs=inputs)
    if poor is not None:  # a warning even with --quiet: the results are not to be trusted
        print(f"rb_dynamics_identify fit: warning: written as asked (--accept-poor-fit), "
              f"although {poor}", file=sys.stderr)
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    if advise and (advice := next_round(ident)) is not None:
        print(f"next: {advice}")
    return EXIT_OK, ident


def _run(args, say: Progress) -> int:
    from .ros_commands import send
    from .rounds import load_into_controller, run_rounds

    earlier = [str(path) for path in (args.out / "round1", args.out / "rounds.json")
               if path.exists()]
    if earlier:
        raise ValueError(f"--out {args.out}: holds an earlier run ({earlier[0]}); give a new "
                         "folder")
    plan_folder = args.out / "plan"
    code = _plan(argparse.Namespace(**{**vars(args), "out": plan_folder}), say)
    if code != EXIT_OK:
        return code
    fit_args = {**vars(args), "plan": plan_folder / "plan.json",
                "accept_poor_fit": True}  # the rounds judge the fits; each is written

    def send_plan(goal: Path) -> int:
        try:
            return send(goal, action=args.action, timeout=args.timeout, say=say,
                        path_tolerance=args.path_tolerance, goal_tolerance=args.goal_tolerance)
        finally:  # send's handlers cancel its goal; Ctrl-C ends the fits and loads as usual
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def fit(bag: Path, folder: Path) -> Any:
        return _fit_and_write(argparse.Namespace(**{**fit_args, "bag": bag, "out": folder}),
                              say, advise=False)[1]  # the rounds say what comes next

    def load(folder: Path) -> None:
        load_into_controller(folder, node=args.node, description_topic=args.description_topic,
                             say=say)

    record = [sys.executable, "-m", "rb_dynamics.ros.identification", "record", "--topic",
              args.topic, "--storage", args.storage]
    return run_rounds(args.out, rounds=args.rounds, min_improvement=args.min_improvement,
                      plan_folder=plan_folder, send=send_plan, fit=fit, load=load,
                      record_command=record, say=say)


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; returns its exit code (argparse exits 2 on a usage error)."""
    args = _parser().parse_args(argv)
    say = Progress(args.quiet)
    from rb_dynamics.identification import IdentificationError, MissingDependency
    from rb_dynamics.model import URDFError

    from .rounds import LoadError

    try:
        if args.command == "plan":
            return _plan(args, say)
        if args.command == "fit":
            return _fit(args, say)
        if args.command == "run":
            return _run(args, say)
        from .ros_commands import record, send

        if args.command == "send":
            return send(args.goal, action=args.action, timeout=args.timeout, say=say,
                        path_tolerance=args.path_tolerance,
                        goal_tolerance=args.goal_tolerance)
        return record(args.out, topic=args.topic, storage=args.storage,
                      duration=args.duration, wait=args.wait, say=say)
    except MissingDependency as exc:
        print(f"rb_dynamics_identify {args.command}: {exc}", file=sys.stderr)
        return EXIT_MISSING
    except (IdentificationError, URDFError, ValueError, OSError) as exc:
        print(f"rb_dynamics_identify {args.command}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except LoadError as exc:
        print(f"rb_dynamics_identify {args.command}: {exc}", file=sys.stderr)
        return EXIT_ROS
    except KeyboardInterrupt:
        print(f"rb_dynamics_identify {args.command}: interrupted", file=sys.stderr)
        return EXIT_ROS


if __name__ == "__main__":
    sys.exit(main())
