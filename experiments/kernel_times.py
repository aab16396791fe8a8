"""Each GPU kernel's duration, from the CSV that Nsight Compute (``ncu --csv``) writes.

On a GPU the replay step is a dozen short kernels inside one CUDA graph per loop iteration, and
a step's time in ``bench_replay.py`` (kernels, their launches and the loop's own cost) says
nothing of which kernel holds it back. ``experiments/gpu_checks.sh kernels`` runs the fused step
under ``ncu --metrics gpu__time_duration.sum`` (each kernel alone, clocks not locked) and this
script groups the rows by kernel: launches, mean and total microseconds, *measured* by ncu on
that GPU. A kernel's time under ncu is its own execution without its neighbours: the sum over
a step's kernels is a lower bound of the step, the rest being launches and the loop.

Usage:
  python experiments/kernel_times.py --csv-files kernels_cuda.log [kernels_jax.log ...] \
      --out kernel_times.json
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
from pathlib import Path

import checked_cli
from ncu_files import read_text, summarise_each, write_rows

UNIT_TO_US = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}
UNIT_TO_US |= {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


@dataclasses.dataclass
class Args:
    csv_files: tuple[Path, ...]
    """Files holding ncu's CSV table (``ncu --csv --metrics gpu__time_duration.sum``), alone or
    among other output: only its quoted lines are read."""
    out: Path = Path("kernel_times.json")


def durations(path: Path) -> dict[str, list[float]]:
    """Kernel name -> the duration of each of its launches, in microseconds.

    Lines that are not part of ncu's CSV table (its ``==PROF==`` notes, the program's own
    output) are skipped; a file without the table raises ``ValueError`` naming it.
    """
    lines = [ln for ln in read_text(path).splitlines() if ln.startswith('"')]
    reader = csv.DictReader(lines)
    rows = list(reader)
    lacking = [c for c in ("Kernel Name", "Metric Value") if c not in (reader.fieldnames or ())]
    out: dict[str, list[float]] = {}
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        if lacking:
            raise ValueError(f"{path}: the ncu table has no {' or '.join(lacking)} column")
        scale = UNIT_TO_US.get(row.get("Metric Unit", ""), None)
        if scale is None:
            raise ValueError(f"{path}: unknown unit {row.get('Metric Unit')!r}")
        try:
            value = float((row["Metric Value"] or "").replace(",", ""))
        except ValueError:
            what = f"{row['Kernel Name']}'s duration {row['Metric Value']!r}"
            raise ValueError(f"{path}: {what} is not a number") from None
        out.setdefault(row["Kernel Name"], []).append(value * scale)
    if not out:
        raise ValueError(f"{path}: no gpu__time_duration.sum rows (not an ncu --csv log?)")
    return out


def summarise(path: Path) -> list[dict]:
    """One row per kernel of ``path``, the longest total first."""
    rows = [
        {
            "file": path.name,
            "kernel": name,
            "launches": len(times),
            "mean_us": statistics.fmean(times),
            "median_us": statistics.median(times),
            "total_us": sum(times),
            "measured": "ncu gpu__time_duration.sum, each kernel alone",
        }
        for name, times in durations(path).items()
    ]
    return sorted(rows, key=lambda r: -r["total_us"])


def main(args: Args) -> list[dict]:
    rows: list[dict] = []
    for path in args.csv_files:
        summary = summarise_each((path,), summarise)
        rows += summary
        print(f"== {path.name}: launches, mean and median us, total us (measured by ncu)")
        for r in summary[:25]:
            print(
                f"{r['launches']:6d} {r['mean_us']:9.2f} {r['median_us']:9.2f} "
                f"{r['total_us']:11.1f}  {r['kernel'][:90]}"
            )
    write_rows(rows, args.out, "rows")
    return rows


if __name__ == "__main__":
    checked_cli.run(Args, main, {}, lambda a: checked_cli.no_files("--csv-files", a.csv_files))
