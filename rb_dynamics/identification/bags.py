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

import contextlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .measurements import JointRecording, RecordingError
from .optional import require
from .regressor import available_memory

__all__ = ["JOINT_STATE_TYPE", "MAX_METADATA_BYTES", "JointStateBagWriter", "bag_folders",
           "read_joint_states", "state_capacity"]

JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"
# a bag's metadata.yaml lists its files and topics: a few kB (a bag split into 10,000 files is
# under 1 MB)
MAX_METADATA_BYTES = 10_000_000
# what the fit holds per joint state beyond the recording itself (resampled copies, periods,
# filtered efforts): the number of states read is bounded by the memory available
FIT_COPIES = 16


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
    """``bag`` (a file, or a folder whose files are all regular ones, its ``metadata.yaml`` at
    most ``MAX_METADATA_BYTES``: the reader loads it whole)."""
    _regular(bag)
    if bag.is_dir():
        for entry in bag.iterdir():
            _regular(entry)
        metadata = bag / "metadata.yaml"
        if metadata.is_file() and metadata.stat().st_size > MAX_METADATA_BYTES:
            raise RecordingError(f"{metadata}: {metadata.stat().st_size} bytes; a bag's "
                                 f"metadata is at most {MAX_METADATA_BYTES} bytes")
    return bag


def read_joint_states(path: str | Path, joints: Sequence[str],
                      topic: str = "/joint_states") -> JointRecording:
    """The recording of ``joints`` on ``topic`` in the bag(s) at ``path``, ordered by header
    stamp; a message repeating the previous one (same stamp and positions) counts once.
    ``RecordingError`` naming the cause: no such topic, joints never published, no efforts,
    NaN, stamps that go back or repeat with other positions, too few states, more messages
    than ``state_capacity`` (counted in the bags' metadata before anything is read)."""
    store = _typestore()
    from rosbags.highlevel import AnyReader

    joints = tuple(joints)
    n = len(joints)
    source = str(path)
    with contextlib.ExitStack() as opened:
        readers = []
        for bag in bag_folders(path):
            try:
                reader = opened.enter_context(AnyReader([bag], default_typestore=store))
            except Exception as exc:  # rosbags raises its own errors per storage
                raise RecordingError(f"{bag}: cannot read the bag: {exc}") from None
            connections = [c for c in reader.connections if c.topic == topic]
            if not connections:
                topics = sorted({c.topic for c in reader.connections})
                raise RecordingError(f"{bag}: no topic {topic!r} (topics: {topics})")
            wrong = [c.msgtype for c in connections if c.msgtype != JOINT_STATE_TYPE]
            if wrong:
                raise RecordingError(f"{bag}: {topic} carries {wrong[0]}, not {JOINT_STATE_TYPE}")
            readers.append((bag, reader, connections))
        # the arrays are made once, from the counts in the bags' metadata, before a message is
        # read: what a fit holds is known, and bounded by the machine's memory
        total = sum(c.msgcount for _, _, connections in readers for c in connections)
        capacity = state_capacity(n)
        if total > capacity:
            raise RecordingError(
                f"{source}: {total} messages on {topic}; this machine can fit at most "
                f"{capacity} joint states of {n} joints ({available_memory() // 2 ** 20} MiB "
                "available): fit a shorter recording (a few periods of the excitation)")
        stamps = np.empty(total)
        position, velocity, effort = (np.empty((total, n)) for _ in range(3))
        rows = 0
        seen_names: set[str] = set()
        no_effort = no_velocity = no_position = 0
        for bag, reader, connections in readers:
            for connection, _, raw in reader.messages(connections=connections):
                msg = reader.deserialize(raw, connection.msgtype)
                names = list(msg.name)
                seen_names.update(names)
                index = {name: k for k, name in enumerate(names)}
                if any(j not in index for j in joints):
                    continue  # a message of other joints (a gripper's driver, say)
                if rows == total:
                    raise RecordingError(f"{bag}: holds more messages on {topic} than its "
                                         f"metadata counts ({total})")
                order = [index[j] for j in joints]
                stamps[rows] = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
                no_position += not _pick(msg.position, order, len(names), position[rows])
                no_velocity += not _pick(msg.velocity, order, len(names), velocity[rows])
                no_effort += not _pick(msg.effort, order, len(names), effort[rows])
                rows += 1
    if not rows:
        missing = [j for j in joints if j not in seen_names]
        raise RecordingError(f"{source}: no message on {topic} names all of {list(joints)}; "
                             f"never published: {missing} (published: {sorted(seen_names)})")
    if no_effort:
        raise RecordingError(f"{source}: {no_effort} of {rows} joint states on {topic} "
                             "carry no efforts (the driver must publish effort)")
    if no_position:
        raise RecordingError(f"{source}: joint states on {topic} without positions")
    stamps, position, effort = stamps[:rows], position[:rows], effort[:rows]
    # a state published again (a driver or a lock-step simulator repeating its last state
    # while it waits, its effort sensor read anew) is one sample, the first; a repeated stamp
    # with other positions stays, and is refused
    repeat = np.r_[False, (np.diff(stamps) == 0)
                   & np.all(position[1:] == position[:-1], axis=1)]
    keep = ~repeat
    return JointRecording.checked(joints, stamps[keep], position[keep], effort[keep],
                                  None if no_velocity else velocity[:rows][keep], source=source)


def state_capacity(joints: int) -> int:
    """How many joint states of ``joints`` joints a fit can hold: the recording's arrays and
    ``FIT_COPIES`` times as much for the fit, in half the memory available."""
    return int(available_memory() // 2 // (8 * (1 + 3 * joints) * FIT_COPIES))


def _pick(values, order: list[int], n: int, out: np.ndarray) -> bool:
    """``values[order]`` into ``out`` when ``values`` has one entry per name (else False)."""
    values = np.asarray(values, dtype=float)
    if len(values) != n:
        return False
    out[:] = values[order]
    return True


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
