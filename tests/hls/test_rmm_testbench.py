"""The replay module's g++ testbench (hls/rmm/rmm_tb.cpp): the synthesized top (rmm_top.cpp, as
Vitis' C-simulation runs it) against the C-simulation's path, word for word, for several K and
capacities; the ap_types headers come from the hls4ml wheel (a test dependency)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

RMM = Path(__file__).resolve().parents[2] / "hls" / "rmm"


def ap_types() -> Path:
    spec = importlib.util.find_spec("hls4ml")
    assert spec is not None, "hls4ml (its ap_types headers) is a test dependency"
    return Path(list(spec.submodule_search_locations or [])[0]) / "templates/vivado/ap_types"


@pytest.fixture(scope="module")
def compiler() -> str:
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "a C++17 compiler builds the kernels: it must be here"
    return cxx


def build(cxx: str, out: Path, k: int, capacity: int) -> Path:
    exe = out / f"rmm_tb_{k}_{capacity}"
    cmd = [cxx, "-std=c++17", "-O2", "-w", f"-I{RMM}", "-isystem", str(ap_types())]
    cmd += [f"-DRMM_K={k}", f"-DRMM_CAPACITY={capacity}", str(RMM / "rmm_tb.cpp"), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return exe


@pytest.mark.parametrize(
    "k, capacity", [(4, 12_288), (16, 100_003), (64, 1 << 20), (32, 1 << 22), (8, 3)]
)
def test_the_synthesized_top_equals_the_c_simulation(compiler, tmp_path, k, capacity):
    exe = build(compiler, tmp_path, k, capacity)
    for seed in (1, 2):
        run = subprocess.run([str(exe), "150", str(seed)], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.startswith(f"PASS K={k} capacity={capacity}")
