"""Measured throughput of split mappings against the fused one-device loop, with their bounds.

DQN + PER on CartPole-v1, MLP 64x64 (docs/design.md section 6). The machine's two cores are two
XLA CPU devices (``jax_num_cpu_devices=2``). For each configuration and delay k, every mapping
below runs (fused on one device; two groups on one device and the third on the other, with the
threaded pipeline for ``k >= sgd_steps``), in rounds whose order alternates (forward, then
reversed) so that the machine's drift hits every mapping alike. A mapping's figure is the median
over rounds of the median of its chunks after the first (which compiles).

Bounds, from a profile of the primitives' compute taken in the same run
(`drlhet.dse.profile.profile_config`): a split's *ideal* speedup over the fused loop is
(sum of the primitives' compute) / (compute of the busier device), as if the fused loop used one
core and the split none of the host's time. The fused program already runs independent
operations on both cores (measure it pinned to one: ``taskset -c 0``, the last usage line),
which this ideal ignores.

Usage:
  python experiments/bench_mapping.py                       # every configuration
  python experiments/bench_mapping.py --configs jax-b256 --delays 0 8
  taskset -c 0 python experiments/bench_mapping.py --mappings fused --out results/x.json
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
from pathlib import Path
from typing import TypedDict

import checked_cli
from _common import run_info


class Config(TypedDict):
    """A named configuration: the replay backend and the `TrainConfig` fields it sets."""

    backend: str
    batch_size: int
    buffer_size: int
    num_envs: int
    sgd_steps: int


CONFIGS: dict[str, Config] = {
    "jax-b256": Config(backend="jax", batch_size=256, buffer_size=1 << 20, num_envs=4, sgd_steps=1),
    "native-b256": Config(
        backend="native", batch_size=256, buffer_size=1 << 20, num_envs=4, sgd_steps=1
    ),
    "jax-b64": Config(backend="jax", batch_size=64, buffer_size=1 << 20, num_envs=4, sgd_steps=1),
    "jax-envs64": Config(
        backend="jax", batch_size=256, buffer_size=1 << 20, num_envs=64, sgd_steps=1
    ),
    "jax-b1024": Config(
        backend="jax", batch_size=1024, buffer_size=1 << 20, num_envs=16, sgd_steps=1
    ),
    "jax-b256-s2": Config(
        backend="jax", batch_size=256, buffer_size=1 << 20, num_envs=4, sgd_steps=2
    ),
}
"""Named configurations (one SGD step per iteration unless ``-s2``): the replay-heavy jax
reference, the native replay, a large buffer at a small batch, many environments per iteration.
With S SGD steps per iteration a pipelined stage call runs ``U = k // (2 S)`` iterations."""

MAPPINGS = {
    "fused": "actors=cpu:0,replay={b}@cpu:0,learner=cpu:0",
    "A+R | L": "actors=cpu:0,replay={b}@cpu:0,learner=cpu:1",
    "A | R+L": "actors=cpu:0,replay={b}@cpu:1,learner=cpu:1",
    "A+L | R": "actors=cpu:0,replay={b}@cpu:1,learner=cpu:0",
}
DEVICE_GROUPS = {  # the groups on each device of a split: for its ideal
    "A+R | L": (("actors", "replay"), ("learner",)),
    "A | R+L": (("actors",), ("replay", "learner")),
    "A+L | R": (("actors", "learner"), ("replay",)),
}


@dataclasses.dataclass
class Args:
    configs: tuple[str, ...] = tuple(CONFIGS)
    mappings: tuple[str, ...] = tuple(MAPPINGS)
    delays: tuple[int, ...] = (0, 2, 4, 8, 16)
    rounds: int = 2
    chunks: int = 3
    """Chunks per run; the first (compilation) is not counted."""
    chunk_steps: int = 4_000
    profile: bool = True
    """Profile the primitives (for the ideal speedups)."""
    out: Path = Path("results/bench_mapping.json")


def ideal_speedups(compute: dict, sgd: int) -> dict[str, float]:
    """(sum of the primitives' compute) / (busier device's compute), per split mapping."""
    m = {k: v["median"] for k, v in compute.items()}
    group = {
        "actors": m["actors"],
        "replay": m["insert"] + sgd * (m["sample"] + m["update"]),
        "learner": sgd * m["train"],
    }
    total = sum(group.values())
    return {
        name: total / max(sum(group[g] for g in dev) for dev in devs)
        for name, devs in DEVICE_GROUPS.items()
    }


