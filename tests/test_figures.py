"""Smoke tests of the figure scripts (``experiments/fig_primitives.py``, ``fig_branching.py``,
``fig_mapping.py``): each ``main`` at a tiny scale writes JSON rows with the documented fields
and a non-empty PNG, and a figure for a device that is not here is labelled modeled."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIELDS = {"backend", "primitive", "batch", "capacity", "branching", "seconds", "label"}
FIELDS |= {"seconds_min", "seconds_max", "threading", "mode"}
MEASURED_HERE = {"jax", "native"}


@pytest.fixture
def experiment(monkeypatch):
    """Imports an experiments script by name (they import their siblings by name too)."""
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module


def check_outputs(rows: list[dict], out: Path, plot: Path) -> None:
    assert json.loads(out.read_text()) == rows
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def check_latency_rows(rows: list[dict]) -> None:
    for r in rows:
        assert FIELDS <= set(r), FIELDS - set(r)
        assert 0 < r["seconds_min"] <= r["seconds"] <= r["seconds_max"], r
        # measured only for backends that run here; everything else (the FPGA board, a GPU)
        # is modeled and says so
        assert r["label"].startswith("measured") == (r["backend"] in MEASURED_HERE), r
        assert r["label"].startswith(("measured", "modeled")), r
    assert {r["backend"] for r in rows} >= {"jax", "fpga", "gpu"}
    assert {r["label"] for r in rows if r["backend"] == "fpga"} == {"modeled (cycle model)"}
    assert {r["label"] for r in rows if r["backend"] == "gpu"} == {"modeled (sheet)"}


def test_fig_primitives_tiny(experiment, tmp_path):
    fp = experiment("fig_primitives")
    args = fp.Args(
        batches=(512,), capacities=(1024,), at_capacity=1024, at_batch=512, repeats=2,
        out=tmp_path / "p.json", plot=tmp_path / "p.png",
    )  # fmt: skip
    rows = fp.main(args)
    check_outputs(rows, args.out, args.plot)
    check_latency_rows(rows)
    got = {(r["sweep"], r["backend"], r["primitive"], r["mode"]) for r in rows}
    for backend in ("jax", "fpga", "gpu"):
        for op in ("insert", "sample", "update"):
            for mode in ("percall", "fused"):
                assert {("batch", backend, op, mode), ("capacity", backend, op, mode)} <= got


def test_fig_primitives_draws_gpu_rows_of_the_default_update_path(
    experiment, tmp_path, monkeypatch
):
    fp = experiment("fig_primitives")
    from drlhet.backends import cuda

    monkeypatch.setattr(cuda, "BLOCK_MAX_BATCH", 1024)

    def row(impl, batch, block_max, rate):
        return {
            "impl": impl, "op": "sample", "mode": "fused", "capacity": 2**20, "branching": 16,
            "batch": batch, "items_per_s": rate, "items_per_s_min": rate / 2,
            "items_per_s_max": rate * 2, "device": "NVIDIA H100 80GB HBM3", "date": "d",
            "cuda_update_path": f"(BLOCK_MAX_BATCH={block_max})",
        }  # fmt: skip

    rows = [row(i, b, m, 1e6 * b) for i in ("drlhet-cuda", "drlhet-jax")
            for b in (256, 4096) for m in (0, 65536)]  # fmt: skip
    rows[0]["items_per_s"] = 2e6 * 256  # cuda at 256 on the per-level path: not the default's
    rows.append({**row("drlhet-native", 256, 0, 1.0), "device": "host CPU"})
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(rows))
    got, notes = fp.gpu_measured((path, tmp_path / "missing.json"), 2**20, 16, ("sample",))
    assert notes == [f"{tmp_path / 'missing.json'}: no such file; its GPU rows are omitted"]
    picked = {(r["backend"], r["batch"]): r["cuda_update_path"] for r in got}
    assert picked == {
        ("cuda", 256): "(BLOCK_MAX_BATCH=65536)",  # one block per tree up to 1024
        ("jax", 256): "(BLOCK_MAX_BATCH=65536)",  # jax from the same run
        ("cuda", 4096): "(BLOCK_MAX_BATCH=0)",  # a launch per level above it
        ("jax", 4096): "(BLOCK_MAX_BATCH=0)",
    }
    assert all(r["seconds"] == pytest.approx(1e-6) for r in got)  # B / (1e6 B) items/s
    assert all(r["label"] == "measured (GPU, d)" for r in got)


def test_fig_branching_tiny(experiment, tmp_path):
    fb = experiment("fig_branching")
    args = fb.Args(
        branchings=(2, 4), capacity=1024, batch=512, repeats=2, modes=("fused",),
        out=tmp_path / "b.json", plot=tmp_path / "b.png",
    )  # fmt: skip
    rows = fb.main(args)
    check_outputs(rows, args.out, args.plot)
    check_latency_rows(rows)
    assert {r["branching"] for r in rows if r["backend"] == "jax"} == {2, 4}
    # the FPGA replay module is built for K >= 4: no modeled figure at K 2
    assert {r["branching"] for r in rows if r["backend"] == "fpga"} == {4}
    assert {r["primitive"] for r in rows} == {"sample", "update"}


def test_fig_mapping_redraws_the_committed_validation(experiment, tmp_path):
    fm = experiment("fig_mapping")
    args = fm.Args(out=tmp_path / "m.json", plot=tmp_path / "m.png")
    rows = fm.main(args)
    check_outputs(rows, args.out, args.plot)
    v = json.loads((REPO / args.validation).read_text())
    maps = [r for r in rows if r["kind"] == "mapping"]
    assert len(maps) == len(v["rows"])
    for c in v["configs"]:
        at = [r for r in maps if (r["batch"], r["capacity"]) == (c["batch"], c["capacity"])]
        assert [r["mapping"] for r in at if r["pick"]] == [c["pick"]]
    bases = [r for r in rows if r["kind"] == "baseline"]
    assert any(b["basis"] != "measured" for b in bases)
    for b in bases:
        assert b["label"].startswith("measured" if b["basis"] == "measured" else "modeled"), b
        assert b["best_speedup"] == pytest.approx(
            max(r["measured_trained_samples_per_s"] for r in maps if r["batch"] == b["batch"]
                and r["capacity"] == b["capacity"]) / b["trained_samples_per_s"]
        )  # fmt: skip
    ratios = {r["baseline"]: r for r in rows if r["kind"] == "ratio"}
    assert set(ratios) == {b["baseline"] for b in bases}
    top = next(r for r in rows if r["kind"] == "ratio_max" and r["over"] == "every baseline")
    assert top["best_over_baseline"] == max(b["best_speedup"] for b in bases)


def delay_runs(folder, task: str, levels: dict[int, float]) -> None:
    """``drlhet train`` run folders ``<task>-k<k>`` of three seeds whose returns rise to
    ``levels[k]`` over three evaluations (spread +-10)."""
    for k, level in levels.items():
        run_dir = folder / f"{task}-k{k}"
        run_dir.mkdir(parents=True)
        rows = [
            {"env_steps": s, "eval_return": [level * s / 3 + d for d in (-10, 0, 10)], "wall_s": s}
            for s in (1, 2, 3)
        ]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_fig_delay_reads_train_runs(experiment, tmp_path):
    # `--from-runs`: the delay figure from `drlhet train` run directories (the Hopper study)
    fd = experiment("fig_delay")
    delay_runs(tmp_path / "runs", "td3-hopper", {0: 1000.0, 4: 995.0, 16: 500.0})
    args = fd.Args(
        tasks=("td3-hopper",), delays=(0, 4, 16), seeds=3, out=tmp_path / "out",
        plot="h.png", from_runs=tmp_path / "runs",
    )  # fmt: skip
    report = fd.main(args)
    # final = mean of the last two evaluations: k0 833.3 +- 8.2; k4 829.2 within; k16 not
    assert [ok for _, _, ok in report["td3-hopper"].values()] == [True, True, False]
    saved = json.loads((tmp_path / "out" / "delay_td3-hopper.json").read_text())
    assert saved["config"]["env"] == "gymnasium:Hopper-v5"
    assert (tmp_path / "out" / "h.png").read_bytes()[:4] == b"\x89PNG"


def test_fig_delay_compares_every_k_against_k0_wherever_it_stands(experiment, tmp_path):
    """``within_one_std_of_k0`` was measured against the first of ``--delays``: with
    ``--delays 4 0 16`` against k = 4, not k = 0 as its name and the printed text say."""
    fd = experiment("fig_delay")
    delay_runs(tmp_path / "runs", "dqn", {4: 500.0, 0: 1000.0, 16: 995.0})
    args = fd.Args(
        tasks=("dqn",), delays=(4, 0, 16), seeds=3, out=tmp_path / "out", plot="d.png",
        from_runs=tmp_path / "runs",
    )  # fmt: skip
    report = fd.main(args)["dqn"]
    # k0 833.3 +- 8.2: k4 (416.7) is not within one std of it, k16 (829.2) is
    assert {k: ok for k, (_, _, ok) in report.items()} == {4: False, 0: True, 16: True}
    saved = json.loads((tmp_path / "out" / "delay_dqn.json").read_text())["by_delay"]
    assert [saved[k]["within_one_std_of_k0"] for k in ("4", "0", "16")] == [False, True, True]


def test_profile_host_loop_times_the_host_driven_stages(tmp_path):
    # experiments/profile_host_loop.py wraps the host loops' stages with timers: after the
    # in-program channels became the CPU splits' default it ran none of them, and its wrappers
    # hid the stages' `lower` (an AttributeError on its default mapping, whatever the input)
    out = tmp_path / "p.json"
    args = ["--chunks", "2", "--chunk-steps", "200", "--buffer-size", "1024", "--batch-size",
            "32", "--out", str(out)]  # fmt: skip
    script = REPO / "experiments" / "profile_host_loop.py"
    got = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-2000:]
    host = json.loads(out.read_text())["loop"]["host"]
    assert {"actor", "replay", "learner", "device_put"} <= set(host), host
    assert all(v["calls"] > 0 and v["seconds"] > 0 for v in host.values())
