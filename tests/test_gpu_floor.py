"""experiments/gpu_floor.cu: the GPU's floor for the one-launch kernels (graph nodes, cluster
barriers, loads from L2). Its timings need a GPU of sm_90 and up; here it is built by nvcc, its
dry build (no device touched, made-up times) checks the fits and the JSON, and its real build
refuses a machine without a GPU in one line."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "experiments" / "gpu_floor.cu"


def build(tmp_path: Path, *flags: str) -> Path:
    if shutil.which("nvcc") is None:
        pytest.skip("missing library: the CUDA toolkit (nvcc is not on PATH)")
    exe = tmp_path / ("gpu_floor" + "".join(f.strip("-") for f in flags))
    cmd = ["nvcc", "-O3", "-std=c++17", "-arch=sm_90", *flags, "-o", str(exe), str(SOURCE)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr, done.stderr
    return exe


def test_the_dry_build_fits_each_case_and_writes_its_rows(tmp_path):
    exe = build(tmp_path, "-DGPU_FLOOR_DRY")
    out = tmp_path / "floor.json"
    done = subprocess.run([str(exe), str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    floor = json.loads(out.read_text())
    assert floor["measured"] is False and floor["device"].startswith("dry run")
    cases = [r["case"] for r in floor["rows"]]
    assert cases[:3] == ["host_step", "graph_step", "empty"]
    assert [r["us"] for r in floor["rows"][:2]] == [9.0, 4.0]
    assert cases.count("phase") == 5 and cases.count("store_release") == 5
    assert [r["n"] for r in floor["rows"] if r["case"] == "load"] == [0, 1, 2, 4, 8]
    assert set(floor["fits"]) == {
        "relaxed", "release", "store_release", "shared_release", "shared_restrict", "load",
        "phase", "remote_cas",
    }  # fmt: skip
    for fit in floor["fits"].values():  # the made-up times: 1 + 0.5 n
        assert fit == {"intercept_us": pytest.approx(1.0), "per_n_us": pytest.approx(0.5)}
    assert "phase          : 1.000 us a node + 0.500 us each" in done.stdout


def test_the_real_build_names_what_is_missing_without_a_gpu(tmp_path):
    exe = build(tmp_path)
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU here, or none it may see
    done = subprocess.run(
        [str(exe), str(tmp_path / "f.json")], capture_output=True, text=True, env=hidden
    )
    assert done.returncode == 1 and not (tmp_path / "f.json").exists()
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: cudaGetDeviceProperties")
    usage = subprocess.run([str(exe)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr
