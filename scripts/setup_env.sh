#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets up everything rb_dynamics needs on a machine without ROS, in ./.venv:
#   1. checks Python >= 3.10 (with venv and headers), a C/C++ compiler, make, cmake
#   2. creates .venv
#   3. installs the pinned ROS 2 Jazzy (or Kilted) wheels and tools (requirements/*.txt), then
#      rewrites the wheels' foreign include paths in $VENV/share/*/cmake/*.cmake
#   4. builds rb_dynamics_interfaces with colcon, installed into .venv (no sourcing needed)
#   5. installs rb_dynamics into .venv (pip install -e .)
#   6. (Jazzy only) the ROS 2 tools that have no wheel on PyPI: launch, launch_ros, the ros2 CLI,
#      control_msgs, built from the sources in ../shared/vendor by its installer (when present)
#   7. (Jazzy only) Humble's control_msgs in a prefix of its own, $VENV/opt/humble, for the tests
#      that run the nodes against Humble's interfaces (test/test_humble.py); built in the
#      background from step 4 on
# Each step is skipped when a stamp in .venv/.stamps matches the hash of its inputs, so a second
# run with nothing changed takes a second or two. Variables: PYTHON (interpreter to use),
# VENV (default ./.venv), ROS_WHEELS (jazzy, the default, or kilted), RB_DYNAMICS_VENDOR (the
# folder holding install-ros-jazzy-extras.sh; default ../shared/vendor beside the repository).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${VENV:-$ROOT/.venv}
ROS_WHEELS=${ROS_WHEELS:-jazzy}
BUILD=$ROOT/build
LOGS=$BUILD/setup_logs
STAMPS=$VENV/.stamps
START=$SECONDS

step() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }
stamp_ok() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
stamp_set() { mkdir -p "$STAMPS" && printf '%s\n' "$2" >"$STAMPS/$1"; }
run_logged() {  # run_logged NAME CMD...: output to a log file, shown only on failure
  local log=$LOGS/$1.log
  shift
  if ! "$@" >"$log" 2>&1; then
    grep -v "^WARNING: Location 'file:" "$log" | tail -n 40 >&2
    die "failed: $* (full log: $log)"
  fi
}

# DDS stays on this machine in everything this script (and what it starts) runs. Both wheel
# sets (Jazzy, Kilted) know ROS_AUTOMATIC_DISCOVERY_RANGE; ROS_LOCALHOST_ONLY is Humble's spelling
# and only earns a deprecation warning from them (rb_dynamics/ros/environment.py picks per distribution).
export ROS_AUTOMATIC_DISCOVERY_RANGE=${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$((50 + RANDOM % 150))}
export ROS_LOG_DIR=${ROS_LOG_DIR:-$BUILD/ros_log}

mkdir -p "$LOGS"
case $ROS_WHEELS in
  jazzy) ROS_REQUIREMENTS=requirements/ros-jazzy.txt LOCK=requirements/lock.txt ;;
  kilted) ROS_REQUIREMENTS=requirements/ros-kilted.txt LOCK=requirements/lock-kilted.txt ;;
  *) die "ROS_WHEELS must be jazzy or kilted (the ROS 2 wheels on PyPI), not '$ROS_WHEELS'" ;;
esac
if command -v flock >/dev/null; then  # two `make` at once wait for each other
  exec 9>"$BUILD/setup.lock"
  flock 9
fi

# ---------------------------------------------------------------- 1. what the machine must have
PY=""
for candidate in ${PYTHON:-} python3 python3.13 python3.12 python3.11 python3.10; do
  if command -v "$candidate" >/dev/null &&
     "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    PY=$("$candidate" -c 'import sys; print(sys.executable)')
    break
  fi
done
[ -n "$PY" ] || die "Python >= 3.10 not found (have: $(python3 --version 2>&1 || echo none)); \
install it, e.g. apt-get install python3 python3-venv python3-dev"
"$PY" -c 'import venv, ensurepip' 2>/dev/null ||
  die "$PY has no venv/ensurepip module: apt-get install python3-venv"
