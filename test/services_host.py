"""A minimal test-only host for ``DynamicsServices``: an rclpy node named ``rb_dynamics`` (rename
with ``-r __node:=...``) serving the four dynamics services for one URDF, with the constraints
declared in its ``constraints.*`` parameters, nothing else.

    python test/services_host.py URDF [--gravity X Y Z]
        --ros-args ...

Kept apart from rb_dynamics/node.py so that the services are tested on their own. A 1 kHz
timer counts its ticks on ``~/ticks`` (std_msgs/UInt64, every 10 ms) so a test can see that
other callbacks keep running while a roll-out is under way.
"""

from __future__ import annotations

import argparse
import sys

from rclpy.node import Node
from std_msgs.msg import UInt64

from rb_dynamics.backend import make_dynamics
from rb_dynamics.constraint_params import ConstraintParameters
from rb_dynamics.model import load_model
from rb_dynamics.ros_runtime import run_node
from rb_dynamics.services import DynamicsServices


def main() -> int:
    ours = sys.argv[1:sys.argv.index("--ros-args")] if "--ros-args" in sys.argv else sys.argv[1:]
    parser = argparse.ArgumentParser()
    parser.add_argument("urdf")
    parser.add_argument("--gravity", type=float, nargs=3, default=(0.0, 0.0, -9.81))
    options = parser.parse_args(ours)
    model = load_model(options.urdf, gravity=options.gravity)
    dynamics = make_dynamics(model)

    class Host(Node):
        def __init__(self) -> None:
            super().__init__("rb_dynamics")
            self.ticks = 0
            constraints = ConstraintParameters(self).build(model)
            self.dynamics_services = DynamicsServices(self, lambda: dynamics,
                                                       lambda _model: constraints)
            self.publisher = self.create_publisher(UInt64, "~/ticks", 10)
            self.create_timer(0.001, self._tick)

        def _tick(self) -> None:
            self.ticks += 1
            if self.ticks % 10 == 0:
                self.publisher.publish(UInt64(data=self.ticks))

    return run_node(Host, sys.argv)


if __name__ == "__main__":
    sys.exit(main())
