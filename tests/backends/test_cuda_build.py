"""The CUDA build's dependencies: an edit of a header the kernels include rebuilds what they built.

The library's object (``sum_tree.cu.o``, CMake's CUDA rule) and the CuPy fatbin (a custom command
in ``kernels/cuda/CMakeLists.txt``) both take their headers from nvcc's depfile (``-MD``), which
ninja keeps in its deps log. The fatbin's headers were once a list written by hand, and a header
the list missed left the fatbin stale after an edit (a new header is the case that shows it).

The sources are copied to a scratch folder (edits and touches there disturb no other build), a
new header is included by the kernels that both outputs compile, the two are built with one
architecture, the header is touched, and ``ninja -n`` must plan to rebuild both. Needs nvcc,
no GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the virtualenv's cmake and ninja (`make install` puts them)
OBJECT = "kernels/cuda/CMakeFiles/drlhet_cuda.dir/sum_tree.cu.o"
FATBIN = "kernels/cuda/drlhet_cuda_kernels.fatbin"
PROBE = "kernels/include/drlhet/build_probe.h"  # the new header, in the copy only


def tool(name: str) -> str:
    """The build tool ``name``: the virtualenv's, else PATH's; a skip naming it when neither."""
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.skip(f"missing library: {name} (a build tool) is not installed")
    return found


def ninja_plan(build: Path, *outputs: str) -> str:
    """What ``ninja -n -d explain`` says it would do for ``outputs``, stdout and stderr."""
    run = subprocess.run(
        [tool("ninja"), "-C", str(build), "-n", "-d", "explain", *outputs],
        check=True,
        capture_output=True,
        text=True,
    )
    return run.stdout + run.stderr


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    """A build folder of a copy of the sources (kernels including `PROBE`) in which the object and
    the fatbin were built once; the copy is the folder's sibling ``src``."""
    if shutil.which("nvcc") is None:
        pytest.skip("missing library: the CUDA toolkit (nvcc is not on PATH)")
    cmake, ninja = tool("cmake"), tool("ninja")
    scratch = tmp_path_factory.mktemp("cuda_build")
    src, out = scratch / "src", scratch / "build"
    src.mkdir()
    shutil.copy2(ROOT / "CMakeLists.txt", src)
    for folder in ("kernels", "hls"):
        shutil.copytree(ROOT / folder, src / folder)
    (src / PROBE).write_text("#pragma once\n")
    kernels = src / "kernels" / "cuda" / "sum_tree_kernels.cuh"  # sum_tree.cu and the fatbin's
    kernels.write_text(f'#include "drlhet/{Path(PROBE).name}"\n' + kernels.read_text())
    configure = [cmake, "-S", str(src), "-B", str(out), "-G", "Ninja"]
    configure += [f"-DCMAKE_MAKE_PROGRAM={ninja}", f"-DPython_EXECUTABLE={sys.executable}"]
    # one architecture, unoptimised (what is recorded does not depend on it): about 2x faster
    configure += [
        "-DCMAKE_CUDA_ARCHITECTURES=80",
        "-DCMAKE_BUILD_TYPE=",
        "-DCMAKE_CUDA_FLAGS=-Xptxas=-O0",
    ]
    subprocess.run(configure, check=True, capture_output=True)
    subprocess.run([ninja, "-C", str(out), OBJECT, FATBIN], check=True, capture_output=True)
    return out


@pytest.mark.slow  # two nvcc builds, ~20 s on the 2-core VM: the default suite was near 15 min
def test_a_touched_header_rebuilds_the_cuda_object_and_the_fatbin(build):
    assert "no work to do" in ninja_plan(build, OBJECT, FATBIN)
    probe = build.parent / "src" / PROBE
    later = time.time() + 10  # after both outputs, past any file-system timestamp granularity
    os.utime(probe, (later, later))
    plan = ninja_plan(build, OBJECT, FATBIN)
    assert f"Building CUDA object {OBJECT}" in plan, plan
    assert "CUDA kernels as a fatbin for CuPy" in plan, plan
