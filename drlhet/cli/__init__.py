"""Command line: ``drlhet train | backends | profile | dse`` (also ``python -m drlhet``).

The only part of the package that reads flags and environment variables; everything else takes
configuration objects. A command ends in one of three ways: done (exit status 0); bad input,
found before anything is written or measured (one line ``drlhet: error: ...`` naming the
option and its value, status 2); or a failure while running (one line ``drlhet: failed: <type>:
<message>``, status 1). ``--debug``, anywhere on the line, also prints the traceback.
"""

from __future__ import annotations

import functools
import io
import sys
import traceback

import tyro

from drlhet.cli.common import UsageError
from drlhet.cli.dse import dse_command, profile_command
from drlhet.cli.train import backends_command, train_command

__all__ = ["main", "EXIT_BAD_INPUT", "EXIT_FAILED"]

EXIT_BAD_INPUT = 2
"""Exit status of a command refused for its input (tyro's own parsing errors use it too)."""
EXIT_FAILED = 1
"""Exit status of a command that failed while running."""
DEBUG = "--debug"


def _one_line(e: BaseException) -> str:
    """The first line of ``e``'s message, saying so when there is more."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    return lines[0] + (f" (more with {DEBUG})" if len(lines) > 1 else "")


def _end(debug: bool, status: int, line: str) -> None:
    if debug:
        traceback.print_exc()
    print(line, file=sys.stderr)
    raise SystemExit(status) from None


def _parse_error(text: str) -> str:
    """The message of a tyro parsing error, one line: its first section after the title (``Error
    parsing --x: ...``, ``Unrecognized options: ...``), without the box, rules and wrapping."""
    lines = [ln.strip().strip("│|╭╮╰╯+").strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    rule = set("─-")
    title = lines[0].strip("─- ") if lines else ""
    section: list[str] = []
    for ln in lines[1:]:  # the box's top border or a plain title line holds the title
        if set(ln) <= rule:
            if section:
                break
            continue
        section.append(ln)
    message = " ".join(section) or title or "(no message)"
    if title and not title.endswith("error") and title.split()[0].lower() not in message.lower():
        message = f"{title.lower()}: {message}"  # e.g. "missing subcommand: Expected one of ..."
    return message.removeprefix("Error parsing ")


def _parsed(command, parsing: io.StringIO, stderr):
    """``command`` run with ``stderr`` back in place of ``parsing`` (what tyro wrote into it
    while parsing, passed on)."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        if sys.stderr is parsing:
            sys.stderr = stderr
            stderr.write(parsing.getvalue())
        return command(*args, **kwargs)

    return run


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``drlhet [--debug] train|backends|profile|dse ...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    end = args.index("--") if "--" in args else len(args)
    debug = DEBUG in args[:end]
    args = [a for i, a in enumerate(args) if i >= end or a != DEBUG]
    stderr = sys.stderr
    commands = {"train": train_command, "backends": backends_command}
    commands |= {"profile": profile_command, "dse": dse_command}
    sys.stderr = parsing = io.StringIO()  # tyro's parsing errors: read back, told in one line
    try:
        tyro.extras.subcommand_cli_from_dict(
            {name: _parsed(command, parsing, stderr) for name, command in commands.items()},
            prog="drlhet",
            description=f"Deep RL with a prioritized replay buffer on heterogeneous devices. "
            f"Exit status: 0 done, {EXIT_BAD_INPUT} bad input (nothing written), {EXIT_FAILED} "
            f"failed while running; add {DEBUG} anywhere for the traceback.",
            args=args,
        )
    except SystemExit as e:
        if sys.stderr is not parsing or e.code in (0, None):
            raise
        sys.stderr = stderr
        _end(False, EXIT_BAD_INPUT, f"drlhet: error: {_parse_error(parsing.getvalue())}")
    except UsageError as e:
        _end(debug, EXIT_BAD_INPUT, f"drlhet: error: {_one_line(e)}")
    except KeyboardInterrupt:
        _end(debug, 130, "drlhet: interrupted")
    except Exception as e:  # noqa: BLE001 - any failure while running: one line, no traceback
        _end(debug, EXIT_FAILED, f"drlhet: failed: {type(e).__name__}: {_one_line(e)}")
    finally:
        if sys.stderr is parsing:
            sys.stderr = stderr
            stderr.write(parsing.getvalue())
