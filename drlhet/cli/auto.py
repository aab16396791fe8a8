"""``drlhet train --mapping auto``: the DSE's best mapping that runs on this machine.

It profiles this machine (the user's profile cache, filled when missing), takes a GPU here as
measured (a GPU profile) and never from its sheet alone, and searches the mappings of this
machine's devices (docs/design.md section 5).
"""

from __future__ import annotations

from collections.abc import Callable

from drlhet.backends.base import CPU, GPU, providing
from drlhet.cli.common import cache_dir as default_cache_dir
from drlhet.dse.build import build_model, cpu_devices_here, first_gpu
from drlhet.dse.cache import ProfileCache
from drlhet.dse.gpu_profile import sheet_for_device
from drlhet.dse.key import ProfileKey
from drlhet.dse.search import best_to_run, search
from drlhet.runtime.config import TrainConfig

__all__ = ["auto_mapping"]


def auto_mapping(
    config: TrainConfig,
    delay: int,
    log: Callable[[str], None] = print,
    backend: str | None = None,
    learner: str | None = None,
) -> str:
    """The DSE's best mapping runnable here for ``config`` (profiles from the user's cache
    folder, measured and cached when missing), its replay on ``backend`` and its learner on
    ``learner`` if given: over this machine's CPU devices, and its GPU as measured (a GPU
    profile; never from a sheet alone), where only a mapping with every group on the GPU is
    taken (`drlhet.dse.search.best_to_run`), named ``gpu:0``.

    Raises:
      ValueError: no mapping runnable here (with that replay or learner backend); before
        anything is profiled, uniform replay (the DSE models prioritized replay) and a learner
        backend the DSE does not place on this machine's devices (the FPGA learner's
        C-simulation).
    """
    _check_auto(config, learner)
    key = ProfileKey.of(config)
    present = cpu_devices_here()
    cache = ProfileCache(default_cache_dir())
    model = build_model(key, cache=cache, log=log, eval_every=config.eval_every)  # its chunks
    gpu = first_gpu()
    sheet = sheet_for_device(gpu.device_kind, model.sheets) if gpu is not None else None
    if sheet is not None and (model.gpu is None or not model.gpu.has(sheet)):
        sheet = None  # a GPU here is taken only as measured (its profile), never from a sheet
    gpu_replay = [b.name for b in providing("replay", GPU, runnable=True) if not b.host]
    if backend is not None:
        gpu_replay = [b for b in gpu_replay if b == backend]
    devices = present + ([sheet] if sheet else [])
    preds = search(model, devices, delay, present=present)  # runnable: backends that load
    if backend is not None:
        preds = [p for p in preds if p.places["replay"].backend == backend]
    if learner is not None:
        preds = [p for p in preds if p.places["learner"].backend == learner]
    picked = best_to_run(preds, sheet, gpu_replay)
    if picked is None:
        given = [f"{g} backend {b!r}" for g, b in (("replay", backend), ("learner", learner)) if b]
        raise ValueError(
            "no mapping runnable here" + (f" with {' and '.join(given)}" if given else "")
        )
    best, text = picked
    log(
        f"--mapping auto: {text} ({best.trained_samples_per_s:,.0f} trained samples/s "
        f"predicted, {best.basis})"
    )
    return text


def _check_auto(config: TrainConfig, learner: str | None) -> None:
    """Refuses, before anything is profiled, what ``--mapping auto`` cannot search for."""
    if config.uniform:
        raise ValueError(
            "the DSE models prioritized replay only: with --uniform give the mapping (its "
            "replay on a bare device: replay=DEVICE)"
        )
    placed = {b.name for p in (CPU, GPU) for b in providing("learner", p, runnable=True)}
    if learner is not None and learner not in placed:
        raise ValueError(
            f"the DSE places no --learner {learner} on this machine's devices (it runs here "
            f"as a simulation, which the DSE does not cost): give the mapping (learner="
            f"{learner}@{CPU}:0)"
        )
