"""What every command shares: the user's cache folder, JAX's compilation cache, CPU devices.

The CLI is the only part of drlhet that reads flags and environment variables.
"""

from __future__ import annotations

import os
from pathlib import Path

from drlhet.backends import CPU

__all__ = ["cache_dir", "enable_compilation_cache", "set_cpu_devices"]


def cache_dir() -> Path:
    """``$DRLHET_CACHE``, else ``$XDG_CACHE_HOME/drlhet``, else ``~/.cache/drlhet``."""
    if os.environ.get("DRLHET_CACHE"):
        return Path(os.environ["DRLHET_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "drlhet" if base else Path.home() / ".cache" / "drlhet"


def enable_compilation_cache(folder: Path | None = None) -> Path:
    """Turns on JAX's persistent compilation cache in ``folder`` (default: ``compiled`` under
    `cache_dir`), so a second run of the same program loads it instead of compiling."""
    import jax

    folder = folder or cache_dir() / "compiled"
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder


def set_cpu_devices(n: int) -> None:
    """Creates ``n`` XLA CPU devices (before JAX is first used)."""
    import jax

    if n < 1:
        raise ValueError(f"--cpu-devices must be >= 1, got {n}")
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError as e:  # JAX already runs (e.g. called from Python): enough devices?
        have = len(jax.devices(CPU))
        if have < n:
            raise ValueError(f"{n} CPU devices are needed; JAX already started with {have}") from e
