"""``drlhet profile`` and ``drlhet dse``: measure the primitives here and rank every mapping.

Part of the CLI, the only reader of flags and environment variables (the profile cache folder
defaults to `drlhet.cli.common.cache_dir`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import tyro

from drlhet.backends.base import CPU, GPU, PLATFORMS, providing
from drlhet.cli.common import (
    UsageError,
    available_memory,
    bad_input,
    check_writable,
    set_cpu_devices,
)
from drlhet.cli.common import cache_dir as default_cache_dir
from drlhet.dse.baselines import baselines
from drlhet.dse.build import build_model, cpu_devices_here, first_gpu, replay_backends_here
from drlhet.dse.cache import ProfileCache
from drlhet.dse.devices import load_sheets
from drlhet.dse.gpu_profile import load_gpu_profiles, sheet_for_device
from drlhet.dse.key import ProfileKey
from drlhet.dse.measure import measure_mapping
from drlhet.dse.model import Prediction
from drlhet.dse.search import best_to_run, expand_devices, search
from drlhet.runtime.config import TrainConfig, check
from drlhet.runtime.memory import MemoryEstimate, estimate_memory, size_text
from drlhet.runtime.trainer import make_trainer

__all__ = ["profile_command", "dse_command", "auto_mapping", "default_devices"]


def default_devices() -> str:
    """This machine's CPU devices and every shipped device sheet (``cpu,a100,h100,...``)."""
    sheets = load_sheets()
    modeled = sorted(n for n, s in sheets.items() if s["kind"] in PLATFORMS and s["kind"] != CPU)
    return ",".join([CPU, *modeled])


def profile_command(
    shape: Annotated[ProfileKey, tyro.conf.arg(name="")],
    cache_dir: Path | None = None,
    cpu_devices: int = 2,
) -> Path:
    """Profiles every primitive of a run on this machine's CPU (every replay backend here), and
    on its GPU if it has one that matches a device sheet, and caches the result (JSON, reused
    until the package or the machine changes).

    Args:
      shape: the run's shape (`drlhet.dse.key.ProfileKey`; ``--backend`` is refused: every
        replay backend here is profiled).
      cache_dir: profile cache folder (default ``$DRLHET_CACHE``, else
        ``$XDG_CACHE_HOME/drlhet``, else ``~/.cache/drlhet``).
      cpu_devices: XLA CPU devices (two are needed for the transfer figures).
    """
    with bad_input(options=_KEY_OPTIONS):
        set_cpu_devices(cpu_devices)
        _check_shape(shape)
        folder = cache_dir or default_cache_dir()
        check_writable(folder, f"--cache-dir {folder}", "cache")
    cache = ProfileCache(cache_dir or default_cache_dir())
    model = build_model(shape, cache=cache, reprofile=True)
    for backend, prof in model.profiles.items():
        med = {k: f"{v['median'] * 1e6:.1f}" for k, v in prof["compute"].items()}
        print(f"{backend}: compute us per call (measured, {prof['device']}): {med}")
        med = {k: f"{v['median'] * 1e6:.1f}" for k, v in prof["call"].items()}
        print(f"{backend}: host-loop call us (measured): {med}")
    for sheet, by_backend in (model.gpu.figures if model.gpu else {}).items():
        for backend, figs in by_backend.items():
            med = {k: f"{v['median'] * 1e6:.1f}" for k, v in figs.items()}
            print(f"{backend}: compute us per call (measured, this GPU: {sheet}): {med}")
    print(f"profiles: {cache.path}")
    return cache.path