PY_INCLUDE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$PY_INCLUDE/Python.h" ] ||
  die "Python headers missing ($PY_INCLUDE/Python.h): apt-get install python3-dev"
command -v cc >/dev/null || command -v gcc >/dev/null ||
  die "no C compiler (cc/gcc): apt-get install build-essential"
command -v c++ >/dev/null || command -v g++ >/dev/null ||
  die "no C++ compiler (c++/g++): apt-get install build-essential"
command -v make >/dev/null || die "no make: apt-get install build-essential"

# cmake: the system's if it is >= 3.22, else the cmake wheel inside the venv
CMAKE_SOURCE="venv wheel (requirements/cmake.txt)"
if command -v cmake >/dev/null && [ "$(command -v cmake)" != "$VENV/bin/cmake" ]; then
  version=$(cmake --version | head -n 1 | awk '{print $3}')
  if printf '3.22\n%s\n' "$version" | sort -V -C; then
    CMAKE_SOURCE="system $(command -v cmake) $version"
  fi
fi
step "python: $PY ($("$PY" --version 2>&1 | cut -d' ' -f2)); cmake: $CMAKE_SOURCE"

# ---------------------------------------------------------------- 2. the venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c '' 2>/dev/null; then
  step "creating $VENV"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
fi
VPY=$VENV/bin/python
PIP=("$VPY" -m pip install --disable-pip-version-check --no-input)

