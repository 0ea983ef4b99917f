# SPDX-License-Identifier: Apache-2.0
"""python -m rb_dynamics.ros.identification: the rb_dynamics_identify command."""

import sys

from .cli import main

sys.exit(main())
