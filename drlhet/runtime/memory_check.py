"""Whether this machine has the memory a run needs, now (`estimate_memory` against what the
machine and this process's cgroup have left): checked by `drlhet.run` and the CLI before
anything is allocated, so that a run too large fails in one line instead of in XLA's allocator
or the kernel's OOM killer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drlhet.machine import available_memory

if TYPE_CHECKING:  # (this module imports no JAX: the CLI reads the machine before it starts)
    from drlhet.runtime.trainer import Trainer

__all__ = ["available_memory", "check_memory"]


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
