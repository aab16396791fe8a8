"""experiments/bench_replay.py at a tiny scale: the pure-JAX peer (flashbax) runs where the
``jax`` backend runs, with as many steps a timed scan, and its rows say so; a backend that is
only simulated here (``cuda`` under the host emulation) is compared with no peer."""

import importlib
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("bench_replay")


def test_flashbax_runs_beside_jax_and_a_simulation_is_compared_with_no_peer(
    bench, tmp_path, capsys
):
    pytest.importorskip("flashbax", reason="missing library: flashbax (the bench extra)")
    args = bench.Args(
        capacities=(1024,), batches=(32,), branchings=(16,), backends=("jax", "cuda"),
        ops=("step",), modes=("fused",), thread_scaling=False, limits=False, repeats=1,
        plain=False, out=tmp_path / "rows.json",
    )  # fmt: skip
    rows = bench.main(args)
    printed = capsys.readouterr().out
    assert json.loads(args.out.read_text()) == rows
    by = {r["impl"]: r for r in rows}
    assert {"drlhet-jax", "flashbax"} <= set(by), sorted(by)
    for field in ("device", "speed_of", "steps_per_repeat"):
        assert by["flashbax"][field] == by["drlhet-jax"][field], field
    assert by["flashbax"]["items_per_s"] > 0
    assert "step: drlhet-jax fused / flashbax fused = " in printed
    if "drlhet-cuda" in by:  # its custom calls under the emulation: function, not speed
        assert "simulation" in by["drlhet-cuda"]["speed_of"]
        assert "drlhet-cuda fused / flashbax" not in printed
        assert "drlhet-cuda fused / drlhet-jax" not in printed
