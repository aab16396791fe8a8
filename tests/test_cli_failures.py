"""A run that fails while running: one line and exit status 1, its run directory removed unless
it holds checkpoints or existed before."""

from __future__ import annotations

import pytest
from cli_args import TINY, one_error_line

from drlhet.cli import main


@pytest.mark.parametrize("debug", [False, True])
def test_a_failure_while_running_is_one_line_exit_1_and_removes_the_run(
    tmp_path, capsys, monkeypatch, debug
):
    seen = []

    def fake_run(config, mapping, **kwargs):
        seen.append(sorted(p.name for p in (tmp_path / "runs").iterdir()))
        raise RuntimeError("the device went away\nsecond line of detail")

    monkeypatch.setattr("drlhet.cli.train.run", fake_run)
    flags = ["--debug"] if debug else []
    with pytest.raises(SystemExit) as exit_info:
        main([*flags, "train", *TINY, "--out", str(tmp_path / "runs"), "--name", "r"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("drlhet: failed: RuntimeError: the device went away (more with --debug)")
    assert (len(err) > 1 and err[0].startswith("Traceback")) if debug else len(err) == 1
    assert seen == [["r"]]  # the run directory existed while running, and is gone
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("existed", [False, True])
def test_a_failed_run_keeps_its_checkpoints_and_a_directory_that_existed(
    tmp_path, capsys, monkeypatch, existed
):
    run_dir = tmp_path / "runs" / "r"
    if existed:
        run_dir.mkdir(parents=True)
        (run_dir / "notes.txt").write_text("mine")

    def fake_run(config, mapping, **kwargs):
        if not existed:  # a run that wrote a checkpoint before it failed
            (run_dir / "checkpoints" / "0").mkdir(parents=True)
        raise ValueError("priority NaN in the replay")

    monkeypatch.setattr("drlhet.cli.train.run", fake_run)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *TINY, "--out", str(tmp_path / "runs"), "--name", "r"])
    assert exit_info.value.code == 1  # a ValueError while running is a failure, not bad input
    assert one_error_line(capsys) == "drlhet: failed: ValueError: priority NaN in the replay"
    assert run_dir.exists()
    assert (run_dir / "notes.txt").exists() if existed else (run_dir / "checkpoints").exists()
