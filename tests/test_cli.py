"""The command line and the run directory it writes; the training program has no tree copies."""

from __future__ import annotations

import json

import pytest

from drlhet.cli import main


def test_train_command_writes_a_run_directory(tmp_path, capsys):
    main(
        [
            "train",
            "--env",
            "probe-constant",
            "--steps",
            "600",
            "--warmup",
            "100",
            "--batch-size",
            "16",
            "--buffer-size",
            "500",
            "--eval-every",
            "200",
            "--eval-envs",
            "2",
            "--dqn.hidden",
            "8",
            "--out",
            str(tmp_path),
            "--name",
            "run",
            "--no-progress",
        ]
    )
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["env"] == "probe-constant" and config["dqn"]["hidden"] == [8]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # warmup 100 + (n_step - 1) x 4 envs to fill the 3-step FIFO + 3 chunks of 200
    assert len(rows) == 3 and rows[-1]["env_steps"] == 100 + 2 * 4 + 3 * 200
    assert (run / "curve.png").stat().st_size > 1000
    out = capsys.readouterr().out
    assert "trained samples/s" in out and "final evaluation return" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "0"], "batch_size must be >= 1, got 0"),
        (["--mapping", "actors=cpu:0,replay=bogus@cpu:1,learner=cpu:1"], "no backend 'bogus'"),
        (["--mapping", "actors=cpu:0,replay=python@cpu:0,learner=cpu:0"], "modeled only"),
        (["--backend", "nope", "--steps", "1000"], "no backend 'nope'"),
        (["--buffer-size", "3000000000"], "buffer_size must be <= 2147483647"),
        (["--backend", "fpga", "--branching", "2", "--steps", "1000"], "supports K in"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *args, "--out", str(tmp_path / "runs"), "--no-progress"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("drlhet: error:") and message in err[0]
    assert not (tmp_path / "runs").exists()


def test_backends_command_lists_the_registry(capsys):
    main(["backends"])
    out = capsys.readouterr().out
    for name in ("jax", "native", "python", "fpga"):
        assert any(line.startswith(name) for line in out.splitlines())
    assert "modeled only" in out
