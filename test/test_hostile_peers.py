# SPDX-License-Identifier: Apache-2.0
"""What a hostile or careless peer does to the control node (issue 26), across processes: the
node refuses what it cannot take, says why, and goes on; only a signal ends it."""

from __future__ import annotations

import numpy as np
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from ros_harness import control_node, fresh_name

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.model import load_model

JOINTS = load_model(DEFAULT_URDF).actuated_joint_names


def _change(node, transition_id: int) -> bool:
    request = ChangeState.Request(transition=Transition(id=transition_id))
    return node.call(ChangeState, "~/change_state", request).success


def _state(node) -> str:
    return node.call(GetState, "~/get_state", GetState.Request()).current_state.label


def test_an_invalid_lifecycle_transition_is_refused_and_the_node_goes_on(tmp_path):
    """26.1: ChangeState with a transition the current state lacks (activate while active,
    activate after shutdown) ended the node with exit 1 and no answer; ``ros2 lifecycle set``
    checks first, other clients do not."""
    node = control_node(tmp_path, {"urdf_path": str(DEFAULT_URDF)},
                        name=fresh_name("rb_dynamics_lifecycle"))
    try:
        commands = node.commands
        assert node.command_after(JOINTS, np.zeros(len(JOINTS))) is not None, node.output()
        assert _state(node) == "active"
        assert not _change(node, Transition.TRANSITION_ACTIVATE)  # already active
        assert node.wait_for_log("change_state refused", 5.0), node.output()
        assert node.process.proc.poll() is None, node.output()
        before = len(commands)
        assert node.command_after(JOINTS, np.zeros(len(JOINTS))) is not None, node.output()
        assert len(commands) > before  # still commanding
        assert _change(node, Transition.TRANSITION_ACTIVE_SHUTDOWN)
        assert _state(node) == "finalized"
        assert not _change(node, Transition.TRANSITION_ACTIVATE)  # nothing leaves finalized
        assert node.process.proc.poll() is None, node.output()
        assert _state(node) == "finalized"
    finally:
        node.close()  # SIGINT: exit 0 within 2 s
