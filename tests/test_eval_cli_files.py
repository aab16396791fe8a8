"""``drlhet eval``'s output file and checkpoints, reviewed: ``--out`` in a folder not made yet is
written (it failed after the evaluation, status 1), the run's own files are never overwritten
(``--out RUN/config.json`` replaced the run's configuration), a run whose checkpoints all fail
is named as ``eval RUN: ...``, and a live run's checkpoints that change while read are read
again (the evaluation failed when the run deleted its oldest meanwhile)."""

from __future__ import annotations

import json
import shutil

import pytest

import drlhet.cli.evaluate as evaluate
from drlhet.checkpoint import CheckpointError
from drlhet.cli import main
from tests.test_cli import one_error_line
from tests.test_eval_cli import run_dir  # noqa: F401  (the fixture: a two-chunk run)


def test_out_in_a_folder_not_made_yet_is_written(run_dir, tmp_path):  # noqa: F811
    out = tmp_path / "new" / "deeper" / "e.json"
    main(["eval", str(run_dir), "--episodes", "2", "--out", str(out)])
    assert json.loads(out.read_text())["episodes"] == 2
    assert [p.name for p in out.parent.iterdir()] == ["e.json"]  # no part file left


@pytest.mark.parametrize("name", ["config.json", "metrics.jsonl", "checkpoints/1/e.json"])
def test_the_runs_own_files_are_refused(run_dir, capsys, name):  # noqa: F811
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as stop:
        main(["eval", str(run_dir), "--episodes", "2", "--out", str(run_dir / name)])
    assert stop.value.code == 2
    line = one_error_line(capsys)
    assert f"--out {run_dir / name} is one of the run's own files (config.json," in line, line
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_no_checkpoint_reading_back_is_named_as_eval(run_dir, tmp_path, capsys):  # noqa: F811
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    for meta in run.glob("checkpoints/*/meta/metadata"):
        meta.write_text("{")
    with pytest.raises(SystemExit) as stop:
        main(["eval", str(run), "--episodes", "2"])
    assert stop.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith(f"drlhet: error: eval {run}: no checkpoint reads back: "), line


def test_a_live_runs_checkpoints_that_changed_are_read_again(
    run_dir,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    real, calls = evaluate.resume_run, []

    def deleted_meanwhile(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:  # the run saved on and deleted the newest as it was read
            shutil.rmtree(run / "checkpoints" / "1")
            raise CheckpointError(f"{run}/checkpoints/1: unreadable (FileNotFoundError)")
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluate, "resume_run", deleted_meanwhile)
    main(["eval", str(run), "--episodes", "2"])
    assert len(calls) == 2 and "after chunk 0 (" in capsys.readouterr().out


def test_returns_that_are_not_finite_are_written_as_null():
    from drlhet.cli.evaluate import _jsonable

    got = _jsonable({"a": [1.0, float("nan")], "b": {"c": float("inf")}, "d": (2, "x")})
    assert got == {"a": [1.0, None], "b": {"c": None}, "d": [2, "x"]}
