"""Why a GPU kernel waits: its warps' stall reasons, from Nsight Compute's raw CSV.

``experiments/kernel_times.py`` says which kernels take the step's time; this says what their
warps wait on while they run. ``experiments/gpu_checks.sh stalls`` profiles a few launches of
the cuda backend's kernels at 2^20 leaves (``ncu --section WarpStateStats --section
SpeedOfLight ... --page raw --csv``: one row per launch, one column per metric, after a row of
units) and this script averages each metric over a kernel's launches and ranks the stall
reasons, ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``: warps waiting
on that reason per issued instruction (e.g. ``long_scoreboard``: a load from memory;
``barrier``: a barrier; ``membar``: a memory fence). *Measured* by ncu on that GPU, each kernel
alone with its caches flushed (ncu's defaults), so the durations are upper bounds.

Usage:
  python experiments/kernel_stalls.py --csv-files stalls_cuda.log --out kernel_stalls.json
"""

from __future__ import annotations

import csv
import dataclasses
import re
import statistics
from pathlib import Path

import checked_cli
from ncu_files import read_text, summarise_each, write_rows

STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
DURATION = "gpu__time_duration.sum"
KEPT = (  # besides the stalls: what bounds a latency-bound kernel
    DURATION,
    "smsp__average_warp_latency_per_inst_issued.ratio",  # cycles a warp waits per instruction
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",  # achieved occupancy
    "launch__registers_per_thread",
    "launch__grid_size",
    "launch__block_size",
    "launch__cluster_dim_x",
)


@dataclasses.dataclass
class Args:
    csv_files: tuple[Path, ...]
    """Files holding ncu's raw CSV (``ncu --page raw --csv``), alone or among other output:
    only its quoted lines are read."""
    out: Path = Path("kernel_stalls.json")
    top: int = 6
    """Stall reasons printed per kernel (the JSON keeps them all)."""


def number(text: str) -> float | None:
    """ncu's value as a float (thousands separators dropped); None for text or n/a."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def launches(path: Path) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The launches' rows of ``path`` (metric name -> value as printed) and each metric's unit.

    Raises ``ValueError`` naming the file when it holds no raw table (no ``Kernel Name``
    column, or no launch).
    """
    lines = [ln for ln in read_text(path).splitlines() if ln.startswith('"')]
    header, *body = list(csv.reader(lines)) or [[]]
    if "Kernel Name" not in header or "Metric Name" in header:
        raise ValueError(f"{path}: no raw table (ncu --page raw --csv) in it")
    table = [dict(zip(header, cells, strict=False)) for cells in body]
    units = next((row for row in table if not row["Kernel Name"]), {})
    rows = [row for row in table if row["Kernel Name"]]
    if not rows:
        raise ValueError(f"{path}: the raw table has no launch (no kernel matched?)")
    return rows, units


def summarise(path: Path) -> list[dict]:
    """One entry per kernel of ``path``: its launches, the kept metrics and every stall reason
    (each a mean over the launches), the stalls largest first; the longest kernel first."""
    rows, units = launches(path)
    by_kernel: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_kernel.setdefault(row["Kernel Name"], []).append(row)
    out = []
    for kernel, runs in by_kernel.items():

        def mean(metric: str, runs=runs) -> float | None:
            values = [v for r in runs if (v := number(r.get(metric, ""))) is not None]
            return statistics.fmean(values) if values else None

        stalls = {m[1]: v for name in runs[0] if (m := STALL.match(name)) and (v := mean(name))}
        metrics = {name: mean(name) for name in KEPT if name in runs[0]}
        out.append(
            {
                "file": path.name,
                "kernel": kernel,
                "launches": len(runs),
                "metrics": metrics,
                "units": {name: units.get(name, "") for name in metrics},
                "stalls": dict(sorted(stalls.items(), key=lambda kv: -kv[1])),
                "measured": "ncu --page raw, each kernel alone, caches flushed",
            }
        )
    return sorted(out, key=lambda e: -(e["metrics"].get(DURATION) or 0.0))


def main(args: Args) -> list[dict]:
    entries = summarise_each(args.csv_files, summarise)
    for e in entries:
        duration = e["metrics"].get(DURATION)
        unit = e["units"].get(DURATION, "")
        took = "n/a" if duration is None else f"{duration:g} {unit}"
        head = f"{e['kernel']} ({e['launches']} launches, {took})"
        stalls = ", ".join(f"{k} {v:.2f}" for k, v in list(e["stalls"].items())[: args.top])
        print(f"{head}: stalls per issued instruction: {stalls or 'none reported'}")
    write_rows(entries, args.out, "kernels")
    return entries


if __name__ == "__main__":
    least = {"top": 0}  # a negative one sliced all but the last reasons
    checked_cli.run(Args, main, least, lambda a: checked_cli.no_files("--csv-files", a.csv_files))
