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

It also reads the traces of jax's profiler (``--trace-files``: ``*.trace.json.gz``, Chrome
trace JSON, as ``bench_replay.py --trace-dir`` writes them), which need no Nsight Systems: on a
GPU, CUPTI's record of every kernel and copy on each stream (the events of the threads named
``Stream...`` of the process named ``/device:GPU:...``; XLA's derived lines of ops and modules
are left out). For such a trace it also writes what the host did during the burst: each host
event's name, count and time per step (events nest, so times overlap), which says whether the
host's launches, not the GPU, set the pace.

Usage:
  python experiments/kernel_timeline.py --csv-files timeline_cuda_trace.log --out timeline.json
  python experiments/kernel_timeline.py --trace-files t/drlhet-cuda-step-*.trace.json.gz
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import math
import re
import statistics
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import checked_cli
from ncu_files import named, read_text, refuse

UNIT_TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
NONE_GIVEN = "give --csv-files (nsys) or --trace-files (jax's profiler)"


@dataclasses.dataclass
class Args:
    csv_files: tuple[Path, ...] = ()
    """Files holding the CSV of ``nsys stats --report cuda_gpu_trace --format csv``, alone or
    among other output (the table starts at its header line)."""
    trace_files: tuple[Path, ...] = ()
    """Traces of jax's profiler (``*.trace.json.gz`` or ``*.json``)."""
    plane: str = "/device:GPU"
    """In a profiler trace, the processes whose names start with this hold the device's work
    (``/host:CPU`` times XLA's CPU ops instead)."""
    lines: str = "Stream"
    """... and of those, the threads whose names start with this (``tf_XLA`` on the CPU)."""
    steps: int | None = None
    """The steps in each trace's burst (a timed scan's length); None: the most common number of
    launches of a kernel name (a step launches each of its kernels once)."""
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
    lines = read_text(path).splitlines()
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
    try:
        cells_of = list(csv.reader(table))
        start, start_us = _column(cells_of[0], "Start")
        duration, duration_us = _column(cells_of[0], "Duration")
    except (ValueError, csv.Error) as err:
        raise ValueError(named(path, err)) from None
    header = cells_of[0]
    out = []
    for cells in cells_of[1:]:
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


def profiler_events(path: Path, plane: str, lines: str) -> tuple[list[Event], list[Event]]:
    """A profiler trace's device events (the ``lines`` threads of the ``plane`` processes) in
    order of start, and every other process's events (the host's). Raises ``ValueError``
    naming the file and what it holds when no process or thread matches."""
    raw = trace_events(path)
    names: dict[str, dict] = {"process_name": {}, "thread_name": {}}
    for e in raw:
        if e.get("ph") == "M" and e.get("name") in names:
            names[e["name"]][(e.get("pid"), e.get("tid"))] = str(e.get("args", {}).get("name", ""))
    pids = {pid for (pid, _), n in names["process_name"].items() if n.startswith(plane)}
    if not pids:
        seen = sorted(set(names["process_name"].values()))
        raise ValueError(f"{path}: no process named {plane}... (there are {seen})")
    tids = {k for k, n in names["thread_name"].items() if k[0] in pids and n.startswith(lines)}
    if not tids:
        seen = sorted({n for k, n in names["thread_name"].items() if k[0] in pids})
        raise ValueError(f"{path}: no thread named {lines}... in {plane} (there are {seen})")
    device, host = [], []
    for e in raw:
        if e.get("ph") != "X" or "ts" not in e:
            continue
        event = Event(str(e.get("name", "")), float(e["ts"]), float(e.get("dur", 0.0)))
        if (e.get("pid"), e.get("tid")) in tids:
            device.append(event)
        elif e.get("pid") not in pids:
            host.append(event)
    if not device:
        raise ValueError(f"{path}: no events on the {plane} {lines} threads")
    return sorted(device, key=lambda e: e.start), host


