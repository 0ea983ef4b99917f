# SPDX-License-Identifier: Apache-2.0
"""A node run by ``rb_dynamics.ros.runtime.run_node`` whose one callback never returns: it
sleeps (``sleep``: the interpreter is free) or matches a regular expression with catastrophic
backtracking (``interpreter``: one C call that holds the interpreter for minutes). Prints
"stuck" once the callback has begun. For test_stopping.py."""

from __future__ import annotations

import re
import sys
import time

from rclpy.node import Node

from rb_dynamics.ros.runtime import run_node


class StuckNode(Node):
    def __init__(self, how: str) -> None:
        super().__init__("stuck_node")
        self.how = how
        self.timer = self.create_timer(0.05, self.stick)

    def stick(self) -> None:
        self.destroy_timer(self.timer)
        print("stuck", flush=True)
        if self.how == "sleep":
            time.sleep(600.0)
        else:
            re.match(r"(a+)+b", "a" * 40)


if __name__ == "__main__":
    run_node(lambda: StuckNode(sys.argv[1]), sys.argv[:1])
