"""What this machine has, read where a run (or its host environments) is about to take it:
the memory a new allocation can have now (`available_memory`), this process's resident memory
(`resident_memory`), and a size as text (`size_text`). Imports neither JAX nor the rest of
drlhet: every package may use it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["available_memory", "resident_memory", "size_text"]


def available_memory() -> tuple[int, str] | None:
    """``(bytes, source)``: the memory a new run can have now, the smaller of the machine's
    (``MemAvailable`` of ``/proc/meminfo``, else free pages from ``os.sysconf``) and what this
    process's cgroup has left (``memory.max - memory.current``); None when neither is known."""
    found: list[tuple[int, str]] = []
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append((int(line.split()[1]) * 1024, "MemAvailable"))
    if not found:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            found.append((pages, "free physical pages"))
    with contextlib.suppress(OSError, ValueError):
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            used = int((cgroup / "memory.current").read_text())
            found.append((int(limit) - used, "cgroup memory.max"))
    return min(found) if found else None


def resident_memory() -> int | None:
    """This process's resident memory in bytes (``/proc/self/statm``), or None where it cannot
    be read."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    return None


def size_text(n: int) -> str:
    """Bytes as text, in GiB from 1 GiB up (``"52.3 GiB"``), else MiB or KiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 2**10:.1f} KiB"