def trace_events(path: Path) -> list[dict]:
    """The events of a profiler trace (its ``traceEvents``, or the whole file where it is a
    list). Raises ``ValueError`` naming the file where it cannot be read, is not (gzipped)
    JSON, or is not a list of event objects whose ``args`` are objects and whose ``ts`` and
    ``dur`` are numbers."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f:
            trace = json.load(f)
    except gzip.BadGzipFile as err:
        raise ValueError(f"{path}: not a profiler trace ({err})") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot be read ({err.strerror or err})") from None
    except (EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a profiler trace ({err})") from None
    if isinstance(trace, dict):
        raw, why = trace.get("traceEvents", []), _not_events(trace.get("traceEvents", []))
    else:
        raw, why = trace, _not_events(trace, "")
    if why:
        raise ValueError(f"{path}: not a profiler trace ({why})")
    return raw


def _not_events(raw: Any, what: str = "traceEvents") -> str:
    """Why ``raw`` is not a list of trace events whose read fields are as they should be (the
    ``args`` of a metadata event an object, the ``ts`` and ``dur`` of a complete one numbers),
    or ""."""
    why = checked_cli.rows_lacking(raw, (), what)
    for i, e in enumerate(raw if not why else ()):
        where = f"{what}[{i}]" if what else f"item {i}"
        if e.get("ph") == "M" and not isinstance(e.get("args", {}), dict):
            return f"{where}'s args are not an object"
        for key in ("ts", "dur") if e.get("ph") == "X" else ():
            value = e.get(key, 0.0)
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"{where}'s {key} {value!r} is not a number"
    return why


def host_during(host: list[Event], burst: list[Event], steps: int) -> list[dict]:
    """The host's events that overlap the burst's span, by name: count and time per step, the
    most time first (the top 12)."""
    t0, t1 = burst[0].start, max(e.end for e in burst)
    inside: dict[str, list[float]] = {}
    for e in host:
        if e.end > t0 and e.start < t1:
            inside.setdefault(e.name, []).append(e.duration)
    rows: list[dict[str, Any]] = [
        {
            "event": n,
            "count": len(d),
            "us_per_step": sum(d) / steps,
            "median_us": statistics.median(d),
        }
        for n, d in inside.items()
    ]
    return sorted(rows, key=lambda r: -r["us_per_step"])[:12]


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


def summarise(
    path: Path,
    trace: list[Event],
    args: Args,
    measured: str,
    host: list[Event] | None = None,
) -> dict:
    """One trace's step: its period, its kernels' time and gaps, per step and per kernel (and,
    given the host's events, what the host did per step meanwhile)."""
    burst = longest_burst(trace, args.burst_gap_us)
    counts = Counter(e.name for e in burst)
    steps = args.steps or Counter(counts.values()).most_common(1)[0][0]
    span = max(e.end for e in burst) - burst[0].start
    busy, end = 0.0, burst[0].start  # the union of the events' spans: nested or overlapping
    for e in burst:  # events (a profiler's host plane, two streams) count once
        busy += max(0.0, e.end - max(e.start, end))
        end = max(end, e.end)
    gaps: dict[str, list[float]] = {}
    end = burst[0].start
    for e in burst:
        gaps.setdefault(e.name, []).append(max(0.0, e.start - end))
        end = max(end, e.end)
    kernels: list[dict[str, Any]] = [
        {
            "kernel": name,
            "launches": counts[name],
            "median_us": statistics.median(e.duration for e in burst if e.name == name),
            "median_gap_before_us": statistics.median(gaps[name]),
        }
        for name in counts
    ]
    kernels.sort(key=lambda k: -k["median_us"] * k["launches"])
    entry = {
        "file": path.name,
        "events": len(burst),
        "steps": steps,
        "period_us": span / steps,
        "kernel_us_per_step": busy / steps,
        "gap_us_per_step": (span - busy) / steps,
        "kernels": kernels,
        "measured": measured,
    }
    if host is not None:
        entry["host"] = host_during(host, burst, steps)
    return entry


def entries(args: Args) -> list[dict]:
    """The summary of every file given (CSV files first). A file that cannot be read or is not
    what it should be is a one-line note (printed after the others are summarised); none
    readable raises ``ValueError`` with the first file's reason, naming it."""
    if not args.csv_files and not args.trace_files:
        raise ValueError(NONE_GIVEN)
    nsys = "nsys cuda_gpu_trace, each kernel in its CUDA graph (the longest burst)"
    label = f"jax's profiler ({args.plane}, {args.lines} lines; the longest burst)"
    out, errors = [], []
    for p, is_csv in [(p, True) for p in args.csv_files] + [(p, False) for p in args.trace_files]:
        try:
            if is_csv:
                out.append(summarise(p, events(p), args, nsys))
            else:
                device, host = profiler_events(p, args.plane, args.lines)
                out.append(summarise(p, device, args, label, host))
        except ValueError as err:
            errors.append(named(p, err))
    if not out:
        raise ValueError(errors[0])
    for why in errors:
        print(f"note: skipped {why}")
    return out


def main(args: Args) -> list[dict]:
    try:
        found = entries(args)
    except ValueError as err:  # every file given: one line naming the first, exit status 2
        refuse(str(err))
    for e in found:
        print(
            f"== {e['file']}: {e['steps']} steps, period {e['period_us']:.1f} us = kernels "
            f"{e['kernel_us_per_step']:.1f} us + gaps {e['gap_us_per_step']:.1f} us (measured)"
        )
        for k in e["kernels"][:12]:
            print(
                f"  {k['kernel'][:60]:60s} x{k['launches']:5d}  {k['median_us']:8.2f} us"
                f"  gap before {k['median_gap_before_us']:7.2f} us"
            )
        for h in e.get("host", [])[:6]:
            print(
                f"  host: {h['event'][:54]:54s} x{h['count']:5d}  {h['us_per_step']:8.2f} us/step"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=1))
    print(f"wrote {len(found)} timelines to {args.out}")
    return found


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": no file given, or a burst gap that is not a
    positive number (a step count below 1 is `LEAST`'s)."""
    if not (args.csv_files or args.trace_files):
        return NONE_GIVEN
    if not args.burst_gap_us > 0 or math.isinf(args.burst_gap_us):  # NaN fails the first
        return f"--burst-gap-us must be a positive number, got {args.burst_gap_us}"
    return ""


LEAST = {"steps": 1}
"""The smallest value of each count (`checked_cli.refused_counts`; 0 read as "not given")."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
