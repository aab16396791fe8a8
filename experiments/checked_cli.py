"""How the experiments read their command line, as the ``drlhet`` CLI does: tyro parses it;
then what tyro refuses (an unknown option, a value of the wrong type), a count below its least
(a repeat, a round, a seed, a batch), a value the script's own check refuses, an output that
cannot be written, or drlhet's configuration check (`drlhet.runtime.config.ConfigError`) ends
the script with one line on stderr, ``<script>: error: ...``, and exit status 2: no traceback,
and nothing measured or written (each is checked before the first measurement, and drlhet
checks a configuration before it runs it).

Imports no jax: a script may set up its threading before jax is imported (bench_replay.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import tyro

__all__ = ["refused_counts", "missing_files", "unwritable_outputs", "run"]

OUTPUTS = ("out", "plot", "measured_out")
"""The fields through which the scripts name what they write (a file, or a folder of files)."""

A = TypeVar("A")


def refused_counts(args: Any, least: Mapping[str, int]) -> str:
    """Why ``args`` has a count below its least (``least``: field -> the smallest value; a
    field may hold an int, None (unset), or a tuple of ints, which must not be empty), in one
    line naming the option; "" when none is."""
    for field, low in least.items():
        value = getattr(args, field)
        option = "--" + field.replace("_", "-")
        if isinstance(value, tuple):
            bad = [v for v in value if v < low]
            if bad or not value:
                return f"{option} must be integers >= {low}, got {bad or 'none'}"
        elif value is not None and value < low:
            return f"{option} must be >= {low}, got {value}"
    return ""


def missing_files(*paths: Path | None) -> str:
    """Why the inputs ``paths`` (None: not given) cannot be read, naming the first that is not a
    file, or ""."""
    for path in paths:
        if path is not None and not path.is_file():
            return f"{path}: no such file"
    return ""


def unwritable_outputs(args: Any) -> str:
    """Why an output of ``args`` (`OUTPUTS`: a file, or an existing folder) cannot be written,
    naming the option, or "": asked before the run, not after its measurements."""
    from drlhet.writable import check_writable  # the standard library only: no jax yet

    for name in OUTPUTS:
        path = getattr(args, name, None)
        if isinstance(path, Path):
            try:
                where = path if path.is_dir() else path.parent
                check_writable(where, f"--{name.replace('_', '-')} {path}", "file")
            except ValueError as e:
                return str(e)
    return ""


def run(
    args_type: type[A],
    main: Callable[[A], Any],
    least: Mapping[str, int],
    refuse: Callable[[A], str] | None = None,
) -> None:
    """Parses ``args_type`` from the command line and runs ``main`` on it, unless a count is
    below its least (`refused_counts`), ``refuse(args)`` says why not, an output cannot be
    written (`unwritable_outputs`), or ``main`` raises drlhet's `ConfigError`: then one line
    and exit status 2."""
    from drlhet.parse_errors import parse_or_refuse  # the standard library only: no jax yet

    args = parse_or_refuse(lambda: tyro.cli(args_type), _refuse)  # what tyro refuses: one line too
    why = refused_counts(args, least) or (refuse(args) if refuse is not None else "")
    why = why or unwritable_outputs(args)
    if not why:
        try:
            main(args)
            return
        except ValueError as e:
            from drlhet.runtime.config import ConfigError  # jax is imported by now

            if not isinstance(e, ConfigError):
                raise
            why = str(e)
    _refuse(why)


def _refuse(why: str) -> NoReturn:
    """Ends the script: ``<script>: error: <why>`` on stderr, exit status 2."""
    print(f"{Path(sys.argv[0]).stem}: error: {why}", file=sys.stderr)
    raise SystemExit(2)