def _config(name: str, args: Args, delay: int):
    from drlhet.agents.dqn import DQNConfig
    from drlhet.runtime.config import TrainConfig

    c = CONFIGS[name]
    every = c["num_envs"] * max(1, args.chunk_steps // c["num_envs"])
    return TrainConfig(
        env="CartPole-v1",
        warmup=5_000,
        eval_every=every,
        eval_envs=2,
        steps=5_000 + args.chunks * every,
        dqn=DQNConfig(hidden=(64, 64)),
        delay=delay,
        batch_size=c["batch_size"],
        buffer_size=c["buffer_size"],
        num_envs=c["num_envs"],
        sgd_steps=c["sgd_steps"],
    )


def _profile(name: str) -> dict:
    from drlhet.dse.key import ProfileKey
    from drlhet.dse.profile import profile_config

    c = CONFIGS[name]
    key = ProfileKey(
        batch=c["batch_size"],
        capacity=c["buffer_size"],
        num_envs=c["num_envs"],
        sgd_steps=c["sgd_steps"],
        backend=c["backend"],
    )
    return profile_config(key)["compute"]


def _measure(name: str, mapping: str, delay: int, args: Args) -> dict:
    from drlhet.runtime.run import run

    cfg = _config(name, args, delay)
    text = MAPPINGS[mapping].format(b=CONFIGS[name]["backend"])
    _, rows = run(cfg, text)
    steady = rows[1:]
    return {
        "trained_samples_per_s": statistics.median(r["trained_samples_per_s"] for r in steady),
        "per_chunk": [r["trained_samples_per_s"] for r in steady],
        "threads": steady[-1].get("threads"),
        "iterations_per_stage_call": steady[-1].get("iterations_per_stage_call"),
    }


def main(args: Args) -> list[dict]:
    import jax

    jax.config.update("jax_num_cpu_devices", 2)
    machine = f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})"
    affinity = sorted(os.sched_getaffinity(0))
    print(f"machine: {machine}; cores this process may use: {affinity}; measured")
    runs = [(c, m, k) for c in args.configs for m in args.mappings for k in args.delays]
    results: dict[tuple, list[dict]] = {r: [] for r in runs}
    ideals = {c: _profile(c) for c in args.configs} if args.profile else {}
    for rnd in range(args.rounds):
        for c, m, k in runs if rnd % 2 == 0 else runs[::-1]:
            results[(c, m, k)].append(_measure(c, m, k, args))
            print(
                f"round {rnd} {c} {m} k={k}: "
                f"{results[(c, m, k)][-1]['trained_samples_per_s']:,.0f}",
                flush=True,
            )
    rows = _rows(args, results, ideals, machine, affinity)
    _print(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    return rows


def _rows(args: Args, results: dict, ideals: dict, machine: str, affinity: list) -> list[dict]:
    rows = []
    for (c, m, k), reps in results.items():
        rate = statistics.median(r["trained_samples_per_s"] for r in reps)
        fused = results.get((c, "fused", k))
        fused_rate = statistics.median(r["trained_samples_per_s"] for r in fused) if fused else None
        ideal = ideal_speedups(ideals[c], CONFIGS[c]["sgd_steps"]).get(m) if c in ideals else None
        speedup = rate / fused_rate if fused_rate else None
        rows.append(
            {
                "config": c,
                **CONFIGS[c],
                "mapping": m,
                "mapping_spec": MAPPINGS[m].format(b=CONFIGS[c]["backend"]),
                "delay": k,
                "trained_samples_per_s": rate,
                "per_round": [r["trained_samples_per_s"] for r in reps],
                "per_chunk": [r["per_chunk"] for r in reps],
                "iterations_per_stage_call": reps[-1]["iterations_per_stage_call"],
                "threads": reps[-1]["threads"],
                "vs_fused_same_k": speedup,
                "ideal_speedup": ideal,
                "share_of_ideal": speedup / ideal if speedup and ideal else None,
                "compute_profile_s": {n: v["median"] for n, v in ideals.get(c, {}).items()},
                "machine": machine,
                "cpu_affinity": affinity,
                "measured": True,
                "run": run_info(),
            }
        )
    return rows


def _print(rows: list[dict]) -> None:
    print(
        f"\n{'config':<12} {'mapping':<8} {'k':>3} {'samples/s':>11} {'/fused':>7} "
        f"{'ideal':>6} {'/ideal':>7}"
    )
    for r in rows:
        f = lambda v, fmt: format(v, fmt) if v is not None else "-"  # noqa: E731
        print(
            f"{r['config']:<12} {r['mapping']:<8} {r['delay']:>3} "
            f"{r['trained_samples_per_s']:>11,.0f} {f(r['vs_fused_same_k'], '7.2f')} "
            f"{f(r['ideal_speedup'], '6.2f')} {f(r['share_of_ideal'], '7.2f')}"
        )


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": a configuration or mapping that is not one
    of `CONFIGS` and `MAPPINGS`, or none."""
    why = checked_cli.unknown_names("--configs", args.configs, CONFIGS)
    return why or checked_cli.unknown_names("--mappings", args.mappings, MAPPINGS)


LEAST = {"delays": 0, "rounds": 1, "chunks": 2, "chunk_steps": 1}
"""The smallest value of each count (`checked_cli.refused_counts`; the first chunk compiles, and
is not counted)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
