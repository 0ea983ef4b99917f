# SPDX-License-Identifier: Apache-2.0
"""Reading a robot description safely: its text, its XML and its numbers, or a ``URDFError``.

Shared by the URDF reader (``urdf.py``) and the ``<ros2_control>`` reader
(``ros2_control.py``), so that both refuse the same oversized files, DTDs and
implausible numbers with the same messages.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from .checks import read_text_file

__all__ = [
    "MAX_MAGNITUDE",
    "MAX_URDF_BYTES",
    "URDFError",
    "parse_number",
    "parse_numbers",
    "parse_xml",
    "read_source",
]

MAX_URDF_BYTES = 20_000_000
# No robot has a link heavier than 1e9 kg or an offset longer than 1e9 m; numbers past this
# bound would overflow the dynamics (inertias go as m·r²) into inf/NaN torques
MAX_MAGNITUDE = 1e9


class URDFError(ValueError):
    """A URDF that cannot be turned into a valid model; the message names the element."""


def read_source(source: str | Path) -> str:
    """The description's text: ``source`` itself when it is XML (contains ``<``), else the file
    it names. Raises ``URDFError`` for a missing file, one that is not a regular file or cannot
    be read, or one over ``MAX_URDF_BYTES``."""
    if isinstance(source, Path) or "<" not in str(source):
        path = Path(source)
        if not path.exists():
            raise URDFError(f"URDF file {str(path)!r} does not exist")
        try:
            return read_text_file(path, MAX_URDF_BYTES, "URDF file", URDFError)
        except OSError as exc:
            raise URDFError(f"URDF file {str(path)!r}: {exc.strerror or exc}") from None
    return str(source)


def parse_xml(text: str) -> ET.Element:
    """The ``<robot>`` root element of ``text``.

    Raises ``URDFError`` for text over ``MAX_URDF_BYTES``, any DTD or entity declaration (a
    URDF never needs one; refusing them rules out entity-expansion attacks), malformed or too
    deeply nested XML, and a root element other than ``<robot>``.
    """
    if len(text) > MAX_URDF_BYTES:
        raise URDFError(f"URDF is larger than {MAX_URDF_BYTES} bytes")
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise URDFError("URDF contains a DTD or entity declaration, which is not allowed")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise URDFError(f"malformed XML: {exc}") from None
    except RecursionError:
        raise URDFError("malformed XML: nesting too deep") from None
    if root.tag != "robot":
        raise URDFError(f"root element is <{root.tag}>, expected <robot>")
    return root


def parse_number(text: str, where: str, allow_inf: bool = False,
                 largest: float = MAX_MAGNITUDE) -> float:
    """``text`` as a float: never NaN, ±inf only if ``allow_inf``, finite within ±``largest``.

    Otherwise ``URDFError`` starting with ``where`` (the element and attribute read).
    """
    try:
        value = float(text)
    except ValueError:
        raise URDFError(f"{where}: {text!r} is not a number") from None
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise URDFError(f"{where}: non-finite number {text!r}")
    if math.isfinite(value) and abs(value) > largest:
        raise URDFError(f"{where}: {text!r} is implausibly large (limit {largest:g})")
    return value


def parse_numbers(text: str | None, count: int, where: str,
                  default: tuple[float, ...] | None = None) -> np.ndarray:
    """``count`` space-separated finite numbers within ±``MAX_MAGNITUDE`` (e.g. ``xyz``).

    ``text`` None (attribute absent) gives ``default``, or ``URDFError`` when there is none;
    anything else unusable is a ``URDFError`` starting with ``where``.
    """
    if text is None:
        if default is None:
            raise URDFError(f"{where}: missing value")
        return np.array(default, dtype=float)
    try:
        values = [float(tok) for tok in text.split()]
    except ValueError:
        raise URDFError(f"{where}: {text!r} is not a list of {count} numbers") from None
    if len(values) != count:
        raise URDFError(f"{where}: expected {count} numbers, got {text!r}")
    if not all(math.isfinite(v) for v in values):
        raise URDFError(f"{where}: non-finite number in {text!r}")
    if any(abs(v) > MAX_MAGNITUDE for v in values):
        raise URDFError(f"{where}: {text!r} is implausibly large (limit {MAX_MAGNITUDE:g})")
    return np.array(values)
