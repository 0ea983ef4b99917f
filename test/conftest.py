"""Test session set-up: every ROS process of the suite talks only on loopback, on its own domain.

A random ROS_DOMAIN_ID per pytest session keeps concurrent runs (and a developer's real robot
on domain 0) apart; child processes inherit these variables.
"""

import os
import random
import tempfile

os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(50, 200))
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"  # Humble's spelling of the same thing
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="rb_dynamics_ros_log_"))
