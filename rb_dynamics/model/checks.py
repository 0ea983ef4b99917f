# SPDX-License-Identifier: Apache-2.0
"""Input checks shared by the engine: numbers of the right shape, all finite, or a clear error."""

from __future__ import annotations

import numpy as np

__all__ = ["finite_array"]


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
