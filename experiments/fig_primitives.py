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
The rows are made by ``primitives_rows.py``, the table and the plot by ``primitives_plot.py``.

Usage:
  python experiments/fig_primitives.py          # reduced: B 32..1024, 2^14..2^22 (~1-2 min here)
  python experiments/fig_primitives.py --full   # every power of two, B to 4096, 11 repeats
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Literal

import checked_cli

# fig_branching.py reads colors_of, draw, legend, series_name, measured_label as fp.<name>
from primitives_plot import colors_of, draw, legend, plot, print_table, series_name  # noqa: F401
from primitives_rows import PRIMITIVES, gpu_measured, measure, measured_label, modeled  # noqa: F401

FULL_BATCHES = tuple(2**e for e in range(5, 13))
FULL_CAPACITIES = tuple(2**e for e in range(14, 23))
FULL_REPEATS = 11


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
    this figure's rows, or a measuring option beside it (ignored: `--full` drew nothing new),
    a device sheet that is not shipped, or a ``--gpu-results`` file that is
    not bench_replay.py's rows (where the GPU rows are drawn); asked before anything is
    measured (imports no jax: ``--threading xla1`` acts before it is imported)."""
    if args.replot is not None:
        drawn = ("replot", "gpu_results", "out", "plot")  # what a redraw reads and writes
        measuring = [f.name for f in dataclasses.fields(Args) if f.name not in drawn]
        because = "with --replot (it measures nothing: it redraws the file)"
        why = checked_cli.unreadable_json(args.replot, _replotted)
        why = why or checked_cli.ignored_options(args, Args(), measuring, because)
    else:
        why = ""
        if args.sheets:  # none modeled: nothing to check
            from drlhet.dse.devices import load_sheets

            why = checked_cli.unknown_names("--sheets", args.sheets, load_sheets())
    why = why or _simulated(args.backends)
    if args.replot is not None or "fused" in args.modes:  # where the GPU rows are drawn
        from report_replay import wrong_shape  # what a bench_replay row file holds

        for path in args.gpu_results:  # a missing one: a note, its rows omitted
            bad = checked_cli.unreadable_json(path, wrong_shape) if path.exists() else ""
            why = why or (f"--gpu-results {bad}" if bad else "")
    return why


def _simulated(names: tuple[str, ...]) -> str:
    """Why a backend named in ``--backends`` cannot be drawn: one that runs on this machine's
    CPU only as a simulation of its hardware (``cuda``'s host emulation, ``fpga``'s
    C-simulation: function, not speed), whose times would be labelled measured."""
    from drlhet import backends

    for name in names:
        if name in backends.names() and backends.get(name).simulates(backends.CPU):
            return (
                f"--backends {name}: on the CPU it runs as a simulation of its hardware "
                "(function, not speed); this figure draws measured speeds (a GPU's from "
                "--gpu-results)"
            )
    return ""


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
