"""Remote actors on Ray, measured (docs/results.md, "Actors on Ray").

Two questions, one run, on this machine:

1. Do actors scale? Env steps/s of gymnasium host environments (``gymnasium:CartPole-v1``,
   stepped on the host CPU) with ``ray:1`` and ``ray:2`` at low replay ratios, where the
   actors, not the learner, bound the run: one SGD step of 32 per iteration of 32 and of 128
   env steps per actor (each actor call 1024 env steps). On one machine every CPU second the
   learner and Ray's daemons spend per env step is taken from the actors: with actor cost
   ``a`` and the rest ``l`` per env step, ray:2 / ray:1 is at most about 2 / (1 + l / a),
   so the lower replay ratio (less learner work per env step) scales further.
2. Does feeding the learner from remote actors cost it anything? At high replay ratios, where
   the learner bounds the run, the learner's trained samples/s in ``ray:1`` and ``ray:2`` runs
   (wall clock, waits for actors included) against the same jitted learner program driven alone
   in this process on batches recorded from those runs (no Ray, no actors). On one machine the
   actors share its cores with the learner, so the share depends on how much CPU the actors
   need to keep up: 8 and 16 SGD steps of 256 per iteration of 32 env steps.

Parameters go out every 32 learner iterations (`RayConfig`'s default), actors run one XLA
thread each, the learner XLA's default threading; the JSON states them.

Each figure is the median over the chunks after the first (the first holds compilation), per
second of each chunk less its evaluation.
Every Ray run starts its own local instance (``ray.init``), ended before the next.

``--pin`` asks question 2 with the actors made remote by CPU affinity instead of by machine:
this process's Python thread and XLA's threads (the learner's compute) on core 0; Ray's
daemons, the actors and this process's Ray threads on the other cores; the learner alone on
core 0 too. It isolates what taking batches from Ray and broadcasting parameters costs the
learner's compute from what sharing its core with the actors costs it (which a learner on its
own machine does not pay). A first version kept this process's Ray threads on core 0 too:
they then waited behind XLA's compute and the actors waited for them (about 5.5k env steps/s
from one actor; the learner kept 0.49 / 0.70).

Usage:
  python experiments/bench_ray.py                  # both, about 12 min on 2 cores (measured)
  python experiments/bench_ray.py --chunks 3       # shorter
  python experiments/bench_ray.py --pin --out results/bench_ray_pinned.json
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import time
from pathlib import Path

import checked_cli
import jax
from _common import run_info

from drlhet.agents.dqn import DQNConfig
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.ray_learner import RayConfig, _learn_fn, run_ray
from drlhet.runtime.trainer import make_trainer


@dataclasses.dataclass
class Args:
    env: str = "gymnasium:CartPole-v1"
    num_envs: int = 32
    chunks: int = 5
    eval_every: int = 65_536
    """Env steps per seed per chunk (a multiple of num_envs x rollout)."""
    rollout: int = 32
    """Question 2's iterations per actor call."""
    scaling_envs: tuple[int, ...] = (32, 128)
    """Question 1's environments per actor, one replay ratio each: one SGD step of 32 per
    iteration of that many env steps, 1024 env steps per actor call."""
    rounds: int = 3
    """Question 1's rounds (ray:1 then ray:2 each) per replay ratio."""
    high_sgd_steps: tuple[int, ...] = (8, 16)
    """Question 2's replay ratios: SGD steps (of 256) per iteration of ``num_envs`` env steps."""
    out: Path = Path("results/bench_ray.json")
    pin: bool = False
    """Question 2 only, the learner on core 0 and Ray with its actors on the others."""


def _config(args: Args, sgd_steps: int, batch: int) -> TrainConfig:
    return TrainConfig(
        env=args.env,
        steps=args.eval_every * (args.chunks + 1),
        warmup=args.eval_every,
        eval_every=args.eval_every,
        eval_envs=2,
        num_envs=args.num_envs,
        sgd_steps=sgd_steps,
        batch_size=batch,
        buffer_size=100_000,
        dqn=DQNConfig(hidden=(64, 64)),
    )


def _steady(rows: list[dict], key: str) -> float:
    """The median over the chunks after the first of ``key``, per second of the chunk less
    its evaluation (the learner's own time, waits for the actors included)."""
    return statistics.median(r[key] * r["chunk_s"] / (r["chunk_s"] - r["eval_s"]) for r in rows[1:])


def _pin_threads(cores: set[int], tids: list[str] | None = None) -> None:
    """Threads ``tids`` of this process (default: all; and what they start later) on
    ``cores``; a thread that has ended meanwhile is skipped."""
    for tid in os.listdir("/proc/self/task") if tids is None else tids:
        try:
            os.sched_setaffinity(int(tid), cores)
        except ProcessLookupError:
            pass


def _ray_init_elsewhere() -> None:
    """Starts Ray's local instance with its daemons (and so its workers) and this process's
    Ray threads off core 0, then puts the threads that were here before (the Python thread and
    XLA's) back on core 0."""
    import ray

    before = os.listdir("/proc/self/task")
    _pin_threads(set(range(1, os.cpu_count() or 2)))
    ray.init(include_dashboard=False, log_to_driver=False)
    _pin_threads({0}, before)


