# SPDX-License-Identifier: Apache-2.0
"""``python -m rb_dynamics.ros.control_node``: the control node."""

from .node import main

main()
