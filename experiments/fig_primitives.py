"""Latency of the replay primitives per call: insert, sample, update vs batch and vs capacity.

For each replay backend that runs on this machine (``jax``, ``native``) the prioritized buffer's
primitives are *measured* with the measuring code of ``experiments/bench_replay.py`` (its
`measure_grid` on a grid of our choosing: warm-up including compilation, then ``--repeats`` timed
repeats, implementations alternating within each repeat); a row holds the median, min and max
of the repeats, converted from items/s to seconds per call. Two modes, as there:

  percall  a jitted primitive called from Python (dispatch included): the latency a caller sees
  fused    the primitive inside a jitted ``lax.scan`` (no dispatch): its cost in a fused loop

GPU rows *measured* on a lent GPU (by default an H100's, 2026-11-26, ``bench_replay.py --device
gpu``; fused mode, sample and update, in the batch sweep at 2^20 only, where they were measured)
are read from ``--gpu-results`` and drawn labelled so, with the GPU's model and the date of
their run: for each batch the cuda update path its default takes there
(`drlhet.backends.cuda.BLOCK_MAX_BATCH`), and ``jax`` on the GPU from the same run.

Devices that are not on this machine are *modeled* by the DSE's device models
(`drlhet.dse.devices.MODELS`): the FPGA board from the replay module's cycle model at the
sheet's clock (labelled ``modeled (cycle model)``), the GPU from its device sheet (``modeled
(sheet)``); the row names the sheet. A modeled ``fused`` row is the device's time per call;
its ``percall`` row adds the sheet's host overhead per call (dispatch or invocation, an
assumption of the sheet); neither includes the link. The ``fpga`` backend's C-simulation
also runs here, but its time is the simulation's (function, not speed), so it is not drawn.

Sweeps: batch at ``--at-capacity`` (2^20) and capacity at ``--at-batch`` (256), K = 16.
Writes JSON rows to ``--out`` and a plot to ``--plot``, and prints a table (microseconds).

Usage:
  python experiments/fig_primitives.py          # reduced: B 32..1024, 2^14..2^22 (~1-2 min here)
  python experiments/fig_primitives.py --full   # every power of two, B to 4096, 11 repeats
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import platform
import re
from pathlib import Path
from typing import Literal

import bench_replay
import checked_cli
from _common import run_info

PRIMITIVES = ("insert", "sample", "update")
FULL_BATCHES = tuple(2**e for e in range(5, 13))
FULL_CAPACITIES = tuple(2**e for e in range(14, 23))
FULL_REPEATS = 11
ROW_BYTES = 44
"""Bytes of one transition of bench_replay's data (obs 4 + action + reward + next_obs 4 + done,
4 bytes each): what a modeled insert writes and a modeled sample reads per item."""
THREADING = {
    "default": "default: XLA's thread pool and native's OpenMP over all {n} cores",
    "pin1": "process pinned to one core (taskset -c 0)",
    "xla1": "XLA intra-op threading off; native's OpenMP over all {n} cores",
}


@dataclasses.dataclass
class Args:
    full: bool = False
    """The full scale: batches 32..4096 and capacities 2^14..2^22 at every power of two, 11
    repeats (unless given)."""
    batches: tuple[int, ...] = (32, 64, 256, 1024)
    """Batches of the batch sweep (at ``at_capacity``)."""
    capacities: tuple[int, ...] = (2**14, 2**16, 2**18, 2**20, 2**22)
    """Capacities of the capacity sweep (at ``at_batch``)."""
    at_capacity: int = 2**20
    at_batch: int = 256
    branching: int = 16
    repeats: int = 5
    """Timed repeats per measurement (after a warm-up that includes compilation); >= 2 (a row
    holds their spread)."""
    backends: tuple[str, ...] = ("jax", "native")
    modes: tuple[Literal["percall", "fused"], ...] = ("percall", "fused")
    sheets: tuple[str, ...] = ("u250", "h100")
    """Device sheets of the modeled devices (``drlhet/dse/sheets``)."""
    threading: Literal["default", "pin1", "xla1"] = "default"
    """As bench_replay's ``--threading``; ``xla1`` acts only if jax is not yet imported."""
    gpu_results: tuple[Path, ...] = (
        Path("results/bench_replay_gpu_h100_paths.json"),
        Path("results/bench_replay_gpu_h100.json"),
    )
    """bench_replay rows measured on a GPU (``--device gpu``), drawn beside this machine's; the
    first file that has a point wins. Empty: none."""
    replot: Path | None = None
    """Measure nothing: redraw this figure's JSON (e.g. the committed one) with the GPU rows
    of ``--gpu-results`` in place of the ones it had, written to ``--out`` and ``--plot``."""
    out: Path = Path("results/fig_primitives.json")
    plot: Path = Path("results/fig_primitives.png")


