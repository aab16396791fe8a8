"""What every command shares: the user's cache folder, JAX's compilation cache, CPU devices,
the memory this machine has, where a run directory may go, and the one way bad input is
reported (`UsageError`).

The CLI is the only part of drlhet that reads flags and environment variables.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Iterator
from pathlib import Path

from drlhet.backends import CPU, BackendUnavailable
from drlhet.runtime.config import ConfigError
from drlhet.runtime.mapping import replay_backend_named
from drlhet.runtime.memory_check import available_memory
from drlhet.writable import check_writable

__all__ = [
    "UsageError",
    "FLAGS_GIVEN",
    "command_line",
    "flags_given",
    "empty_paths",
    "no_replay_backend",
    "refuse_unused_flags",
    "bad_input",
    "available_memory",
    "cache_dir",
    "enable_compilation_cache",
    "set_cpu_devices",
    "run_directory",
    "check_writable",
]


class UsageError(Exception):
    """Bad input to a command: `drlhet.cli.main` prints it as one line and exits with 2."""


def _as_options(e: Exception, options: dict[str, str]) -> str:
    """The message of ``e`` with the configuration fields it names (`ConfigError`) written
    as the command's options (``batch_size`` -> ``--batch-size``, or ``options[field]``); the
    reason it quotes (a backend's words) as it is."""
    if not isinstance(e, ConfigError) or not e.fields:
        return str(e)
    spelled = {f: "--" + options.get(f, f).replace("_", "-") for f in e.fields}
    pattern = r"\b(" + "|".join(map(re.escape, e.fields)) + r")\b"
    head = re.sub(pattern, lambda m: spelled[m.group(1)], e.head)
    return f"{head}: {e.reason}" if e.reason else head


@contextlib.contextmanager
def bad_input(prefix: str = "", options: dict[str, str] | None = None) -> Iterator[None]:
    """Reports a ``ValueError`` or `BackendUnavailable` raised inside as bad input: a
    `UsageError` whose message is ``prefix`` and the error's (configuration fields spelled as
    options; ``options`` renames fields whose option differs, ``{"batch_size": "batch"}``)."""
    try:
        yield
    except UsageError:
        raise
    except (ValueError, BackendUnavailable) as e:
        raise UsageError(prefix + _as_options(e, options or {})) from e


def cache_dir() -> Path:
    """``$DRLHET_CACHE``, else ``$XDG_CACHE_HOME/drlhet``, else ``~/.cache/drlhet``."""
    if os.environ.get("DRLHET_CACHE"):
        return Path(os.environ["DRLHET_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "drlhet" if base else Path.home() / ".cache" / "drlhet"


def enable_compilation_cache(folder: Path | None = None) -> Path:
    """`drlhet.runtime.compiling.enable_compilation_cache` in ``folder`` (default: ``compiled``
    under `cache_dir`), so a second run of the same program loads it instead of compiling.

    Raises:
      ValueError: the folder cannot be made."""
    from drlhet.runtime.compiling import enable_compilation_cache as enable

    return enable(folder or cache_dir() / "compiled")


MAX_CPU_DEVICES = 1024
"""Most XLA CPU devices a command creates (JAX took 1.6 s to start 1,024 on the 2-core VM, 18 s
for 4,096; 100,000 ran out of patience)."""


def set_cpu_devices(n: int) -> None:
    """Creates ``n`` XLA CPU devices (before JAX is first used)."""
    import jax

    if not 1 <= n <= MAX_CPU_DEVICES:
        raise ValueError(f"--cpu-devices must be in [1, {MAX_CPU_DEVICES}], got {n}")
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError as e:  # JAX already runs (e.g. called from Python): enough devices?
        have = len(jax.devices(CPU))
        if have < n:
            raise ValueError(f"{n} CPU devices are needed; JAX already started with {have}") from e


FLAGS_GIVEN: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "drlhet_flags_given", default=None
)
"""The options written on the command line (``--steps=5`` and ``--steps 5`` as ``steps``,
``--dqn.hidden`` as ``dqn.hidden``), set by `drlhet.cli.main`; None where a command is called
from Python."""


def flags_given(args: list[str]) -> frozenset[str]:
    """The option names in ``args`` (before ``--``), without their dashes or values."""
    end = args.index("--") if "--" in args else len(args)
    return frozenset(
        a[2:].split("=", 1)[0].replace("-", "_") for a in args[:end] if a.startswith("--")
    )


PER_OPTIONS = ("alpha", "beta_start", "branching", "dqn.priority_eps", "ddpg.priority_eps")
"""The options that tune prioritized replay alone (``--uniform`` replay has no priorities)."""


def refuse_unused_flags(algo: str, uniform: bool, given: frozenset[str] | None) -> None:
    """Refuses options ``given`` (`FLAGS_GIVEN`) that the run would ignore: the other
    agent's (``--ddpg.td3`` on a DQN run) and, with ``--uniform``, prioritized replay's.

    Raises:
      ValueError: naming them and what to do.
    """
    other = "ddpg" if algo == "dqn" else "dqn"
    theirs = sorted(g for g in given or () if g.split(".")[0] == other)
    if theirs:
        raise ValueError(
            f"{_spelled(theirs)}: {other.upper()}'s options, and this run trains "
            f"{algo.upper()} (--algo {algo}); drop them, or pass --algo {other}"
        )
    per = sorted(g for g in given or () if g in PER_OPTIONS)
    if uniform and per:
        raise ValueError(
            f"{_spelled(per)}: prioritized replay's options, and --uniform replay has no "
            "priorities; drop them, or --uniform"
        )


def _spelled(flags: list[str]) -> str:
    """``["dqn.priority_eps", "alpha"]`` as ``--dqn.priority-eps, --alpha``."""
    return ", ".join("--" + f.replace("_", "-") for f in flags)


PATH_OPTIONS = ("--out", "--cache-dir", "--resume", "--gpu-profile")
"""The commands' options that name a file or folder."""


def empty_paths(args: list[str]) -> str:
    """Why ``args`` (before ``--``) are refused: a path option given an empty value (``--out
    ""``, ``--out=``: an unset shell variable, say), which a path reads as the current folder
    (a run directory, a cache made there); or ""."""
    end = args.index("--") if "--" in args else len(args)
    for i, arg in enumerate(args[:end]):
        option, eq, value = arg.partition("=")
        given = value if eq else (args[i + 1] if i + 1 < end else None)
        if option in PATH_OPTIONS and given is not None and not given.strip():
            return f"{option} is empty; name the path"
    return ""


def no_replay_backend(uniform: bool, mapping: str | None) -> str | None:
    """``mapping`` (the text of ``--mapping``), once it names no replay backend where the
    replay is ``uniform``, which has no tree for one to hold (as ``--backend`` is refused then:
    `drlhet.runtime.config.check`): ``replay=cpu:0`` places it, ``replay=native@cpu:0`` (or
    ``sample=native@cpu:0``, a primitive of the replay's) is refused.

    Raises:
      ValueError: naming both options and the placement.
    """
    if not uniform or mapping is None:
        return mapping
    named = replay_backend_named(mapping)
    if named is not None:
        key, device = named.split("=")[0], named.split("@")[-1]
        raise ValueError(
            f"--mapping {named} names a replay backend, and --uniform replay has no "
            f"tree for it: place the replay on a device alone ({key}={device})"
        )
    return mapping


@contextlib.contextmanager
def command_line(args: list[str]) -> Iterator[None]:
    """`FLAGS_GIVEN` set to ``args``' options inside (and as it was after)."""
    token = FLAGS_GIVEN.set(flags_given(args))
    try:
        yield
    finally:
        FLAGS_GIVEN.reset(token)


NAME_MAX = 255
"""Longest name of one folder, in bytes (Linux's, macOS's and Windows' file systems)."""


def run_directory(out: Path, name: str) -> Path:
    """``out / name``, once it is known that a folder can be made there (`check_writable`):
    ``name`` one folder's name (a name with ``/`` or ``..`` would put the run elsewhere,
    ``../../etc`` included), ``out / name`` not a file and not another run's directory (one
    with checkpoints or ``metrics.jsonl``).

    Raises:
      ValueError: naming the option and its value.
    """
    if name in ("", ".", "..") or "/" in name or (os.altsep is not None and os.altsep in name):
        raise ValueError(f"--name must be one folder's name (no '/', not '..'), got {name!r}")
    if len(os.fsencode(name)) > NAME_MAX:
        raise ValueError(f"--name must be at most {NAME_MAX} bytes, got {len(os.fsencode(name))}")
    run_dir = out / name
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--out {out}: {run_dir} exists and is not a folder")
    held = [f for f in ("checkpoints", "metrics.jsonl") if (run_dir / f).exists()]
    if held:  # a new run there would write over its files and mix with its checkpoints
        from drlhet.checkpoint import Checkpoints

        go_on = (
            f"go on with it with --resume {run_dir}"
            if Checkpoints(run_dir / "checkpoints").chunks()
            else "it has no checkpoint to go on from (stopped before its first); remove it"
        )
        raise ValueError(
            f"--name {name}: {run_dir} already holds a run ({held[0]}); {go_on}, or give "
            "another --name"
        )
    check_writable(run_dir, f"--out {out}", "run directory")
    return run_dir
