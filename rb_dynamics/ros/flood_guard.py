# SPDX-License-Identifier: Apache-2.0
"""A polled input that stops listening to a publisher that floods it.

A subscription read at the node's own pace (``runtime.polled_node``: the newest message, when
it is due) costs the node one take per read however fast its publisher sends. The middleware
still carries every message: the publisher sends each sample to each matched reader, and the
node's process receives and stores it on the middleware's own threads. A publisher running
away at tens of kHz thus costs a node its pace on a busy machine though the node reads one
message per step. What stops that traffic is the reader going away: a publisher sends nothing
to a reader that is gone.

``FloodGuard`` measures the publisher's rate from the sequence numbers of the messages it reads
(a publisher numbers its samples one by one; messages superseded between two reads are counted
by the jump) over ``RATE_WINDOW_S`` of reads, and above ``max_rate`` destroys its subscription
for ``QUIET_S``, twice as long each time the flood is still there when it listens again, up to
``MAX_QUIET_S``. What the topic said last stays in effect meanwhile, as when a publisher is
silent. A change of publisher (the sequence going back) starts the measurement anew, so that
two publishers are never taken for one fast one; a middleware that does not number its samples
(``publication_sequence_number`` unsupported) is never refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rclpy.node import Node
from rclpy.subscription import Subscription

from .runtime import not_spun, take_queued_with_info

__all__ = ["FloodGuard", "MAX_QUIET_S", "QUIET_S", "RATE_WINDOW_S"]

RATE_WINDOW_S = 0.1  # s of reads a rate is measured over
QUIET_S = 1.0  # s the topic is not read after the first flood seen
MAX_QUIET_S = 8.0  # ... doubling while the flood goes on, up to this
STILL_FLOODING_S = 1.0  # a flood seen this soon after listening again is the same flood


class FloodGuard:
    """``msg_type`` on ``topic`` (resolved), subscribed on the polled node ``inbox`` (depth 1)
    and read with ``take_newest``; ``max_rate`` messages/s (0: no limit); ``warn(text, key)``
    says when the topic is not read (``ThrottledLogger``); ``parameter``: the name of the limit,
    for that text. ``clock``: monotonic seconds."""

    def __init__(self, inbox: Node, msg_type: Any, topic: str, max_rate: float,
                 warn: Callable[[str, str], None], parameter: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.inbox, self.msg_type, self.topic = inbox, msg_type, topic
        self.max_rate, self.warn, self.parameter, self._clock = max_rate, warn, parameter, clock
        self.floods = 0  # times the topic was closed
        self.subscription: Subscription | None = None
        self._quiet = QUIET_S
        self._reopen_at = 0.0
        self._opened_at = -float("inf")
        self._window: tuple[int, float] | None = None  # (sequence number, read at) it starts at
        self._last_sequence = -1
        self._open(clock())

    @property
    def listening(self) -> bool:
        return self.subscription is not None

    def take_newest(self) -> Any | None:
        """The newest message since the last call, if any (None while the topic is not read:
        it is read again once its quiet time is over)."""
        now = self._clock()
        if self.subscription is None:
            if now >= self._reopen_at:
                self._open(now)
            return None
        newest = None
        for taken in take_queued_with_info(self.subscription, 2):  # (a queue of one: the
            newest = taken                                        # second take empties it)
        if newest is None:
            return None
        msg, info = newest
        rate = self._rate(info.get("publication_sequence_number"), now)
        if rate is not None and self.max_rate > 0.0 and rate > self.max_rate:
            self._close(now, rate)
        return msg

    def close(self) -> None:
        """Destroy the subscription for good (with the node)."""
        if self.subscription is not None:
            self.inbox.destroy_subscription(self.subscription)
            self.subscription = None
        self._reopen_at = float("inf")

    def _rate(self, sequence: int | None, now: float) -> float | None:
        """Messages/s over the window that ``sequence`` read at ``now`` ends, once it is
        ``RATE_WINDOW_S`` long (None before, or without sequence numbers)."""
        if not sequence:  # None, or 0: RMW_MESSAGE_INFO_SEQUENCE_NUMBER_UNSUPPORTED
            return None
        last, self._last_sequence = self._last_sequence, sequence
        if self._window is None or sequence < last:  # the first, or another publisher
            self._window = (sequence, now)
            return None
        first, since = self._window
        if now - since < RATE_WINDOW_S:
            return None
        self._window = (sequence, now)
        return (sequence - first) / (now - since)

    def _open(self, now: float) -> None:
        self.subscription = self.inbox.create_subscription(self.msg_type, self.topic,
                                                           not_spun, 1)
        self._opened_at, self._window = now, None

    def _close(self, now: float, rate: float) -> None:
        self._quiet = (min(2.0 * self._quiet, MAX_QUIET_S)
                       if now - self._opened_at <= STILL_FLOODING_S and self.floods else QUIET_S)
        self.inbox.destroy_subscription(self.subscription)
        self.subscription, self._reopen_at = None, now + self._quiet
        self.floods += 1
        self.warn(f"{self.topic} comes at {rate:.0f} messages/s, more than {self.parameter} "
                  f"{self.max_rate:g}: not read for {self._quiet:g} s (what it said last stays "
                  "in effect, as when its publisher is silent)", self.topic)
