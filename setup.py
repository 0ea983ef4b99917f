# SPDX-License-Identifier: Apache-2.0
"""rb_dynamics: an ament_python package (colcon, ``pip install .`` and ``pip install -e .``)."""

from glob import glob

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

package_name = "rb_dynamics"


class BuildExt(build_ext):
    """Adds numpy's headers when the build runs, so numpy is needed only then."""

    def build_extension(self, ext):
        try:
            import numpy
        except ImportError as exc:  # an optional extension: the Python kernels remain
            from setuptools.errors import CompileError

            raise CompileError(f"numpy is needed to build {ext.name}: {exc}") from exc
        ext.include_dirs.append(numpy.get_include())
        super().build_extension(ext)


# The trampoline into the per-model compiled kernels (rb_dynamics/dynamics/kernel_cache.py).
# Optional: without a compiler or numpy at build time the package installs and runs the Python
# kernels.
ckernels = Extension(
    f"{package_name}.dynamics.trampoline._ckernels",
    sources=[f"{package_name}/dynamics/trampoline/_ckernels.c"],
    optional=True,
)

setup(
    name=package_name,
    version="0.3.0",
    packages=find_packages(exclude=["test", "test.*"]),
    ext_modules=[ckernels],
    cmdclass={"build_ext": BuildExt},
    # the bundled robot ships inside the Python package too, so `pip install` (even -e) finds
    # it; so do the nodes' parameter schemas, which the nodes declare their parameters from
    package_data={package_name: ["urdf/*.urdf", "ros/*/parameters.yaml"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
        (f"share/{package_name}/launch", glob("launch/*.launch.py")),
        (f"share/{package_name}/config", glob("config/*.yaml")),
        (f"share/{package_name}/urdf", glob(f"{package_name}/urdf/*.urdf")),
    ],
    # numpy and scipy are dependencies of the ROS package (package.xml): rosdep installs them
    install_requires=["setuptools"],
    # system identification of the whole arm (rb_dynamics_identify): bags without ROS and the
    # semidefinite program of the consistent parameters; the nodes and the engine run without
    extras_require={"identification": ["rosbags", "cvxpy", "clarabel"]},
    zip_safe=False,  # a compiled extension
    maintainer="Seed 50c174e3 maintainers",
    maintainer_email="maintainers@users.noreply.a-seed-50c174e3.example",
    description="Rigid-body dynamics of URDF robots and a ROS 2 node serving them",
    license="Apache-2.0",
    python_requires=">=3.10",
    entry_points={
        "console_scripts": [
            "rb_dynamics_node = rb_dynamics.ros.control_node:run",
            "rb_simulator = rb_dynamics.ros.simulator_node:run",
            "rb_reference = rb_dynamics.demo.reference_publisher:main",
            "rb_dynamics_main_job = rb_dynamics.demo.main_job:main",
            "rb_dynamics_identify = rb_dynamics.ros.identification.cli:main",
        ],
    },
)
