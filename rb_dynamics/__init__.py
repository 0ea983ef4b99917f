# SPDX-License-Identifier: Apache-2.0
"""rb_dynamics: rigid-body dynamics (RNEA, CRBA, ABA) of URDF robots, and ROS 2 nodes around it.

The core (``model``, ``dynamics``) needs only NumPy; ``node`` and ``main_job`` need rclpy.
"""

from pathlib import Path

__version__ = "0.2.0"

DEFAULT_URDF = Path(__file__).resolve().parent / "urdf" / "default_arm.urdf"

__all__ = ["DEFAULT_URDF", "__version__"]
