"""The FPGA replay module's cycle model on a board: figures for the README and the results.

Every figure here is *modeled (cycle model)*: the closed form of `drlhet.dse.devices.rmm_cycles`
at the board's clock (its device sheet), never measured (no board ran it). Printed and written
as JSON rows:

  * commands at 2^20 leaves, B 256, K 16 and 64: write, sample (stratified, i.i.d.), read, with
    each stage's II and depth, cycles and microseconds of the kernel;
  * the primitives of a training configuration (default: `drlhet train`'s, DQN on CartPole):
    insert (write E), sample (B), update (write B), as the kernel's time and as the latency the
    host sees (the sheet's invocation + the words over the link, both sheet values);
  * where the leaves live for larger capacities (on chip, DDR, beyond);
  * with ``--stepped``: the testbench's clock-by-clock count beside the closed form (K 16 and
    64, B 32, 256, 4096), the check the tests also make.

Usage:
  python experiments/fpga_cycles.py [--board u250] [--stepped] [--out results/fpga_cycles.json]
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import checked_cli
from _common import run_info

from drlhet.backends.rmm_spec import accepts, uram_blocks
from drlhet.dse.devices import link_seconds, load_sheets, rmm_cycles
from drlhet.dse.devices.fpga import board_memory
from drlhet.runtime.config import TrainConfig

LABEL = "modeled (cycle model)"


@dataclasses.dataclass
class Args:
    board: str = "u250"
    """The FPGA board's device sheet (drlhet/dse/sheets)."""
    capacity: int = 1 << 20
    """Leaves of the commands' tree, 1 to 2^30."""
    batch: int = 256
    """Entries of each command (a write's priorities, a sample's draws, a read's slots)."""
    branchings: tuple[int, ...] = (16, 64)
    """K of the commands, each one the module is built for (4, 8, 16, 32, 64)."""
    stepped: bool = False
    """Also run the testbench's stepped count (needs g++ and hls4ml)."""
    out: Path = Path("results/fpga_cycles.json")
    """The JSON rows."""


def _v(sheet: dict, name: str) -> float:
    return float(sheet["values"][name]["value"])


def commands(args: Args, sheet: dict) -> list[dict]:
    rows, mhz = [], _v(sheet, "clock_mhz")
    print(f"\n== {sheet['description']}, {mhz:.0f} MHz: one command, {LABEL} ==")
    print(f"{'K':>3} {'command':<18} {'cycles':>7} {'us':>7}  stages (II/depth)")
    for k in args.branchings:
        for op, strat in (("write", True), ("sample", True), ("sample", False), ("read", True)):
            name = op if op != "sample" else f"sample {'strat' if strat else 'iid'}"
            chain = rmm_cycles.stages(op, k, args.capacity, args.batch, stratified=strat)
            n = rmm_cycles.cycles(op, k, args.capacity, args.batch, stratified=strat)
            stages = " ".join(f"{s.ii}/{s.depth}" for s in chain)
            print(f"{k:>3} {name:<18} {n:>7} {n / mhz:>7.2f}  {stages}")
            rows.append(
                {
                    "table": "command", "board": sheet["name"], "branching": k,
                    "capacity": args.capacity, "batch": args.batch, "command": name,
                    "cycles": n, "kernel_us": n / mhz, "clock_mhz": mhz,
                    "stages": [s._asdict() for s in chain], "basis": LABEL,
                }
            )  # fmt: skip
    return rows


