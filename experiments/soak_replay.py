"""Replay soak run: ten million priority updates on one buffer, checked as they go.

Per learner step, inside jitted ``lax.scan`` blocks (buffer and queue donated): insert a few
transitions with random priorities, sample a batch, and push the batch's new priorities through
a queue of delayed updates (`drlhet.replay.delayed`, k steps), so the updates that reach the
buffer are k steps stale and some hit slots overwritten since (their stamps drop them).
Priorities are log-uniform over several decades. Between blocks the run records

* the root against the float64 sum of the leaves (relative error; the fixed-point tree of the
  ``fpga`` backend is compared against the exact integer sum of its leaves),
* the buffer's error bits (0: nothing was refused),
* the process's resident memory (``VmRSS`` of /proc/self/status).

Each backend runs in its own process, so the memory figures are its own. JSON rows go to
``--out``, one per backend, labelled measured, with this machine.

Usage:
  python experiments/soak_replay.py                      # native, jax, fpga: 10^7 updates each
  python experiments/soak_replay.py --updates 1000000 --backends native
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import checked_cli
from _common import run_info


@dataclasses.dataclass
class Args:
    backends: tuple[str, ...] = ("native", "jax", "fpga")
    """Replay backends to soak (one process each; ``fpga`` is the replay module's C-sim)."""
    updates: int = 10_000_000
    """Priority updates applied per backend (rounded up to whole blocks)."""
    fpga_updates: int = 0
    """A smaller count for ``fpga`` (its C-simulation is slower); 0: ``--updates``."""
    capacity: int = 2**20
    branching: int = 16
    batch: int = 256
    inserts: int = 32
    """Transitions inserted per learner step (the ring wraps every capacity / inserts steps)."""
    delay: int = 4
    """k of the delayed updates."""
    decades: tuple[float, float] = (-4.0, 4.0)
    """Priorities are 10^u, u uniform in this range."""
    alpha: float = 0.6
    block: int = 1000
    """Learner steps per jitted scan (a record is taken after each)."""
    seed: int = 0
    out: Path = Path("results/soak_replay.json")
    child: str = ""
    """Internal: run this one backend here and print its row."""


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()} {os.cpu_count()} cores {model} ({platform.node()})".strip()


def rss_mib() -> tuple[float, float]:
    """``(VmRSS, VmHWM)`` of this process in MiB."""
    got = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            got[name] = int(value.split()[0]) / 1024
    return got["VmRSS"], got["VmHWM"]


def make_block(args: Args, fns, delayed):
    """A jitted ``(carry, keys [S]) -> (carry, stale [S])`` of S learner steps (carry donated)."""
    import jax
    import jax.numpy as jnp

    lo, hi = args.decades

    def priorities(key, n):
        return jnp.power(10.0, jax.random.uniform(key, (n,), jnp.float32, lo, hi))

    def step(carry, key):
        rep, pending, count = carry
        k_add, k_sample, k_new = jax.random.split(key, 3)
        ids = count * args.inserts + jnp.arange(args.inserts, dtype=jnp.int32)
        rep = fns.add(rep, {"id": ids}, priorities(k_add, args.inserts))
        b = fns.sample(rep, k_sample)
        # the update about to be applied: how many of its slots were overwritten since
        head = jnp.clip(pending.indices[0], 0, args.capacity - 1)
        stale = jnp.sum((rep.stamps[head] != pending.stamps[0]) & (pending.stamps[0] >= 0))
        rep, pending = delayed.push(
            rep, pending, b.indices, b.stamps, priorities(k_new, args.batch)
        )
        return (rep, pending, count + 1), stale

    return jax.jit(lambda c, keys: jax.lax.scan(step, c, keys), donate_argnums=0)


def root_error(tree) -> tuple[float, float]:
    """``(root, |root - sum of leaves| / sum)``, the sum in float64 (exact for fixed point)."""
    import numpy as np

    if hasattr(tree, "nodes"):  # a float tree
        from drlhet.replay import sum_tree as st

        root = float(np.asarray(st.total(tree)))
        exact = float(np.sum(np.asarray(st.leaves(tree), np.float64)))
    else:  # fixed point: 64-bit integers
        root = int(np.asarray(tree.hi)[0]) * 2**32 + int(np.asarray(tree.lo)[0])
        exact = int(np.sum(np.asarray(tree.leaves, np.uint64)))
    return float(root), abs(root - exact) / exact if exact else float(root != exact)


