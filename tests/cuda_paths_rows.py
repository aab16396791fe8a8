"""The CUDA path pickers' tests' rows (test_cuda_paths.py and the tests beside it): a fused step
row of bench_replay as the `cluster`, `narrow` and other stages of gpu_checks.sh write them, a
rows file, and the `experiments` fixture that imports pick_cuda_paths.py and
with_cuda_paths.py (a test module imports it as itself, ``import x as x``, which ruff takes as
used)."""

import importlib
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def experiments(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("pick_cuda_paths"), importlib.import_module("with_cuda_paths")


def row(batch, rate, block=0, narrow=4096, cluster=0, impl="drlhet-cuda", op="step", k=16,
        top=None, region=None):  # fmt: skip
    out = {
        "impl": impl, "op": op, "mode": "fused", "capacity": 2**20, "batch": batch,
        "branching": k, "cuda_block_max_batch": block, "cuda_narrow_max_nodes": narrow,
        "cuda_cluster_max_batch": cluster, "items_per_s": rate,
    }  # fmt: skip
    out = out if region is None else out | {"cuda_region_max_batch": region}
    return out if top is None else out | {"cuda_shared_top": top}


def write(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text(json.dumps(rows))
    return path
