"""Command line: ``drlhet train | eval | backends | profile | dse`` (also ``python -m drlhet``).

The only part of the package that reads flags and environment variables; everything else takes
configuration objects. A command ends in one of three ways: done (exit status 0); bad input,
found before anything is written or measured (one line ``drlhet: error: ...`` naming the
option and its value, status 2); or a failure while running (one line ``drlhet: failed: <type>:
<message>``, status 1). ``--debug``, anywhere on the line, also prints the traceback. A
training run stopped by SIGINT (Ctrl-C) or SIGTERM ends after its chunk, that chunk saved
(`drlhet.cli.stopping`), with status 128 + the signal's number (130, 143); a second one stops
it at once.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback

import tyro

from drlhet.cli.common import UsageError, command_line, empty_paths
from drlhet.cli.dse import dse_command, profile_command
from drlhet.cli.evaluate import eval_command
from drlhet.cli.train import backends_command, train_command
from drlhet.integers import registry as integer_options
from drlhet.parse_errors import HeldStderr

__all__ = ["main", "EXIT_BAD_INPUT", "EXIT_FAILED"]

EXIT_BAD_INPUT = 2
"""Exit status of a command refused for its input (tyro's own parsing errors use it too)."""
EXIT_FAILED = 1
"""Exit status of a command that failed while running."""
DEBUG = "--debug"


def _one_line(e: BaseException | str) -> str:
    """The first line of ``e``'s message, saying so when there is more."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    return lines[0] + (f" (more with {DEBUG})" if len(lines) > 1 else "")


def _platforms_refused(e: BaseException) -> str:
    """The line for JAX failing to start the platforms ``JAX_PLATFORMS`` names (its error is
    raised from ``xla_bridge``; without JAX's CUDA plugin, ``cuda`` is a bare AssertionError),
    else ""."""
    platforms = os.environ.get("JAX_PLATFORMS")
    frames = traceback.extract_tb(e.__traceback__)
    if not platforms or not frames or not frames[-1].filename.endswith("xla_bridge.py"):
        return ""
    said = str(e).split(" (set JAX_PLATFORMS")[0].strip()
    why = said or f"JAX raised a bare {type(e).__name__}: is its plugin installed?"
    return (
        f"JAX_PLATFORMS={platforms}: JAX cannot start it ({_one_line(why)}); unset "
        "JAX_PLATFORMS, or install JAX's plugin for it (for a GPU: pip install 'jax[cuda13]')"
    )


def _end(debug: bool, status: int, line: str) -> None:
    if debug:
        traceback.print_exc()
    print(line, file=sys.stderr)
    raise SystemExit(status) from None


def _reader_gone() -> None:
    """Ends quietly when stdout's reader has closed the pipe (as ``cat`` and ``grep`` do:
    status 141, 128 + SIGPIPE): Python's exit would flush stdout again and fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(141) from None


def _parsed(command, held: HeldStderr):
    """``command``, run with stderr back in place (`HeldStderr.release`): tyro has parsed."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        held.release()
        return command(*args, **kwargs)

    return run


CLOSED_LOOP = "Event loop is closed"


def quiet_closed_loops() -> None:
    """Drops, from now on in this process, the unraisable ``RuntimeError: Event loop is
    closed`` alone: orbax's read of a corrupt checkpoint (named and skipped) leaves
    tensorstore callbacks that post to its closed asyncio loops, and each printed a traceback
    (4 to 37 of them around the one warning line). Every other unraisable error is printed as
    before; ``--debug`` keeps these too."""
    previous = sys.unraisablehook
    if getattr(previous, "drops", None) == CLOSED_LOOP:
        return  # installed already (main called again in this process)

    def hook(unraisable) -> None:
        value = unraisable.exc_value
        if not (isinstance(value, RuntimeError) and str(value) == CLOSED_LOOP):
            previous(unraisable)

    hook.drops = CLOSED_LOOP  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``drlhet [--debug] train|eval|backends|profile|dse ...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    end = args.index("--") if "--" in args else len(args)
    debug = DEBUG in args[:end]
    args = [a for i, a in enumerate(args) if i >= end or a != DEBUG]
    if why := empty_paths(args):
        _end(False, EXIT_BAD_INPUT, f"drlhet: error: {why}")
    if not debug:
        quiet_closed_loops()
    commands = {"train": train_command, "backends": backends_command}
    commands |= {"eval": eval_command, "profile": profile_command, "dse": dse_command}
    # the options written (what --resume refuses); tyro's refusals: read back, told in one line
    with command_line(args), HeldStderr() as held:
        try:
            tyro.extras.subcommand_cli_from_dict(
                {name: _parsed(command, held) for name, command in commands.items()},
                prog="drlhet",
                description=f"Deep RL with a prioritized replay buffer on heterogeneous devices. "
                f"Exit status: 0 done, {EXIT_BAD_INPUT} bad input (nothing written), "
                f"{EXIT_FAILED} failed while running, 130 / 143 a run stopped by SIGINT / "
                f"SIGTERM (after its chunk, saved); add {DEBUG} anywhere for the traceback.",
                args=args,
                registry=integer_options(),  # --steps 1e6, --buffer-size 2^20
            )
        except SystemExit as e:
            why = held.refusal(e)
            if not why:
                raise
            _end(False, EXIT_BAD_INPUT, f"drlhet: error: {why}")
        except UsageError as e:
            _end(debug, EXIT_BAD_INPUT, f"drlhet: error: {_one_line(e)}")
        except KeyboardInterrupt:
            _end(debug, 130, "drlhet: interrupted")
        except BrokenPipeError:  # the reader went away (`drlhet dse | head`): nothing to say
            _reader_gone()
        except Exception as e:  # noqa: BLE001 - any failure while running: one line, no traceback
            if why := _platforms_refused(e):
                _end(debug, EXIT_BAD_INPUT, f"drlhet: error: {why}")
            _end(debug, EXIT_FAILED, f"drlhet: failed: {type(e).__name__}: {_one_line(e)}")
