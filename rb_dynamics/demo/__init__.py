# SPDX-License-Identifier: Apache-2.0
"""The main job and its reference publisher: the simulator and the control node in closed loop on
the bundled arm (``python -m rb_dynamics.demo.main_job``).
"""
