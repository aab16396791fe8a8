"""How the experiments read their command line, as the ``drlhet`` CLI does: tyro parses it;
then what tyro refuses (an unknown option, a value of the wrong type), a count below its least
(a repeat, a round, a seed, a batch), an output that cannot be written (an empty path, a folder
named where a file goes or the other way round, a folder that refuses new files), a value the
script's own check refuses (an unknown name, an input file that is missing or not what the
script reads, a training configuration drlhet would refuse), or drlhet's configuration check
(`drlhet.runtime.config.ConfigError`) ends the script with one line on stderr,
``<script>: error: ...``, and exit status 2: no traceback, and nothing measured or written
(each is checked before the first measurement, and drlhet checks a configuration before it
runs it).

Imports no jax: a script may set up its threading before jax is imported (bench_replay.py);
`refused_config` alone imports it, for the scripts that train.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import tyro

__all__ = [
    "refused_counts",
    "ignored_options",
    "unknown_names",
    "missing_files",
    "no_files",
    "unreadable_json",
    "lacking",
    "rows_lacking",
    "refused_output",
    "unwritable_outputs",
    "empty_outputs",
    "refused_config",
    "run",
]

OUTPUTS = ("out", "plot", "measured_out", "env_out", "rerun_out")
"""The fields through which the scripts name a file they write (a script whose ``out`` is a
folder of files says so: `run`'s ``folders``)."""
FOLDERS = ("trace_dir",)
"""The fields through which the scripts name a folder they write files into."""
PLOTS = ("plot",)
"""The file outputs that matplotlib writes: their suffix must name an image type it writes
(without one it would add ``.png`` to the name)."""

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


def ignored_options(args: Any, defaults: Any, fields: Iterable[str], because: str) -> str:
    """Why ``args`` is refused for setting an option that does nothing in this run: the first
    of ``fields`` whose value differs from ``defaults``' (an instance of the same Args), in one
    line ending with ``because``; "" when none is set."""
    for field in fields:
        if getattr(args, field) != getattr(defaults, field):
            return f"--{field.replace('_', '-')} does nothing {because}"
    return ""


def unknown_names(option: str, given: Sequence[str], known: Iterable[str]) -> str:
    """Why the names ``given`` to ``option`` (``--tasks``) are refused: none given, or some not
    among ``known``, in one line listing the known ones; "" when all are known."""
    known = list(known)
    bad = [name for name in given if name not in known]
    if bad or not given:
        got = ", ".join(map(repr, bad)) if bad else "none"
        return f"{option} takes one or more of {', '.join(known)}; got {got}"
    return ""


def missing_files(*paths: Path | None) -> str:
    """Why the inputs ``paths`` (None: not given) cannot be read, naming the first that is not a
    file, or ""."""
    for path in paths:
        if path is not None and not path.is_file():
            return f"{path}: no such file"
    return ""


def no_files(option: str, paths: Sequence[Path]) -> str:
    """Why the input files ``paths`` of ``option`` cannot be read: none given, or one missing
    (`missing_files`); or ""."""
    if not paths:
        return f"{option}: no file given; name one or more"
    return missing_files(*paths)


def unreadable_json(path: Path | None, shape: Callable[[Any], str] | None = None) -> str:
    """Why ``path`` (None: not given) cannot be read as the JSON its script reads, in one line
    naming the file: missing, unreadable, not JSON, or of the wrong shape (``shape(data)``:
    what is wrong with it, "" when nothing is; `lacking` and `rows_lacking` say it); or ""."""
    if path is None:
        return ""
    if not path.is_file():
        return f"{path}: no such file"
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        return f"{path}: cannot be read ({e.strerror})"
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"{path}: not JSON ({e})"
    why = shape(data) if shape is not None else ""
    return f"{path}: {why}" if why else ""


def lacking(value: Any, keys: Iterable[str], what: str = "") -> str:
    """Why ``value`` (read from JSON; ``what``: its name in the file, "" for the whole file) is
    not an object holding ``keys``: ``"the file is a list, not an object"``, ``"configs[0]
    lacks 'pick'"``; or ""."""
    what = what or "the file"
    if not isinstance(value, dict):
        return f"{what} is {_json_kind(value)}, not an object"
    missing = [key for key in keys if key not in value]
    return f"{what} lacks {', '.join(map(repr, missing))}" if missing else ""


def rows_lacking(value: Any, keys: Iterable[str], what: str = "") -> str:
    """Why ``value`` (read from JSON; ``what``: its name in the file, "" for the whole file) is
    not a list of objects that each hold ``keys``, naming the first that is not (``"rows[3]
    lacks 'batch'"``, ``"item 3 is a number, not an object"``); or ""."""
    if not isinstance(value, list):
        return f"{what or 'the file'} is {_json_kind(value)}, not a list"
    keys = list(keys)
    for i, row in enumerate(value):
        why = lacking(row, keys, f"{what}[{i}]" if what else f"item {i}")
        if why:
            return why
    return ""


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "true or false"}
    kinds |= {int: "a number", float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def refused_output(path: Path, option: str, kind: str = "file") -> str:
    """Why ``path``, given to ``option``, cannot be written as a ``kind`` (``"file"``,
    ``"plot"``: a file matplotlib writes, or ``"folder"`` of files), in one line naming the
    option, or "": an existing folder where a file goes (``""`` reaches here as ``.``, the
    current folder), an existing file where a folder goes, a plot's suffix that names no
    image type, or a folder where nothing can be made (`drlhet.writable.check_writable`)."""
    from drlhet.writable import check_writable  # the standard library only: no jax yet

    shown = f"{option} {path}"
    if kind == "folder":
        if path.exists() and not path.is_dir():
            return f"{shown}: a file, not a folder; name the folder to write into"
        where = path
    else:
        if path.is_dir() or path.name in ("", ".", ".."):
            return f"{shown}: a folder, not a file; name the file to write"
        if kind == "plot":
            from matplotlib.backend_bases import FigureCanvasBase  # no backend chosen yet

            types = sorted(FigureCanvasBase.get_supported_filetypes())
            if path.suffix.lower().removeprefix(".") not in types:
                suffix = f"suffix {path.suffix!r}" if path.suffix else "no suffix"
                return (
                    f"{shown}: {suffix}, not an image type matplotlib writes ({', '.join(types)})"
                )
        where = path.parent
    try:
        check_writable(where, shown, "file")
    except ValueError as e:
        return str(e)
    return ""


def unwritable_outputs(args: Any, folders: Collection[str] = ()) -> str:
    """Why an output of ``args`` cannot be written (`refused_output`), naming the option, or "":
    asked before the run, not after its measurements. The fields of `OUTPUTS` name files (a
    plot, `PLOTS`, one that matplotlib writes), those of `FOLDERS` and ``folders`` (``out``
    where the script writes several files into it) name folders; a field that ``args`` lacks,
    or that is not a path (None: not written), is not checked. Two outputs naming one path are
    refused (the run wrote its JSON, then its plot over it)."""
    seen: dict[Path, str] = {}
    for name in dict.fromkeys((*OUTPUTS, *FOLDERS, *folders)):
        path = getattr(args, name, None)
        if not isinstance(path, Path):
            continue
        option = f"--{name.replace('_', '-')}"
        if path.resolve() in seen:  # the second write would replace the first
            return f"{option} {path} is also {seen[path.resolve()]}'s: name another file"
        seen[path.resolve()] = option
        kind = "folder" if name in FOLDERS or name in folders else "file"
        kind = "plot" if kind == "file" and name in PLOTS else kind
        why = refused_output(path, option, kind)
        if why:
            return why
    return ""


def empty_outputs(argv: Sequence[str], fields: Iterable[str]) -> str:
    """Why the command line ``argv`` (without the script) is refused: an output option of
    ``fields`` given an empty value (``--out ""``, ``--out=``: an unset shell variable, say),
    which a path would read as the current folder; or ""."""
    options = {"--" + field.replace("_", "-") for field in fields}
    for i, arg in enumerate(argv):
        option, eq, value = arg.partition("=")
        if option not in options:
            continue
        given = value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
        if given is not None and not given.strip():
            return f"{option} is empty; name the path to write"
    return ""


def refused_config(cfg: Any, mapping: str | None = None, option: str = "") -> str:
    """Why drlhet would refuse to train ``cfg`` (a `TrainConfig`) on ``mapping`` (its text;
    None: every group on JAX's default device), in one line, or "": its configuration check, a
    training shorter than one chunk, an unknown environment, a mapping that does not parse or
    names a backend or device that is not here (``option``, the option that gave the mapping,
    heads that message). Builds the environment and loads the backends, trains nothing;
    imports jax (a script that sets up jax, e.g. its CPU devices, does so first)."""
    from drlhet.backends import BackendUnavailable
    from drlhet.envs import make_env
    from drlhet.runtime.config import check, chunks_of, tree_shape
    from drlhet.runtime.mapping import Mapping
    from drlhet.runtime.run import default_mapping

    try:  # each raises ValueError or BackendUnavailable for bad input, and does nothing else
        check(cfg)
        chunks_of(cfg)
        make_env(cfg.env, cfg.num_envs)
    except (ValueError, BackendUnavailable) as e:
        return str(e)
    try:
        placed = (
            default_mapping(cfg) if mapping is None else Mapping.parse(mapping, tree_shape(cfg))
        )
        placed.validate()
    except (ValueError, BackendUnavailable) as e:
        return f"{option} {mapping}: {e}" if option else str(e)
    return ""


def run(
    args_type: type[A],
    main: Callable[[A], Any],
    least: Mapping[str, int],
    refuse: Callable[[A], str] | None = None,
    folders: Collection[str] = (),
) -> None:
    """Parses ``args_type`` from the command line and runs ``main`` on it, unless a count is
    below its least (`refused_counts`), an output cannot be written (`empty_outputs`,
    `unwritable_outputs`; ``folders``: the fields that name a folder of files, as ``out`` of
    fig_delay.py), ``refuse(args)`` says why not, or ``main`` raises drlhet's `ConfigError`:
    then one line and exit status 2."""
    from drlhet.integers import registry  # these two: the standard library and tyro, no jax yet
    from drlhet.parse_errors import parse_or_refuse

    # what tyro refuses: one line too; integers as written in papers (1e6, 2^20)
    args = parse_or_refuse(lambda: tyro.cli(args_type, registry=registry()), _refuse)
    why = refused_counts(args, least)
    why = why or empty_outputs(sys.argv[1:], (*OUTPUTS, *FOLDERS, *folders))
    why = why or unwritable_outputs(args, folders)
    why = why or (refuse(args) if refuse is not None else "")
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
