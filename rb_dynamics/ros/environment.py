# SPDX-License-Identifier: Apache-2.0
"""The environment that keeps ROS 2 traffic on this machine, spelled for the distribution in use.

Humble (and older) know only ``ROS_LOCALHOST_ONLY=1``; Iron introduced
``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` and Jazzy deprecates the old variable, so rcl prints
"ROS_LOCALHOST_ONLY is deprecated" at every node start when it is set. Pure: no rclpy import
(the distribution is read from ``ROS_DISTRO`` or the installed distributions' metadata), so the
main job, the benchmarks and the tests can call it before rclpy is loaded.
"""

from __future__ import annotations

import os
import random
from collections.abc import MutableMapping
from importlib import metadata

# distributions that predate ROS_AUTOMATIC_DISCOVERY_RANGE (it came with Iron)
_LOCALHOST_ONLY_DISTROS = ("ardent", "bouncy", "crystal", "dashing", "eloquent", "foxy",
                           "galactic", "humble")
# rclpy's major version per distribution, for wheels and installs that set no ROS_DISTRO
_RCLPY_MAJOR = {1: "galactic", 2: "galactic", 3: "humble", 4: "iron", 5: "iron", 6: "iron",
                7: "jazzy", 8: "jazzy", 9: "kilted"}
LOCAL_DISCOVERY_VARIABLES = ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_LOCALHOST_ONLY")


def ros_distro(environ: MutableMapping[str, str] | None = None) -> str | None:
    """The ROS 2 distribution in use, lower case, or None when no rclpy is installed.

    ``ROS_DISTRO`` (set by sourcing a ROS install) wins; then the PyPI wheels' names
    (``ros-jazzy-rclpy``); then rclpy's version (the Kilted wheels are ``ros-rclpy``).
    """
    environ = os.environ if environ is None else environ
    if environ.get("ROS_DISTRO"):
        return environ["ROS_DISTRO"].strip().lower()
    for distro in ("jazzy", "kilted", "humble", "iron", "rolling"):
        try:
            metadata.version(f"ros-{distro}-rclpy")
            return distro
        except metadata.PackageNotFoundError:
            pass
    for name in ("ros-rclpy", "rclpy"):
        try:
            major = int(metadata.version(name).split(".")[0])
        except (metadata.PackageNotFoundError, ValueError):
            continue
        return _RCLPY_MAJOR.get(major, "rolling" if major > max(_RCLPY_MAJOR) else "galactic")
    return None


def local_discovery(distro: str | None) -> dict[str, str]:
    """The one variable (and value) that limits discovery to this machine on ``distro``.

    An unknown distribution gets the new spelling: the wheels this project installs are Jazzy
    and Kilted, and anything newer keeps it.
    """
    if distro is not None and distro.lower() in _LOCALHOST_ONLY_DISTROS:
        return {"ROS_LOCALHOST_ONLY": "1"}
    return {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}


def keep_local(environ: MutableMapping[str, str] | None = None, distro: str | None = None, *,
               override: bool = False) -> dict[str, str]:
    """Set the local-discovery variable for the distribution and a random ``ROS_DOMAIN_ID``.

    Values already in ``environ`` are kept (a user's choice wins) unless ``override``, which
    also removes the other distribution's spelling: a test session owns its environment.
    Returns the variables it set or kept, for the caller's log.
    """
    environ = os.environ if environ is None else environ
    wanted = local_discovery(distro if distro is not None else ros_distro(environ))
    wanted["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(50, 200))
    if override:
        for name in LOCAL_DISCOVERY_VARIABLES:
            if name not in wanted:
                environ.pop(name, None)
        environ.update(wanted)
    else:
        for name, value in wanted.items():
            environ.setdefault(name, value)
    return {name: environ[name] for name in wanted}
