"""How drlhet compiles its run-time programs: `jit` is ``jax.jit`` with `OPTIONS`.

XLA's CPU compiler spends about a fifth of its time in LLVM's most aggressive level (3, its
default) without making drlhet's programs faster: level 2 compiles the default DQN chunk in
2.8 s against 3.5 s and runs it as fast (0.378 against 0.384 s, min of 8; a first
``drlhet train`` to 475 took 9.4 s against 11.2, mean of 3; 2-core VM, 2026-11-26). The
results are the same up to rounding, not bit for bit: on some networks LLVM schedules a few
SGD sums differently and parameters move by an ulp. Level 0 compiles faster still but
contracts no multiply-adds and runs the chunk at half speed: not used.

Every run-time program (init, warm-up, chunks, the host loops' stages, Ray's actors) is
compiled with the same options, so the run paths stay bit-identical to each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

__all__ = ["OPTIONS", "jit", "inlined"]

OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 2}


def jit(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """``jax.jit(fn, **kwargs)`` compiled with `OPTIONS` (``compiler_options`` is part of JAX's
    persistent cache key, so cached programs of other options are not reused)."""
    return jax.jit(fn, compiler_options=OPTIONS, **kwargs)


def inlined(fn: Any) -> Callable[..., Any]:
    """The function a `jit` wraps, to call inside another program: JAX takes compile options
    at the top-level program only (a nested `jit` with them is refused)."""
    return getattr(fn, "__wrapped__", fn)
