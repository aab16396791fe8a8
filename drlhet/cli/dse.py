"""``drlhet profile`` and ``drlhet dse``: measure the primitives here and rank every mapping.

Part of the CLI, the only reader of flags and environment variables (the profile cache folder
defaults to `drlhet.cli.common.cache_dir`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import tyro

from drlhet.backends.base import CPU, PLATFORMS
from drlhet.cli.auto import auto_mapping
from drlhet.cli.common import (
    UsageError,
    available_memory,
    bad_input,
    check_writable,
    set_cpu_devices,
)
from drlhet.cli.common import cache_dir as default_cache_dir
from drlhet.dse.baselines import baselines
from drlhet.dse.build import build_model, cpu_devices_here, replay_backends_here
from drlhet.dse.cache import ProfileCache
from drlhet.dse.devices import load_sheets
from drlhet.dse.gpu_profile import load_gpu_profiles, shapes_measured
from drlhet.dse.key import ProfileKey
from drlhet.dse.measure import measure_mapping
from drlhet.dse.model import Prediction
from drlhet.dse.search import expand_devices, search
from drlhet.runtime.config import check
from drlhet.runtime.memory import MemoryEstimate, estimate_memory, size_text
from drlhet.runtime.trainer import make_trainer

__all__ = ["profile_command", "dse_command", "auto_mapping", "default_devices"]


def default_devices(sheets: dict[str, dict] | None = None) -> str:
    """This machine's CPU devices and every device sheet of ``sheets`` (default: the shipped
    ones): ``cpu,a100,h100,...``."""
    sheets = load_sheets() if sheets is None else sheets
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
    sheets: Path | None = None,
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
      sheets: device sheets read instead of the shipped ones (a copy of drlhet/dse/sheets with
        values changed, e.g. a board's measured ``invocation_us``, or 1 for
        ``learner_memories_resident``: a learner driver that keeps the memories on the board).
    """
    with bad_input(options=_KEY_OPTIONS):
        set_cpu_devices(cpu_devices)
        if delay < 0:
            raise ValueError(f"--delay must be >= 0, got {delay}")
        _check_shape(shape, delay if measure else None)
        _check_outputs(top, out, cache_dir)
        gpu_rows = _gpu_rows(gpu_profile)
        sheet_set = _sheets(sheets)
    present = cpu_devices_here()
    named = default_devices(sheet_set) if devices is None else devices  # '' is refused
    with bad_input(f"--devices {named}: "):
        devs = expand_devices(named, len(present), sheet_set)
    with bad_input():
        _check_profiled_gpus(gpu_profile, gpu_rows, devs)
    cache = ProfileCache(cache_dir or default_cache_dir())
    every = shape.train_config().eval_every  # the run predicted, and measured (--measure)
    model = build_model(
        shape, cache=cache, reprofile=reprofile, sheets_dir=sheets, gpu_rows=gpu_rows,
        eval_every=every,
    )  # fmt: skip
    if gpu_profile is not None and model.gpu is None:
        _note_other_shapes(gpu_profile, gpu_rows or [], shape)
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


def _note_other_shapes(path: Path, rows: list[dict], shape: ProfileKey) -> None:
    """Says that the ``--gpu-profile`` file ``path`` has no rows of ``shape``, and which
    options ask for the shapes it has."""
    held = "; ".join(shapes_measured(rows, dataclasses.asdict(shape)))
    print(
        f"note: --gpu-profile {path} has no rows for this shape; GPUs stay modeled from sheets "
        f"(its rows were measured at: {held})"
    )


def _check_outputs(top: int, out: Path, cache_dir: Path | None) -> None:
    """Refuses ``--top`` below 1, and an ``--out`` or a cache folder that cannot be written."""
    if top < 1:
        raise ValueError(f"--top must be >= 1, got {top}")
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; name the JSON file to write")
    check_writable(out.parent, f"--out {out}", "file")
    folder = cache_dir or default_cache_dir()
    check_writable(folder, f"--cache-dir {folder}", "cache")


def _sheets(folder: Path | None) -> dict[str, dict]:
    """The device sheets of ``--sheets`` ``folder`` (`load_sheets`; None: the shipped ones).

    Raises:
      ValueError: not a folder, no sheet in it, or a sheet's fault, naming the option.
    """
    if folder is None:
        return load_sheets()
    if not folder.is_dir():
        raise ValueError(f"--sheets {folder} is not a folder")
    try:
        found = load_sheets(folder)
    except ValueError as e:
        raise ValueError(f"{e} (--sheets)") from None
    if not found:
        raise ValueError(f"--sheets {folder} holds no device sheet (*.json)")
    return found


def _check_profiled_gpus(path: Path | None, rows: list[dict] | None, devices: list[str]) -> None:
    """Refuses a ``--gpu-profile`` none of whose GPUs is among ``devices`` (its rows would be
    left unused, every GPU row modeled from its sheet)."""
    sheets = sorted({r["sheet"] for r in rows or [] if r.get("sheet")})
    if path is not None and not set(sheets) & set(devices):
        raise ValueError(
            f"--gpu-profile {path} measured {', '.join(sheets) or 'no GPU with a sheet'}, "
            f"which --devices {','.join(devices)} does not list: add it, or drop --gpu-profile"
        )


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
        "with device sheets (drlhet/dse/sheets; a sheet costs a GPU's replay backends "
        "alike); modeled (cycle model) = the FPGA modules' cycle models (hls/rmm, "
        "hls/learner); measured = run here"
    )
    print(
        "bottleneck = what sets the time: fused = one program; chain = a strict loop's "
        "stages in turn; thread <groups> = a pipeline's host thread; cpu cores = the programs' "
        "share of this machine's cores; dependency cycle = calls waiting for delayed updates; "
        "<device> = its busy time"
    )
    shown = feasible[:top]
    wide = max([16, *(len(p.bottleneck) for p in shown)])
    head = f"{'#':>3} {'mapping':<64} {'trained/s':>11} {'basis':>28} {'bottleneck':>{wide}}"
    print(head + (f" {'measured':>11}" if measured is not None else ""))
    for i, p in enumerate(shown):
        line = (
            f"{i + 1:>3} {p.mapping_text():<64} {p.trained_samples_per_s:>11,.0f} "
            f"{p.basis:>28} {p.bottleneck:>{wide}}"
        )
        if measured is not None:
            got = measured.get(p.mapping_text())
            line += f" {got:>11,.0f}" if got is not None else f" {'not run':>11}"
        print(line)
    _print_best(feasible[0], runnable, measured)


def _print_best(best: Prediction, runnable: list[Prediction], measured: dict | None) -> None:
    """The best mapping, the best runnable here (or that none is) and, with ``--measure``,
    the best measured."""
    print(f"\nbest: {best.mapping_text()} ({best.basis}) {best.trained_samples_per_s:,.0f}/s")
    if runnable:
        print(
            f"best runnable here: {runnable[0].mapping_text()} "
            f"{runnable[0].trained_samples_per_s:,.0f}/s ({runnable[0].basis})"
        )
    else:
        print("best runnable here: none (no mapping of these devices runs on this machine)")
    if measured:
        text = max(measured, key=lambda m: measured[m])
        predicted = next(p.trained_samples_per_s for p in runnable if p.mapping_text() == text)
        print(
            f"best measured here: {text} {measured[text]:,.0f}/s (measured; predicted "
            f"{predicted:,.0f}/s)"
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
