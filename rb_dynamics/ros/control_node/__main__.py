# SPDX-License-Identifier: Apache-2.0
"""``python -m rb_dynamics.ros.control_node``: the control node."""

import sys

from . import run

sys.exit(run())
