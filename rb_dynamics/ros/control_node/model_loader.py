# SPDX-License-Identifier: Apache-2.0
"""The control node's robot: a description loaded, its dynamics and controller built off the
executor thread, and all of it swapped in whole; and its dynamics overlay.

Parsing a big URDF never stalls the services, and the control loop goes on with the old model
until the new one is installed. A description that cannot be used leaves the old model in
place and is said (``refused``); one refused for its gains (a ``ControllerError``) is tried
again when the law's gains or ``mode`` change (``retry``).

The overlay (``rb_dynamics.model.overlay``: armature, friction, effort offsets per joint) is
applied to every description loaded: the ``dynamics_overlay`` parameter's file, read at each
load, until ``~/set_dynamics_overlay`` gives one (``set_overlay``); then that one. A file that
cannot be read, or an overlay that does not fit the description, refuses the description.
``set_overlay`` swaps the overlaid model in between two commands: new dynamics (answering at
once on the reference algorithms, on generated kernels with the new armature once built), given
to the running controller (``JointController.swap_dynamics``: its reference and goal go on).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rclpy.node import Node

from rb_dynamics.control import (
    ControllerError,
    JointController,
    command_step_problem,
    overlay_problem,
)
from rb_dynamics.dynamics import ConstraintSet, LiveDynamics
from rb_dynamics.model import DynamicsOverlay, Model, apply_overlay, load_model, read_overlay
from rb_dynamics.ros import parameters as ros_params
from rb_dynamics.ros.constraint_parameters import ConstraintParameters
from rb_dynamics.ros.model_source import ModelSource
from rb_dynamics.ros.runtime import LatestOnlyWorker, freeze_long_lived

from .control_loop import ControlLoop
from .law_parameters import check_stable_gains, impedance_gains

__all__ = ["BuildController", "Installed", "ModelLoader"]

# (model, its dynamics, parameter values being set right now) → the controller, or None when
# there is nothing to command; raises to refuse the description
BuildController = Callable[[Model, LiveDynamics, dict[str, Any]], "JointController | None"]
# told after a model and its controller are swapped in, on the loader's thread
Installed = Callable[[Model, "JointController | None"], None]


class ModelLoader:
    """Owns the node's ``model`` (the description's, ``urdf_model``, with the ``overlay``
    applied), its ``dynamics`` and where they came from (``origin``, ``overlay_origin``).

    ``follow_sources`` takes the description from the documented sources (at once, then each
    new one off the executor thread); ``set_overlay`` replaces the overlay; ``constraints_for``
    builds the declared constraints once per model.
    """

    def __init__(self, node: Node, loop: ControlLoop, build_controller: BuildController,
                 installed: Installed, parameter_value: Callable[[str], Any]) -> None:
        self.node, self.loop = node, loop
        self.parameter_value = parameter_value  # the value the last accepted change set
        self.build_controller, self.installed = build_controller, installed
        self.model: Model | None = None
        self.dynamics: LiveDynamics | None = None
        self.origin = ""  # where the model came from ("": none yet)
        self.urdf_model: Model | None = None  # the description's, before the overlay
        self.overlay: DynamicsOverlay | None = None  # the overlay on ``model`` (None: none)
        self.overlay_origin = ""  # where it came from ("": none)
        # (overlay, origin) given by ~/set_dynamics_overlay (the parameter's file is then no
        # longer read); None: the parameter's
        self._given: tuple[DynamicsOverlay | None, str] | None = None
        self._swap = threading.RLock()  # one model or overlay swap at a time
        self.overlay_changed: Callable[[Model], None] = lambda model: None
        self.refused = ""  # why the last description was refused, until one is taken
        self._retry: tuple[str, str] | None = None  # refused for its gains: tried again
        self.constraint_parameters = ConstraintParameters(
            node, ros_params.node_schema("control_node"))
        self._constraints: tuple[Model, ConstraintSet | ValueError] | None = None
        self._worker = LatestOnlyWorker(self._install, "model loader")
        self._in_background = False

    def follow_sources(self) -> None:
        """Load the description the node is given now (on this thread), then follow the
        /robot_description topic (each new one on the loader's thread)."""
        ModelSource(self.node, self._load, follow_topic=True, use_bundled=False)
        self._in_background = True

    def stop(self) -> None:
        self._worker.stop()

    @property
    def swap_lock(self) -> threading.RLock:
        """Held while a model or an overlay is built and swapped in. A parameter change holds
        it while the change is checked and set, so no controller is built or installed in
        between (re-entrant: the loader's own thread may set parameters while it holds it)."""
        return self._swap

    def retry(self, changes: dict[str, Any]) -> None:
        """Build again a description refused for its gains, with ``changes`` (parameter values
        being set); nothing when none was."""
        if self._retry is not None:
            self._worker.submit(*self._retry, changes)

    def constraints_for(self, model: Model) -> ConstraintSet:
        """The declared constraints on ``model``, built once per model (ValueError: misfit)."""
        if self._constraints is None or self._constraints[0] is not model:
            try:
                built: ConstraintSet | ValueError = self.constraint_parameters.build(model)
            except ValueError as exc:
                built = exc
            self._constraints = (model, built)
        built = self._constraints[1]
        if isinstance(built, ValueError):
            raise ValueError(f"the declared constraints do not fit {model.name!r}: {built}")
        return built

    def _load(self, source: str, origin: str) -> None:
        if self._in_background:
            self._worker.submit(source, origin, {})
        else:
            self._install(source, origin, {})

    def _install(self, source: str, origin: str, changes: dict[str, Any]) -> None:
        """Load and swap in a new model; on any error keep the old one and say why."""
        node = self.node
        try:
            bare = load_model(source, floating_base=node.get_parameter("floating_base").value,
                              gravity=node.get_parameter("gravity").value)
            with self._swap:  # the overlay cannot change between its reading and the swap
                overlay, overlay_origin = self._overlay()
                model = bare if overlay is None else _overlaid(bare, overlay, overlay_origin)
                dynamics = self._dynamics(model)
                controller = self.build_controller(model, dynamics, changes)
                with self.loop.lock:
                    self.model, self.dynamics, self.origin = model, dynamics, origin
                    self.urdf_model = bare
                    self.overlay, self.overlay_origin = overlay, overlay_origin
                    self.loop.install(controller)
        except Exception as exc:  # noqa: BLE001 - a description must never end the node
            kept = f"; keeping {self.model.name!r}" if self.model is not None else ""
            self.refused = f"description from {origin} refused: {exc}"
            node.get_logger().error(f"cannot use the description from {origin}: {exc}{kept}")
            self._retry = (source, origin) if isinstance(exc, ControllerError) else None
            return
        self.refused, self._retry = "", None
        self.installed(model, controller)
        self._report(model, controller, origin)
        freeze_long_lived()  # the model and its controller live until the next description

    def _dynamics(self, model: Model) -> LiveDynamics:
        return LiveDynamics(model, self.node.get_parameter("dynamics_kernels").value,
                            on_switch=self._on_kernels)

    def _overlay(self) -> tuple[DynamicsOverlay | None, str]:
        """The overlay for a description: the one given at run time, else the parameter's
        file, read now (ValueError naming the file when it cannot be)."""
        if self._given is not None:
            return self._given
        path = self.node.get_parameter("dynamics_overlay").value
        if not path:
            return None, ""
        try:
            return read_overlay(path), f"file {path}"
        except (OSError, ValueError) as exc:
            raise ValueError(f"dynamics_overlay {path!r}: {exc}") from None

    def set_overlay(self, overlay: DynamicsOverlay | None, origin: str) -> Model:
        """Swap in the description's model with ``overlay`` (None: the URDF's values) between
        two commands; the new model. ValueError (nothing changed) when there is no model yet
        or the overlay does not fit it."""
        with self._swap:
            bare = self.urdf_model
            if bare is None:
                raise ValueError("no robot description loaded yet" + (
                    f" ({self.refused})" if self.refused else ""))
            model = bare if overlay is None else _overlaid(bare, overlay, origin)
            dynamics = self._dynamics(model)
            controller = self.loop.controller  # replaced only under ``_swap``
            # impedance's derived gains follow the inertia the overlay gives
            gains = {} if controller is None else impedance_gains(
                controller, self.parameter_value, dynamics)
            with self.loop.lock:
                if controller is not None:
                    _check_swap(controller, dynamics, gains, self.loop.stability.loop_period)
                    controller.swap_dynamics(dynamics)
                    controller.set_gains(**gains)
                    self.loop.stability.recheck()
                self.model, self.dynamics = model, dynamics
                self.overlay, self.overlay_origin = overlay, origin if overlay else ""
                self._given = (self.overlay, self.overlay_origin)
        self.overlay_changed(model)
        return model

    def _report(self, model: Model, controller: JointController | None, origin: str) -> None:
        log = self.node.get_logger()
        for warning in model.warnings:
            log.warning(warning)
        try:
            self.constraints_for(model)
        except ValueError as exc:  # the control law does not use them; the services say so
            log.error(f"{exc}; ~/forward_dynamics and ~/simulate will refuse")
        headline = f"{model.summary().splitlines()[0]} from {origin}"
        if controller is None:
            why = ("floating base" if self.node.get_parameter("floating_base").value
                   else "no actuated joints")
            log.info(f"{headline}; {why}: serving the dynamics services, publishing no efforts")
            return
        log.info(f"{headline}; mode {controller.mode}; efforts for {controller.joints} on "
                 f"{self.node.resolve_topic_name('~/effort_commands')}")

    def _on_kernels(self, kind: str) -> None:
        self.node.get_logger().info(f"dynamics kernels: {kind}")
        freeze_long_lived()


def _overlaid(model: Model, overlay: DynamicsOverlay, origin: str) -> Model:
    """``model`` with ``overlay``; ValueError naming where it came from when it does not fit
    or describes no robot ``model`` can be (``control.overlay_checks.overlay_problem``)."""
    try:
        overlaid = apply_overlay(model, overlay)
    except ValueError as exc:
        raise ValueError(f"the dynamics overlay ({origin}) does not fit: {exc}") from None
    why = overlay_problem(model, overlaid, overlay)
    if why is not None:
        raise ValueError(f"the dynamics overlay ({origin}) is not plausible for "
                         f"{model.name!r}: {why}")
    return overlaid


def _check_swap(controller: JointController, dynamics: LiveDynamics,
                gains: dict[str, Any], period: float) -> None:
    """ValueError (nothing changed) when the controller's gains (impedance's derived ones:
    ``gains``) make its loop unstable at ``period`` on the new ``dynamics``, as a gain change
    would, or the swap would move its command by more than a bound in one step
    (``control.overlay_checks.command_step_problem``). Call under the loop's lock."""
    try:
        check_stable_gains(controller, {"mode": controller.mode}, gains, period, dynamics)
    except ControllerError as exc:
        raise ValueError(f"the dynamics overlay is refused: {exc}") from None
    why = command_step_problem(controller, dynamics)
    if why is not None:
        raise ValueError(f"the dynamics overlay is refused: {why}")
