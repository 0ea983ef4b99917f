# SPDX-License-Identifier: Apache-2.0
"""rosbag2 files without ROS: joint states read from, and written to, MCAP or SQLite3 bags.

``read_joint_states`` takes a bag folder (or a folder of bag folders, read one after another in
time order) and returns a ``JointRecording`` of the named joints from ``sensor_msgs/JointState``
messages on a topic: by joint name (each message may list its joints in any order), at the
messages' header stamps. ``JointStateBagWriter`` writes such messages, already serialised
(CDR, as rclpy's ``serialize_message`` gives them) or built from arrays.

Needs ``rosbags`` (the identification extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .measurements import JointRecording, RecordingError
from .optional import require

__all__ = ["JOINT_STATE_TYPE", "JointStateBagWriter", "bag_folders", "read_joint_states"]

JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"


def _typestore():
    require("rosbags", "reading and writing bags")
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_JAZZY)


def bag_folders(path: str | Path) -> list[Path]:
    """``path`` itself when it is a bag (a folder with ``metadata.yaml``, or a single .mcap or
    .db3 file), else the bags directly inside it, sorted by name. ``RecordingError`` if none,
    or for a bag that is (or holds) a device or a FIFO."""
    path = Path(path)
    if not path.exists():
        raise RecordingError(f"{path}: no such bag or folder")
    _regular(path)
    if path.is_file() or (path / "metadata.yaml").exists():
        return [_regular_inside(path)]
    bags = sorted(_regular_inside(p) for p in path.iterdir()
                  if (p / "metadata.yaml").exists() or p.suffix in (".mcap", ".db3"))
    if not bags:
        raise RecordingError(f"{path}: not a rosbag2 (no metadata.yaml) and holds no bags")
    return bags


def _regular(path: Path) -> Path:
    """``path`` when it is a folder or a regular file: a device would be read without end, a
    FIFO would hold the reader until something writes to it."""
    if not (path.is_dir() or path.is_file()):
        raise RecordingError(f"{path}: not a regular file or a folder")
    return path


def _regular_inside(bag: Path) -> Path:
    """``bag`` (a file, or a folder whose files are all regular ones)."""
    _regular(bag)
    if bag.is_dir():
        for entry in bag.iterdir():
            _regular(entry)
    return bag


def read_joint_states(path: str | Path, joints: Sequence[str],
                      topic: str = "/joint_states") -> JointRecording:
    """The recording of ``joints`` on ``topic`` in the bag(s) at ``path``, ordered by header
    stamp; a message repeating the previous one (same stamp and positions) counts once.
    ``RecordingError`` naming the cause: no such topic, joints never published, no efforts,
    NaN, stamps that go back or repeat with other positions, too few states."""
    store = _typestore()
    from rosbags.highlevel import AnyReader

    joints = tuple(joints)
    stamps, positions, velocities, efforts = [], [], [], []
    seen_names: set[str] = set()
    no_effort = no_velocity = 0
    source = str(path)
    for bag in bag_folders(path):
        try:
            reader_cm = AnyReader([bag], default_typestore=store)
            reader = reader_cm.__enter__()
        except Exception as exc:  # rosbags raises its own errors per storage
            raise RecordingError(f"{bag}: cannot read the bag: {exc}") from None
        try:
            connections = [c for c in reader.connections if c.topic == topic]
            if not connections:
                topics = sorted({c.topic for c in reader.connections})
                raise RecordingError(f"{bag}: no topic {topic!r} (topics: {topics})")
            wrong = [c.msgtype for c in connections if c.msgtype != JOINT_STATE_TYPE]
            if wrong:
                raise RecordingError(f"{bag}: {topic} carries {wrong[0]}, not {JOINT_STATE_TYPE}")
            for connection, _, raw in reader.messages(connections=connections):
                msg = reader.deserialize(raw, connection.msgtype)
                names = list(msg.name)
                seen_names.update(names)
                index = {n: k for k, n in enumerate(names)}
                if any(j not in index for j in joints):
                    continue  # a message of other joints (a gripper's driver, say)
                order = [index[j] for j in joints]
                stamps.append(msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)
                positions.append(_pick(msg.position, order, len(names)))
                v, e = _pick(msg.velocity, order, len(names)), _pick(msg.effort, order, len(names))
                no_velocity += v is None
                no_effort += e is None
                velocities.append(v)
                efforts.append(e)
        finally:
            reader_cm.__exit__(None, None, None)
    if not stamps:
        missing = [j for j in joints if j not in seen_names]
        raise RecordingError(f"{source}: no message on {topic} names all of {list(joints)}; "
                             f"never published: {missing} (published: {sorted(seen_names)})")
    if no_effort:
        raise RecordingError(f"{source}: {no_effort} of {len(stamps)} joint states on {topic} "
                             "carry no efforts (the driver must publish effort)")
    if any(p is None for p in positions):
        raise RecordingError(f"{source}: joint states on {topic} without positions")
    stamps, positions, efforts = np.array(stamps), np.array(positions), np.array(efforts)
    velocity = None if no_velocity else np.array(velocities)
    # a state published again (a driver or a lock-step simulator repeating its last state
    # while it waits, its effort sensor read anew) is one sample, the first; a repeated stamp
    # with other positions stays, and is refused
    repeat = np.r_[False, (np.diff(stamps) == 0)
                   & np.all(positions[1:] == positions[:-1], axis=1)]
    keep = ~repeat
    return JointRecording.checked(joints, stamps[keep], positions[keep], efforts[keep],
                                  None if velocity is None else velocity[keep], source=source)


def _pick(values, order: list[int], n: int) -> np.ndarray | None:
    values = np.asarray(values, dtype=float)
    return values[order] if len(values) == n else None


class JointStateBagWriter:
    """A rosbag2 being written with ``sensor_msgs/JointState`` on one topic: ``write_cdr``
    takes a serialised message, ``write`` builds one. ``storage``: "mcap" or "sqlite3".
    Use as a context manager (the bag is complete when it closes)."""

    def __init__(self, path: str | Path, topic: str = "/joint_states", storage: str = "mcap"):
        self.store = _typestore()
        from rosbags.rosbag2 import StoragePlugin, Writer

        plugins = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
        if storage not in plugins:
            raise ValueError(f"storage must be 'mcap' or 'sqlite3', got {storage!r}")
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f"{self.path} exists: a bag is written into a new folder")
        self._writer = Writer(self.path, version=8, storage_plugin=plugins[storage])
        self._writer.open()
        self._connection = self._writer.add_connection(topic, JOINT_STATE_TYPE,
                                                       typestore=self.store)
        self.count = 0

    def write_cdr(self, receive_time_ns: int, data: bytes) -> None:
        self._writer.write(self._connection, int(receive_time_ns), data)
        self.count += 1

    def write(self, stamp: float, names: Sequence[str], position, velocity=None, effort=None,
              receive_time_ns: int | None = None) -> None:
        """One JointState stamped ``stamp`` s (receive time: the stamp unless given)."""
        types = self.store.types
        sec = int(np.floor(stamp))
        nanosec = min(int(round((stamp - sec) * 1e9)), 999_999_999)
        header = types["std_msgs/msg/Header"](
            stamp=types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec), frame_id="")

        def arr(x):
            return np.ascontiguousarray([] if x is None else x, dtype=np.float64)

        msg = types[JOINT_STATE_TYPE](header=header, name=list(names), position=arr(position),
                                      velocity=arr(velocity), effort=arr(effort))
        data = self.store.serialize_cdr(msg, JOINT_STATE_TYPE)
        self.write_cdr(receive_time_ns if receive_time_ns is not None
                       else sec * 1_000_000_000 + nanosec, data)

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> JointStateBagWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
