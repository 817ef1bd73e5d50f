"""Builds the ferry package with CMake: the whole project (libferry and the ferry._ferry
extension, no tests or benchmarks) in a build folder of setuptools', then installs the extension
and a copy of libferry next to it (the extension finds it through its $ORIGIN rpath).

    pip install --no-build-isolation ./python        # from the repository root

Environment: CXX (default clang++ when found), CMAKE_BUILD_PARALLEL_LEVEL (default: all CPUs),
FERRY_CMAKE_ARGS (extra -D options, space-separated).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*ferry\s+VERSION\s+([0-9.]+)", f.read())
    return m.group(1) if m else "0.0.0"


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out_dir = os.path.abspath(os.path.dirname(self.get_ext_fullpath(ext.name)))
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        args = [
            "cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            "-DFERRY_BUILD_TESTS=OFF", "-DFERRY_BUILD_BENCH=OFF", "-DFERRY_BUILD_PYTHON=ON",
            f"-DPython3_EXECUTABLE={sys.executable}", f"-DFERRY_PYTHON_INSTALL_DIR={out_dir}",
        ]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        cxx = os.environ.get("CXX") or shutil.which("clang++")
        if cxx:
            args.append(f"-DCMAKE_CXX_COMPILER={cxx}")
        if shutil.which("ccache"):
            args.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        args += shlex.split(os.environ.get("FERRY_CMAKE_ARGS", ""))
        subprocess.run(args, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", build_dir, "-j", jobs, "--target", "ferry_python"],
                       check=True)
        # The extension and libferry, to FERRY_PYTHON_INSTALL_DIR (rpath $ORIGIN).
        subprocess.run(["cmake", "--install", build_dir, "--component", "ferry_python"],
                       check=True)


setup(
    name="ferry",
    version=project_version(),
    description="ferry transfer engine: Mooncake-compatible and Pythonic APIs",
    packages=["ferry"],
    ext_modules=[Extension("ferry._ferry", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
