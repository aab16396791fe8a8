"""What the host pays per command of a replay tree on a board, inside a compiled program
(docs/results.md, "The replay board's host cost").

A run with ``--replay-board`` sends each write and sample to the board from a host callback
(`drlhet.backends.fpga_replay_board`). This times, in one process on this machine, per command
in a jitted scan of ``--commands`` commands (median of ``--repeats``): a bare ``io_callback``
round trip (the floor any board pays here before its driver), the module's write and sample on
the simulated board through those callbacks (the module's C-simulation served through its host
protocol), and the same commands as the C-simulation's own FFI calls (no callback). A real
board's commands add its driver's invocation and the link to the callback; the simulated
board's figures are this host's work, not a board's speed. Writes one JSON row per figure.

Usage:
  python experiments/bench_board_callback.py [--batches 4 64 256] [--commands 2000]
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path

import checked_cli
import jax
import jax.numpy as jnp
import numpy as np
from _common import run_info
from jax.experimental import io_callback

from drlhet.backends import board_tree_ops, tree_ops
from drlhet.backends.rmm_spec import accepts


@dataclasses.dataclass
class Args:
    batches: tuple[int, ...] = (4, 64, 256)
    """Entries of a command (an insert writes the envs' E, an update and a sample B)."""
    commands: int = 2_000
    """Commands timed in one compiled scan."""
    repeats: int = 5
    capacity: int = 1 << 17
    branching: int = 16
    out: Path = Path("results/bench_board_callback.json")


def _timed(fn, operands, repeats: int) -> float:
    """Median seconds of ``fn(*operands())`` (compiled, run once before; fresh operands each
    time, outside the timing: a tree on a board is used once)."""
    jax.block_until_ready(fn(*operands()))
    times = []
    for _ in range(repeats):
        args = jax.block_until_ready(operands())
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _bare(n: int):
    def host(x):
        return np.int32(x + 1)

    def body(c, _):
        return io_callback(host, jax.ShapeDtypeStruct((), jnp.int32), c), None

    return jax.jit(lambda x: jax.lax.scan(body, x, None, length=n)[0]), lambda: (jnp.int32(0),)


def _commands(ops, args: Args, batch: int, op: str):
    """A compiled scan of ``args.commands`` writes (or samples) of ``batch`` entries on a tree
    of ``args.capacity`` leaves whose every leaf holds 1 (made afresh for each call)."""

    def operands():
        tree = ops.init(args.capacity, args.branching)
        slots = jnp.arange(args.capacity, dtype=jnp.int32)
        return jax.jit(ops.write)(tree, slots, jnp.ones(args.capacity)), keys

    def write(t, k):
        idx = jax.random.randint(k, (batch,), 0, args.capacity)
        return ops.write(t, idx, jnp.full((batch,), 2.0)), None

    def sample(t, k):
        indices, _ = ops.draw(t, k, batch, True)
        return t, indices  # (the next draw's tree is the same: they may overlap)

    body = write if op == "write" else sample
    keys = jax.random.split(jax.random.key(0), args.commands)
    return jax.jit(lambda t, ks: jax.lax.scan(body, t, ks)), operands


def main(args: Args) -> list[dict]:
    fn, operands = _bare(args.commands)
    us = _timed(fn, operands, args.repeats) / args.commands * 1e6
    rows = [{"figure": "io_callback round trip", "batch": 0, "us_per_command": us}]
    print(f"io_callback round trip: {us:.1f} us", flush=True)
    for batch in args.batches:
        for name, ops in (
            ("C-simulation FFI", tree_ops("fpga")),
            (
                "simulated board",
                board_tree_ops("fpga", "sim", args.capacity, args.branching, batch),
            ),
        ):
            for op in ("write", "sample"):
                fn, operands = _commands(ops, args, batch, op)
                us = _timed(fn, operands, args.repeats) / args.commands * 1e6
                rows.append({"figure": f"{name} {op}", "batch": batch, "us_per_command": us})
                print(f"B {batch:5d} {name:17s} {op:6s} {us:8.1f} us", flush=True)
    summary = {"label": "measured (cpu)", "date": time.strftime("%Y-%m-%d"), "run": run_info()}
    summary |= {"args": {k: str(v) for k, v in dataclasses.asdict(args).items()}, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    return rows


LEAST = {"batches": 1, "commands": 1, "repeats": 1, "capacity": 1, "branching": 1}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, lambda a: accepts(a.capacity, a.branching))
