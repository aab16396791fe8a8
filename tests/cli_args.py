"""A tiny `drlhet train` run's options, and the one error line a refused command prints
(test_cli.py and the command line's other tests)."""

from __future__ import annotations

TINY_SHAPE = [
    "--env",
    "probe-constant",
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
]
TINY = [*TINY_SHAPE, "--steps", "500", "--no-progress"]
"""A run of 2 chunks that takes a few seconds."""


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def refused_before_the_run(main, tmp_path, capsys, args: list[str], message: str) -> None:
    """``drlhet train`` on a tiny run with ``args`` exits with status 2 and one error line that
    holds ``message``, before its run folder is made (``{tmp}`` in ``args``: ``tmp_path``)."""
    import pytest

    args = [a.format(tmp=tmp_path) for a in args]
    with pytest.raises(SystemExit) as stop:
        main(["train", *TINY, *args, "--out", str(tmp_path / "runs")])
    assert stop.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith("drlhet: error: ") and message in line, line
    assert not (tmp_path / "runs").exists()
