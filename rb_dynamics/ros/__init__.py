# SPDX-License-Identifier: Apache-2.0
"""The ROS 2 layer: one subpackage per node (``control_node``, ``simulator_node``) and what both
use: parameters (declared from each node's schema, its subpackage's ``parameters.yaml``;
``parameter_docs`` generates config/*.yaml and docs/parameters.md from the schemas), message
conversions, diagnostics, the spin runtime, the model source and launch support. The only layer
(with ``rb_dynamics.demo``) that imports rclpy or messages.
"""
