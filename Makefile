# Everything runs from ./.venv, set up by scripts/setup_env.sh (idempotent: seconds when done).
.PHONY: setup run test test-fast bench lint parameters clean

# ROS 2 wheels from PyPI: jazzy (LTS, default) or kilted, each in its own venv
ROS_WHEELS ?= jazzy
export ROS_WHEELS
VENV := $(CURDIR)/$(if $(filter jazzy,$(ROS_WHEELS)),.venv,.venv-$(ROS_WHEELS))
export VENV
PY := $(VENV)/bin/python

# DDS stays on loopback, on a random domain, logging inside build/. Jazzy and Kilted spell
# loopback ROS_AUTOMATIC_DISCOVERY_RANGE (Humble's ROS_LOCALHOST_ONLY only earns them a
# deprecation warning at every node start); rb_dynamics/ros/environment.py picks per distribution.
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
ifndef ROS_DOMAIN_ID
ROS_DOMAIN_ID := $(shell echo $$(( 50 + $$(od -An -N2 -tu2 /dev/urandom) % 150 )))
endif
export ROS_DOMAIN_ID
export ROS_LOG_DIR ?= $(CURDIR)/build/ros_log

setup:
	@bash scripts/setup_env.sh

# the main job: simulator + control node in closed loop on the bundled arm, report and plot
# (options: make run ARGS="--urdf my.urdf --duration 5 --mode gravity_compensation")
run: setup
	$(PY) -m rb_dynamics.demo.main_job $(ARGS)

# (a subset: make test TESTS="test/test_ros2_launch.py test/test_ros2_cli.py")
TESTS ?= test
# parallel pytest workers (pytest-xdist), each on a ROS domain of its own (test/conftest.py); a
# module stays on one worker, so the nodes a module shares between its tests are started once,
# and the modules go out longest first (conftest's LONGEST_FIRST); then the tests marked
# ``alone`` (a pace against a baseline of the run), one at a time. (Exit code 5: a subset
# without tests of that kind.)
WORKERS ?= 2

test: setup
	$(PY) -m pytest $(TESTS) -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder \
	  -m "not alone" || [ $$? -eq 5 ]
	$(PY) -m pytest $(TESTS) -q -m alone || [ $$? -eq 5 ]

# the tests that need no ROS (the engine, control, simulation, identification): the ones that
# talk to ROS are marked ``ros`` by test/conftest.py
test-fast: setup
	$(PY) -m pytest $(TESTS) -q -m "not ros" -n $(WORKERS) --dist loadfile --no-loadscope-reorder

# benchmarks (not tests): dynamics against Pinocchio, then the 1 kHz latency through the node
bench: setup
	$(PY) benchmarks/bench_dynamics.py --json build/bench_dynamics.json
	$(PY) benchmarks/bench_latency.py --json build/bench_latency.json
	$(PY) benchmarks/bench_simulation.py

lint: setup
	$(VENV)/bin/ruff check .

# config/*.yaml and docs/parameters.md from the nodes' parameter schemas
# (rb_dynamics/ros/*/parameters.yaml), after a schema was edited
parameters: setup
	$(PY) -m rb_dynamics.ros.parameter_docs --write

clean:
	rm -rf build install log $(VENV)
