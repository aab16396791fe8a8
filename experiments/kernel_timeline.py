"""The fused replay step as the GPU runs it: each kernel's time inside the CUDA graph, and the
gaps between kernels, from Nsight Systems' GPU trace (``nsys stats --report cuda_gpu_trace
--format csv``).

Nsight Compute (``kernel_times.py``) times each kernel alone, its caches flushed, with a floor
of about 2.5 us even for a one-thread kernel: it cannot say whether a step of 35 us is the
kernels' own time or the time between them (a graph node's launch after its predecessor, the
loop's turn). The GPU trace of a run under ``nsys profile --cuda-graph-trace node`` can: it has
each kernel's start and duration as it ran, in its graph. This script takes the longest burst
of GPU work in the trace (events closer than ``burst_gap_us``: the timed scan), counts its steps
as the most common number of launches per kernel name (a step launches each of its kernels
once), and writes per step the period, the kernels' summed time and the rest (gaps), and per
kernel its launches, median duration and median gap before it. *Measured* by nsys on that GPU
(its tracing adds a little to each launch).

Usage:
  python experiments/kernel_timeline.py --csv-files timeline_cuda_trace.log --out timeline.json
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

import tyro

UNIT_TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


@dataclasses.dataclass
class Args:
    csv_files: tuple[Path, ...]
    """Files holding the CSV of ``nsys stats --report cuda_gpu_trace --format csv``, alone or
    among other output (the table starts at its header line)."""
    burst_gap_us: float = 200.0
    """A pause of the GPU longer than this ends a burst of work."""
    out: Path = Path("kernel_timeline.json")


@dataclasses.dataclass(frozen=True)
class Event:
    """One kernel (or copy, or memset) on the GPU: start and duration in microseconds."""

    name: str
    start: float
    duration: float

    @property
    def end(self) -> float:
        return self.start + self.duration


def _column(header: list[str], name: str) -> tuple[str, float]:
    """The header cell that names ``name`` (e.g. ``Start (ns)``) and its unit's factor to us."""
    for cell in header:
        match = re.fullmatch(rf"{name}(?: \((\w+)\))?", cell.strip())
        if match:
            unit = match.group(1) or "ns"  # nsys reports nanoseconds unless told otherwise
            if unit not in UNIT_TO_US:
                raise ValueError(f"unknown unit {unit!r} in column {cell!r}")
            return cell, UNIT_TO_US[unit]
    raise ValueError(f"no {name!r} column in the header {header}")


def events(path: Path) -> list[Event]:
    """The trace's events in order of start. Lines before the table's header (the program's
    output, nsys's notes) and after its last row are skipped; a file without the table raises
    ``ValueError`` naming it."""
    lines = path.read_text().splitlines()
    starts = [
        i for i, ln in enumerate(lines) if "Start" in ln and "Duration" in ln and "Name" in ln
    ]
    if not starts:
        raise ValueError(f"{path}: no cuda_gpu_trace table (no Start, Duration, Name header)")
    table = []
    for ln in lines[starts[0] :]:
        if not ln.strip():
            break
        table.append(ln)
    reader = csv.reader(table)
    header = next(reader)
    try:
        start, start_us = _column(header, "Start")
        duration, duration_us = _column(header, "Duration")
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    out = []
    for cells in reader:
        row = dict(zip(header, cells, strict=False))
        try:
            t0 = float(row[start].replace(",", "")) * start_us
            dt = float(row[duration].replace(",", "")) * duration_us
        except (KeyError, ValueError):
            continue  # a summary or malformed line
        out.append(Event(row.get("Name", "").strip(), t0, dt))
    if not out:
        raise ValueError(f"{path}: the cuda_gpu_trace table has no rows")
    return sorted(out, key=lambda e: e.start)


def longest_burst(trace: list[Event], gap_us: float) -> list[Event]:
    """The run of events with the most members whose gaps are all at most ``gap_us``."""
    bursts: list[list[Event]] = [[trace[0]]]
    end = trace[0].end
    for e in trace[1:]:
        if e.start - end > gap_us:
            bursts.append([])
        bursts[-1].append(e)
        end = max(end, e.end)
    return max(bursts, key=len)


def summarise(path: Path, gap_us: float) -> dict:
    """One trace's step: its period, its kernels' time and gaps, per step and per kernel."""
    burst = longest_burst(events(path), gap_us)
    counts = Counter(e.name for e in burst)
    steps = Counter(counts.values()).most_common(1)[0][0]
    span = max(e.end for e in burst) - burst[0].start
    busy = sum(e.duration for e in burst)
    gaps: dict[str, list[float]] = {}
    end = burst[0].start
    for e in burst:
        gaps.setdefault(e.name, []).append(max(0.0, e.start - end))
        end = max(end, e.end)
    kernels = [
        {
            "kernel": name,
            "launches": counts[name],
            "median_us": statistics.median(e.duration for e in burst if e.name == name),
            "median_gap_before_us": statistics.median(gaps[name]),
        }
        for name in counts
    ]
    kernels.sort(key=lambda k: -k["median_us"] * k["launches"])
    return {
        "file": path.name,
        "events": len(burst),
        "steps": steps,
        "period_us": span / steps,
        "kernel_us_per_step": busy / steps,
        "gap_us_per_step": (span - busy) / steps,
        "kernels": kernels,
        "measured": "nsys cuda_gpu_trace, each kernel in its CUDA graph (the longest burst)",
    }


def main(args: Args) -> list[dict]:
    try:
        entries = [summarise(path, args.burst_gap_us) for path in args.csv_files]
    except (OSError, ValueError) as err:
        sys.exit(f"error: {err}")
    for e in entries:
        print(
            f"== {e['file']}: {e['steps']} steps, period {e['period_us']:.1f} us = kernels "
            f"{e['kernel_us_per_step']:.1f} us + gaps {e['gap_us_per_step']:.1f} us (measured)"
        )
        for k in e["kernels"][:12]:
            print(
                f"  {k['kernel'][:60]:60s} x{k['launches']:5d}  {k['median_us']:8.2f} us"
                f"  gap before {k['median_gap_before_us']:7.2f} us"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(entries, indent=1))
    print(f"wrote {len(entries)} timelines to {args.out}")
    return entries


if __name__ == "__main__":
    main(tyro.cli(Args))
