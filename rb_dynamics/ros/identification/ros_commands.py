# SPDX-License-Identifier: Apache-2.0
"""The subcommands of ``rb_dynamics_identify`` that talk to ROS: ``record`` and ``send``.

``record`` subscribes to ``sensor_msgs/JointState`` (reliable, a deep queue: every state
counts) and writes each message as received — serialised by rclpy, stamped with its receive
time like ``ros2 bag record`` — into a new rosbag2 through ``rosbags``' writer. ``send`` reads
the goal file ``plan`` wrote and sends it to a FollowJointTrajectory action server, printing
feedback now and then and the result.
"""

from __future__ import annotations

import signal
import threading
import time

from .cli import EXIT_INPUT, EXIT_OK, EXIT_ROS, Progress

# a goal of 100,000 points on 10 joints (positions, velocities, accelerations) is
# ~70 MB of YAML
MAX_GOAL_FILE_BYTES = 200_000_000

__all__ = ["record", "send"]


def record(args, say: Progress) -> int:
    """Record ``args.topic`` into the bag ``args.out`` for ``args.duration`` s (or until
    SIGINT/SIGTERM) after the first message."""
    import rclpy
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState

    from rb_dynamics.identification import JointStateBagWriter

    if args.out.exists():
        print(f"rb_dynamics_identify record: {args.out} exists; a bag goes into a new folder")
        return EXIT_INPUT
    rclpy.init()
    node = rclpy.create_node("rb_dynamics_identify_record")
    stop = threading.Event()
    first: list[float] = []
    queue: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def on_state(msg: JointState) -> None:
        now = node.get_clock().now().nanoseconds
        with lock:
            queue.append((now, serialize_message(msg)))
        if not first:
            first.append(time.monotonic())

    qos = QoSProfile(depth=10000, reliability=ReliabilityPolicy.RELIABLE,
                     history=HistoryPolicy.KEEP_LAST)
    node.create_subscription(JointState, args.topic, on_state, qos)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    spinner = threading.Thread(target=_spin, args=(node, stop), daemon=True)
    spinner.start()
    writer = None
    started = time.monotonic()
    last_note = started
    try:
        while not stop.is_set():
            time.sleep(0.05)
            with lock:
                batch, queue[:] = list(queue), []
            if batch and writer is None:
                writer = JointStateBagWriter(args.out, args.topic, args.storage)
                say(f"recording {args.topic} into {args.out} ({args.storage})")
            for stamp, data in batch:
                writer.write_cdr(stamp, data)
            now = time.monotonic()
            if not first and now - started > args.wait:
                print(f"rb_dynamics_identify record: no message on {args.topic} in "
                      f"{args.wait:g} s")
                return EXIT_ROS
            if first and now - last_note > 5.0:
                say(f"{writer.count} joint states")
                last_note = now
            if first and args.duration is not None and now - first[0] >= args.duration:
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
    print(f"recorded {writer.count} joint states into {args.out}")
    return EXIT_OK


def _spin(node, stop: threading.Event) -> None:
    import rclpy

    executor = rclpy.executors.SingleThreadedExecutor()
    executor.add_node(node)
    while not stop.is_set():
        executor.spin_once(timeout_sec=0.05)


def send(args, say: Progress) -> int:
    """Send the goal in ``args.goal`` to ``args.action`` and wait for its result."""
    from rb_dynamics.model import plain_yaml, read_text_file

    # excitation.yaml is a goal (five levels of nesting); ValueError/OSError reach main
    goal_data = plain_yaml(read_text_file(args.goal, MAX_GOAL_FILE_BYTES, "goal file"),
                           str(args.goal), max_depth=8)
    import rclpy
    from control_msgs.action import FollowJointTrajectory
    from rclpy.action import ActionClient
    from rosidl_runtime_py.set_message import set_message_fields

    goal = FollowJointTrajectory.Goal()
    try:
        set_message_fields(goal, goal_data)
    except (AttributeError, TypeError, ValueError) as exc:
        print(f"rb_dynamics_identify send: {args.goal} is not a FollowJointTrajectory goal: "
              f"{exc}")
        return EXIT_INPUT
    rclpy.init()
    node = rclpy.create_node("rb_dynamics_identify_send")
    try:
        client = ActionClient(node, FollowJointTrajectory, args.action)
        if not client.wait_for_server(timeout_sec=args.timeout):
            print(f"rb_dynamics_identify send: no action server {args.action} in "
                  f"{args.timeout:g} s")
            return EXIT_ROS
        points = goal.trajectory.points
        end = points[-1].time_from_start
        say(f"sending {len(points)} points ({end.sec + end.nanosec * 1e-9:.1f} s) to "
            f"{args.action}")
        future = client.send_goal_async(goal)
        rclpy.spin_until_future_complete(node, future)
        handle = future.result()
        if handle is None or not handle.accepted:
            print(f"rb_dynamics_identify send: the goal was rejected by {args.action}")
            return EXIT_ROS
        result_future = handle.get_result_async()
        while not result_future.done():
            rclpy.spin_once(node, timeout_sec=1.0)
        result = result_future.result().result
        print(f"result: error_code {result.error_code} {result.error_string!r}")
        return EXIT_OK if result.error_code == 0 else EXIT_ROS
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
