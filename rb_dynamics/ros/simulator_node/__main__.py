# SPDX-License-Identifier: Apache-2.0
"""``python -m rb_dynamics.ros.simulator_node``: the simulator node."""

import sys

from . import run

sys.exit(run())
