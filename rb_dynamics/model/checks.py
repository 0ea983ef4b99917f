# SPDX-License-Identifier: Apache-2.0
"""Input checks shared by the engine: numbers of the right shape, all finite, positive where
they must be, one of the allowed choices, files of a bounded size, or an error naming the
argument; files and YAML text read with bounds.

Each check returns the value as the engine uses it and raises ``error`` (``ValueError`` or a
subclass the caller chooses) otherwise; nothing is changed when a check fails.
"""

from __future__ import annotations

import math
import os
import stat
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["check_choice", "check_positive", "check_rotational_inertia", "finite_array",
           "finite_vector", "name_list", "plain_yaml", "read_text_file", "repeated_names"]


def finite_array(values, name: str, shape: tuple[int, ...] | None = None,
                 error: type[ValueError] = ValueError) -> np.ndarray:
    """``values`` as a new float array (of ``shape`` when given) with only finite entries.

    Otherwise ``error`` naming ``name``: "must be an array of numbers", "must have shape …",
    or "contains NaN or inf (name[k] = nan)" with the first bad entry (rows first: for a
    trajectory ``k`` is the point).
    """
    try:
        arr = np.array(values, dtype=float)
    except (TypeError, ValueError):
        raise error(f"{name} must be an array of numbers") from None
    if shape is not None and arr.shape != shape:
        raise error(f"{name} must have shape {shape}, got {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        index = ", ".join(map(str, at))
        raise error(f"{name} contains NaN or inf ({name}[{index}] = {arr[at]})")
    return arr


def finite_vector(values, name: str, size: int, error: type[ValueError] = ValueError
                  ) -> np.ndarray:
    """``values`` flattened to a new float vector of ``size`` finite entries.

    Otherwise ``error`` naming ``name``: ``finite_array``'s messages, or "name has k values,
    expected size".
    """
    arr = finite_array(values, name, error=error).reshape(-1)
    if arr.size != size:
        raise error(f"{name} has {arr.size} values, expected {size}")
    return arr


def check_positive(value, name: str, error: type[ValueError] = ValueError) -> float:
    """``value`` as a float when it is a finite number > 0; otherwise ``error``: "name must be
    positive and finite, got value"."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise error(f"{name} must be positive and finite, got {value!r}") from None
    if not (number > 0 and math.isfinite(number)):
        raise error(f"{name} must be positive and finite, got {value}")
    return number


def check_choice(value, choices: Sequence[str], name: str,
                 error: type[ValueError] = ValueError) -> str:
    """``value`` when it is one of ``choices``; otherwise ``error``: "name must be one of
    choices, not 'value'"."""
    if value not in choices:
        raise error(f"{name} must be one of {tuple(choices)}, not {value!r}")
    return value


def check_rotational_inertia(inertia: np.ndarray, where: str,
                             error: type[ValueError] = ValueError) -> None:
    """Refuse a 3×3 rotational inertia (kg·m²) that no physical body has: ``error`` with
    "<where> inertia is not symmetric", "… is not positive semi-definite" or "<where>
    inertia's principal moments … violate the triangle inequality" (each principal moment
    is at most the sum of the other two). Tolerances are relative to the largest entry
    (symmetry) and the largest principal moment (the others)."""
    if np.abs(inertia - inertia.T).max() > 1e-9 * max(float(np.abs(inertia).max()), 1e-300):
        raise error(f"{where} inertia is not symmetric: {inertia.tolist()}")
    eig = np.linalg.eigvalsh(inertia)
    scale = max(float(np.abs(eig).max()), 1e-300)
    if eig[0] < -1e-9 * scale:
        raise error(f"{where} inertia is not positive semi-definite (eigenvalues {eig})")
    if eig[0] + eig[1] < eig[2] - 1e-6 * scale:
        raise error(f"{where} inertia's principal moments {eig} violate the triangle "
                    "inequality (no physical body has them)")


def repeated_names(names: Sequence[str]) -> list[str]:
    """The names that occur more than once in ``names``, sorted; linear in its length (a message
    may carry a name thousands of times)."""
    return sorted(name for name, count in Counter(names).items() if count > 1)


def name_list(names: Sequence[str], limit: int = 5) -> str:
    """``names`` for a message: all of them up to ``limit``, else the first ``limit`` and how many
    more (a refusal must not echo a list a peer made arbitrarily long)."""
    shown = ", ".join(repr(name) for name in list(names[:limit]))
    more = len(names) - limit
    return f"[{shown}]" if more <= 0 else f"[{shown}, … and {more} more]"


def read_text_file(path: str | Path, max_bytes: int, what: str,
                   error: type[ValueError] = ValueError) -> str:
    """The text of the regular file ``path`` (UTF-8, undecodable bytes replaced), never more
    than ``max_bytes`` read: a device (``/dev/zero``), a FIFO or a file growing while it is
    read cannot hold the reader or fill its memory.

    ``error`` naming ``what`` and the path for anything but a regular file, or one over
    ``max_bytes``; ``OSError`` for a path that cannot be opened (missing, no permission).
    """
    # O_NONBLOCK: opening a FIFO would otherwise wait for a writer
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise error(f"{what} {str(path)!r} is not a regular file")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise error(f"{what} {str(path)!r} is larger than {max_bytes} bytes")
    return data.decode("utf-8", errors="replace")


def plain_yaml(text: str, where: str, max_depth: int,
               error: type[ValueError] = ValueError) -> Any:
    """``text`` read as YAML (libyaml's safe loader where PyYAML has it), after one pass over
    its events refusing aliases (``*name``: a few lines of nested aliases stand for billions of
    values, and reading them would hold the reader for minutes and fill its memory) and
    nesting deeper than ``max_depth`` (the loader recurses once per level).

    ``error`` naming ``where`` for an alias, deeper nesting or text that is not YAML.
    """
    import yaml  # a dependency of rclpy and of the identification extra; only here

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise error(f"{where}: aliases (*{event.anchor}) are not taken")
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > max_depth:
                    raise error(f"{where}: nested deeper than {max_depth} levels")
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise error(f"{where}: not YAML: {exc}") from None
