# SPDX-License-Identifier: Apache-2.0
"""The exit codes of ``rb_dynamics_identify`` (docs/identification.md, "Exit codes and
refusals"), which both ``cli`` and ``ros_commands`` return: 0 success; 1 bad input (the message
names it; nothing written); 2 usage (argparse); 3 a package of the identification extra
missing; 4 a ROS failure (no server, goal rejected or failed, nothing recorded)."""

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_MISSING, EXIT_ROS = 0, 1, 2, 3, 4

__all__ = ["EXIT_INPUT", "EXIT_MISSING", "EXIT_OK", "EXIT_ROS", "EXIT_USAGE"]
