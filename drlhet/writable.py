"""Whether a command can write where it was told to, asked before it runs (the CLI's commands
and the scripts in ``experiments/``), so that a run is not lost to an output path that cannot
be written. Imports nothing but the standard library: a script may call it before jax is
imported."""

from __future__ import annotations

import tempfile
from pathlib import Path

__all__ = ["check_writable"]


def check_writable(path: Path, option: str, what: str) -> None:
    """Raises ``ValueError`` (``"<option>: no <what> can be made in <folder> (<why>)"``) unless
    a folder can be made and removed again in the deepest folder of ``path`` that exists: a
    permission, a read-only or a virtual file system refuses it now, before anything is
    compiled or measured, not when the result is written. Nothing is left behind."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    try:
        tempfile.TemporaryDirectory(dir=existing).cleanup()
    except OSError as e:
        raise ValueError(f"{option}: no {what} can be made in {existing} ({e.strerror})") from None
