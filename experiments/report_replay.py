"""Markdown tables from bench_replay.py's JSON rows (for the README). Prints; changes nothing.

Usage:
  python experiments/report_replay.py results/bench_replay.json results/bench_replay_threading.json
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import checked_cli
import tyro


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e6:.2f}M"


def rate(rows, impl, op, mode, capacity, batch, k=16):
    for r in rows:
        if (r.get("impl"), r.get("op"), r.get("mode"), r.get("capacity"), r.get("batch")) == (
            impl,
            op,
            mode,
            capacity,
            batch,
        ) and r.get("branching") in (k, None):
            return r
    return None


def cell(r) -> str:
    if r is None:
        return "-"
    return f"{fmt(r['items_per_s'])} ({fmt(r['items_per_s_min'])}-{fmt(r['items_per_s_max'])})"


def where_measured(rows: list[dict]) -> str:
    """One line: on which device each implementation was measured (a GPU by its model; a
    simulation said so), and the run(s) the rows came from where they record it."""
    on: dict[str, list[str]] = {}
    for r in rows:
        if "op" not in r:
            continue
        speed = str(r.get("speed_of", ""))
        kind = r.get("device_kind") or (speed[len("this GPU (") : -1] if "GPU (" in speed else "")
        device = f"{r.get('device', 'cpu')}{f' ({kind})' if kind else ''}"
        if "simulation" in speed:
            device += ", a simulation: function only, not the hardware's speed"
        on.setdefault(device, [])
        if r["impl"] not in on[device]:
            on[device].append(r["impl"])
    line = "Measured on " + "; on ".join(f"{d}: {', '.join(i)}" for d, i in on.items()) + "."
    runs = list(dict.fromkeys(
        f"{run['started_utc']} (commit {run.get('commit')}, jax {run['versions'].get('jax')})"
        for r in rows if isinstance(run := r.get("run"), dict)
    ))  # fmt: skip
    if len(runs) > 1:
        line += f" Rows of {len(runs)} runs, started {'; '.join(runs)}."
    elif runs:
        line += f" Run started {runs[0]}."
    return line


def main(grid_path: str, threading_path: str | None = None) -> None:
    rows = json.loads(Path(grid_path).read_text())
    print_machine(rows)
    print_primitives(rows)
    print_steps(rows)
    print_branchings(rows)
    if threading_path and Path(threading_path).exists():
        print_threading(json.loads(Path(threading_path).read_text()))


def print_machine(rows: list[dict]) -> None:
    """Where the rows were measured: the machine, its threading, the devices, and the
    machine's memory limits where measured."""
    lim = next((r for r in rows if r["impl"] == "machine-limit"), None)
    any_row = next(r for r in rows if r["impl"] != "machine-limit")
    machine, threading = (any_row.get(k, "not recorded") for k in ("machine", "threading"))
    print(f"Machine: {machine}; threading: {threading}.")
    print(where_measured(rows))
    if lim:
        print(
            f"Memory limits, one core, 1 GiB array (measured): dependent random read "
            f"{lim['dependent_ns']:.0f} ns, independent random reads "
            f"{lim['independent_per_s'] / 1e6:.0f}M/s, "
            f"sequential read {lim['sequential_gbs']:.0f} GB/s."
        )


def print_primitives(rows: list[dict]) -> None:
    """The table of each implementation's insert, sample, update and step, fused and per
    call, at capacity 2^20, K 16, batch 256."""
    impls = [
        ("drlhet-jax", "fused"),
        ("drlhet-native", "fused"),
        ("drlhet-native-1t", "fused"),
        ("drlhet-jax", "percall"),
        ("drlhet-native", "percall"),
        ("flashbax", "fused"),
        ("flashbax", "percall"),
        ("cpprb", "percall"),
    ]
    print("\n**Capacity 2^20, K = 16, batch 256** (items/s, median (min-max) of repeats):\n")
    print("| impl | mode | insert | sample | update | step |")
    print("|---|---|---|---|---|---|")
    for impl, mode in impls:
        cells = [
            cell(rate(rows, impl, op, mode, 2**20, 256))
            for op in ("insert", "sample", "update", "step")
        ]
        if any(c != "-" for c in cells):
            print(f"| {impl} | {mode} | " + " | ".join(cells) + " |")


