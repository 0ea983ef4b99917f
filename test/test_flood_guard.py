# SPDX-License-Identifier: Apache-2.0
"""``ros.flood_guard.FloodGuard`` on real rclpy nodes and DDS, with its clock in the test's
hands: the rate is measured from the publisher's sequence numbers, a flood closes the
subscription (its publisher then has no reader to send to), the quiet time doubles while the
flood goes on and starts again at its first value once it is over, and two publishers are
never taken for one fast one. Across processes, in the simulator: test_sim_floods."""

from __future__ import annotations

import itertools
import time

import pytest
import rclpy
from std_msgs.msg import Int64

from rb_dynamics.ros.flood_guard import MAX_QUIET_S, QUIET_S, RATE_WINDOW_S, FloodGuard
from rb_dynamics.ros.runtime import polled_node

TOPIC = "/flood_guard_test"
LIMIT = 5000.0  # messages/s


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def rig():
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("flood_guard_test", context=context)
    inbox = polled_node(node, "inbox")
    warnings: list[str] = []
    clock = Clock()
    guard = FloodGuard(inbox, Int64, TOPIC, LIMIT, lambda text, _key: warnings.append(text),
                       "max_rate", clock)
    publishers = [node.create_publisher(Int64, TOPIC, 10) for _ in range(2)]
    yield guard, publishers, clock, warnings
    guard.close()
    inbox.destroy_node()
    node.destroy_node()
    rclpy.shutdown(context=context)


def readers(publisher, count: int = 1) -> bool:
    """Whether ``publisher`` comes to have ``count`` matched readers (within 10 s)."""
    deadline = time.monotonic() + 10.0
    while publisher.get_subscription_count() != count and time.monotonic() < deadline:
        time.sleep(0.01)
    return publisher.get_subscription_count() == count


_numbers = itertools.count(1)
_last_sent = [0]


def send(publisher, count: int) -> None:
    """``count`` messages, numbered on from the last one sent by any publisher."""
    msg = Int64()
    for _ in range(count):
        msg.data = _last_sent[0] = next(_numbers)
        publisher.publish(msg)


def read(guard: FloodGuard, wait: float = 5.0) -> Int64 | None:
    """The guard's newest message, once the last one sent has arrived (None: it did not)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        msg = guard.take_newest()
        if msg is not None and msg.data == _last_sent[0]:
            return msg
        time.sleep(0.005)
    return None


TICK = 0.0625  # s between reads (exact in binary: two of them make a window)


def flood(guard: FloodGuard, publisher, clock: Clock) -> None:
    """A window of reads ending in a burst of 16 000 messages/s or more."""
    send(publisher, 10)
    read(guard)
    clock.now += 2 * TICK
    send(publisher, 2000)
    read(guard)


def test_a_flood_closes_the_topic_for_a_quiet_time_that_doubles_while_it_goes_on(rig):
    guard, (publisher, _), clock, warnings = rig
    assert TICK < RATE_WINDOW_S <= 2 * TICK
    assert readers(publisher)
    for _ in range(8):  # 800 messages/s: under the limit, every newest message read
        send(publisher, 50)
        assert read(guard) is not None
        clock.now += TICK
    assert guard.listening and not warnings
    send(publisher, 2000)
    clock.now += 2 * TICK
    assert read(guard) is not None  # the message that showed the flood still counts
    assert not guard.listening and guard.floods == 1
    assert "messages/s, more than max_rate 5000: not read for 1 s" in warnings[-1], warnings
    assert readers(publisher, 0)  # the publisher has nothing to send to: no traffic
    clock.now += QUIET_S - TICK
    assert guard.take_newest() is None and not guard.listening
    clock.now += TICK
    # listening again, the flood still there: twice as long each time, up to MAX_QUIET_S
    quiet = QUIET_S
    for _ in range(5):
        assert guard.take_newest() is None and guard.listening
        assert readers(publisher)
        flood(guard, publisher, clock)
        quiet = min(2 * quiet, MAX_QUIET_S)
        assert not guard.listening and f"not read for {quiet:g} s" in warnings[-1], warnings
        clock.now += quiet
    # once the flood is over, the next one starts at QUIET_S again
    guard.take_newest()
    assert readers(publisher)
    for _ in range(32):  # 2 s at 800 messages/s
        send(publisher, 50)
        assert read(guard) is not None
        clock.now += TICK
    assert guard.listening, warnings[-1]
    flood(guard, publisher, clock)
    assert not guard.listening and "not read for 1 s" in warnings[-1], warnings
    assert guard.floods == 7


def test_two_publishers_are_not_one_fast_one_and_no_limit_is_no_limit(rig):
    guard, (first, second), clock, warnings = rig
    assert readers(first) and readers(second)
    send(first, 3000)  # far apart in their sequence numbers
    assert read(guard) is not None
    for _ in range(40):  # each 100 messages/s; their newest messages alternate
        for publisher in (second, first):
            send(publisher, 1)
            assert read(guard) is not None
            clock.now += 0.005
    assert guard.listening and not warnings
    guard.max_rate = 0.0
    for _ in range(5):
        send(first, 2000)
        assert read(guard) is not None
        clock.now += 2 * TICK
    assert guard.listening and not warnings