def measured_label() -> str:
    node = platform.node()
    return f"measured (cpu, {os.cpu_count()}-core {'VM' if node == 'vm' else node})"


def threading_text(mode: str) -> str:
    return THREADING[mode].format(n=os.cpu_count())


def measure(
    points: list[tuple[int, int, int]],
    *,
    ops: tuple[str, ...],
    modes: tuple[str, ...],
    backends: tuple[str, ...],
    repeats: int,
    threading: str,
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
            threading=threading,  # type: ignore[arg-type]
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
                t = model.seconds(op, sheet, s)
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


def series_name(r: dict) -> str:
    """A row's curve: backend on device, with its basis."""
    basis = "measured" if r["label"].startswith("measured") else r["label"]
    return f"{r['backend']} on {r['device']}, {basis}"


def print_table(rows: list[dict], axis: str, title: str) -> None:
    """Median microseconds per call, one line per (series, mode, primitive), one column per
    value of ``axis``."""
    xs = sorted({r[axis] for r in rows})
    head = " ".join(f"{_tick(axis, x):>8}" for x in xs)
    print(f"\n== {title}: us per call (median of repeats; modeled rows are not measured) ==")
    print(f"{'backend on device (basis)':<44} {'mode':<8} {'op':<7} {head}")
    keys = dict.fromkeys((series_name(r), r["mode"], r["primitive"]) for r in rows)
    for name, mode, op in keys:
        at = {r[axis]: r["seconds"] for r in rows if (series_name(r), r["mode"], r["primitive"])
              == (name, mode, op)}  # fmt: skip
        cells = " ".join(f"{1e6 * at[x]:>8.2f}" if x in at else f"{'-':>8}" for x in xs)
        print(f"{name[:44]:<44} {mode:<8} {op:<7} {cells}")


def _tick(axis: str, x: int) -> str:
    return f"2^{x.bit_length() - 1}" if axis == "capacity" else str(x)


def draw(ax, rows: list[dict], axis: str, colors: dict) -> None:
    """One panel: seconds per call against ``axis`` (log-log), a curve per series and mode
    (percall solid, fused dashed), the measured ones with their min-max band."""
    for key in dict.fromkeys((series_name(r), r["mode"]) for r in rows):
        sel = sorted((r for r in rows if (series_name(r), r["mode"]) == key), key=lambda r: r[axis])
        xs = [r[axis] for r in sel]
        style = "-" if key[1] == "percall" else "--"
        color = colors[key[0]]
        ax.plot(xs, [r["seconds"] for r in sel], style, marker="o", ms=3, color=color)
        if sel[0]["label"].startswith("measured"):
            lo, hi = [r["seconds_min"] for r in sel], [r["seconds_max"] for r in sel]
            ax.fill_between(xs, lo, hi, color=color, alpha=0.15, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, which="both", lw=0.3, alpha=0.5)


def legend(fig, colors: dict) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[n], marker="o", ms=3, label=n) for n in colors]
    handles += [
        Line2D(
            [],
            [],
            color="k",
            ls="-",
            label="per call (measured: jitted, called from "
            "Python; modeled: + the sheet's host overhead)",
        ),
        Line2D(
            [],
            [],
            color="k",
            ls="--",
            label="fused (measured: in lax.scan; modeled: the device's time)",
        ),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)


def colors_of(rows: list[dict]) -> dict:
    names = list(dict.fromkeys(series_name(r) for r in rows))
    return {n: f"C{i}" for i, n in enumerate(names)}


