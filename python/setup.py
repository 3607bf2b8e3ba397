"""pip install ./python (offline, with Debian's python3-setuptools).

Builds the _tidepool extension against libpool. Where libpool comes from:

- $TIDEPOOL_LIBPOOL_DIR: a directory holding an installed libpool.so (for
  example /usr/local/lib after `cmake --install`); the extension links it
  there and finds it there at run time.
- otherwise: libpool is built here from this repository (CMake, Release,
  the libraries only, into python/build/libpool) and its libpool.so.0 is
  shipped inside the package, found through an $ORIGIN rpath, so the
  installed package needs nothing else of tidepool.

Either way the extension sees only the public headers (include/) and the
header-only fabric/dlist.h.
"""
import glob
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BuildExt(build_ext):
    """Builds (or finds) libpool before the extension."""

    def run(self):
        libdir = os.environ.get("TIDEPOOL_LIBPOOL_DIR")
        ext = self.extensions[0]
        if libdir:
            if not glob.glob(os.path.join(libdir, "libpool.so*")):
                raise SystemExit(f"tidepool: no libpool.so in {libdir} "
                                 "(TIDEPOOL_LIBPOOL_DIR)")
            ext.library_dirs = [libdir]
            ext.runtime_library_dirs = [libdir]
        else:
            build = os.path.join(HERE, "build", "libpool")
            cmake = shutil.which("cmake")
            if not cmake:
                raise SystemExit("tidepool: building libpool needs cmake "
                                 "(apt-get install cmake, or run "
                                 "deploy/install-deps.sh)")
            subprocess.check_call(
                [cmake, "-S", ROOT, "-B", build,
                 "-DCMAKE_BUILD_TYPE=Release", "-DTP_PYTHON=OFF",
                 "-DTP_WERROR=OFF"])
            subprocess.check_call(
                [cmake, "--build", build, "--target", "pool", "-j",
                 str(os.cpu_count() or 2)])
            lib = os.path.join(build, "libpool", "libpool.so.0")
            pkg = os.path.join(self.build_lib, "tidepool")
            os.makedirs(pkg, exist_ok=True)
            shutil.copy2(os.path.realpath(lib),
                         os.path.join(pkg, "libpool.so.0"))
            ext.library_dirs = [os.path.join(build, "libpool")]
            ext.extra_link_args = ["-Wl,-rpath,$ORIGIN"]
        super().run()


setup(
    name="tidepool",
    version="0.4.0",
    description="Pooled DRAM for LLM inference: the KV tier, GPU "
                "prefetch and pooled tensors from Python",
    packages=["tidepool", "tidepool.connectors"],
    package_data={"tidepool": ["py.typed", "*.pyi"]},
    ext_modules=[Extension(
        "tidepool._tidepool",
        ["_tidepool.c", "tp_buffer.c", "tp_pool.c", "tp_region.c",
         "tp_map.c", "tp_kv.c", "tp_gpu.c"],
        depends=["tp_int.h", os.path.join(ROOT, "fabric", "dlist.h")],
        include_dirs=[os.path.join(ROOT, "include"), ROOT],
        libraries=["pool"],
        extra_compile_args=["-std=gnu11", "-Wall"])],
    cmdclass={"build_ext": BuildExt},
    # vLLM loads these in every process (vllm/plugins/__init__.py):
    # registers TidepoolOffloadingSpec with its OffloadingSpecFactory
    # (docs/engines.md, "vLLM")
    entry_points={"vllm.general_plugins": [
        "tidepool = tidepool.connectors.vllm:register"]},
    python_requires=">=3.9",
)
