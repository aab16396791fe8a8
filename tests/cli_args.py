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
