"""Validation of the performance model: predicted vs measured throughput of every runnable mapping.

docs/design.md section 5 ("every mapping that can run on the machine is also run and measured")
and docs/results.md. For DQN + PER on CartPole-v1 (MLP 64x64, 4 envs, 2 SGD steps per
iteration) at batch 64 and 256 and capacity 2^17 and 2^20: profile the primitives afresh (the
predictions use only these profiles), predict every mapping of actors / replay / learner over
the machine's two XLA CPU devices (``jax_num_cpu_devices=2``) with every replay backend here,
run each one with the scheduler and measure it (a mapping and its relabeling cpu:0 <-> cpu:1
are the same hardware: measured once), in rounds (profile, measure all; again; each round in a
fresh process) so that the machine's drift hits prediction and measurement alike and each
round samples the state a process keeps. A mapping's error is the median over the rounds of
(prediction from that round's profiles / that round's measurement - 1); the unpaired error
(prediction from the median profiles / median of all chunks - 1) is kept beside it. A speed
probe before and after the profile and every measurement pairs them at the same machine speed
(a measurement taken at another speed is retaken; the counts are reported). Then report
the model's error, whether the DSE's pick is within 5% of the best measured mapping, and the
pick's speedup over the worst runnable mapping and over the baselines (measured where runnable,
modeled otherwise).
The rounds run in ``validate_rounds.py``; the rows, the summary and the plot are made by
``validate_report.py``.

Usage:
  python experiments/validate_dse.py [--delay 0] [--batches 64 256] [--capacities 131072 1048576]
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import tempfile
from pathlib import Path

import checked_cli
import jax
from validate_report import _config, _plot, _rows, _summary
from validate_rounds import DEVICES, _rounds

from drlhet.dse.build import merge_models, replay_backends_here
from drlhet.dse.cache import ProfileCache
from drlhet.dse.key import ProfileKey
from drlhet.dse.search import search


@dataclasses.dataclass
class Args:
    batches: tuple[int, ...] = (64, 256)
    capacities: tuple[int, ...] = (1 << 17, 1 << 20)
    delay: int = 0
    rounds: int = 4
    """Profile-then-measure rounds (A B A B): drift of the machine hits both sides."""
    chunks: int = 3
    """Timed chunks per mapping per round (after one compilation chunk)."""
    chunk_steps: int = 4_000
    out: Path = Path("results/dse_validation.json")
    plot: Path = Path("results/dse_validation.png")
    isolate: bool = True
    """Run each round (its profile and its measurements) in a fresh process: state a process
    keeps (heap layout, thread placement, allocator pools) moved one mapping's throughput by up
    to 1.8x between processes here, so each round samples it instead of all rounds sharing it."""


def main(args: Args) -> dict:
    jax.config.update("jax_num_cpu_devices", 2)
    machine = f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})"
    rows: list[dict] = []
    configs, rounds_profiles = [], []
    cache = ProfileCache(Path(tempfile.mkdtemp(prefix="drlhet-profiles-")))
    print(f"machine: {machine}; DQN + PER, CartPole-v1, MLP 64x64, 4 envs, 2 SGD steps/iter")
    for batch in args.batches:
        for capacity in args.capacities:
            key = ProfileKey(batch=batch, capacity=capacity)
            models, per_round, profiles = _rounds(args, key, cache.path)
            rounds_profiles += profiles
            model = merge_models(models)
            preds = search(
                model, DEVICES, args.delay, present=DEVICES, backends_here=replay_backends_here()
            )
            runnable = [p for p in preds if p.runnable]  # once up to a swap of the CPUs
            new_rows, measured = _rows(args, key, runnable, per_round)
            rows += new_rows
            configs.append(_config(args, key, model, runnable[0], measured))
    summary = _summary(machine, rows, configs, rounds_profiles)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    _plot(rows, args.plot)
    return summary


LEAST = {"batches": 1, "capacities": 1, "delay": 0, "rounds": 1, "chunks": 1, "chunk_steps": 1}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST)
