# SPDX-License-Identifier: Apache-2.0
"""``python -m rb_dynamics.ros.simulator_node``: the simulator node."""

from .node import main

main()
