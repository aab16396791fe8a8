"""bench_replay.py's threading: the settings of ``--threading`` and ``--threading-study``.

``default`` (XLA's own thread pool over all cores), ``pin1`` (the process pinned to core 0, like
``taskset -c 0``), ``xla1`` (XLA intra-op threading off). The study runs bench_replay.py once per
setting, each in a process of its own, and names its files after ``--out`` (`study_outputs`).

Imports no jax: a setting is applied before jax is imported (`apply_threading`).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench_replay import Args

XLA_SINGLE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

THREADINGS = ("default", "pin1", "xla1")
"""The settings of ``--threading``, in the order the study runs them."""


def apply_threading(mode: str) -> None:
    """Must run before jax is imported."""
    if mode == "pin1":
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    elif mode == "xla1":
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " " + XLA_SINGLE_THREAD
        ).strip()


def study_outputs(out: Path) -> tuple[Path, dict[str, Path]]:
    """Where ``--threading-study`` writes, named after ``--out`` (``<folder>/<name>.json``): all
    the rows in ``<name>_threading.json``, and each setting's run in
    ``<name>_threading_<setting>.json`` beside it."""

    def named(tail: str) -> Path:
        return out.with_name(f"{out.stem}_threading{tail}{out.suffix}")

    return named(""), {mode: named(f"_{mode}") for mode in THREADINGS}


def study_run(args: Args, mode: str, out: Path, script: str) -> list[dict]:
    """One setting's run of the study: ``script`` (bench_replay.py) in a process of its own,
    writing ``out``; its rows. A run that fails ends the study (exit status 1) with one line
    naming its setting, exit status, last line on stderr and command."""
    cmd = [sys.executable, script, "--quick", "--no-peers", "--threading", mode]
    cmd += ["--ops", "sample", "update", "step", "--modes", "fused", "percall"]
    cmd += ["--repeats", str(args.repeats), "--out", str(out)]
    print("$", shlex.join(cmd), flush=True)
    got = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    if got.returncode == 0:
        sys.stderr.write(got.stderr)  # its warnings, once it has run
        return json.loads(out.read_text())
    last = (got.stderr.strip().splitlines() or ["no output on stderr"])[-1]
    print(
        f"bench_replay: failed: threading study, --threading {mode}: exit status "
        f"{got.returncode} ({last}); {study_outputs(args.out)[0]} not written; command: "
        f"{shlex.join(cmd)}",
        file=sys.stderr,
    )
    raise SystemExit(1)


def threading_study(args: Args, script: str) -> list[dict]:
    """Runs ``script`` (bench_replay.py) under each setting, writes all their rows and prints
    drlhet-jax's items/s per setting; the rows."""
    target, outs = study_outputs(args.out)
    rows = []
    for mode, out in outs.items():
        rows += study_run(args, mode, out, script)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(rows, indent=1))
    print("\n== threading study, capacity 2^20, K 16, batch 256: items/s (median, measured) ==")
    print(f"{'threading':<10} {'mode':<8} {'sample':>10} {'update':>10} {'step':>10}")
    for mode in THREADINGS:
        for m in ("fused", "percall"):
            r = {
                x["op"]: x["items_per_s"]
                for x in rows
                if x.get("threading") == mode
                and x.get("mode") == m
                and x.get("impl") == "drlhet-jax"
            }
            print(f"{mode:<10} {m:<8} {r['sample']:>10.3g} {r['update']:>10.3g} {r['step']:>10.3g}")
    print(f"wrote {target}")
    return rows
