# SPDX-License-Identifier: Apache-2.0
"""The subcommands of ``rb_dynamics_identify`` that talk to ROS: ``record`` and ``send``.

``record`` subscribes to ``sensor_msgs/JointState`` (reliable, a deep queue: every state
counts) and writes each message as received — serialised by rclpy, stamped with its receive
time like ``ros2 bag record`` — into a new rosbag2 through ``rosbags``' writer, and reports the
states lost (``states_lost``). ``send`` reads the goal file ``plan`` wrote (checked by
``goal_duration`` before the server is asked for) and sends it to a FollowJointTrajectory
action server, waiting for the result at most the goal's duration + ``--timeout``; SIGINT
cancels the goal.
"""

from __future__ import annotations

import array
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rb_dynamics.identification.preprocessing import MIN_COVERAGE

from .exit_codes import EXIT_INPUT, EXIT_OK, EXIT_ROS

# a goal of MAX_TRAJECTORY_POINTS (10,000) points on 10 joints (positions, velocities,
# accelerations) is ~5.5 MB of YAML: this bound takes 35 joints
MAX_GOAL_FILE_BYTES = 20_000_000
# the tolerances ``send`` gives a goal that has none (rad, or m on a prismatic joint): an arm
# further than this from the planned path is not executing the excitation, and a real one may
# be swinging where nobody planned it to go. No goal tolerance by default: how the arm settles
# after the last point is no part of the recording, and a badly modelled arm's slow settling
# must not turn an excitation executed in full into a failed goal
DEFAULT_PATH_TOLERANCE = 1.0
DEFAULT_GOAL_TOLERANCE = 0.0
GOAL_TIME_TOLERANCE = 2  # s after the goal's end to come within its goal tolerance

__all__ = ["FollowingReport", "goal_duration", "record", "send", "states_lost"]


def record(out: Path, *, topic: str, storage: str, duration: float | None, wait: float,
           say: Callable[[str], None]) -> int:
    """Record ``topic`` into the new bag ``out`` (``storage``: "mcap" or "sqlite3") for
    ``duration`` s after the first message (None: until SIGINT/SIGTERM), giving up after
    ``wait`` s without one; progress lines go to ``say``. Returns the exit code."""
    import rclpy
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState

    from rb_dynamics.identification import JointStateBagWriter

    if out.exists():
        print(f"rb_dynamics_identify record: {out} exists; a bag goes into a new folder")
        return EXIT_INPUT
    rclpy.init()
    node = rclpy.create_node("rb_dynamics_identify_record")
    stop = threading.Event()
    first: list[float] = []
    queue: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    stamps = array.array("d")  # header stamps as received: the gaps say what was lost
    dropped = [0]  # messages the middleware reports lost (the subscriber's queue overflowed)

    def on_state(msg: JointState) -> None:
        now = node.get_clock().now().nanoseconds
        with lock:
            queue.append((now, serialize_message(msg)))
            stamps.append(msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)
        if not first:
            first.append(time.monotonic())

    qos = QoSProfile(depth=10000, reliability=ReliabilityPolicy.RELIABLE,
                     history=HistoryPolicy.KEEP_LAST)
    _subscribe_counting_losses(node, JointState, topic, on_state, qos, dropped)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    spinner = threading.Thread(target=_spin, args=(node, stop), daemon=True)
    spinner.start()
    say(f"waiting for {topic} (Ctrl-C stops)")
    writer = None
    started = time.monotonic()
    last_note = started
    try:
        while not stop.is_set():
            time.sleep(0.05)
            with lock:
                batch, queue[:] = list(queue), []
            if batch and writer is None:
                writer = JointStateBagWriter(out, topic, storage)
                say(f"recording {topic} into {out} ({storage})")
            for stamp, data in batch:
                writer.write_cdr(stamp, data)
            now = time.monotonic()
            if not first and now - started > wait:
                print(f"rb_dynamics_identify record: no message on {topic} in "
                      f"{wait:g} s")
                return EXIT_ROS
            if first and now - last_note > 5.0:
                say(f"{writer.count} joint states")
                last_note = now
            if first and duration is not None and now - first[0] >= duration:
                break
    finally:
        stop.set()
        spinner.join(timeout=2.0)
        with lock:
            batch = list(queue)
        if writer is not None:
            for stamp, data in batch:
                writer.write_cdr(stamp, data)
            writer.close()
        node.destroy_node()
        rclpy.try_shutdown()
    if writer is None:  # stopped before the first message: no bag was begun
        print(f"rb_dynamics_identify record: stopped before any message on {topic}; "
              "nothing recorded")
        return EXIT_ROS
    print(f"recorded {writer.count} joint states into {out}")
    for line in states_lost(np.asarray(stamps), dropped[0]):
        print(f"rb_dynamics_identify record: {line}")
    return EXIT_OK


