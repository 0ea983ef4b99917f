# SPDX-License-Identifier: Apache-2.0
"""The one place the package reaches into rclpy's private API.

Three things rclpy offers no public way to do, each read here the same way on Humble, Jazzy
and Kilted (``test_rclpy_private`` checks them on the distribution it runs on; the suite runs
on each):

- the parameter overrides a node was given (to declare a parameter whose file value has no
  type without losing it): ``Node._parameter_overrides``;
- a lifecycle node's ``~/change_state`` service and its state machine (to answer an invalid
  transition instead of raising out of the callback): ``Node._service_change_state``,
  ``Node._state_machine``;
- the ``qos_overrides.<topic>.subscription.*`` parameters ``create_subscription`` declares
  with ``qos_overriding_options``, for a subscription another node makes:
  ``rclpy.qos_overriding_options._declare_qos_parameters``;
- the node whose executor a node's /clock subscription (``use_sim_time``) wakes:
  ``Node._time_source`` and its ``_node_weak_ref``;
- the clock of an action server (``ActionServer`` takes ``node.get_clock()`` in its
  constructor, with no argument to give another).

Each returns a neutral answer where an rclpy lacks the attribute, so that a future rclpy
degrades a feature rather than stopping a node.
"""

from __future__ import annotations

import weakref
from typing import Any

from rclpy.clock import Clock
from rclpy.node import Node
from rclpy.qos import QoSProfile

__all__ = ["action_server_on_clock", "change_state_service", "clock_subscription_on",
           "declare_qos_override_parameters", "parameter_overrides"]


def parameter_overrides(node: Node) -> dict[str, Any]:
    """The overrides (name → rclpy Parameter) ``node`` was started with; {} if unknown."""
    return getattr(node, "_parameter_overrides", None) or {}


def change_state_service(node: Node) -> tuple[Any, Any] | None:
    """A lifecycle node's ``~/change_state`` service (its ``callback`` replaceable) and state
    machine (``current_state``, ``available_transitions``); None for another node or an rclpy
    that keeps them elsewhere."""
    service = getattr(node, "_service_change_state", None)
    machine = getattr(node, "_state_machine", None)
    if service is None or machine is None or not callable(getattr(service, "callback", None)):
        return None
    return service, machine


def declare_qos_override_parameters(node: Node, topic: str, qos: QoSProfile) -> None:
    """Declare on ``node`` the read-only ``qos_overrides.<topic>.subscription.{history,depth,
    reliability}`` parameters (defaults from ``qos``) and apply their overrides to ``qos``, as
    ``create_subscription(..., qos_overriding_options=with_default_policies())`` does."""
    from rclpy.qos_overriding_options import QoSOverridingOptions, _declare_qos_parameters
    from rclpy.subscription import Subscription

    _declare_qos_parameters(Subscription, node, node.resolve_topic_name(topic), qos,
                            QoSOverridingOptions.with_default_policies())


def clock_subscription_on(node: Node, holder: Node) -> bool:
    """Let ``node``'s time source keep its /clock subscription on ``holder`` (same context):
    ``node``'s clock still follows /clock while ``node``'s ``use_sim_time`` says so (a change
    of it subscribes or unsubscribes on ``holder``), but a /clock message wakes ``holder``'s
    executor, not ``node``'s. False (nothing changed) for an rclpy that keeps it elsewhere."""
    source = getattr(node, "_time_source", None)
    if source is None or not isinstance(getattr(source, "_node_weak_ref", None),
                                        weakref.ReferenceType) \
            or not isinstance(getattr(type(source), "ros_time_is_active", None), property):
        return False
    active = source.ros_time_is_active
    source.ros_time_is_active = False  # the subscription on ``node`` destroyed
    source._node_weak_ref = weakref.ref(holder)
    source.ros_time_is_active = active  # subscribed again, on ``holder``
    return True


def action_server_on_clock(node: Node, clock: Clock, *args: Any, **kwargs: Any) -> Any:
    """rclpy's ``ActionServer(node, *args, **kwargs)`` whose own clock (the one rcl_action
    times result expiry with) is ``clock`` instead of ``node``'s; what it stamps goals with is
    still ``node``'s clock. rclpy reads ``node.get_clock()`` while it constructs the server:
    ``node``'s method is shadowed for that call only, in the constructing thread's view and in
    every other's (build it before anything else reads ``node``'s clock). The server's C side
    keeps a bare pointer to the clock: the server holds a reference to it, so that the clock
    lives as long as the server (freed, it crashed the node at the next goal's end)."""
    from rclpy.action import ActionServer

    node.get_clock = lambda: clock  # an instance attribute: shadows the method
    try:
        server = ActionServer(node, *args, **kwargs)
    finally:
        del node.get_clock
    server.rb_dynamics_clock = clock
    return server
