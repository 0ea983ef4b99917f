# SPDX-License-Identifier: Apache-2.0
"""Does a call release the GIL? Run it in a thread while this thread keeps ticking."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np


def ticks_during(call: Callable[[], object]) -> tuple[float, float, np.ndarray]:
    """``call()`` in a worker thread while this thread records perf_counter ticks: the call's
    start and stop, and the ticks that fell inside it. With the GIL held for the whole call
    this thread could not tick during it (no ticks, or one gap as long as the call)."""
    span: list[float] = []

    def worker() -> None:
        start = time.perf_counter()
        call()
        span.extend([start, time.perf_counter()])

    thread = threading.Thread(target=worker)
    ticks = []
    thread.start()
    while thread.is_alive():
        ticks.append(time.perf_counter())
    thread.join()
    start, stop = span
    return start, stop, np.array([t for t in ticks if start <= t <= stop])
