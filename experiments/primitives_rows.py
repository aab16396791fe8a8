"""fig_primitives.py's rows: the primitives' seconds per call, one dict a (device, primitive,
mode, batch, capacity) point, from each source the figure draws: *measured* on this machine (by
bench_replay.py's `measure_grid`), *modeled* by the DSE's device sheets, and *measured* on a
GPU (read from bench_replay.py's ``--device gpu`` rows).

Imports no jax at import time: jax and drlhet are imported where a row is made.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import re
from pathlib import Path

import bench_replay
from _common import run_info

PRIMITIVES: tuple[bench_replay.Op, ...] = ("insert", "sample", "update")
ROW_BYTES = 44
"""Bytes of one transition of bench_replay's data (obs 4 + action + reward + next_obs 4 + done,
4 bytes each): what a modeled insert writes and a modeled sample reads per item."""
THREADING = {
    "default": "default: XLA's thread pool and native's OpenMP over all {n} cores",
    "pin1": "process pinned to one core (taskset -c 0)",
    "xla1": "XLA intra-op threading off; native's OpenMP over all {n} cores",
}


def measured_label() -> str:
    node = platform.node()
    return f"measured (cpu, {os.cpu_count()}-core {'VM' if node == 'vm' else node})"


def threading_text(mode: str) -> str:
    return THREADING[mode].format(n=os.cpu_count())


def measure(
    points: list[tuple[int, int, int]],
    *,
    ops: tuple[bench_replay.Op, ...],
    modes: tuple[bench_replay.Mode, ...],
    backends: tuple[str, ...],
    repeats: int,
    threading: bench_replay.Threading,
) -> list[dict]:
    """Measured rows at each ``(capacity, batch, K)`` of ``points``, by bench_replay's
    `measure_grid`
    (one call per distinct (batch, K) over the capacities; its own output hidden except its
    notes)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for c, b, k in dict.fromkeys(points):
        groups.setdefault((b, k), []).append(c)
    raw: list[dict] = []
    log = io.StringIO()
    for (b, k), caps in groups.items():
        bench_args = bench_replay.Args(
            full=True,  # bench_replay's grid: the product of the three tuples
            capacities=tuple(caps),
            batches=(b,),
            branchings=(k,),
            repeats=repeats,
            ops=ops,
            modes=modes,
            backends=backends,
            thread_scaling=False,
            limits=False,
            peers=False,
            threading=threading,
        )
        with contextlib.redirect_stdout(log):
            raw += bench_replay.measure_grid(bench_args)
    for line in dict.fromkeys(log.getvalue().splitlines()):
        if line.startswith("note:"):
            print(line)
    return [_measured_row(r, repeats) for r in raw if r.get("op") in ops]


def _measured_row(r: dict, repeats: int) -> dict:
    """A bench_replay row (items/s of ``steps_per_repeat`` calls) as seconds per call."""
    b = r["batch"]
    return {
        "backend": r["impl"].removeprefix("drlhet-"),
        "device": r["device"],
        "primitive": r["op"],
        "mode": r["mode"],
        "batch": b,
        "capacity": r["capacity"],
        "branching": r["branching"],
        "seconds": b / r["items_per_s"],
        "seconds_min": b / r["items_per_s_max"],
        "seconds_max": b / r["items_per_s_min"],
        "label": measured_label(),
        "threading": threading_text(r["threading"]),
        "repeats": repeats,
        "calls_per_repeat": r["steps_per_repeat"],
        "warmup_s": r["warmup_s"],
        "device_kind": r["device_kind"],
        "run": r["run"],
    }


def _shapes(capacity: int, batch: int, k: int):
    """The sizes the device models read (the replay's; the learner's are unused here)."""
    from drlhet.dse.shapes import Shapes
    from drlhet.replay.sum_tree import layout

    lay = layout(capacity, k)
    return Shapes(
        batch=batch, capacity=capacity, branching=k, num_envs=batch, sgd_steps=1,
        levels=lay.depth, tree_bytes=4 * lay.size, row_bytes=ROW_BYTES, params=0,
        macs_per_sample=0, layers=0, bytes={},
    )  # fmt: skip