def states_lost(stamps: np.ndarray, dropped: int = 0) -> list[str]:
    """What a recording lost: the gaps in its header stamps ``stamps`` (s, as received) longer
    than 1.5 sample periods (the median step), as states lost and where; ``dropped`` messages
    the middleware reported lost. No lines when nothing was."""
    lines = []
    steps = np.diff(stamps)
    if len(steps) >= 2:
        sample = float(np.median(steps))
        gaps = np.flatnonzero(steps > 1.5 * sample) if sample > 0 else np.array([], int)
        if len(gaps):
            lost = int(np.sum(np.round(steps[gaps] / sample) - 1))
            k = gaps[int(np.argmax(steps[gaps]))]
            lines.append(f"{lost} states lost: {len(gaps)} gap(s) in the header stamps, the "
                         f"longest {steps[k]:.3f} s after t = {stamps[k] - stamps[0]:.3f} s "
                         f"(states every {sample * 1e3:.3g} ms)")
        back = int(np.sum(steps <= 0))
        if back:
            lines.append(f"{back} header stamps repeat or go back")
    if dropped:
        lines.append(f"{dropped} messages lost by the middleware (the subscriber's queue "
                     "overflowed)")
    return lines


def _subscribe_counting_losses(node, msg_type, topic: str, callback, qos,
                               dropped: list[int]) -> None:
    """Subscribe, adding the messages the middleware reports lost to ``dropped[0]`` where this
    rclpy and middleware report them (the subscription without that count elsewhere)."""

    def lost(status) -> None:
        dropped[0] += status.total_count_change

    try:
        try:
            from rclpy.event_handler import SubscriptionEventCallbacks, UnsupportedEventTypeError
        except ImportError:  # Humble
            from rclpy.qos_event import SubscriptionEventCallbacks, UnsupportedEventTypeError
        events = SubscriptionEventCallbacks(message_lost=lost)
    except (ImportError, TypeError):  # an rclpy without the message_lost event
        node.create_subscription(msg_type, topic, callback, qos)
        return
    try:
        node.create_subscription(msg_type, topic, callback, qos, event_callbacks=events)
    except UnsupportedEventTypeError:
        node.create_subscription(msg_type, topic, callback, qos)


def _spin(node, stop: threading.Event) -> None:
    import rclpy

    executor = rclpy.executors.SingleThreadedExecutor()
    executor.add_node(node)
    while not stop.is_set():
        executor.spin_once(timeout_sec=0.05)


