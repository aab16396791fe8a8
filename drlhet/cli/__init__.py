"""Command line: ``drlhet train | backends | profile | dse`` (also ``python -m drlhet``).

The only part of the package that reads flags and environment variables; everything else takes
configuration objects. Bad input ends the command with one line naming the value (exit 2), no
traceback.
"""

from __future__ import annotations

import sys

import tyro

from drlhet.backends import BackendUnavailable
from drlhet.cli.dse import dse_command, profile_command
from drlhet.cli.train import backends_command, train_command

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``drlhet train|backends|profile|dse ...``."""
    try:
        tyro.extras.subcommand_cli_from_dict(
            {
                "train": train_command,
                "backends": backends_command,
                "profile": profile_command,
                "dse": dse_command,
            },
            args=sys.argv[1:] if argv is None else argv,
        )
    except (ValueError, BackendUnavailable) as e:
        print(f"drlhet: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
