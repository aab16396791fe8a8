"""fig_primitives.py's drawing: the printed table (microseconds per call) and the figure (seconds
per call against batch and capacity, log-log, a panel per sweep and primitive) of its rows.

Imports no jax; matplotlib is imported where the figure is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from primitives_rows import PRIMITIVES

if TYPE_CHECKING:
    from fig_primitives import Args


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