def dse_command(
    shape: Annotated[ProfileKey, tyro.conf.arg(name="")],
    delay: int = 0,
    devices: str | None = None,
    top: int = 20,
    measure: bool = False,
    cache_dir: Path | None = None,
    reprofile: bool = False,
    out: Path = Path("runs/dse.json"),
    cpu_devices: int = 2,
    gpu_profile: Path | None = None,
) -> dict:
    """Predicts the throughput of every mapping and ranks them (docs/design.md section 5).

    Args:
      shape: the run's shape (`drlhet.dse.key.ProfileKey`; ``--backend`` is refused: every
        replay backend here is profiled).
      delay: priority-update delay k (0: strict chain; >= 1: slowest stage).
      devices: devices to map onto: ``cpu`` (this machine's XLA CPU devices), ``cpu:N``, and
        device sheets (``h100``, ``h200``, ``a100``, ``u200``, ``u250``); absent ones are modeled.
        Default: ``cpu`` and every shipped sheet of a device.
      top: rows to print (the JSON has them all).
      measure: also run every runnable mapping and print its measured throughput (in chunks
        of the shape's own ``eval_every``, as predicted: the pipeline's iterations per call
        divide them).
      cache_dir: profile cache folder.
      reprofile: measure the profiles again even when cached.
      out: JSON with every prediction.
      cpu_devices: XLA CPU devices of this process.
      gpu_profile: primitives measured on a GPU (``experiments/profile_gpu.py``'s JSON, e.g.
        ``results/gpu_profile_h100.json``): for this shape, they replace the sheet model of
        the GPU they were measured on (a GPU present here is profiled anyway).
    """
    with bad_input(options=_KEY_OPTIONS):
        set_cpu_devices(cpu_devices)
        if delay < 0:
            raise ValueError(f"--delay must be >= 0, got {delay}")
        _check_shape(shape, delay if measure else None)
        if top < 1:
            raise ValueError(f"--top must be >= 1, got {top}")
        if out.is_dir():
            raise ValueError(f"--out {out} is a folder; name the JSON file to write")
        check_writable(out.parent, f"--out {out}", "file")
        folder = cache_dir or default_cache_dir()
        check_writable(folder, f"--cache-dir {folder}", "cache")
        gpu_rows = _gpu_rows(gpu_profile)
    present = cpu_devices_here()
    named = default_devices() if devices is None else devices  # '' is refused, not the default
    with bad_input(f"--devices {named}: "):
        devs = expand_devices(named, len(present), load_sheets())
    cache = ProfileCache(cache_dir or default_cache_dir())
    every = shape.train_config().eval_every  # the run predicted, and measured (--measure)
    model = build_model(
        shape, cache=cache, reprofile=reprofile, gpu_rows=gpu_rows, eval_every=every
    )
    if gpu_profile is not None and model.gpu is None:
        print(
            f"note: --gpu-profile {gpu_profile} has no rows for this shape; GPUs stay modeled "
            "from sheets"
        )
    preds = search(model, devs, delay, present=present, backends_here=replay_backends_here(shape))
    if not any(p.note == "" for p in preds):
        why = preds[0].note if preds else "no placement has costs"
        raise UsageError(f"--devices {','.join(devs)}: no mapping is feasible ({why})")
    measured = _measure_runnable(shape, preds, delay, every) if measure else {}
    _print_ranking(shape, delay, preds, measured if measure else None, top)
    feasible = [p for p in preds if p.note == ""]
    best = feasible[0]
    for name, b in baselines(preds, model).items():
        print(
            f"  best over {name:<32} {best.trained_samples_per_s / b.trained_samples_per_s:8.2f}x "
            f"({b.mapping_text()}, {b.basis})"
        )
    result = _result(shape, delay, devs, preds, measured)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"all predictions: {out}")
    return result


def _gpu_rows(path: Path | None) -> list[dict] | None:
    """The rows of the ``--gpu-profile`` file ``path`` (`load_gpu_profiles`; None: none given).

    Raises:
      ValueError: the file's fault, naming the file and the option.
    """
    if path is None:
        return None
    try:
        return load_gpu_profiles(path)
    except ValueError as e:  # the library names the file; the option is the command's
        raise ValueError(f"{e} (--gpu-profile)") from None


def _measure_runnable(
    shape: ProfileKey, preds: list[Prediction], delay: int, every: int
) -> dict[str, float]:
    """Runs every runnable mapping in chunks of ``every`` steps; its trained samples/s."""
    measured: dict[str, float] = {}
    for p in preds:
        if p.runnable:
            m = measure_mapping(shape, p.mapping_text(), delay, chunk_steps=every)
            measured[p.mapping_text()] = m["trained_samples_per_s"]
            print(f"measured {p.mapping_text()}: {measured[p.mapping_text()]:,.0f}", flush=True)
    return measured


_KEY_OPTIONS = {
    "batch_size": "batch",
    "buffer_size": "capacity",
    "dqn.hidden": "hidden",
    "ddpg.hidden": "hidden",
}
"""Fields of a `TrainConfig` whose `ProfileKey` option has another name."""


def _check_shape(shape: ProfileKey, measured_delay: int | None = None) -> None:
    """Refuses a shape that cannot be trained, that names a backend (before anything is
    measured: every replay backend here is profiled), or that this machine's memory cannot
    hold (`_check_memory`; with ``measured_delay``, runs measured at that delay too)."""
    if shape.backend is not None:
        raise ValueError(
            f"--backend {shape.backend}: every replay backend that loads here is profiled; "
            "drop --backend"
        )
    cfg = shape.train_config()
    check(cfg)
    tr = make_trainer(cfg)  # the environment, the algorithm and the backend fit together
    rest = f"--num-envs {shape.num_envs}"
    _check_memory(shape, estimate_memory(tr, 1, copies=2), "profiling it", rest)
    if measured_delay is not None:
        run = estimate_memory(make_trainer(shape.train_config(delay=measured_delay)), 1)
        _check_memory(shape, run, "a run measured at it", f"--delay {measured_delay}")


