"""What `drlhet dse` predicts, measures and writes, on the toy model of test_model.py: runs in the
chunks of the run, and each figure labelled as what it is."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tiny_profile_key import TINY

from drlhet.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_the_dse_predicts_and_measures_runs_in_the_chunks_of_the_run(tmp_path, monkeypatch):
    """The pipeline's iterations per call divide a chunk's iterations (`drlhet.dse.pipelined
    .unroll`): `drlhet dse` predicts (and ``--measure`` runs) the shape's own run, and
    ``--mapping auto`` predicts the run it picks for, each in its chunks of ``eval_every``."""
    from drlhet.cli import auto as auto_cli
    from drlhet.cli import dse as dse_cli
    from drlhet.dse.model import Model
    from tests.dse.test_model import NATIVE, PROFILE, SHAPES, toy_sheets

    asked: list[tuple[str, int]] = []

    def build(key, **kw):  # the toy model of tests/dse/test_model.py, at this chunk
        asked.append(("model", kw["eval_every"]))
        shapes = dataclasses.replace(SHAPES, iterations=kw["eval_every"] // key.num_envs)
        return Model(shapes, toy_sheets(), {"jax": PROFILE, "native": NATIVE}, cpu_cores=2)

    def measure(key, text, delay, chunk_steps):
        asked.append(("measured", chunk_steps))
        return {"trained_samples_per_s": 1.0}

    monkeypatch.setattr(dse_cli, "build_model", build)
    monkeypatch.setattr(auto_cli, "build_model", build)  # --mapping auto's
    monkeypatch.setattr(dse_cli, "measure_mapping", measure)
    out = tmp_path / "d.json"
    args = ["dse", "--num-envs", "2", "--delay", "8", "--devices", "cpu", "--measure"]
    main([*args, "--cache-dir", str(tmp_path), "--out", str(out)])
    every = dataclasses.replace(TINY, num_envs=2).train_config().eval_every
    assert asked[0] == ("model", every) and set(asked[1:]) == {("measured", every)}
    asked.clear()
    cfg = TINY.train_config(eval_every=TINY.num_envs * 625, delay=8)
    dse_cli.auto_mapping(cfg, cfg.delay, log=lambda s: None)
    assert asked == [("model", TINY.num_envs * 625)]


def test_the_json_and_the_table_label_each_figure_as_what_it_is(tmp_path, monkeypatch, capsys):
    """Every row of ``--out`` carries its own basis (profiled here, modeled from a sheet) and,
    with ``--measure``, what was measured of it (runnable rows only); the table prints it."""
    from drlhet.cli import dse as dse_cli
    from drlhet.dse.model import Model
    from tests.dse.test_model import NATIVE, PROFILE, SHAPES, toy_sheets

    sheets = toy_sheets()
    sheets["h100"] = {**sheets["gpu"], "name": "h100"}  # the toy GPU, named as a shipped sheet

    def build(key, **kw):
        return Model(SHAPES, sheets, {"jax": PROFILE, "native": NATIVE}, cpu_cores=2)

    measured = iter(range(1, 1000))
    monkeypatch.setattr(dse_cli, "build_model", build)
    monkeypatch.setattr(
        dse_cli, "measure_mapping", lambda *a, **k: {"trained_samples_per_s": next(measured)}
    )
    out = tmp_path / "d.json"
    args = ["dse", "--devices", "cpu,h100", "--measure", "--top", "1000"]
    main([*args, "--cache-dir", str(tmp_path), "--out", str(out)])
    rows = json.loads(out.read_text())["predictions"]
    table = capsys.readouterr().out
    got = {r["mapping"]: r["measured_trained_samples_per_s"] for r in rows if r["runnable"]}
    assert sorted(got.values()) == list(range(1, len(got) + 1))  # each its own measurement
    for r in rows:
        on_gpu = "@h100" in r["mapping"]
        assert r["basis"] == ("modeled (sheet)" if on_gpu else "profiled"), r
        assert r["runnable"] is (not on_gpu) or r["note"], r
        if not r["runnable"]:
            assert r["measured_trained_samples_per_s"] is None, r
    for mapping, rate in got.items():
        line = next(x for x in table.splitlines() if f" {mapping} " in x)
        assert line.split()[-1] == f"{rate:,}" and "profiled" in line, line
    # the rows that did not run say so; the best measured is named beside the best predicted
    rows_shown = [x for x in table.splitlines() if x[:4].strip().isdigit()]
    assert all(x.endswith(" not run") for x in rows_shown if "@h100" in x)
    best = max(got, key=lambda m: got[m])
    assert f"best measured here: {best} {got[best]:,}/s (measured; predicted " in table
    assert "bottleneck = what sets the time: fused = one program" in table


def test_a_search_of_devices_none_of_which_runs_here_says_so(tmp_path, monkeypatch, capsys):
    from drlhet.cli import dse as dse_cli
    from drlhet.dse.model import Model
    from tests.dse.test_model import PROFILE, SHAPES, toy_sheets

    sheets = toy_sheets() | {"h100": {**toy_sheets()["gpu"], "name": "h100"}}
    monkeypatch.setattr(
        dse_cli, "build_model", lambda *a, **k: Model(SHAPES, sheets, {"jax": PROFILE})
    )
    main(
        [
            "dse",
            "--devices",
            "h100",
            "--cache-dir",
            str(tmp_path),
            "--out",
            str(tmp_path / "d.json"),
        ]
    )
    out = capsys.readouterr().out  # the JSON's best_runnable null had no line
    assert "best runnable here: none (no mapping of these devices runs on this machine)" in out


def test_a_sheets_folder_replaces_the_shipped_sheets(tmp_path, monkeypatch, capsys):
    """``--sheets DIR``: its devices are the default ones and are what the model reads."""
    from drlhet.cli import dse as dse_cli
    from drlhet.dse.devices import load_sheets
    from drlhet.dse.model import Model
    from tests.dse.test_model import NATIVE, PROFILE, SHAPES, toy_sheets

    folder = tmp_path / "sheets"
    folder.mkdir()
    sheets = toy_sheets()
    sheets["myboard"] = {**sheets.pop("fpga"), "name": "myboard"}
    for name, sheet in sheets.items():
        (folder / f"{name}.json").write_text(json.dumps(sheet))
    read: list = []

    def build(key, **kw):
        read.append(kw["sheets_dir"])
        return Model(SHAPES, load_sheets(kw["sheets_dir"]), {"jax": PROFILE, "native": NATIVE})

    monkeypatch.setattr(dse_cli, "build_model", build)
    out = tmp_path / "d.json"
    main(["dse", "--sheets", str(folder), "--cache-dir", str(tmp_path), "--out", str(out)])
    assert read == [folder]
    result = json.loads(out.read_text())
    assert result["devices"] == ["cpu:0", "cpu:1", "gpu", "myboard"]
    assert any("learner=fpga@myboard" in p["mapping"] for p in result["predictions"])


def test_a_gpu_profile_of_other_shapes_is_noted_with_the_options_of_its_shapes(
    tmp_path, monkeypatch, capsys
):
    """A ``--gpu-profile`` with no rows for the shape asked leaves the GPU modeled; the note
    said only that, not which ``drlhet dse`` options its measurements answer (the shipped
    files hold two shapes, neither the default one)."""
    from drlhet.cli import dse as dse_cli
    from drlhet.dse.model import Model
    from tests.dse.test_model import PROFILE, SHAPES, toy_sheets

    sheets = toy_sheets() | {"h200": {**toy_sheets()["gpu"], "name": "h200"}}
    monkeypatch.setattr(
        dse_cli, "build_model", lambda *a, **k: Model(SHAPES, sheets, {"jax": PROFILE})
    )
    path = REPO / "results" / "gpu_profile_h200.json"
    args = ["dse", "--devices", "cpu,h200", "--gpu-profile", str(path), "--batch", "256"]
    main([*args, "--capacity", "2^20", "--cache-dir", str(tmp_path), "--out", str(tmp_path / "d")])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"note: --gpu-profile {path} has no rows for this shape; GPUs stay modeled from sheets "
        "(its rows were measured at: --batch 128 --capacity 50000; --hidden 256 256 --batch "
        "4096 --num-envs 64)"
    ), out[0]


def test_the_shapes_a_profile_holds_are_named_by_the_options_that_differ():
    from drlhet.dse.gpu_profile import shapes_measured

    shape = dict(algo="dqn", env="E", hidden=[64, 64], batch=128, capacity=9, branching=16)
    shape |= dict(num_envs=4, sgd_steps=2, backend=None)
    rows = [
        {"key": "a-jax", "shape": shape},
        {"key": "a-cuda", "shape": shape | {"backend": "cuda"}},  # the same shape: once
        {"key": "b-jax", "shape": shape | {"hidden": [], "algo": "ddpg", "env": "P"}},
        {"key": "c-jax"},  # an older row without its shape: by its key
    ]
    asked = shape | {"batch": 256}
    assert shapes_measured(rows, asked) == [
        "--batch 128",
        "--algo ddpg --env P --hidden --batch 128",
        "key c-jax",
    ]
    assert shapes_measured(rows[:1], shape) == ["this shape (a-jax)"]
