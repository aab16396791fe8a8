"""What the scripts that read Nsight Compute's output share (``kernel_times.py``,
``kernel_stalls.py``, ``kernel_source.py``; ``kernel_timeline.py``, which reads Nsight Systems',
takes `read_text` and `refuse`): each file read by the script's own ``summarise``, a missing or
unreadable file, or one that is not what the script reads, a one-line exit naming it, the rows
written as JSON."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn


def summarise_each(paths: tuple[Path, ...], summarise: Callable[[Path], list[dict]]) -> list[dict]:
    """``summarise(path)`` of every path, in order, concatenated; on a missing file, or a
    ``ValueError`` or ``csv.Error`` (the summariser's own message, the file's name put in front
    where it lacks it), one line on stderr, ``<script>: error: ...``, and exit status 2, as the
    other experiments refuse bad input."""
    rows: list[dict] = []
    for path in paths:
        if not path.is_file():
            refuse(f"no such file: {path}")
        try:
            rows += summarise(path)
        except (ValueError, csv.Error) as e:
            refuse(named(path, e))
    return rows


def read_text(path: Path) -> str:
    """The text of ``path``; a ``ValueError`` naming it where it cannot be read (its
    permissions, a folder) or is not text."""
    try:
        return path.read_text()
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a text file ({e.reason} at byte {e.start})") from None


def named(path: Path, error: Exception) -> str:
    """``error``'s message, headed by ``path`` where it does not already name it."""
    why = str(error)
    return why if why.startswith(str(path)) else f"{path}: {why}"


def refuse(message: str) -> NoReturn:
    """Ends the script: ``<script>: error: <message>`` on stderr, exit status 2."""
    print(f"{Path(sys.argv[0]).stem}: error: {message}", file=sys.stderr)
    sys.exit(2)


def write_rows(rows: list[dict], out: Path, noun: str) -> None:
    """``rows`` as indented JSON in ``out`` (its folder made), and a line saying so."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {len(rows)} {noun} to {out}")