def send(goal_file: Path, *, action: str, timeout: float, say: Callable[[str], None],
         path_tolerance: float = DEFAULT_PATH_TOLERANCE,
         goal_tolerance: float = DEFAULT_GOAL_TOLERANCE) -> int:
    """Send the goal in ``goal_file`` to ``action`` and wait for its result while the server
    answers; returns the exit code. A server silent (no feedback, no result) for ``timeout`` s
    is taken for dead, the goal cancelled (one that dies mid-goal never answers; the goal's
    duration is the server's time, simulated time on a lock-step simulator, which may run far
    slower than the wall clock); SIGINT/SIGTERM cancel the goal and end the command (exit 4).
    A goal without tolerances gets ``path_tolerance`` and ``goal_tolerance`` (rad or m, every
    joint; 0: none) so that the server aborts an excitation the arm does not follow; how well
    it was followed (from the server's feedback) is printed at the end. Progress lines go to
    ``say``."""
    from rb_dynamics.model import plain_yaml, read_text_file

    # excitation.yaml is a goal (five levels of nesting); ValueError/OSError reach main. Its
    # size is refused before it is read, its shape before the server is asked for
    if goal_file.is_file() and goal_file.stat().st_size > MAX_GOAL_FILE_BYTES:
        raise ValueError(f"goal file {str(goal_file)!r} is larger than {MAX_GOAL_FILE_BYTES} "
                         f"bytes ({goal_file.stat().st_size}; a plan's goal of 10,000 points "
                         "on 10 joints is 5.5 MB)")
    goal_data = plain_yaml(read_text_file(goal_file, MAX_GOAL_FILE_BYTES, "goal file"),
                           str(goal_file), max_depth=8)
    duration = goal_duration(goal_data, str(goal_file))
    import rclpy
    from control_msgs.action import FollowJointTrajectory
    from rclpy.action import ActionClient
    from rosidl_runtime_py.set_message import set_message_fields

    rclpy.init()
    node = rclpy.create_node("rb_dynamics_identify_send")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    handle = None
    try:
        client = ActionClient(node, FollowJointTrajectory, action)
        if not client.wait_for_server(timeout_sec=timeout):
            print(f"rb_dynamics_identify send: no action server {action} in "
                  f"{timeout:g} s")
            return EXIT_ROS
        goal = FollowJointTrajectory.Goal()
        try:
            set_message_fields(goal, goal_data)
        except (AttributeError, TypeError, ValueError) as exc:
            print(f"rb_dynamics_identify send: {goal_file} is not a FollowJointTrajectory "
                  f"goal: {exc}")
            return EXIT_INPUT
        _give_tolerances(goal, path_tolerance, goal_tolerance)
        say(f"sending {len(goal.trajectory.points)} points ({duration:.1f} s) to "
            f"{action}")
        heard = [time.monotonic()]  # when the server last said something of the goal
        following = FollowingReport()

        def on_feedback(message) -> None:
            heard[0] = time.monotonic()
            following.add(message.feedback)

        future = client.send_goal_async(goal, feedback_callback=on_feedback)
        if not _spin_until(node, future, time.monotonic() + timeout, stop):
            print(f"rb_dynamics_identify send: {action} did not answer the goal in "
                  f"{timeout:g} s" + (" (interrupted)" if stop.is_set() else ""))
            return EXIT_ROS
        handle = future.result()
        if handle is None or not handle.accepted:
            print(f"rb_dynamics_identify send: the goal was rejected by {action}")
            return EXIT_ROS
        result_future = handle.get_result_async()
        heard[0] = time.monotonic()
        while not _spin_until(node, result_future, heard[0] + timeout, stop):
            if stop.is_set() or time.monotonic() > heard[0] + timeout:
                break
        if not result_future.done():
            _cancel(node, handle)
            if stop.is_set():
                print("rb_dynamics_identify send: interrupted; the goal was cancelled")
            else:
                print(f"rb_dynamics_identify send: neither feedback nor a result from "
                      f"{action} for {timeout:g} s (--timeout) during the goal of "
                      f"{duration:.1f} s: the server stopped answering; the goal was cancelled")
            return EXIT_ROS
        result = result_future.result().result
        print(f"result: error_code {result.error_code} {result.error_string!r}")
        for line in following.lines():
            print(line)
        if result.error_code == FollowJointTrajectory.Result.PATH_TOLERANCE_VIOLATED:
            print("rb_dynamics_identify send: the arm left the planned path by more than the "
                  "path tolerance: the controller cannot execute this excitation with its "
                  "model (an armature the URDF lacks cuts computed torque's gain on light "
                  "joints); raise its gains, give it a first identification "
                  "(dynamics_overlay) or a slower plan, or relax --path-tolerance")
        return EXIT_OK if result.error_code == 0 else EXIT_ROS
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def _give_tolerances(goal, path_tolerance: float, goal_tolerance: float) -> None:
    """Per-joint position tolerances on a goal that has none (a goal file's own are kept); a
    tolerance of 0 adds none. A goal tolerance comes with GOAL_TIME_TOLERANCE where the goal
    has no time tolerance: without one a trajectory controller waits for it forever."""
    from control_msgs.msg import JointTolerance

    names = list(goal.trajectory.joint_names)
    for tolerances, value in ((goal.path_tolerance, path_tolerance),
                              (goal.goal_tolerance, goal_tolerance)):
        if value > 0.0 and not tolerances:
            tolerances.extend(JointTolerance(name=name, position=float(value))
                              for name in names)
    time_tolerance = goal.goal_time_tolerance
    if goal_tolerance > 0.0 and time_tolerance.sec == 0 and time_tolerance.nanosec == 0:
        time_tolerance.sec = GOAL_TIME_TOLERANCE


