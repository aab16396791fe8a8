"""Building a `Model` for a run on this machine: profiles (cached or measured), the device
sheets, the run's shapes; and merging the models of several profiling rounds.

docs/design.md section 5.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from drlhet.backends.base import CPU, GPU, get, providing, reference
from drlhet.dse.baselines import host_replay_backend, profile_python_replay
from drlhet.dse.cache import ProfileCache
from drlhet.dse.devices import load_sheets
from drlhet.dse.gpu_profile import GpuProfiles, profile_row, sheet_for_device
from drlhet.dse.key import ProfileKey
from drlhet.dse.model import Model
from drlhet.dse.profile import compute_figures, profile_config
from drlhet.dse.trace import shapes_of

__all__ = [
    "replay_backends_here",
    "cpu_devices_here",
    "build_model",
    "first_gpu",
    "gpu_rows_here",
    "merge_models",
]

_HOST_STAGES = ("replay_in", "replay_next", "apply")


def replay_backends_here(key: ProfileKey | None = None, platform: str = CPU) -> list[str]:
    """Replay backends that run inside XLA on this machine's ``platform``, best first (on the
    CPU the reference always; faster ones when they load); with ``key``, only those that hold
    its tree (their registry entry's ``accepts``: the others are not profiled, and the model
    says why they cannot run)."""
    tree = None if key is None else (key.capacity, key.branching)
    runs = providing("replay", platform, runnable=True)
    return [b.name for b in runs if not b.host and not b.refuses(tree)]


def cpu_devices_here() -> list[str]:
    """This process's XLA CPU devices as a mapping names them (``cpu:0``, ``cpu:1``, ...)."""
    return [f"{CPU}:{i}" for i in range(len(jax.devices(CPU)))]


def _host_costs(
    key: ProfileKey, cache: ProfileCache, reprofile: bool, device: Any, log: Callable[[str], None]
) -> dict[str, dict[str, float]]:
    """The host replay backend's costs per stage (`drlhet.dse.baselines`), cached like the
    profiles (an empty profile is cached when its library is missing)."""
    host = host_replay_backend()
    if host is None:
        return {}
    k = dataclasses.replace(key, backend=host)
    prof = None if reprofile else cache.get(k)
    if prof is None:
        log(f"profiling the Python-level baseline buffer (cpprb) for {k.name()}")
        prof = profile_python_replay(k, device) or {}
        cache.put(k, prof)
    return {host: {s: prof[s]["median"] for s in _HOST_STAGES}} if prof else {}


def first_gpu() -> Any:
    """This process's first GPU device, or None."""
    try:
        return jax.devices(GPU)[0]
    except RuntimeError:
        return None


def _settings(backend: str) -> str:
    """``backend``'s path switches as they are now (`Backend.settings`), hashed, as a suffix of
    its profiles' cache keys ("" for a backend without switches)."""
    describe = get(backend).settings
    if describe is None:
        return ""
    return "+" + hashlib.sha1(describe().encode()).hexdigest()[:8]