def soak(args: Args, backend: str) -> dict:
    """Soaks one backend in this process; returns its row."""
    rss0 = rss_mib()[0]
    import jax
    import jax.numpy as jnp

    from drlhet import backends
    from drlhet.replay.delayed import make_delayed_updates
    from drlhet.replay.prioritized import make_prioritized_replay

    total = args.fpga_updates if backend == "fpga" and args.fpga_updates else args.updates
    blocks = math.ceil(math.ceil(total / args.batch) / args.block)
    ops = backends.tree_ops(backend)
    fns_numbers = ops.numbers  # "float" or "fixed": which reference the tree follows
    fns = make_prioritized_replay(
        args.capacity, args.batch, alpha=args.alpha, branching=args.branching, tree_ops=ops
    )
    delayed = make_delayed_updates(fns, args.delay, args.batch)
    key = jax.random.key(args.seed)
    key, k_fill = jax.random.split(key)
    lo, hi = args.decades
    fill = jnp.power(10.0, jax.random.uniform(k_fill, (args.capacity,), jnp.float32, lo, hi))
    rep = fns.add(fns.init({"id": jnp.int32(0)}), {"id": -jnp.arange(args.capacity)}, fill)
    carry = (rep, delayed.init(), jnp.zeros((), jnp.int32))
    run = make_block(args, fns, delayed)
    trace, stale_total, t_run = [], 0, 0.0
    for n in range(blocks):
        key, k_block = jax.random.split(key)
        t0 = time.perf_counter()
        carry, stale = jax.block_until_ready(run(carry, jax.random.split(k_block, args.block)))
        t_run += time.perf_counter() - t0 if n else 0.0  # block 0 includes compilation
        stale_total += int(stale.sum())
        root, err = root_error(carry[0].tree)
        rss, _ = rss_mib()
        trace.append(
            {"step": (n + 1) * args.block, "root": root, "root_rel_error": err,
             "error": int(carry[0].error), "rss_mib": round(rss, 1)}
        )  # fmt: skip
        print(f"  {backend} block {n + 1}/{blocks}: {trace[-1]}", file=sys.stderr, flush=True)
    steps = blocks * args.block
    applied = (steps - args.delay) * args.batch  # the last k pushes are still queued
    return {
        "experiment": "soak_replay",
        "backend": backend,
        "numbers": fns_numbers,
        "capacity": args.capacity,
        "branching": args.branching,
        "batch": args.batch,
        "inserts_per_step": args.inserts,
        "delay": args.delay,
        "alpha": args.alpha,
        "priority_decades": list(args.decades),
        "steps": steps,
        "priority_updates": applied,
        "insertions": args.capacity + steps * args.inserts,
        "stale_updates_dropped": stale_total,
        "max_root_rel_error": max(r["root_rel_error"] for r in trace),
        "final_root_rel_error": trace[-1]["root_rel_error"],
        "error_bits": int(carry[0].error),
        "rss_mib_before_jax": round(rss0, 1),
        "rss_mib_start": trace[0]["rss_mib"],
        "rss_mib_end": trace[-1]["rss_mib"],
        "rss_mib_peak": round(rss_mib()[1], 1),
        "updates_per_s_after_compile": (steps - args.block) * args.batch / t_run if t_run else None,
        "trace": trace,
        "machine": machine(),
        "jax": jax.__version__,
        "measured": True,
    }


def main(args: Args) -> None:
    if args.child:
        print(json.dumps(soak(args, args.child)))
        return
    rows: list[dict[str, Any]] = []
    for backend in args.backends:
        cmd = [sys.executable, __file__, *sys.argv[1:], "--child", backend]
        print(f"soak: {backend}", flush=True)
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if done.returncode:
            rows.append({"backend": backend, "failed": done.returncode, "measured": True,
                         "run": run_info()})  # fmt: skip
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append({**row, "run": run_info()})
        print(
            f"  {backend}: {row['priority_updates']:,} updates, max root rel. error "
            f"{row['max_root_rel_error']:.2e}, error bits {row['error_bits']}, RSS "
            f"{row['rss_mib_start']} -> {row['rss_mib_end']} MiB, "
            f"{row['stale_updates_dropped']:,} stale updates dropped"
        )
    ref = next((r for r in rows if r.get("backend") == "jax" and "trace" in r), None)
    for row in rows:  # float backends must follow the reference's trajectory bit for bit
        if ref is not None and row is not ref and "trace" in row and row["numbers"] == "float":
            row["roots_equal_jax"] = [r["root"] for r in row["trace"]] == [
                r["root"] for r in ref["trace"]
            ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {args.out}")
    failed = [f"{r['backend']} (exit {r['failed']})" for r in rows if "failed" in r]
    if failed:  # the rows are kept; the run's status says that some backend did not finish
        sys.exit(f"soak_replay: failed: {', '.join(failed)}")


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": non-finite priority decades, more inserts
    per step than the buffer holds, or a backend that is not registered, does not load here or
    refuses this buffer (its capacity, K, alpha); asked before any backend's process starts
    (which would end in a traceback, its row marked failed)."""
    if args.child:  # the parent asked
        return ""
    if not all(math.isfinite(u) for u in args.decades):
        return f"--decades must be finite, got {list(args.decades)}"
    if args.inserts > args.capacity:  # one add of more than the capacity is refused
        return f"--inserts {args.inserts} must be <= --capacity {args.capacity}"
    from drlhet import backends
    from drlhet.replay.prioritized import make_prioritized_replay

    why = checked_cli.unknown_names("--backends", args.backends, backends.names())
    for name in args.backends if not why else ():
        try:
            ops = backends.tree_ops(name)
            why = backends.get(name).refuses((args.capacity, args.branching))
            make_prioritized_replay(
                args.capacity, args.batch, alpha=args.alpha, branching=args.branching, tree_ops=ops
            )
        except (ValueError, backends.BackendUnavailable) as e:
            why = str(e)
        if why:
            return f"--backends {name}: {why}"
    return why


LEAST = {
    "updates": 1,
    "fpga_updates": 0,
    "capacity": 1,
    "branching": 2,
    "batch": 1,
    "inserts": 1,
    "delay": 0,
    "block": 1,
}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
