# SPDX-License-Identifier: Apache-2.0
"""Forward-dynamics simulation without ROS: integrators, the implicit friction step, the
``Simulator``, compiled steps and the joint drives of a simulated ``<ros2_control>`` block
(what a driver's sensors make of the simulated state is ``rb_dynamics.sensing``).

Imports ``rb_dynamics.dynamics`` and ``rb_dynamics.model``.
"""

from .friction_step import (
    NEWTON_ITERATIONS,
    STICK_SLIP_SWEEPS,
    STICK_SLIP_TOLERANCE,
    friction_step_velocity,
    implicit_friction_velocity,
    stick_slip_velocity,
)
from .joint_drives import (
    DEFAULT_BANDWIDTH,
    DEFAULT_DAMPING_RATIO,
    STABILITY_MARGIN,
    JointDrives,
    ServoGains,
    ServoSimulator,
    make_drives,
    max_stable_bandwidth,
    servo_gains,
    step_spectral_radius,
)
from .simulator import (
    FRICTION_LAWS,
    INTEGRATORS,
    CompiledSteps,
    SimulationStep,
    Simulator,
    Trace,
    apply_position_limits,
    compiled_steps,
    integrate,
    joint_losses,
    normalize_configuration,
    project_onto_constraints,
    step,
)

__all__ = [
    "CompiledSteps",
    "DEFAULT_BANDWIDTH",
    "DEFAULT_DAMPING_RATIO",
    "FRICTION_LAWS",
    "INTEGRATORS",
    "JointDrives",
    "STABILITY_MARGIN",
    "NEWTON_ITERATIONS",
    "STICK_SLIP_SWEEPS",
    "STICK_SLIP_TOLERANCE",
    "ServoGains",
    "ServoSimulator",
    "SimulationStep",
    "Simulator",
    "Trace",
    "apply_position_limits",
    "compiled_steps",
    "friction_step_velocity",
    "implicit_friction_velocity",
    "integrate",
    "joint_losses",
    "make_drives",
    "max_stable_bandwidth",
    "normalize_configuration",
    "project_onto_constraints",
    "servo_gains",
    "step",
    "step_spectral_radius",
    "stick_slip_velocity",
]