class FollowingReport:
    """How well a goal was followed, from the server's FollowJointTrajectory feedback: per
    joint the range of the actual positions over the range of the desired ones, and the RMS
    and largest position error (feedback comes at the server's monitor rate: a sample of the
    goal, not every state)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.count = 0

    def add(self, feedback) -> None:
        """Take one feedback message (one whose joints differ from the first's is skipped)."""
        names = list(feedback.joint_names)
        desired = np.asarray(feedback.desired.positions, float)
        actual = np.asarray(feedback.actual.positions, float)
        error = np.asarray(feedback.error.positions, float)
        n = len(names)
        if not (n and len(desired) == len(actual) == len(error) == n):
            return
        if not self.names:
            self.names = names
            self._desired_low, self._desired_high = desired.copy(), desired.copy()
            self._actual_low, self._actual_high = actual.copy(), actual.copy()
            self._squared, self._largest = np.zeros(n), np.zeros(n)
        elif names != self.names:
            return
        np.minimum(self._desired_low, desired, out=self._desired_low)
        np.maximum(self._desired_high, desired, out=self._desired_high)
        np.minimum(self._actual_low, actual, out=self._actual_low)
        np.maximum(self._actual_high, actual, out=self._actual_high)
        self._squared += error * error
        np.maximum(self._largest, np.abs(error), out=self._largest)
        self.count += 1

    def lines(self) -> list[str]:
        """The report: a header, one line per joint, and a warning per joint whose executed
        range is under half or over 1.5 times its planned one (``fit`` refuses under half)."""
        if not self.count:
            return ["followed: the server sent no feedback with positions"]
        planned = self._desired_high - self._desired_low
        executed = self._actual_high - self._actual_low
        rms = np.sqrt(self._squared / self.count)
        width = max(len(name) for name in self.names)
        out = [f"followed ({self.count} feedback messages): {'joint':<{width}}  range  "
               "error RMS  error max",
               *(f"  {name:<{width}}  {self._percent(e, p):>5}  {r:9.3g}  {m:9.3g}"
                 for name, e, p, r, m in zip(self.names, executed, planned, rms,
                                             self._largest))]
        for name, e, p in zip(self.names, executed, planned):
            if p > 1e-6 and not MIN_COVERAGE <= e / p <= 2.0 - MIN_COVERAGE:
                out.append(f"rb_dynamics_identify send: {name} covered {100 * e / p:.0f} % "
                           "of its planned range: the excitation was not executed as planned "
                           f"(fit refuses a joint under {MIN_COVERAGE:.0%}); see "
                           "docs/identification.md, "
                           "'When the arm does not follow the plan'")
        return out

    @staticmethod
    def _percent(executed: float, planned: float) -> str:
        return f"{100 * executed / planned:.0f} %" if planned > 1e-6 else "-"


def goal_duration(data, where: str) -> float:
    """The duration (s) of the FollowJointTrajectory goal ``data`` (plain data), checked for
    what a controller needs before anything is converted: a trajectory with joint names and
    1 to ``MAX_TRAJECTORY_POINTS`` points, the last one's ``time_from_start`` finite and
    ≥ 0. ValueError naming ``where`` and what is missing."""
    from rb_dynamics.control import MAX_TRAJECTORY_POINTS

    trajectory = data.get("trajectory") if isinstance(data, dict) else None
    if not isinstance(trajectory, dict):
        raise ValueError(f"{where}: not a FollowJointTrajectory goal (no 'trajectory' mapping)")
    names, points = trajectory.get("joint_names"), trajectory.get("points")
    if not (isinstance(names, list) and names):
        raise ValueError(f"{where}: trajectory.joint_names is empty or missing")
    if not (isinstance(points, list) and points):
        raise ValueError(f"{where}: trajectory.points is empty or missing: a goal needs at "
                         "least one point")
    if len(points) > MAX_TRAJECTORY_POINTS:
        raise ValueError(f"{where}: {len(points)} points; a controller takes at most "
                         f"{MAX_TRAJECTORY_POINTS}")
    end = points[-1].get("time_from_start") if isinstance(points[-1], dict) else None
    try:
        seconds = float(end.get("sec", 0)) + 1e-9 * float(end.get("nanosec", 0))
    except (AttributeError, TypeError, ValueError):
        raise ValueError(f"{where}: the last point has no time_from_start") from None
    if not (0.0 <= seconds < 1e6):
        raise ValueError(f"{where}: the last point's time_from_start is {seconds:g} s")
    return seconds


def _spin_until(node, future, deadline: float, stop: threading.Event) -> bool:
    """Spin ``node`` until ``future`` is done (True), ``deadline`` (monotonic) passes or
    ``stop`` is set (False)."""
    import rclpy

    while not future.done():
        if stop.is_set() or time.monotonic() > deadline:
            return False
        rclpy.spin_once(node, timeout_sec=0.1)
    return True


def _cancel(node, handle) -> None:
    """Ask the server to cancel the goal ``handle``; waits at most 2 s for its answer."""
    _spin_until(node, handle.cancel_goal_async(), time.monotonic() + 2.0, threading.Event())
