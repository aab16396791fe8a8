"""Performance model and design-space exploration (DESIGN section 5).

Zhang, Meng, Prasanna, TPDS 2023, Sec. 6: profile the primitives on the devices that exist,
model the ones that do not from device sheets, predict every mapping's training throughput and
pick the best. Entry points: `build_model` (profiles from the cache, measured when missing),
`drlhet.dse.search.search`, `measure_mapping` (runs a mapping with the scheduler), and the
``drlhet profile`` / ``drlhet dse`` commands.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Callable
from pathlib import Path

from drlhet.dse.model import Model, Place, Prediction, load_sheets, shapes_of
from drlhet.dse.profile import ProfileCache, ProfileKey, profile_config, profile_python_replay
from drlhet.dse.search import baselines, enumerate_mappings, expand_devices, search

__all__ = [
    "Model",
    "Place",
    "Prediction",
    "ProfileKey",
    "ProfileCache",
    "build_model",
    "replay_backends_here",
    "measure_mapping",
    "merge_models",
    "search",
    "baselines",
    "enumerate_mappings",
    "expand_devices",
    "load_sheets",
]


def replay_backends_here() -> list[str]:
    """Replay backends that run on this machine's CPU (``jax``, and ``native`` when built)."""
    from drlhet.backends import CPU, providing

    return [b.name for b in providing("replay", CPU, runnable=True)]


def build_model(
    key: ProfileKey,
    cache: ProfileCache | None = None,
    reprofile: bool = False,
    sheets_dir: Path | None = None,
    log: Callable[[str], None] = print,
) -> Model:
    """A `Model` for ``key`` (its ``backend`` is ignored): CPU profiles of every replay backend
    here, from ``cache`` or measured now (and cached), plus the device sheets."""
    import jax

    cache = cache or ProfileCache()
    cpus = jax.devices("cpu")
    profiles = {}
    for backend in replay_backends_here():
        k = dataclasses.replace(key, backend=backend)
        prof = None if reprofile else cache.get(k)
        if prof is None:
            log(f"profiling {k.name()} on {cpus[0]} (measured; cached in {cache.path})")
            prof = profile_config(k, cpus[0], cpus[1] if len(cpus) > 1 else None)
            cache.put(k, prof)
        profiles[backend] = prof
    kp = dataclasses.replace(key, backend="python")
    py = None if reprofile else cache.get(kp)
    if py is None:
        log(f"profiling the Python-level baseline buffer (cpprb) for {kp.name()}")
        py = profile_python_replay(kp, cpus[0]) or {}
        cache.put(kp, py)
    python_replay = (
        {s: py[s]["median"] for s in ("replay_in", "replay_next", "apply")} if py else None
    )
    return Model(
        shapes_of(key),
        load_sheets(sheets_dir),
        profiles,
        cpu_cores=os.cpu_count() or 1,
        python_replay=python_replay,
    )


def measure_mapping(
    key: ProfileKey,
    mapping: str,
    delay: int = 0,
    chunks: int = 4,
    chunk_steps: int = 2_000,
) -> dict:
    """Runs ``mapping`` with the scheduler and measures it (median over the chunks after the
    first, which includes compilation): ``trained_samples_per_s``, ``env_steps_per_s``, and the
    per-chunk figures."""
    from drlhet.runtime.mapping import Mapping
    from drlhet.runtime.run import run

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


def merge_models(models: list[Model]) -> Model:
    """One model from several profiling rounds of the same configuration: every measured figure
    is the median over the rounds (robust to a round that met a busy machine)."""
    import copy

    first = models[0]
    if len(models) == 1:
        return first

    def med(dicts: list[dict]) -> dict:
        out = copy.deepcopy(dicts[0])
        for group in ("compute", "call", "latency", "transfer"):
            for name in out.get(group, {}):
                for s in ("median", "min", "max"):
                    out[group][name][s] = statistics.median(d[group][name][s] for d in dicts)
        return out

    profiles = {b: med([m.profiles[b] for m in models]) for b in first.profiles}
    python = None
    if first.python_replay is not None:
        python = {
            k: statistics.median(m.python_replay[k] for m in models if m.python_replay)
            for k in first.python_replay
        }
    return Model(first.s, first.sheets, profiles, first.cpu_cores, python)