def primitives(sheet: dict, link: dict, cfg: TrainConfig) -> list[dict]:
    """Insert, sample and update of ``cfg`` on the board: kernel and host-visible latency."""
    mhz, invoke = _v(sheet, "clock_mhz"), _v(sheet, "invocation_us")
    k, cap = cfg.branching, cfg.buffer_size
    rows = []
    print(
        f"\n== primitives of `drlhet train` (K {k}, {cap} leaves, B {cfg.batch_size}, "
        f"E {cfg.num_envs}) on {sheet['name']}, {LABEL} =="
    )
    print(f"{'primitive':<10} {'cycles':>7} {'kernel us':>10} {'host-seen us':>13}")
    for prim, op, n, words in (
        ("insert", "write", cfg.num_envs, 2 * cfg.num_envs + 1),
        ("sample", "sample", cfg.batch_size, 4 * cfg.batch_size + 2),
        ("update", "write", cfg.batch_size, 2 * cfg.batch_size + 1),
    ):
        c = rmm_cycles.cycles(op, k, cap, n)
        kernel = c / mhz
        seen = invoke + kernel + 1e6 * link_seconds(link, 4 * words)
        print(f"{prim:<10} {c:>7} {kernel:>10.2f} {seen:>13.2f}")
        rows.append(
            {
                "table": "primitive", "board": sheet["name"], "primitive": prim,
                "branching": k, "capacity": cap, "entries": n, "cycles": c,
                "kernel_us": kernel, "host_seen_us": seen, "basis": LABEL,
                "host_seen_basis": "modeled (sheet: invocation and link are assumptions)",
            }
        )  # fmt: skip
    return rows


def placements(sheet: dict) -> list[dict]:
    memory = board_memory(sheet)
    uram = memory[2]
    rows = []
    print(f"\n== where the leaves live on {sheet['name']} (K 16) ==")
    for log2 in (20, 21, 22, 23, 26, 31):
        cap = 1 << log2
        leaves, inner = rmm_cycles.memory_bytes(cap, 16)
        blocks = sum(uram_blocks(cap, 16))
        try:
            at = rmm_cycles.placement(cap, 16, *memory)
            c = rmm_cycles.cycles("sample", 16, cap, 256, leaves=at)
        except ValueError as e:
            at, c = f"refused: {e}", None
        print(
            f"2^{log2}: {(leaves + inner) / 2**20:>8.0f} MiB, {blocks:,} URAM blocks"
            f" (of {uram}) -> {at}; sample B 256: {c} cycles"
        )
        rows.append(
            {"table": "placement", "capacity": cap, "at": at, "sample_cycles": c,
             "uram_blocks": blocks, "board_uram_blocks": uram}
        )  # fmt: skip
    return rows


def stepped(args: Args) -> list[dict]:
    from drlhet.dse.devices.rmm_testbench import build, stepped_cycles

    rows, worst = [], 0.0
    print("\n== cycle model vs the testbench's stepped count ==")
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.branchings:
            exe = build(Path(tmp), k, args.capacity)
            for b in (32, 256, 4096):
                for op in ("write", "sample", "read"):
                    chain = rmm_cycles.stages(op, k, args.capacity, b)
                    count, items = stepped_cycles(exe, op, b, chain)
                    model = rmm_cycles.cycles(op, k, args.capacity, b, kept=items)
                    worst = max(worst, abs(model / count - 1))
                    rows.append(
                        {
                            "table": "stepped", "branching": k, "batch": b, "command": op,
                            "model": model, "stepped": count,
                        }
                    )  # fmt: skip
                    print(f"K {k:>2} B {b:>4} {op:<6} model {model:>6} stepped {count:>6}")
    print(f"largest deviation: {100 * worst:.2f}%")
    return rows


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": a board without an FPGA device sheet, or a
    K or a capacity the module is not built for (it modeled K 2 and 2^32 leaves). (Counts
    below 1: `LEAST`.)"""
    sheets = load_sheets()
    fpgas = sorted(name for name, s in sheets.items() if s["kind"] == "fpga")
    why = checked_cli.unknown_names("--board", [args.board], fpgas)
    if why:
        return why
    for k in args.branchings:
        if accepts(args.capacity, k):
            return f"--branchings {k} --capacity {args.capacity}: {accepts(args.capacity, k)}"
    return ""


def main(args: Args) -> list[dict]:
    sheets = load_sheets()
    sheet = sheets[args.board]
    rows = commands(args, sheet)
    rows += primitives(sheet, sheets[sheet["link"]], TrainConfig())
    rows += placements(sheet)
    if args.stepped:
        rows += stepped(args)
    rows = [{**r, "run": run_info("hls4ml")} for r in rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    print(f"\nwrote {len(rows)} rows to {args.out} (every figure {LABEL})")
    return rows


LEAST = {"capacity": 1, "batch": 1, "branchings": 2}
"""The smallest value of each count (`checked_cli.refused_counts`; K 1 never ends a tree)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