def _check_memory(shape: ProfileKey, need: MemoryEstimate, what: str, rest: str) -> None:
    """Refuses ``need`` (`drlhet.runtime.memory`) beyond the memory available now, naming the
    option of its largest part (``rest``: of the state's other arrays): profiling holds at
    least two copies of a run's state (the trainer's and a timed copy), a run one (with its
    delayed updates); beyond the memory they would run out of it midway."""
    have = available_memory()
    if have is None or need.total <= have[0]:
        return
    parts = {"replay": need.replay, "agents": need.agent, "other": need.other}
    option = {
        "replay": f"--capacity {shape.capacity}",
        "agents": f"--hidden {' '.join(map(str, shape.hidden))}",
        "other": rest,
    }[max(parts, key=lambda k: parts[k])]
    detail = ", ".join(f"{k} {size_text(need.copies * v)}" for k, v in parts.items())
    raise ValueError(
        f"{option}: {what} needs ~{size_text(need.total)} ({detail}), this machine has "
        f"{size_text(have[0])} available ({have[1]})"
    )


def _print_ranking(
    shape: ProfileKey,
    delay: int,
    preds: list[Prediction],
    measured: dict[str, float] | None,
    top: int,
) -> None:
    """The table of the ``top`` feasible mappings, the best, and the best runnable here."""
    feasible = [p for p in preds if p.note == ""]
    runnable = [p for p in feasible if p.runnable]
    print(
        f"\nDSE: {shape.algo.upper()} on {shape.env}, MLP {shape.hidden}, batch {shape.batch}, "
        f"capacity {shape.capacity}, K {shape.branching}, {shape.num_envs} envs, "
        f"{shape.sgd_steps} SGD steps/iteration, delay {delay}; {len(preds)} mappings "
        f"({len(feasible)} feasible, {len(runnable)} runnable here)"
    )
    print(
        "basis: profiled = predicted from costs measured on this machine; <gpu> measured = "
        "from primitives measured on that GPU (a GPU profile); modeled (sheet) = predicted "
        "with device sheets (drlhet/dse/sheets); modeled (cycle model) = the FPGA modules' "
        "cycle models (hls/rmm, hls/learner); measured = run here"
    )
    head = f"{'#':>3} {'mapping':<64} {'trained/s':>11} {'basis':>28} {'bottleneck':>16}"
    print(head + (f" {'measured':>11}" if measured is not None else ""))
    for i, p in enumerate(feasible[:top]):
        line = (
            f"{i + 1:>3} {p.mapping_text():<64} {p.trained_samples_per_s:>11,.0f} "
            f"{p.basis:>28} {p.bottleneck:>16}"
        )
        if measured is not None and p.mapping_text() in measured:
            line += f" {measured[p.mapping_text()]:>11,.0f}"
        print(line)
    best = feasible[0]
    print(f"\nbest: {best.mapping_text()} ({best.basis}) {best.trained_samples_per_s:,.0f}/s")
    if runnable:
        print(
            f"best runnable here: {runnable[0].mapping_text()} "
            f"{runnable[0].trained_samples_per_s:,.0f}/s (profiled)"
        )


def _result(
    shape: ProfileKey,
    delay: int,
    devices: list[str],
    preds: list[Prediction],
    measured: dict[str, float],
) -> dict:
    """The JSON the command writes: every prediction, the best, and the best runnable."""
    feasible = [p for p in preds if p.note == ""]
    runnable = [p for p in feasible if p.runnable]
    return {
        "shape": dataclasses.asdict(shape),
        "delay": delay,
        "devices": devices,
        "predictions": [
            {
                "mapping": p.mapping_text(),
                "trained_samples_per_s": p.trained_samples_per_s,
                "env_steps_per_s": p.env_steps_per_s,
                "basis": p.basis,
                "runnable": p.runnable,
                "bottleneck": p.bottleneck,
                "note": p.note,
                "measured_trained_samples_per_s": measured.get(p.mapping_text()),
            }
            for p in preds
        ],
        "best": feasible[0].mapping_text(),
        "best_runnable": runnable[0].mapping_text() if runnable else None,
    }


def auto_mapping(
    config: TrainConfig,
    delay: int,
    log: Callable[[str], None] = print,
    backend: str | None = None,
) -> str:
    """The DSE's best mapping runnable here for ``config`` (profiles from the user's cache
    folder, measured and cached when missing), its replay on ``backend`` if given: over this
    machine's CPU devices, and its GPU as measured (a GPU profile; never from a sheet alone),
    where only a mapping with every group on the GPU is taken (`drlhet.dse.search.best_to_run`),
    named ``gpu:0``.

    Raises:
      ValueError: no mapping runnable here (with that replay backend).
    """
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
    picked = best_to_run(preds, sheet, gpu_replay)
    if picked is None:
        raise ValueError(
            "no mapping runnable here" + (f" with replay backend {backend!r}" if backend else "")
        )
    best, text = picked
    log(
        f"--mapping auto: {text} ({best.trained_samples_per_s:,.0f} trained samples/s "
        f"predicted, {best.basis})"
    )
    return text
