# SPDX-License-Identifier: Apache-2.0
"""Learning a robot's dynamics from data: payload identification (mass, centre of mass and
inertia from measured efforts).

Imports ``rb_dynamics.dynamics`` and ``rb_dynamics.model``.
"""
