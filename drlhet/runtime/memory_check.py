"""Whether this machine has the memory a run needs, now (`estimate_memory` against what the
machine and this process's cgroup have left): checked by `drlhet.run` and the CLI before
anything is allocated, so that a run too large fails in one line instead of in XLA's allocator
or the kernel's OOM killer."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (this module imports no JAX: the CLI reads the machine before it starts)
    from drlhet.runtime.trainer import Trainer

__all__ = ["available_memory", "check_memory"]


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


def check_memory(tr: Trainer, seeds: int, copies: int = 1) -> None:
    """Raises ``ValueError`` when a run of ``tr`` with ``seeds`` seeds (``copies`` of its
    state) needs more memory than this machine has available now, naming each part."""
    from drlhet.runtime.memory import estimate_memory, size_text

    have = available_memory()
    if have is None:
        return
    need = estimate_memory(tr, seeds, copies=copies)
    if need.total > have[0]:
        text = size_text
        raise ValueError(
            f"the run needs ~{text(need.total)} (replay {text(need.replay)}, agents "
            f"{text(need.agent)}, delayed updates and the rest {text(need.other)}, evaluation "
            f"{text(need.evaluation)}), this machine has {text(have[0])} available "
            f"({have[1]}); lower buffer_size, eval_envs or seeds (memory_check=False runs it "
            "anyway)"
        )