def gpu_rows_here(
    key: ProfileKey,
    cache: ProfileCache,
    reprofile: bool = False,
    sheets: dict[str, dict] | None = None,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """GPU profile rows (`drlhet.dse.gpu_profile`) of every replay backend that runs on this
    machine's first GPU, at ``key``'s shape: each primitive timed in a compiled scan on the GPU
    (`drlhet.dse.profile.compute_figures`), from ``cache`` or measured now (and cached). None
    without a GPU, or when no device sheet matches it (the DSE names GPUs by their sheets)."""
    gpu = first_gpu()
    if gpu is None:
        return []
    sheet = sheet_for_device(gpu.device_kind, sheets)
    if sheet is None:
        log(f"note: no device sheet matches this GPU ({gpu.device_kind}); it stays unprofiled")
        return []
    rows = []
    for backend in replay_backends_here(key, GPU):
        k = dataclasses.replace(key, backend=backend)
        cache_key = dataclasses.replace(key, backend=f"{backend}@{sheet}{_settings(backend)}")
        figs = None if reprofile else cache.get(cache_key)
        if figs is None:
            log(f"profiling {k.name()} on {gpu.device_kind} (measured; cached in {cache.path})")
            figs = compute_figures(k, gpu)
            cache.put(cache_key, figs)
        rows.append(profile_row(k.name(), backend, gpu.device_kind, sheet, figs))
    return rows


def build_model(
    key: ProfileKey,
    cache: ProfileCache,
    reprofile: bool = False,
    sheets_dir: Path | None = None,
    log: Callable[[str], None] = print,
    gpu_rows: list[dict] | None = None,
    eval_every: int | None = None,
) -> Model:
    """A `Model` for ``key`` (its ``backend`` is ignored): CPU profiles of every replay backend
    here, from ``cache`` or measured now (and cached), the host baseline's costs, the device
    sheets (``sheets_dir``, default: the shipped ones), and GPU profiles: ``gpu_rows`` (e.g.
    read from a file measured on another machine), then those of a GPU present here
    (`gpu_rows_here`, measured or cached), which replace the sheet model of their GPU. It
    predicts runs in chunks of ``eval_every`` env steps (`drlhet.dse.trace.shapes_of`; None:
    not known)."""
    cpus = jax.devices(CPU)
    profiles = {}
    for backend in replay_backends_here(key):
        k = dataclasses.replace(key, backend=backend)
        prof = None if reprofile else cache.get(k)
        if prof is not None and len(cpus) > 1 and prof.get("other_device") is None:
            prof = None  # profiled with one CPU device: no hop or pipeline figures to split by
        if prof is None:
            log(f"profiling {k.name()} on {cpus[0]} (measured; cached in {cache.path})")
            prof = profile_config(k, cpus[0], cpus[1] if len(cpus) > 1 else None, log=log)
            cache.put(k, prof)
        profiles[backend] = prof
    host_costs = _host_costs(key, cache, reprofile, cpus[0], log)
    sheets = load_sheets(sheets_dir)
    rows = list(gpu_rows or []) + gpu_rows_here(key, cache, reprofile, sheets, log)
    prefix = dataclasses.replace(key, backend=None).name()
    gpu = GpuProfiles(rows, prefix, reference()) if rows else None
    return Model(
        shapes_of(key, eval_every),
        sheets,
        profiles,
        cpu_cores=usable_cpus(),
        host_costs=host_costs,
        gpu=gpu or None,
    )


def usable_cpus() -> int:
    """The logical CPUs this process may run on (its affinity: fewer than the machine's under
    ``taskset`` or a container's cpuset), which the CPU devices' threads share."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux; elsewhere every CPU
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def _median_profile(profiles: list[dict]) -> dict:
    """One profile whose every measured figure is the median over ``profiles``."""
    out = copy.deepcopy(profiles[0])
    for group in ("compute", "call", "latency", "transfer", "pipeline"):
        for name in out.get(group, {}):
            for s in ("median", "min", "max"):
                out[group][name][s] = statistics.median(d[group][name][s] for d in profiles)
    return out


def merge_models(models: list[Model]) -> Model:
    """One model from several profiling rounds of the same configuration: every measured figure
    is the median over the rounds (robust to a round that met a busy machine); the rest (the
    shapes, sheets, cores, GPU profiles and whether the host-driven loops are modeled) is the
    first round's.

    Raises:
      ValueError: the rounds model different runs (their shapes or ``host_driven`` differ).
    """
    first = models[0]
    if len(models) == 1:
        return first
    for m in models[1:]:
        if (m.s, m.host_driven) != (first.s, first.host_driven):
            raise ValueError("merge_models: the rounds model different runs (shapes or loops)")
    profiles = {b: _median_profile([m.profiles[b] for m in models]) for b in first.profiles}
    host = {
        b: {
            stage: statistics.median(m.host_costs[b][stage] for m in models if b in m.host_costs)
            for stage in costs
        }
        for b, costs in first.host_costs.items()
    }
    return Model(
        first.s,
        first.sheets,
        profiles,
        first.cpu_cores,
        host,
        host_driven=first.host_driven,
        gpu=first.gpu,
    )
