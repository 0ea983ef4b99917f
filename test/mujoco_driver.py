# SPDX-License-Identifier: Apache-2.0
"""A small robot driver around MuJoCo, for the drive and identification tests: a second
simulator, not ours.

Loads a URDF into MuJoCo (its meshes, ``<ros2_control>`` and ``<gazebo>`` elements dropped: the
dynamics only), gives each joint the arm's true friction (``damping``: viscous, N·m·s/rad, and
``frictionloss``: dry, N·m, MuJoCo's sign law; each one per joint or one for all, none unless
given) and rotor inertia (``armature``, kg·m²), and, with ``gravcomp``, plays a drive that
compensates gravity itself: every body's ``gravcomp`` is 1, so MuJoCo applies g(q) as a
passive force whatever is commanded.

Lock-step on its own step, as the package's simulator: each command on ``~/commands``
(std_msgs/Float64MultiArray, efforts in joint order, applied as ``qfrc_applied``) is one
``time_step`` step, answered with ``/clock`` and then ``joint_states`` (position, velocity and
the effort: the command, plus MuJoCo's gravity compensation with ``effort_includes_gravity``,
plus Gaussian noise of σ ``effort_noise`` + ``effort_noise_relative`` × |effort|) stamped
with the simulated time. A state no command answers is sent again every 0.2 s.

Run as ``python -m mujoco_driver --ros-args -p urdf_path:=... -p initial_positions:=[...]``
with test/ on the path.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import mujoco
import numpy as np
import rclpy
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

RESEND_S = 0.2


def dynamics_only(urdf: str) -> str:
    """The URDF without what MuJoCo does not need or cannot load: visual and collision
    elements (meshes by package:// path), ``<ros2_control>`` and ``<gazebo>`` blocks."""
    for tag in ("visual", "collision", "ros2_control", "gazebo", "transmission"):
        urdf = re.sub(rf"<{tag}\b.*?</{tag}>", "", urdf, flags=re.S)
    return urdf


class MujocoDriver(Node):
    def __init__(self) -> None:
        super().__init__("mujoco_driver")
        urdf = Path(self.declare_parameter("urdf_path", "").value).read_text()
        initial = list(self.declare_parameter("initial_positions", [0.0]).value)
        damping = list(self.declare_parameter("damping", [0.0]).value)
        armature = list(self.declare_parameter("armature", [0.0]).value)
        frictionloss = list(self.declare_parameter("frictionloss", [0.0]).value)
        self.gravcomp = bool(self.declare_parameter("gravcomp", False).value)
        self.effort_includes_gravity = bool(
            self.declare_parameter("effort_includes_gravity", True).value)
        self.effort_noise = float(self.declare_parameter("effort_noise", 0.0).value)
        self.effort_noise_relative = float(
            self.declare_parameter("effort_noise_relative", 0.0).value)
        self.rng = np.random.default_rng()
        dt = float(self.declare_parameter("time_step", 0.001).value)
        spec = mujoco.MjSpec.from_string(dynamics_only(urdf))
        if self.gravcomp:  # set before compiling: the compiler counts the bodies that have it
            for body in spec.bodies:
                body.gravcomp = 1.0
        self.model = m = spec.compile()
        m.opt.timestep = dt
        self.joints = [m.joint(j).name for j in range(m.njnt)]
        self.dofs = np.array([m.jnt_dofadr[j] for j in range(m.njnt)])
        qpos = np.array([m.jnt_qposadr[j] for j in range(m.njnt)])
        m.dof_frictionloss[:] = 0.0  # only the dry friction given: the URDF's is not the arm's
        for values, field in ((damping, m.dof_damping), (armature, m.dof_armature),
                              (frictionloss, m.dof_frictionloss)):
            field[self.dofs] = values if len(values) == len(self.dofs) else values[0]
        self.data = mujoco.MjData(m)
        self.data.qpos[qpos] = initial
        mujoco.mj_forward(m, self.data)
        self.qpos = qpos
        self.command = np.zeros(len(self.dofs))
        self.clock_pub = self.create_publisher(Clock, "/clock", 10)
        self.state_pub = self.create_publisher(JointState, "joint_states", 100)
        self.create_subscription(Float64MultiArray, "~/commands", self._on_command, 100)
        self.last_publish = self.get_clock().now()
        self.create_timer(RESEND_S / 2, self._resend)
        self.get_logger().info(f"mujoco {mujoco.__version__}: {self.joints}, gravcomp "
                               f"{self.gravcomp}, damping {m.dof_damping[self.dofs].tolist()}, "
                               f"armature {m.dof_armature[self.dofs].tolist()}, frictionloss "
                               f"{m.dof_frictionloss[self.dofs].tolist()}")
        self._publish()

    def _on_command(self, msg: Float64MultiArray) -> None:
        if len(msg.data) != len(self.dofs) or not np.all(np.isfinite(msg.data)):
            self.get_logger().warning(f"command of {len(msg.data)} values ignored")
            return
        self.command = np.array(msg.data)
        self.data.qfrc_applied[:] = 0.0
        self.data.qfrc_applied[self.dofs] = self.command
        mujoco.mj_step(self.model, self.data)
        self._publish()

    def _resend(self) -> None:
        if (self.get_clock().now() - self.last_publish).nanoseconds > RESEND_S * 1e9:
            self._publish()

    def _publish(self) -> None:
        t = self.data.time
        stamp = Clock().clock
        stamp.sec, stamp.nanosec = int(t), int(round((t - int(t)) * 1e9))
        self.clock_pub.publish(Clock(clock=stamp))
        effort = self.command.copy()
        if self.gravcomp and self.effort_includes_gravity:
            effort += self.data.qfrc_gravcomp[self.dofs]
        effort += self.rng.normal(0.0, 1.0, len(self.dofs)) * (
            self.effort_noise + self.effort_noise_relative * np.abs(effort))
        msg = JointState(name=self.joints, position=self.data.qpos[self.qpos].tolist(),
                         velocity=self.data.qvel[self.dofs].tolist(), effort=effort.tolist())
        msg.header.stamp = stamp
        self.state_pub.publish(msg)
        self.last_publish = self.get_clock().now()


def main() -> int:
    rclpy.init(args=sys.argv)
    node = MujocoDriver()
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
