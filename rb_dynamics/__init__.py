# SPDX-License-Identifier: Apache-2.0
"""rb_dynamics: rigid-body dynamics (RNEA, CRBA, ABA) of URDF robots, and ROS 2 nodes around it.

The packages, each importing only those below it (``.importlinter``, test/test_layers.py):

- ``demo``: the main job, the simulator and the control node in closed loop, and its reference.
- ``ros``: the ROS 2 layer: ``ros.control_node`` (efforts from joint states, the trajectory
  action, the dynamics and payload services), ``ros.simulator_node``, and what both share.
- ``control``: the control law, trajectories, effort limits, feasibility (no ROS).
- ``simulation``: integrators, the simulator, joint drives (no ROS).
- ``identification``: learning dynamics from data: the arm's inertial parameters, armature
  and friction from an excitation it planned, and payloads (no ROS).
- ``sensing``: what a driver's joint sensors report (noise, offset, quantisation, delays),
  shared by the simulator and synthetic recordings (no ROS).
- ``dynamics``: the algorithms on a model: the reference, the generated kernels, payload terms,
  constraints.
- ``model``: spatial algebra, joint models, the kinematic tree, the URDF reader, input checks.

Everything below ``ros`` needs only NumPy (and SciPy); docs/layout.md has a line per module.
"""

from pathlib import Path

__version__ = "0.3.0"

DEFAULT_URDF = Path(__file__).resolve().parent / "urdf" / "default_arm.urdf"

__all__ = ["DEFAULT_URDF", "__version__"]
