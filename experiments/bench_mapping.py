"""Measured throughput of every mapping runnable here, at delay k = 0 and k = 4.

DQN + PER on CartPole-v1, MLP 64x64, batch 256 (docs/design.md section 6). The machine's two
cores are exposed as two XLA CPU devices (``jax_num_cpu_devices=2``), so multi-segment
mappings run for real: actors on one device, replay and/or learner on the other, a host loop
between them.
Reports trained samples/s and env steps/s (median over the chunks after the first, which
includes compilation) and, per multi-segment mapping, the k = 4 / k = 0 ratio.

Usage:
  python experiments/bench_mapping.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
from pathlib import Path

import tyro


@dataclasses.dataclass
class Args:
    delays: tuple[int, ...] = (0, 4)
    chunks: int = 4
    """Chunks per run; the first (compilation) is not counted."""
    chunk_steps: int = 2_000
    out: Path = Path("results/bench_mapping.json")


MAPPINGS = {
    "fused jax (cpu:0)": "actors=cpu:0,replay=jax@cpu:0,learner=cpu:0",
    "fused native (cpu:0)": "actors=cpu:0,replay=native@cpu:0,learner=cpu:0",
    "actors cpu:0 | replay+learner jax cpu:1": "actors=cpu:0,replay=jax@cpu:1,learner=cpu:1",
    "actors cpu:0 | replay+learner native cpu:1": "actors=cpu:0,replay=native@cpu:1,learner=cpu:1",
    "actors+learner cpu:0 | replay jax cpu:1": "actors=cpu:0,replay=jax@cpu:1,learner=cpu:0",
    "actors+learner cpu:0 | replay native cpu:1": "actors=cpu:0,replay=native@cpu:1,learner=cpu:0",
}


def main(args: Args) -> list[dict]:
    import jax

    jax.config.update("jax_num_cpu_devices", 2)
    from drlhet.agents.dqn import DQNConfig
    from drlhet.runtime.config import TrainConfig
    from drlhet.runtime.mapping import Mapping, segments
    from drlhet.runtime.run import run

    base = TrainConfig(
        env="CartPole-v1",
        batch_size=256,
        sgd_steps=1,
        num_envs=4,
        buffer_size=100_000,
        warmup=5_000,
        eval_every=args.chunk_steps,
        eval_envs=2,
        steps=5_000 + args.chunks * args.chunk_steps,
        dqn=DQNConfig(hidden=(64, 64)),
    )
    machine = f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})"
    rows = []
    print(
        f"machine: {machine}; DQN + PER, CartPole-v1, MLP 64x64, batch 256, 4 envs, "
        f"1 SGD step per iteration; trained samples/s (measured)"
    )
    print(
        f"{'mapping':<46} {'segments':>8} " + " ".join(f"{'k=' + str(k):>12}" for k in args.delays)
    )
    for name, text in MAPPINGS.items():
        mapping = Mapping.parse(text)
        nseg = len(segments(mapping))
        rates = {}
        for k in args.delays:
            _, chunk_rows = run(dataclasses.replace(base, delay=k), mapping)
            steady = chunk_rows[1:]
            rate = statistics.median(r["trained_samples_per_s"] for r in steady)
            env_sps = statistics.median(r["env_steps_per_s"] for r in steady)
            rates[k] = rate
            rows.append(
                {
                    "mapping": name,
                    "mapping_spec": str(mapping),
                    "segments": nseg,
                    "delay": k,
                    "trained_samples_per_s": rate,
                    "env_steps_per_s": env_sps,
                    "per_chunk": [r["trained_samples_per_s"] for r in steady],
                    "machine": machine,
                    "measured": True,
                }
            )
        print(
            f"{name:<46} {nseg:>8} " + " ".join(f"{rates[k]:>12,.0f}" for k in args.delays),
            flush=True,
        )
    best = max(rows, key=lambda r: r["trained_samples_per_s"])
    print(
        f"best: {best['mapping']} at k={best['delay']}: "
        f"{best['trained_samples_per_s']:,.0f} trained samples/s"
    )
    for name in MAPPINGS:
        r = {x["delay"]: x["trained_samples_per_s"] for x in rows if x["mapping"] == name}
        if 0 in r and 4 in r and rows[[x["mapping"] for x in rows].index(name)]["segments"] > 1:
            print(f"{name}: k=4 / k=0 = {r[4] / r[0]:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main(tyro.cli(Args))
