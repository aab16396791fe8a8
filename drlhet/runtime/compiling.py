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

The library leaves JAX's settings alone unless asked: `enable_compilation_cache` turns on JAX's
persistent cache (as ``drlhet train`` does), so a second run of a configuration loads its
programs instead of compiling them (``drlhet.run`` of the default DQN on CartPole-v1, one seed,
96,008 env steps, in a fresh process: 14.2 s with an empty cache, 8.4 s with it filled;
measured on the 2-core VM, 2026-11-30).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

__all__ = ["OPTIONS", "jit", "inlined", "enable_compilation_cache"]

OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 2}


def jit(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """``jax.jit(fn, **kwargs)`` compiled with `OPTIONS` (``compiler_options`` is part of JAX's
    persistent cache key, so cached programs of other options are not reused)."""
    return jax.jit(fn, compiler_options=OPTIONS, **kwargs)


def inlined(fn: Any) -> Callable[..., Any]:
    """What a `jit` wraps, to call inside another program: JAX takes compile options at the
    top-level program only (a nested `jit` with them is refused), so this is a plain
    ``jax.jit`` of the wrapped function, one per ``fn`` (kept while ``fn`` lives). Programs
    that call it with the same shapes share its trace: the pipeline's chunk programs (a
    run's first, middle and last) call each stage up to three times; XLA inlines the call,
    so the compiled program is the one the unwrapped function gave."""
    try:
        return _NESTED[fn]
    except (KeyError, TypeError):  # TypeError: ``fn`` cannot be weakly referenced
        pass
    nested = jax.jit(getattr(fn, "__wrapped__", fn))
    with contextlib.suppress(TypeError):
        _NESTED[fn] = nested
    return nested


_NESTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""`inlined`'s nested jits, by the function they were made for."""


def enable_compilation_cache(folder: str | Path) -> Path:
    """Turns on JAX's persistent compilation cache in ``folder`` (made if missing) for every
    program of this process, however small or quick to compile (JAX's defaults skip programs
    compiled in under a second, which are most of a run's). Returns the folder.

    Raises:
      ValueError: the folder cannot be made (a file on the way, no permission), named.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"no compilation cache folder can be made at {folder} ({e})") from None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
