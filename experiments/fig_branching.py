"""The sum tree's fan-out K against sample and update latency per call (the paper's K study).

At one capacity (2^20) and batch (256), for K in 2, 4, 8, 16, 32, 64: the ``jax`` and ``native``
backends *measured* here with ``experiments/bench_replay.py``'s measuring code (through
``experiments/fig_primitives.py``: median, min and max of ``--repeats`` repeats after a warm-up
that includes compilation, per call and fused), and the FPGA replay module *modeled (cycle
model)* at the board sheet's clock, the GPU *modeled (sheet)*, by the DSE's device models. A
larger K means fewer levels (fewer dependent reads per descent) but K children read and
prefix-summed per level; the FPGA module is built for K 4..64 only (K 2 omitted, with a note).
Same row format as fig_primitives; JSON rows in ``--out``, the plot in ``--plot``.

Usage:
  python experiments/fig_branching.py          # reduced: 5 repeats (~30-40 s here)
  python experiments/fig_branching.py --full   # 15 repeats
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Literal

import checked_cli
import fig_primitives as fp
from bench_replay import Op

OPS: tuple[Op, ...] = ("sample", "update")
FULL_REPEATS = 15


@dataclasses.dataclass
class Args:
    full: bool = False
    """The full scale: 15 repeats (unless given)."""
    branchings: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
    capacity: int = 2**20
    batch: int = 256
    repeats: int = 5
    """Timed repeats per measurement (after a warm-up that includes compilation); >= 5."""
    backends: tuple[str, ...] = ("jax", "native")
    modes: tuple[Literal["percall", "fused"], ...] = ("percall", "fused")
    sheets: tuple[str, ...] = ("u250", "h100")
    """Device sheets of the modeled devices (``drlhet/dse/sheets``)."""
    threading: Literal["default", "pin1", "xla1"] = "default"
    out: Path = Path("results/fig_branching.json")
    plot: Path = Path("results/fig_branching.png")


def plot(args: Args, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(OPS), figsize=(12, 5.6), squeeze=False)
    colors = fp.colors_of(rows)
    for ax, op in zip(axes[0], OPS, strict=True):
        fp.draw(ax, [r for r in rows if r["primitive"] == op], "branching", colors)
        ax.set_xticks(args.branchings, [str(k) for k in args.branchings])
        ax.set_title(f"{op}, capacity 2^{args.capacity.bit_length() - 1}, batch {args.batch}")
        ax.set_xlabel("branching factor K")
        ax.set_ylabel("seconds per call")
    fp.legend(fig, colors)
    fig.suptitle(
        f"Sum-tree fan-out K: {fp.measured_label()}, threading {args.threading}; min-max of "
        f"{args.repeats} repeats shaded; other devices modeled",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.14, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: Args) -> list[dict]:
    if args.full and args.repeats == Args.repeats:
        args = dataclasses.replace(args, repeats=FULL_REPEATS)
    points = [(args.capacity, args.batch, k) for k in args.branchings]
    rows = fp.measure(
        points,
        ops=OPS,
        modes=args.modes,
        backends=args.backends,
        repeats=args.repeats,
        threading=args.threading,
    )
    model_rows, notes = fp.modeled(points, args.sheets, OPS)
    for note in dict.fromkeys(notes):
        print(f"note: {note}")
    rows += [r for r in model_rows if r["mode"] in args.modes]
    rows = [{**r, "sweep": "branching"} for r in rows]
    fp.print_table(
        rows, "branching", f"vs K (capacity 2^{args.capacity.bit_length() - 1}, B {args.batch})"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    plot(args, rows, args.plot)
    print(f"\nwrote {len(rows)} rows to {args.out} and the plot to {args.plot}")
    return rows


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": a device sheet that is not shipped (asked
    before anything is measured; imports no jax: ``--threading xla1`` acts before it is)."""
    from drlhet.dse.devices import load_sheets

    return checked_cli.unknown_names("--sheets", args.sheets, load_sheets()) if args.sheets else ""


LEAST = {"branchings": 2, "capacity": 1, "batch": 1, "repeats": 2}
"""The smallest value of each count (`checked_cli.refused_counts`; a spread needs two
repeats)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