def modeled(
    points: list[tuple[int, int, int]], sheet_names: tuple[str, ...], ops: tuple[str, ...]
) -> tuple[list[dict], list[str]]:
    """Modeled rows of each device sheet at each ``(capacity, batch, K)`` (an insert writes B
    transitions, as measured); and notes on what the models could not cost."""
    from drlhet.dse.devices import MODELS, load_sheets

    sheets, rows, notes = load_sheets(), [], []
    for name in sheet_names:
        sheet = sheets[name]
        model = MODELS.get(sheet["kind"])
        if model is None:
            notes.append(f"{name}: no device model for kind {sheet['kind']!r}; omitted")
            continue
        label = f"modeled ({model.source('replay')})"
        host = model.host_overhead(sheet)
        for c, b, k in dict.fromkeys(points):
            s = _shapes(c, b, k)
            why = model.infeasible("replay", sheet, s)
            if why:
                notes.append(f"{name} at 2^{c.bit_length() - 1}, B {b}, K {k}: {why}; omitted")
                continue
            for op in ops:
                t = model.seconds(op, sheet, s, sheets[sheet["link"]])
                for mode, sec in (("fused", t), ("percall", t + host)):
                    rows.append(
                        {
                            "backend": sheet["kind"], "device": name, "sheet": name,
                            "primitive": op,
                            "mode": mode, "batch": b, "capacity": c, "branching": k,
                            "seconds": sec, "seconds_min": sec, "seconds_max": sec,
                            "label": label, "threading": "n/a (modeled)",
                            "host_overhead_s": host if mode == "percall" else 0.0,
                            "basis": f"{sheet['description']}; percall adds the sheet's host "
                            "overhead per call; the link is not included", "run": run_info(),
                        }
                    )  # fmt: skip
    return rows, notes


def gpu_measured(
    files: tuple[Path, ...], capacity: int, k: int, ops: tuple[str, ...]
) -> tuple[list[dict], list[str]]:
    """Fused rows measured on a GPU at ``capacity`` and K ``k`` (seconds per call), from the
    bench_replay rows of ``files``: per batch, cuda on the update path its default takes at
    that batch and jax from the same run; and notes on missing files."""
    from drlhet.backends.cuda import BLOCK_MAX_BATCH

    rows: list[dict] = []
    notes: list[str] = []
    seen: set[tuple[str, str, int]] = set()
    for f in files:  # each that exists checked before anything is measured (`refused`)
        if not f.exists():
            notes.append(f"{f}: no such file; its GPU rows are omitted")
            continue
        got = [
            r for r in json.loads(f.read_text())
            if r.get("impl") in ("drlhet-cuda", "drlhet-jax") and r.get("mode") == "fused"
            and r.get("capacity") == capacity and r.get("branching") == k and r.get("op") in ops
        ]  # fmt: skip
        for r in got:
            path = str(r.get("cuda_update_path", ""))
            ran = re.search(r"BLOCK_MAX_BATCH=(\d+)", path)
            if ran and (r["batch"] <= int(ran[1])) != (r["batch"] <= BLOCK_MAX_BATCH):
                continue  # cuda took the other update path in that run (jax beside it)
            key = (r["impl"], r["op"], r["batch"])
            if key in seen:
                continue
            seen.add(key)
            b = r["batch"]
            rows.append(
                {
                    "backend": r["impl"].removeprefix("drlhet-"), "device": gpu_kind(r),
                    "primitive": r["op"], "mode": "fused", "batch": b, "capacity": capacity,
                    "branching": k, "seconds": b / r["items_per_s"],
                    "seconds_min": b / r["items_per_s_max"],
                    "seconds_max": b / r["items_per_s_min"],
                    "label": f"measured (GPU, {run_date(r)})",
                    "threading": "n/a (GPU)", "source": str(f),
                    "cuda_update_path": path or None, "run": r.get("run"),
                }
            )  # fmt: skip
    return rows, notes


def gpu_kind(r: dict) -> str:
    """The GPU a bench_replay row ran on, by model: its ``device_kind``, the model in its
    ``speed_of`` (``this GPU (NVIDIA H200)``), or its ``device`` (the first GPU rows, of
    2026-11-26, wrote the model there)."""
    found = re.fullmatch(r"this GPU \((.+)\)", str(r.get("speed_of", "")))
    return r.get("device_kind") or (found[1] if found else str(r["device"]))


def run_date(r: dict) -> str:
    """The day a bench_replay row was measured: its ``date``, its run's start, or a note."""
    started = (r.get("run") or {}).get("started_utc")
    return r.get("date") or (started[:10] if started else "date not recorded")
