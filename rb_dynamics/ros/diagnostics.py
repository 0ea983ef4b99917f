# SPDX-License-Identifier: Apache-2.0
"""What the control node says on /diagnostics, about once a second.

One status per node: the model and where it came from, the mode, the dynamics kernels in use,
rates of states and commands over the last period, compute time, clamping, the last problem,
and running totals since start (states received = commands + superseded + not answered, for
every state: not answered are those taken without a command, e.g. before a model is loaded, with
a refused state, or between commands at ``max_publish_rate``), so that a monitor can account
for every state it sent (``read_totals``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus, KeyValue

__all__ = ["STATE_AGE_P99_KEY", "TOTALS_KEYS", "Statistics", "Totals", "read_totals",
           "state_age_report", "status"]

# /diagnostics keys of the running totals, so that a monitor can account for every state
TOTALS_KEYS = {"received": "states received (total)", "superseded": "states superseded (total)",
               "commands": "commands (total)", "unanswered": "states not answered (total)",
               "stamp": "newest state stamp (ns)"}
STATE_AGE_P99_KEY = "state age at command p99 (ms)"


@dataclass
class Statistics:
    """What the diagnostics report about one period; the control loop fills it."""

    states: int = 0
    skipped: int = 0  # older states superseded by a newer one before they were handled
    commands: int = 0
    compute_total: float = 0.0
    compute_max: float = 0.0
    clamped: set[str] = field(default_factory=set)
    last_problem: str = ""
    ages: int = 0  # how many of the loop's state-age slots this period filled


@dataclass
class Totals:
    """Since start: received = commands + superseded + unanswered, always."""

    received: int = 0
    superseded: int = 0
    commands: int = 0
    unanswered: int = 0  # taken without a command: no controller, refused, rate-limited
    newest_stamp_ns: int = 0


def read_totals(status: DiagnosticStatus) -> dict[str, float] | None:
    """This node's running totals (and the period's state-age p99, NaN when none) from one of
    its diagnostic statuses; None for any other status."""
    values = {kv.key: kv.value for kv in status.values}
    if TOTALS_KEYS["received"] not in values:
        return None
    totals: dict[str, float] = {name: int(values[key]) for name, key in TOTALS_KEYS.items()}
    totals["age_p99_ms"] = float(values.get(STATE_AGE_P99_KEY, "nan"))
    return totals


def state_age_report(ages_s: np.ndarray) -> dict[str, str]:
    """State stamp → command publish, on the node's clock: transport in plus compute.
    Meaningful when the state's stamp and the node share a clock (one machine, or /clock)."""
    if len(ages_s) == 0:
        return {}
    ages = 1e3 * ages_s
    return {"state age at command mean (ms)": f"{ages.mean():.4f}",
            STATE_AGE_P99_KEY: f"{np.percentile(ages, 99):.4f}",
            "state age at command max (ms)": f"{ages.max():.4f}",
            "state ages (count)": str(len(ages))}


def period_values(stats: Statistics, totals: Totals, ages_s: np.ndarray,
                  state_age: float) -> dict[str, str]:
    """The key/values of one period of a running controller."""
    return {
        "joint states per s": str(stats.states), "commands per s": str(stats.commands),
        "stale states skipped per s": str(stats.skipped),
        "state age (s)": f"{state_age:.4f}" if math.isfinite(state_age) else "never",
        "compute mean (ms)": f"{1e3 * stats.compute_total / max(stats.commands, 1):.4f}",
        "compute max (ms)": f"{1e3 * stats.compute_max:.4f}",
        "clamped joints": ", ".join(sorted(stats.clamped)) or "none",
        "last problem": stats.last_problem or "none",
        TOTALS_KEYS["received"]: str(totals.received),
        TOTALS_KEYS["superseded"]: str(totals.superseded),
        TOTALS_KEYS["commands"]: str(totals.commands),
        TOTALS_KEYS["unanswered"]: str(totals.unanswered),
        TOTALS_KEYS["stamp"]: str(totals.newest_stamp_ns),
        **state_age_report(ages_s),
    }


def controller_level(stats: Statistics, state_age: float, max_state_age: float
                     ) -> tuple[int, str]:
    """(level, message) of a running controller over one period."""
    if not math.isfinite(state_age):
        return DiagnosticStatus.WARN, "no joint state received"
    if state_age > max_state_age:
        if stats.commands:  # the states come, further apart than state_timeout
            return DiagnosticStatus.WARN, (
                f"publishing, but the newest joint state is {state_age:.3g} s old (state_timeout "
                f"{max_state_age:g} s): states come further apart than state_timeout, the stop "
                "command goes out between them")
        return DiagnosticStatus.ERROR, (f"joint state stale ({state_age:.3g} s old, "
                                        f"state_timeout {max_state_age:g} s): not publishing")
    if stats.commands == 0:
        return DiagnosticStatus.WARN, stats.last_problem or "no command published"
    if stats.clamped:
        return DiagnosticStatus.WARN, f"publishing; clamping {sorted(stats.clamped)}"
    if stats.last_problem:
        return DiagnosticStatus.WARN, f"publishing; {stats.last_problem}"
    return DiagnosticStatus.OK, "publishing"


def status(name: str, level: int, message: str, values: dict[str, str]) -> DiagnosticStatus:
    """The node's one diagnostic status."""
    return DiagnosticStatus(name=f"{name}: controller", hardware_id=name, level=level,
                            message=message,
                            values=[KeyValue(key=k, value=v) for k, v in values.items()])