def _ray_run(
    cfg: TrainConfig, actors: int, rollout: int, record: list | None = None, pin: bool = False
) -> dict:
    import ray

    if pin:
        _ray_init_elsewhere()
    rc = RayConfig(actors=actors, rollout=rollout, sync_every=32)
    t = time.perf_counter()
    _, rows, report = run_ray(cfg, rc, record_batches=record)
    ray.shutdown()
    return {
        "actors": actors,
        "sgd_steps": cfg.sgd_steps,
        "batch": cfg.batch_size,
        "env_steps_per_s": _steady(rows, "env_steps_per_s"),
        "trained_samples_per_s": _steady(rows, "trained_samples_per_s"),
        "wall_s": time.perf_counter() - t,
        "lag_mean": report["lag_mean"],
        "lag_max": report["lag_max"],
        "duplicates": report["duplicates"],
        "gaps": report["gaps"],
    }


def _learner_alone(cfg: TrainConfig, rollout: int, batches: list, repeat: int) -> float:
    """Trained samples/s of the Ray learner's own jitted program on recorded batches."""
    tr = make_trainer(cfg)
    learn = _learn_fn(cfg, tr, rollout, True)
    keys = jax.random.split(jax.random.key(0), cfg.seeds)
    s = jax.jit(jax.vmap(tr.init))(keys)
    state = [s.agent, s.replay, s.pending, s.key]
    fill = _learn_fn(cfg, tr, rollout, False)
    for b in batches:  # the buffer as full as in the run
        *state, _ = fill(*state, b, cfg.warmup)
    *state, m = learn(*state, batches[0], cfg.warmup)  # compile
    jax.block_until_ready(m)
    t = time.perf_counter()
    for _ in range(repeat):
        for b in batches:
            *state, m = learn(*state, b, cfg.warmup)
    jax.block_until_ready(m)
    samples = repeat * len(batches) * rollout * cfg.sgd_steps * cfg.batch_size * cfg.seeds
    return samples / (time.perf_counter() - t)


def _learner_share(args: Args, sgd_steps: int) -> dict:
    """Question 2: the learner's trained samples/s with ray:1 and ray:2 over the same program
    alone, at ``sgd_steps`` SGD steps of 256 per iteration."""
    high = _config(args, sgd_steps=sgd_steps, batch=256)
    record: list = []
    remote = {n: _ray_run(high, n, args.rollout, record, args.pin) for n in (1, 2)}
    alone = _learner_alone(high, args.rollout, record[-32:], repeat=2)
    share = {n: r["trained_samples_per_s"] / alone for n, r in remote.items()}
    for n, r in remote.items():
        print(f"{sgd_steps} SGD steps per iteration: learner trained samples/s: with ray:{n} "
              f"{r['trained_samples_per_s']:,.0f}, alone {alone:,.0f}: {share[n]:.2f}",
              flush=True)  # fmt: skip
    return {
        "sgd_steps": sgd_steps,
        "samples_per_env_step": sgd_steps * 256 // args.num_envs,
        "pinned": "learner on core 0, Ray and its actors on the others" if args.pin else None,
        "with_ray1": remote[1],
        "with_ray2": remote[2],
        "alone_trained_samples_per_s": alone,
        "share_ray1": share[1],
        "share_ray2": share[2],
    }


def main(args: Args) -> dict:
    machine = f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})"
    if args.pin:  # before JAX starts its threads
        _pin_threads({0})
    result = {
        "label": "measured (cpu)",
        "machine": machine,
        "date": time.strftime("%Y-%m-%d"),
        "run": run_info("ray"),
        "env": args.env,
        "num_envs": args.num_envs,
        "rollout": args.rollout,
        "sync_every": 32,
        "threads": "actors: one CPU and one XLA thread each; learner: XLA's default threading"
        + ("; pinned to core 0" if args.pin else ""),
    }
    if not args.pin:
        result |= _scaling(args)
    result["learner"] = [_learner_share(args, n) for n in args.high_sgd_steps]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return result


def _scaling(args: Args) -> dict:
    """Question 1: env steps/s with ray:1 and ray:2 at low replay ratios (one SGD step of 32
    per iteration of ``num_envs`` env steps, for each of ``args.scaling_envs``), ``args.rounds``
    rounds alternating ray:1 and ray:2; the ratio per round and their median."""
    out = []
    for envs in args.scaling_envs:
        rollout = max(1, 1024 // envs)
        low = _config(dataclasses.replace(args, num_envs=envs, rollout=rollout), 1, 32)
        rounds = [[_ray_run(low, n, rollout) for n in (1, 2)] for _ in range(args.rounds)]
        ratios = [r2["env_steps_per_s"] / r1["env_steps_per_s"] for r1, r2 in rounds]
        for (r1, r2), ratio in zip(rounds, ratios, strict=True):
            print(f"{envs} envs per actor, rollout {rollout}: env steps/s ray:1 "
                  f"{r1['env_steps_per_s']:,.0f}, ray:2 {r2['env_steps_per_s']:,.0f}: "
                  f"{ratio:.2f}x", flush=True)  # fmt: skip
        print(f"{envs} envs per actor: median ratio {statistics.median(ratios):.2f}x", flush=True)
        out.append({
            "num_envs": envs,
            "rollout": rollout,
            "rounds": rounds,
            "ratios": ratios,
            "ratio_median": statistics.median(ratios),
        })  # fmt: skip
    return {"scaling": out}


LEAST = {
    "num_envs": 1,
    "chunks": 1,
    "eval_every": 1,
    "rollout": 1,
    "scaling_envs": 1,
    "rounds": 1,
    "high_sgd_steps": 1,
}
"""The smallest value of each count (`checked_cli.refused_counts`)."""


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": ``--pin`` on a machine of one core (the
    learner takes core 0, Ray the others)."""
    cores = os.cpu_count() or 1
    return (
        f"--pin needs at least 2 cores, this machine has {cores}" if args.pin and cores < 2 else ""
    )


if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
