"""`measure_mapping`: run a mapping with the scheduler and measure its throughput (the ground
truth the model is validated against, docs/design.md section 5)."""

from __future__ import annotations

import statistics

from drlhet.dse.key import ProfileKey
from drlhet.runtime.mapping import Mapping
from drlhet.runtime.run import run

__all__ = ["measure_mapping"]


def measure_mapping(
    key: ProfileKey,
    mapping: str,
    delay: int = 0,
    chunks: int = 4,
    chunk_steps: int = 2_000,
) -> dict:
    """Runs ``mapping`` with the scheduler and measures it (median over the chunks after the
    first, which includes compilation): ``trained_samples_per_s``, ``env_steps_per_s``, and the
    per-chunk figures (``per_chunk``)."""
    warmup = max(1_000, key.batch)
    cfg = key.train_config(
        delay=delay,
        eval_every=chunk_steps,
        steps=warmup + (chunks + 1) * chunk_steps,
        eval_envs=2,
        warmup=warmup,
    )
    _, rows = run(cfg, Mapping.parse(mapping))
    steady = rows[1:]
    per = [r["trained_samples_per_s"] for r in steady]
    return {
        "trained_samples_per_s": statistics.median(per),
        "env_steps_per_s": statistics.median(r["env_steps_per_s"] for r in steady),
        "per_chunk": per,
    }
