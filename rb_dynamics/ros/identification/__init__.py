# SPDX-License-Identifier: Apache-2.0
"""``rb_dynamics_identify``, the command line of the whole arm's identification: ``cli`` (the
subcommands, the ROS-free ``plan`` and ``fit``), ``ros_commands`` (``record`` and ``send``,
with rclpy) and the ``exit_codes`` they return."""

from .cli import main
from .exit_codes import EXIT_INPUT, EXIT_MISSING, EXIT_OK, EXIT_ROS, EXIT_USAGE

__all__ = ["EXIT_INPUT", "EXIT_MISSING", "EXIT_OK", "EXIT_ROS", "EXIT_USAGE", "main"]
