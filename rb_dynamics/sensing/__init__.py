# SPDX-License-Identifier: Apache-2.0
"""What a joint's sensors report of the true state: the one sensor model (``joint_sensors``:
effort offset, noise with absolute and relative σ, outliers, quantisation of encoder and
effort, delays, jitter), shared by the simulator node's readings and identification's
synthetic recordings.

Needs only NumPy: a layer beside ``rb_dynamics.dynamics``, below the simulation and the
identification that both use it.
"""

from .joint_sensors import JointSensors, Reading, StateHistory

__all__ = ["JointSensors", "Reading", "StateHistory"]
