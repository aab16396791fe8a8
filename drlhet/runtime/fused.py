"""The one-segment path: the whole loop as one jitted ``lax.scan`` per chunk, on one device."""

from __future__ import annotations

import functools
import time

import jax

from drlhet.runtime.chunks import check_replay_error, chunk_row
from drlhet.runtime.compiling import jit
from drlhet.runtime.saving import ChunkHook
from drlhet.runtime.trainer import Trainer, TrainState

__all__ = ["run_fused"]


def run_fused(
    tr: Trainer,
    states: TrainState,
    device: jax.Device,
    t0: float,
    hook: ChunkHook,
    extra: dict | None = None,
    first: int = 0,
) -> tuple[TrainState, list[dict]]:
    """Runs chunks ``first..tr.chunks - 1`` of ``tr`` on ``device``, the states (``[S]`` seeds)
    donated; after each, ``hook.after(row, state getter)``.

    Returns:
      ``(states, rows)``: the final states and one row per chunk (`chunk_row`, plus ``extra``).
    """
    cfg = tr.config
    states = jax.device_put(states, device)
    chunk = jit(jax.vmap(tr.chunk), donate_argnums=0)
    rows, last = [], time.perf_counter()
    for i in range(first, tr.chunks):
        states, summary = chunk(states)
        summary = jax.device_get(summary)
        check_replay_error(summary["replay_error"], i, summary, cfg)
        rows.append({**chunk_row(cfg, tr.iterations, summary, i, t0, last), **(extra or {})})
        last = time.perf_counter()
        hook.after(rows[-1], functools.partial(_same, states))
    return states, rows


def _same(states: TrainState) -> TrainState:
    return states