def plot(args: Args, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 8.5), squeeze=False)
    colors = colors_of(rows)
    sweeps = (
        ("batch", "batch B", f"capacity 2^{args.at_capacity.bit_length() - 1}"),
        ("capacity", "capacity (leaves)", f"batch {args.at_batch}"),
    )
    for i, (axis, xlabel, fixed) in enumerate(sweeps):
        for j, op in enumerate(PRIMITIVES):
            ax = axes[i][j]
            sel = [r for r in rows if r["sweep"] == axis and r["primitive"] == op]
            draw(ax, sel, axis, colors)
            ax.set_title(f"{op}, {fixed}, K {args.branching}", fontsize=10)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("seconds per call")
    legend(fig, colors)
    fig.suptitle(f"Replay primitives per call: {basis_text(rows, args)}", fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def basis_text(rows: list[dict], args: Args) -> str:
    """What the figure's rows are, from the rows themselves (a ``--replot`` draws another
    run's): the CPU rows' label, threading and repeats; the GPUs measured, with their dates;
    the modeled devices."""
    cpu = [r for r in rows if r["label"].startswith("measured (cpu")]
    gpus = dict.fromkeys(  # a GPU row's label: measured (GPU, <its run's date>)
        f"{r['device']} ({r['label'].removeprefix('measured (GPU, ').removesuffix(')')})"
        for r in rows
        if r["label"].startswith("measured (GPU")
    )
    repeats = sorted({r["repeats"] for r in cpu if "repeats" in r}) or [args.repeats]
    parts = [
        f"{cpu[0]['label']}, threading {cpu[0]['threading'].split(':')[0]}, min-max of "
        f"{'/'.join(map(str, repeats))} repeats shaded"
        if cpu
        else "nothing measured on a CPU",
        f"GPU rows measured on {', '.join(gpus)}" if gpus else "",
        "other devices modeled (not measured)",
    ]
    return parts[0] + "\n" + "; ".join(p for p in parts[1:] if p)


def scaled(args: Args) -> Args:
    """``args`` at the full scale where ``--full`` asks for it (fields left at their default)."""
    if not args.full:
        return args
    d = Args()
    return dataclasses.replace(
        args,
        batches=FULL_BATCHES if args.batches == d.batches else args.batches,
        capacities=FULL_CAPACITIES if args.capacities == d.capacities else args.capacities,
        repeats=FULL_REPEATS if args.repeats == d.repeats else args.repeats,
    )


def replot(args: Args) -> list[dict]:
    """``args.replot``'s rows, its GPU-measured ones replaced by ``--gpu-results``'."""
    old = json.loads(args.replot.read_text())  # type: ignore[union-attr]
    rows = [r for r in old if not r["label"].startswith("measured (GPU")]
    gpu_rows, notes = gpu_measured(args.gpu_results, args.at_capacity, args.branching, PRIMITIVES)
    for note in notes:
        print(f"note: {note}")
    rows += [{**r, "sweep": "batch"} for r in gpu_rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    plot(args, rows, args.plot)
    print(f"redrew {args.replot} with {len(gpu_rows)} GPU rows: {args.out}, {args.plot}")
    return rows


def _replotted(rows: object) -> str:
    """Why ``rows`` (a ``--replot`` file's JSON) are not this figure's rows, or ""."""
    why = checked_cli.rows_lacking(rows, ("label",))
    return f"not fig_primitives.py's JSON rows ({why})" if why else ""


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": a ``--replot`` file that is missing or not
    this figure's rows, a device sheet that is not shipped, or a ``--gpu-results`` file that is
    not bench_replay.py's rows (where the GPU rows are drawn); asked before anything is
    measured (imports no jax: ``--threading xla1`` acts before it is imported)."""
    if args.replot is not None:
        why = checked_cli.unreadable_json(args.replot, _replotted)
    else:
        why = ""
        if args.sheets:  # none modeled: nothing to check
            from drlhet.dse.devices import load_sheets

            why = checked_cli.unknown_names("--sheets", args.sheets, load_sheets())
    if args.replot is not None or "fused" in args.modes:  # where the GPU rows are drawn
        from report_replay import wrong_shape  # what a bench_replay row file holds

        for path in args.gpu_results:  # a missing one: a note, its rows omitted
            bad = checked_cli.unreadable_json(path, wrong_shape) if path.exists() else ""
            why = why or (f"--gpu-results {bad}" if bad else "")
    return why


def main(args: Args) -> list[dict]:
    args = scaled(args)
    if args.replot is not None:
        return replot(args)
    k = args.branching
    sweeps = {
        "batch": [(args.at_capacity, b, k) for b in args.batches],
        "capacity": [(c, args.at_batch, k) for c in args.capacities],
    }
    points = sweeps["batch"] + sweeps["capacity"]
    got = measure(
        points,
        ops=PRIMITIVES,
        modes=args.modes,
        backends=args.backends,
        repeats=args.repeats,
        threading=args.threading,
    )
    model_rows, notes = modeled(points, args.sheets, PRIMITIVES)
    gpu_rows: list[dict] = []
    if "fused" in args.modes and args.gpu_results:
        gpu_rows, gpu_notes = gpu_measured(args.gpu_results, args.at_capacity, k, PRIMITIVES)
        notes += gpu_notes
    for note in dict.fromkeys(notes):
        print(f"note: {note}")
    rows = []
    for sweep, pts in sweeps.items():  # a point in both sweeps gets a row in each
        for r in got + model_rows:
            if (r["capacity"], r["batch"], r["branching"]) in pts and r["mode"] in args.modes:
                rows.append({**r, "sweep": sweep})
    rows += [{**r, "sweep": "batch"} for r in gpu_rows]  # every batch that was measured
    for sweep, fixed in (("batch", "at_capacity"), ("capacity", "at_batch")):
        sel = [r for r in rows if r["sweep"] == sweep]
        print_table(sel, sweep, f"vs {sweep} ({fixed} {getattr(args, fixed)}, K {k})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    plot(args, rows, args.plot)
    print(f"\nwrote {len(rows)} rows to {args.out} and the plot to {args.plot}")
    return rows


LEAST = {
    "batches": 1,
    "capacities": 1,
    "at_capacity": 1,
    "at_batch": 1,
    "branching": 2,
    "repeats": 2,
}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
