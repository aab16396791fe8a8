"""The kernels' shared per-element header, kernels/include/drlhet/sum_tree.h, compiles as CUDA
device code with nvcc, and as plain C++17 the way HLS C simulation compiles it (g++, warnings as
errors, no exceptions), with nothing included but <cstdint> (its descent step against the
reference: test_kernel_header.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

INCLUDE = Path(__file__).resolve().parents[2] / "kernels" / "include"
HEADER = INCLUDE / "drlhet" / "sum_tree.h"


# ---- the header compiles for CUDA and for HLS C simulation ---------------------------------------

DEVICE_PROBE = r"""
#include "drlhet/sum_tree.h"

__global__ void Probe(const float* children, int k, const float* u, int n, drlhet::Choice* out,
                      float* next, float* sums) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const drlhet::Choice c = k == 16 ? drlhet::ChooseChild<16>(children, k, u[i])
                                   : drlhet::ChooseChild<0>(children, k, u[i]);
  out[i] = c;
  next[i] = drlhet::NextTarget(u[i], c.left);
  sums[i] = drlhet::SeqSum(children + k * (i % 2), k);
  float acc, left, left_nz;
  int32_t count, last_nz, child;
  drlhet::ScanBegin(acc, left, left_nz, count, last_nz);
  for (int j = 0; j < k; ++j) {
    drlhet::ScanChild(children[j], j, u[i], acc, left, left_nz, count, last_nz);
  }
  drlhet::ResolveChild(count, last_nz, left, left_nz, child, left);
  next[n + i] = drlhet::SumChild(acc, left) + drlhet::ChosenValue(children[child]);
}
"""

HOST_PROBE = r"""
#include "drlhet/sum_tree.h"

// An HLS-style top function: fixed-size arrays, a compile-time K, no library calls.
void Top(const float children[16], float u, int* child, float* next, float* sum) {
  const drlhet::Choice c = drlhet::ChooseChild<16>(children, 16, u);
  *child = c.child;
  *next = drlhet::NextTarget(u, c.left);
  *sum = drlhet::SeqSum(children, 16);
}

drlhet::Choice Dynamic(const float* children, int k, float u) {
  return drlhet::ChooseChild<0>(children, k, u);
}

bool Layout(drlhet::TreeLayout* out) { return drlhet::MakeLayout(1 << 20, 16, out); }
"""


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.is_file() else None


def _compile(cmd, cwd):
    run = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{run.stdout}\n{run.stderr}"


def test_header_compiles_as_cuda_device_code(tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("missing library: the CUDA toolkit (nvcc not on PATH or in /usr/local/cuda)")
    (tmp_path / "probe.cu").write_text(DEVICE_PROBE)
    _compile(
        [nvcc, "-std=c++17", "-arch=sm_80", "-Werror", "all-warnings", f"-I{INCLUDE}"]
        + ["-c", "probe.cu", "-o", "probe.o"],
        tmp_path,
    )
    assert (tmp_path / "probe.o").stat().st_size > 0


def test_header_compiles_as_plain_cxx17_for_hls(tmp_path):
    gxx = shutil.which("g++")
    # g++ builds the package's native kernels, so a machine that runs `make test` has it
    assert gxx is not None, "g++ is not on PATH (it builds the native kernels)"
    (tmp_path / "probe.cc").write_text(HOST_PROBE)
    _compile(
        [gxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-pedantic"]
        + ["-fno-exceptions", "-fno-rtti", f"-I{INCLUDE}", "probe.cc"],
        tmp_path,
    )


def test_header_depends_on_cstdint_only():
    text = HEADER.read_text()
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    assert re.findall(r"#\s*include\s*(\S+)", code) == ["<cstdint>"]
    forbidden = re.findall(r"\b(?:new|delete|malloc|free|throw|try|std::\w+)\b", code)
    assert not forbidden, f"not HLS/CUDA-friendly: {forbidden}"