def print_steps(rows: list[dict]) -> None:
    """The table of the step by capacity and batch (K 16), with native's ratios to jax and
    to cpprb."""
    caps = sorted({r["capacity"] for r in rows if "capacity" in r})
    batches = sorted({r["batch"] for r in rows if "batch" in r})
    print("\n**Step (sample B + update B) by capacity and batch, K = 16** (items/s, median):\n")
    print(
        "| capacity | batch | jax fused | native fused | flashbax fused | cpprb "
        "| native / jax | native / cpprb |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for c in caps:
        for b in batches:
            got = {
                name: rate(rows, name, "step", mode, c, b)
                for name, mode in (
                    ("drlhet-jax", "fused"),
                    ("drlhet-native", "fused"),
                    ("flashbax", "fused"),
                    ("cpprb", "percall"),
                )
            }
            if not any(got.values()):
                continue
            v = {k: (r["items_per_s"] if r else None) for k, r in got.items()}
            nj = (
                f"{v['drlhet-native'] / v['drlhet-jax']:.2f}x"
                if v["drlhet-native"] and v["drlhet-jax"]
                else "-"
            )
            nc = (
                f"{v['drlhet-native'] / v['cpprb']:.1f}x"
                if v["drlhet-native"] and v["cpprb"]
                else "-"
            )
            print(
                f"| 2^{c.bit_length() - 1} | {b} | {fmt(v['drlhet-jax'])} "
                f"| {fmt(v['drlhet-native'])} "
                f"| {fmt(v['flashbax'])} | {fmt(v['cpprb'])} | {nj} | {nc} |"
            )


def print_branchings(rows: list[dict]) -> None:
    """The table of jax's and native's sample, update and step by branching factor K
    (capacity 2^20, batch 256, fused)."""
    ks = sorted({r["branching"] for r in rows if r.get("branching")})
    print("\n**Branching factor K, capacity 2^20, batch 256, fused** (items/s, median):\n")
    print(
        "| K | jax sample | jax update | jax step | native sample | native update | native step |"
    )
    print("|---|---|---|---|---|---|---|")
    for k in ks:
        vals = [
            rate(rows, impl, op, "fused", 2**20, 256, k)
            for impl in ("drlhet-jax", "drlhet-native")
            for op in ("sample", "update", "step")
        ]
        if any(vals):
            print(
                f"| {k} | " + " | ".join(fmt(r["items_per_s"] if r else None) for r in vals) + " |"
            )


def print_threading(trows: list[dict]) -> None:
    """The table of the fused step under each threading setting (the threading study's rows
    ``trows``)."""
    print("\n**Threading, capacity 2^20, K = 16, batch 256, fused step** (items/s, median):\n")
    print("| setting | jax | native (all threads) | native (1 thread) |")
    print("|---|---|---|---|")
    for t in ("default", "pin1", "xla1"):
        sel = [r for r in trows if r.get("threading") == t]
        vals = [
            rate(sel, impl, "step", "fused", 2**20, 256)
            for impl in ("drlhet-jax", "drlhet-native", "drlhet-native-1t")
        ]
        print(f"| {t} | " + " | ".join(fmt(r["items_per_s"] if r else None) for r in vals) + " |")


RATES = ("items_per_s", "items_per_s_min", "items_per_s_max")
LIMITS = ("dependent_ns", "independent_per_s", "sequential_gbs")
"""What the tables read of a measured row (one with an ``op``) and of the machine's limits."""


def wrong_shape(rows: Any) -> str:
    """Why ``rows`` (the grid file's JSON) are not bench_replay.py's rows, or "": a list of
    objects, each naming its ``impl``, at least one measured (not the machine's limits), and
    each measured one its items/s (the machine and the threading are printed where the first
    says them: the first GPU rows, of 2026-11-26, do not); what the tables read of each row
    of its type (`_wrong_row`), so that nothing it holds stops `main` halfway."""
    why = checked_cli.rows_lacking(rows, ("impl",))
    measured = [r for r in rows if r["impl"] != "machine-limit"] if not why else []
    if not why and not measured:
        why = "no measured row (only the machine's limits, or none)"
    limit = next((r for r in rows if r["impl"] == "machine-limit"), None) if not why else None
    if limit is not None:
        i = rows.index(limit)
        why = checked_cli.lacking(limit, LIMITS, f"item {i}") or _not_numbers(limit, LIMITS, i)
    for i, r in enumerate(rows if not why else ()):
        if "op" in r:
            why = why or checked_cli.lacking(r, RATES, f"item {i}") or _wrong_row(r, i)
    return f"not bench_replay.py's JSON rows ({why})" if why else ""


def wrong_threading_shape(rows: Any) -> str:
    """Why ``rows`` (the threading file's JSON) are not bench_replay.py's rows, or ""."""
    why = checked_cli.rows_lacking(rows, ())
    for i, r in enumerate(rows if not why else ()):
        if "op" in r:
            why = why or checked_cli.lacking(r, ("items_per_s",), f"item {i}") or _wrong_row(r, i)
    return f"not bench_replay.py's JSON rows ({why})" if why else ""


def _wrong_row(row: dict, i: int) -> str:
    """Why measured row ``i`` does not hold what the tables read as they read it, or "": its
    rates numbers (a bound may be null), its capacity a whole number above 0, its batch and
    branching (where given) whole numbers."""
    why = _not_numbers(row, ("items_per_s",), i)
    why = why or _not_numbers({k: v for k, v in row.items() if v is not None}, RATES[1:], i)
    for key in ("capacity", "batch", "branching") if not why else ():
        value = row.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return f"item {i}'s {key} is {value!r}, not a whole number"
        if key == "capacity" and value is not None and value < 1:
            return f"item {i}'s capacity is {value!r}, not a whole number above 0"
    return why


def _not_numbers(row: dict, keys: tuple[str, ...], i: int) -> str:
    """Why ``row`` (item ``i``) holds one of ``keys`` that is not a number, or ""."""
    for key in keys:
        value = row.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"item {i}'s {key} is {value!r}, not a number"
    return ""


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line naming the file, or "": a file that is missing or
    not bench_replay.py's rows."""
    why = checked_cli.unreadable_json(args.grid, wrong_shape)
    return why or checked_cli.unreadable_json(args.threading, wrong_threading_shape)


@dataclasses.dataclass
class Args:
    grid: tyro.conf.Positional[Path]
    """bench_replay.py's JSON rows."""
    threading: tyro.conf.Positional[Path | None] = None
    """bench_replay.py --threading-study's rows (bench_replay_threading.json), if any."""


if __name__ == "__main__":
    checked_cli.run(
        Args,
        lambda a: main(str(a.grid), None if a.threading is None else str(a.threading)),
        {},
        refused,
    )
