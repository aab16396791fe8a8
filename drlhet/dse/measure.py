"""`measure_mapping`: run a mapping with the scheduler and measure its throughput (the ground
truth the model is validated against, docs/design.md section 5); `speed_probe`: the machine's
speed of the moment, so that a validation pairs a profile with measurements taken at the same
speed."""

from __future__ import annotations

import functools
import statistics
import time

from drlhet.dse.key import ProfileKey
from drlhet.runtime.mapping import Mapping
from drlhet.runtime.run import run

__all__ = ["measure_mapping", "speed_probe", "whole_chunk"]


def whole_chunk(key: ProfileKey, chunk_steps: int) -> int:
    """The env steps of a chunk that `measure_mapping` runs for ``chunk_steps``: whole
    iterations of ``key.num_envs`` steps, at least one (its ``eval_every``)."""
    return max(key.num_envs, chunk_steps - chunk_steps % key.num_envs)


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
    every = whole_chunk(key, chunk_steps)
    cfg = key.train_config(
        delay=delay,
        eval_every=every,
        steps=warmup + (chunks + 1) * every,
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


@functools.cache
def _probe_program():
    import jax
    import jax.numpy as jnp

    def body(x, w):
        return jnp.tanh(x @ w), None

    @jax.jit
    def go(x, ws):  # x [256, 64], ws [400, 64, 64]: an MLP's matmuls, one after the other
        return jax.lax.scan(body, x, ws)[0]

    k1, k2 = jax.random.split(jax.random.key(0))  # a fixed workload, not a training key
    x = jax.random.normal(k1, (256, 64))
    ws = jax.random.normal(k2, (400, 64, 64)) / 8.0
    return go, x, ws


def speed_probe(repeats: int = 9) -> float:
    """Median seconds of a fixed reference workload (400 matmuls of [256, 64] x [64, 64] in one
    compiled scan, about 6 ms on the 2-core development VM) on the default device.

    The development VM's speed moves by up to 2x for minutes at a time (every primitive and
    every mapping at once: docs/results.md); the ratio of two probes says whether two
    measurements were taken at the same speed."""
    go, x, ws = _probe_program()
    go(x, ws).block_until_ready()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        go(x, ws).block_until_ready()
        times.append(time.perf_counter() - t)
    return statistics.median(times)