# ---------------------------------------------------------------- 3. pinned packages
REQ_HASH=$( { hash_of requirements/*.txt; "$VPY" -VV; echo "$CMAKE_SOURCE $ROS_WHEELS"; } |
  sha256sum | cut -c1-16)
if stamp_ok requirements "$REQ_HASH"; then
  step "packages: up to date (requirements/*.txt unchanged)"
else
  step "packages: installing ROS 2 $ROS_WHEELS wheels, numpy, scipy, pin, pytest, ruff, colcon..." \
       "(about a minute when nothing is cached)"
  run_logged pip-install "${PIP[@]}" -c "$LOCK" -r "$ROS_REQUIREMENTS" -r requirements/dev.txt
  case $CMAKE_SOURCE in
    venv*) step "packages: no usable system cmake: installing the cmake wheel into the venv"
           run_logged pip-cmake "${PIP[@]}" -r requirements/cmake.txt ;;
  esac
  step "packages: reinstalling lark over the rosidl wheels' lark-parser"
  run_logged pip-lark "${PIP[@]}" --force-reinstall --no-deps -r requirements/lark.txt

  # The wheels' CMake exports name the include dirs of the host they were built on
  # (/opt/python/cp3XX-cp3XX/...): point them at this interpreter's and this numpy's.
  VENV_INCLUDE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  NUMPY_INCLUDE=$("$VPY" -c 'import numpy; print(numpy.get_include())')
  mapfile -t cmake_files < <(grep -l '/opt/python/cp3' "$VENV"/share/*/cmake/*.cmake || true)
  if [ "${#cmake_files[@]}" -gt 0 ]; then
    sed -i \
      -e "s#/opt/python/cp3[0-9]*-cp3[0-9]*/lib/python3\.[0-9]*/site-packages/numpy/_core/include#$NUMPY_INCLUDE#g" \
      -e "s#/opt/python/cp3[0-9]*-cp3[0-9]*/include/python3\.[0-9]*#$VENV_INCLUDE#g" \
      "${cmake_files[@]}"
  fi
  step "packages: rewrote include paths in ${#cmake_files[@]} CMake files" \
       "-> $VENV_INCLUDE, $NUMPY_INCLUDE"
  if grep -l '/opt/python/cp3' "$VENV"/share/*/cmake/*.cmake >/dev/null 2>&1; then
    die "foreign /opt/python paths remain in $VENV/share/*/cmake/*.cmake"
  fi
  # everything built against the wheels is built again (ros-jazzy-extras: the installer's stamp)
  rm -f "$STAMPS/interfaces" "$STAMPS/package" "$STAMPS/ros-jazzy-extras" \
    "$STAMPS/humble-control-msgs"
  stamp_set requirements "$REQ_HASH"
fi

# ---------------------------------------------------------------- 7. Humble's control_msgs
# Humble has no wheels; its interfaces differ from Jazzy's where a node could trip (fields added
# since). control_msgs 4.8.0 (../shared/vendor/ros-humble-control-msgs) is built into a prefix of
# its own, $VENV/opt/humble, which the Humble tests put first on the paths of the nodes they start.
# It needs only the wheels (step 3) and writes only its own prefix, so it is built in the
# background while steps 4-6 run (the longest step; a build is partly serial: cmake, generators).
VENDOR=${RB_DYNAMICS_VENDOR:-$ROOT/../shared/vendor}
VENDOR=$(cd "$VENDOR" 2>/dev/null && pwd || printf '%s' "$VENDOR")
HUMBLE_SRC=$VENDOR/ros-humble-control-msgs
HUMBLE_PREFIX=$VENV/opt/humble
HUMBLE_BUILD=""  # the background build's pid
if [ "$ROS_WHEELS" != jazzy ] || [ ! -d "$HUMBLE_SRC" ]; then
  step "Humble's control_msgs: skipped (needs the Jazzy venv and $HUMBLE_SRC)"
else
  HUMBLE_HASH=$( { echo "$REQ_HASH"; find "$HUMBLE_SRC" -type f | LC_ALL=C sort | xargs cat; } |
    sha256sum | cut -c1-16)
  if stamp_ok humble-control-msgs "$HUMBLE_HASH"; then
    step "Humble's control_msgs: up to date ($HUMBLE_PREFIX)"
  else
    step "Humble's control_msgs: colcon build into $HUMBLE_PREFIX, in the background (~3-4 min)"
    (
      humble_start=$SECONDS
      rm -rf "$BUILD/humble" "$HUMBLE_PREFIX"
      run_logged humble-control-msgs env PATH="$VENV/bin:$PATH" AMENT_PREFIX_PATH="$VENV" \
        CMAKE_PREFIX_PATH="$VENV" colcon --log-base "$BUILD/humble/log" build \
        --base-paths "$HUMBLE_SRC" --packages-select control_msgs \
        --build-base "$BUILD/humble/build" --install-base "$HUMBLE_PREFIX" --merge-install \
        --event-handlers console_direct- \
        --cmake-args -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$VPY"
      stamp_set humble-control-msgs "$HUMBLE_HASH"
      step "Humble's control_msgs: built ($((SECONDS - humble_start)) s)"
    ) &
    HUMBLE_BUILD=$!
  fi
fi

# ---------------------------------------------------------------- 4. rb_dynamics_interfaces
IF_SRC=$ROOT/rb_dynamics_interfaces
IF_HASH=$( { echo "$REQ_HASH"; find "$IF_SRC" -type f | LC_ALL=C sort | xargs cat; } |
  sha256sum | cut -c1-16)
if stamp_ok interfaces "$IF_HASH"; then
  step "rb_dynamics_interfaces: up to date"
else
  step "rb_dynamics_interfaces: colcon build, installed into $VENV (~30 s)"
  export PATH=$VENV/bin:$PATH AMENT_PREFIX_PATH=$VENV CMAKE_PREFIX_PATH=$VENV
  rm -rf "$BUILD/colcon"
  # colcon finds no package inside another package's folder: name both paths. The install base
  # is the venv itself (merged), so the generated types import with no sourcing.
  run_logged interfaces-colcon colcon --log-base "$BUILD/colcon/log" build \
    --base-paths "$ROOT" "$IF_SRC" --packages-select rb_dynamics_interfaces \
    --build-base "$BUILD/colcon/build" --install-base "$VENV" --merge-install \
    --event-handlers console_direct- \
    --cmake-args -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$VPY"
  stamp_set interfaces "$IF_HASH"
fi

# ---------------------------------------------------------------- 5. rb_dynamics itself
PKG_HASH=$( { echo "$REQ_HASH $ROOT"; cat setup.py setup.cfg package.xml \
  rb_dynamics/dynamics/trampoline/*.c; } | sha256sum | cut -c1-16)
if stamp_ok package "$PKG_HASH"; then
  step "rb_dynamics: up to date (editable install of $ROOT)"
else
  # editable: code changes need no reinstall; the URDF is package data, so it is found too
  # (data_files such as launch/ and config/ are not copied to $VENV/share by an editable install)
  step "rb_dynamics: pip install -e . (no deps: all pinned above)"
  run_logged pip-rb_dynamics "${PIP[@]}" --no-deps --no-build-isolation -e "$ROOT"
  step "checking that rclpy, the interfaces and rb_dynamics import"
  run_logged import-check "$VPY" -c \
    'import rclpy, rb_dynamics; from rb_dynamics_interfaces.srv import ForwardDynamics'
  stamp_set package "$PKG_HASH"
fi

# ---------------------------------------------------------------- 6. ROS tools with no wheel
# launch, launch_ros, the ros2 CLI and control_msgs are not on PyPI: their Jazzy sources and an
# installer live in ../shared/vendor (not part of this repository). Its own stamp makes it ~1 s
# when up to date; PIP_CONSTRAINT keeps the pins of the lock for what it takes from PyPI.
EXTRAS=$VENDOR/install-ros-jazzy-extras.sh
if [ "$ROS_WHEELS" != jazzy ]; then
  step "ROS tools (launch, ros2 CLI, control_msgs): skipped, the vendored sources are Jazzy's" \
       "and this is the $ROS_WHEELS venv"
elif [ ! -f "$EXTRAS" ]; then
  step "ROS tools (launch, ros2 CLI, control_msgs): skipped, no $EXTRAS" \
       "(set RB_DYNAMICS_VENDOR to the folder that has it)"
else
  step "ROS tools: $EXTRAS (launch, ros2 CLI, control_msgs; 3-7 min the first time, ~1 s after)"
  extras_start=$SECONDS
  run_logged ros-jazzy-extras env PIP_CONSTRAINT="$ROOT/$LOCK" \
    bash "$EXTRAS" "$VENV" "$BUILD/ros-jazzy-extras"
  step "ROS tools: $(tail -n 1 "$LOGS/ros-jazzy-extras.log") ($((SECONDS - extras_start)) s)"
fi

if [ -n "$HUMBLE_BUILD" ]; then
  wait "$HUMBLE_BUILD" || die "Humble's control_msgs: the build failed (log: $LOGS/humble-control-msgs.log)"
fi

# ---------------------------------------------------------------- what is there
# optional: the launch-file and ros2 CLI tests skip (saying so) without them
optional=$("$VPY" - <<'PY'
import importlib.util
import os
import sys

bin_dir = os.path.dirname(sys.executable)
tools = {
    "ros2 CLI": os.access(os.path.join(bin_dir, "ros2"), os.X_OK),
    "launch_ros": importlib.util.find_spec("launch_ros") is not None,
    "control_msgs": importlib.util.find_spec("control_msgs") is not None,
    "xacro": os.access(os.path.join(bin_dir, "xacro"), os.X_OK),
}
print(", ".join(f"{name} {'yes' if there else 'no'}" for name, there in tools.items()))
PY
)
step "optional tools in $VENV: $optional"
step "ready in $((SECONDS - START)) s: $VENV (ROS 2 $ROS_WHEELS wheels, rb_dynamics_interfaces," \
     "rb_dynamics); no sourcing needed, use $VENV/bin/python"
