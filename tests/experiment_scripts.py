"""Running the experiments' scripts in the tests of what they write (test_experiment_outputs.py
and the tests beside it): tiny options, a run of its own for each test (`fresh_run`, autouse
where imported), a script imported by name, the one line a script refuses with, and the run a
JSON row names. A test module imports a fixture as itself (``import x as x``), which ruff takes
as used."""

import importlib
import os
import shlex
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")


REPO = Path(__file__).resolve().parents[1]
REPLAY_TINY = (
    "--capacities 64 --batches 8 --branchings 16 --repeats 1 --ops sample --modes fused "
    "--no-thread-scaling --no-limits --no-peers --out b.json"
)
PRIMITIVES_TINY = (
    "--batches 8 --capacities 64 --at-capacity 64 --at-batch 8 --repeats 2 --modes fused "
    "--out f.json --plot f.png"
)


@pytest.fixture(autouse=True)
def fresh_run(monkeypatch):
    """`_common.run_info` is one object per process: each test's script is a run of its own."""
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    common = importlib.import_module("_common")
    common._run.cache_clear()
    yield
    common._run.cache_clear()


@pytest.fixture
def experiment(monkeypatch):
    """Imports an experiments script by name (they import their siblings by name too)."""
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module


def refused(cli, capsys, script: str, args: str) -> str:
    """The one line ``script`` refuses ``args`` with (exit status 2, nothing on stdout)."""
    with pytest.raises(SystemExit) as stop:
        cli(script, *shlex.split(args))
    out, err = capsys.readouterr()
    assert stop.value.code == 2, (stop.value.code, err[-2000:])
    assert err.count("\n") == 1 and err.startswith(f"{script}: error: "), err
    assert out == ""
    return err.strip()


def check_run(run: dict, command: str) -> None:
    """``run`` is `_common.run_info`'s: this process's versions, machine and command."""
    import jax
    import numpy as np

    assert run["versions"]["jax"] == jax.__version__
    assert run["versions"]["numpy"] == np.__version__
    assert run["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert run["machine"]["cores"] == os.cpu_count() and run["machine"]["cpu"]
    assert run["command"].startswith(f"experiments/{command}")
    assert run["started_utc"].endswith("Z") and "commit" in run


def gpu_row(impl: str, op: str) -> dict:
    """A fused row of bench_replay --device gpu as it writes them now (``device`` the JAX
    device, the model in ``device_kind`` and ``speed_of``, the date in its run)."""
    return {
        "impl": impl, "op": op, "mode": "fused", "capacity": 2**20, "branching": 16,
        "batch": 4096, "items_per_s": 1e8, "items_per_s_min": 9e7, "items_per_s_max": 1.1e8,
        "device": "cuda:0", "device_kind": "NVIDIA H200", "speed_of": "this GPU (NVIDIA H200)",
        "run": {"started_utc": "2026-11-29T10:00:00Z"},
    }  # fmt: skip
