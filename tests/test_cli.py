"""The command line and the run directory it writes (what it refuses: test_cli_refusals.py; a run
that fails: test_cli_failures.py)."""

from __future__ import annotations

import json

import pytest

# test_eval_cli.py, test_uniform_cli.py and others import these from here
from cli_args import TINY, TINY_SHAPE, one_error_line  # noqa: F401

from drlhet.cli import main


def test_train_command_writes_a_run_directory(tmp_path, capsys):
    main(
        [
            "train",
            *TINY_SHAPE,
            "--steps",
            "600",
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
    # warmup 100 + (n_step - 1) x 4 envs to fill the 3-step FIFO + the 2 whole chunks of 200
    # that fit in --steps 600 (rounded down, never up)
    assert len(rows) == 2 and rows[-1]["env_steps"] == 100 + 2 * 4 + 2 * 200
    assert (run / "curve.png").stat().st_size > 1000
    out = capsys.readouterr().out
    assert "trained samples/s" in out and "final evaluation return" in out
    assert "env steps per seed: 508 of --steps 600 (108 of warm-up, then 2 of 2 chunks" in out
    assert "all seeds, after the first chunk): " in out


def test_a_run_of_one_chunk_says_its_throughput_includes_compilation(tmp_path, capsys):
    """With one chunk there is no chunk after the first: its rate (compilation included) was
    printed as measured "after the first chunk". Its progress bar, in a log (no terminal),
    draws the chunk once, then once more as it closes (the chunk was drawn twice)."""
    main(["train", *TINY_SHAPE, "--steps", "400", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert "then 1 of 1 chunks" in out
    assert "all seeds, one chunk, compilation included): " in out
    drawn = [line for line in err.replace("\r", "\n").splitlines() if "ret=" in line]
    assert len(drawn) == 2 and all("308/400" in line for line in drawn), drawn


def test_help_and_what_a_command_writes_to_stderr_still_come_through(capsys, monkeypatch):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0 and "usage: drlhet" in capsys.readouterr().out

    def backends_command() -> None:  # a stand-in command that warns, as a run's progress does
        import sys

        print("progress", file=sys.stderr)

    monkeypatch.setattr("drlhet.cli.backends_command", backends_command)
    main(["backends"])
    assert capsys.readouterr().err == "progress\n"


def test_backends_command_lists_the_registry(capsys):
    main(["backends"])
    out = capsys.readouterr().out
    for name in ("jax", "native", "python", "fpga"):
        assert any(line.startswith(name) for line in out.splitlines())
    assert "modeled only" in out
    # a backend that also simulates its hardware on the CPU says so
    assert "fpga (cpu: sim)" in next(ln for ln in out.splitlines() if ln.startswith("fpga"))
    # the trees a replay backend holds, where it does not hold every tree
    assert "its replay holds trees of K <= 256" in out  # native, cuda
    assert "its replay holds trees of K in (4, 8, 16, 32, 64) and capacity <= 1073741824" in out
    assert out.count("its replay holds trees") == 3  # jax and python hold any tree


def test_a_run_on_a_simulated_device_says_so_before_it_starts(tmp_path, capsys):
    main(["train", *TINY, "--backend", "fpga", "--out", str(tmp_path), "--name", "r"])
    out = capsys.readouterr().out
    before, _, after = out.partition("final evaluation return")
    assert "note: replay=fpga@cpu:0 simulates its hardware here" in before
    assert "replay=fpga@cpu:0 is a simulation of its hardware" in after  # beside the figures


def test_a_run_names_the_placements_that_only_simulate_their_hardware():
    from drlhet.cli.report import simulated

    mapping = "actors=jax@cpu:0,replay=cuda@cpu:0,learner=fpga@cpu:1"
    assert simulated(mapping) == ["replay=cuda@cpu:0", "learner=fpga@cpu:1"]
    assert simulated("actors=jax@gpu:0,replay=cuda@gpu:0,learner=jax@gpu:0") == []
    assert simulated("actors=jax@cpu:0,replay=native@cpu:0,learner=jax@cpu:0") == []
