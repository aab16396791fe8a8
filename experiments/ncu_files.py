"""What the scripts that read Nsight Compute's output share (``kernel_times.py``,
``kernel_stalls.py``, ``kernel_source.py``): each file read by the script's own ``summarise``,
a missing or unreadable file a one-line exit naming it, the rows written as JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn


def summarise_each(paths: tuple[Path, ...], summarise: Callable[[Path], list[dict]]) -> list[dict]:
    """``summarise(path)`` of every path, in order, concatenated; on a missing file or a
    ``ValueError`` (the summariser's own message, naming the file), one line on stderr,
    ``<script>: error: ...``, and exit status 2, as the other experiments refuse bad input."""
    rows: list[dict] = []
    for path in paths:
        if not path.is_file():
            refuse(f"no such file: {path}")
        try:
            rows += summarise(path)
        except ValueError as e:
            refuse(str(e))
    return rows


def refuse(message: str) -> NoReturn:
    """Ends the script: ``<script>: error: <message>`` on stderr, exit status 2."""
    print(f"{Path(sys.argv[0]).stem}: error: {message}", file=sys.stderr)
    sys.exit(2)


def write_rows(rows: list[dict], out: Path, noun: str) -> None:
    """``rows`` as indented JSON in ``out`` (its folder made), and a line saying so."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {len(rows)} {noun} to {out}")
