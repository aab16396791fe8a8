"""Does one primitive's profiled time stay put from process to process? (docs/results.md,
"The machine's speed regimes").

Starts ``--processes`` fresh Python processes in turn. Each one times the speed probe the DSE
validation uses (`drlhet.dse.measure.speed_probe`: one long chain of matmuls), then profiles the
compute figures of one configuration three times in a row (`drlhet.dse.profile`'s compiled scans
of each primitive, the figures the model predicts from), then times the probe again. Settings:
``default`` (the process free on both cores), ``pin1`` (pinned to one core with ``taskset``),
``xla1`` (XLA's intra-op threading turned off by flag). Writes one JSON row per process.

Usage:
  python experiments/probe_regimes.py [--processes 6] [--settings default pin1 xla1]
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import checked_cli
from _common import run_info

XLA_SINGLE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
SETTINGS = ("default", "pin1", "xla1")


@dataclasses.dataclass
class Args:
    processes: int = 6
    """Fresh processes per setting and capacity."""
    settings: tuple[str, ...] = SETTINGS
    capacities: tuple[int, ...] = (1 << 17, 1 << 20)
    batch: int = 64
    out: Path = Path("results/probe_regimes.json")


def child(batch: int, capacity: int) -> dict:
    """Runs in the fresh process: probe, three compute profiles, probe (microseconds)."""
    import jax

    jax.config.update("jax_num_cpu_devices", 2)
    from drlhet.dse.key import ProfileKey
    from drlhet.dse.measure import speed_probe
    from drlhet.dse.profile import compute_figures

    key = ProfileKey(batch=batch, capacity=capacity, backend="jax")
    before = speed_probe()
    profiles = [compute_figures(key) for _ in range(3)]
    after = speed_probe()
    return {
        "probe_ms": [before * 1e3, after * 1e3],
        "compute_us": [{k: v["median"] * 1e6 for k, v in p.items()} for p in profiles],
    }


def _launch(setting: str, batch: int, capacity: int) -> dict:
    cmd = [sys.executable, __file__, "--child", str(batch), str(capacity)]
    env = dict(os.environ)
    if setting == "pin1":
        cmd = ["taskset", "-c", "0", *cmd]
    elif setting == "xla1":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + XLA_SINGLE_THREAD).strip()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(args: Args) -> list[dict]:
    rows = []
    for setting in args.settings:
        for i in range(args.processes):
            for capacity in args.capacities:
                got = _launch(setting, args.batch, capacity)
                row = {"setting": setting, "process": i, "batch": args.batch, **got}
                row["capacity"] = capacity
                rows.append(row)
                train = [round(c["train"], 1) for c in got["compute_us"]]
                probe = [round(p, 2) for p in got["probe_ms"]]
                print(f"{setting:8s} C=2^{capacity.bit_length() - 1} probe {probe} ms, "
                      f"train {train} us", flush=True)  # fmt: skip
    summary = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})",
        "date": time.strftime("%Y-%m-%d"),
        "label": "measured (cpu)",
        "run": run_info(),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    return rows


LEAST = {"processes": 1, "capacities": 1, "batch": 1}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        checked_cli.run(
            Args,
            main,
            LEAST,
            lambda a: checked_cli.unknown_names("--settings", a.settings, SETTINGS),
        )
