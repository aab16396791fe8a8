"""Training throughput: PER (each replay backend) against uniform replay, same config, one run.

Measures trained samples/s (SGD steps x batch per second) and env steps/s of the training
iterations alone (evaluation excluded), alternating the variants per repeat; reports the PER /
uniform ratio, and counts whole-tree copies in each compiled training program (a copy of the tree
inside the jitted step is what made a prototype lose 3-4x to PER).

Usage:
  python experiments/bench_train.py                 # CartPole, MLP 64x64, batch 256
  python experiments/bench_train.py --threading pin1
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import checked_cli
from _common import run_info


@dataclasses.dataclass
class Args:
    env: str = "CartPole-v1"
    hidden: tuple[int, ...] = (64, 64)
    batch_size: int = 256
    num_envs: int = 4
    sgd_steps: int = 1
    buffer_size: int = 100_000
    iterations: int = 2_000
    """Iterations per timed repeat."""
    repeats: int = 5
    backends: tuple[str, ...] = ("jax", "native")
    threading: Literal["default", "pin1"] = "default"
    out: Path = Path("results/bench_train.json")


def main(args: Args) -> list[dict]:
    if args.threading == "pin1":
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    from drlhet.envs import make_env
    from drlhet.runtime.config import ConfigError

    try:  # the name first, before anything is built or measured (after the pinning above)
        make_env(args.env)
    except ValueError as e:
        raise ConfigError(f"--env: {e}", "env") from None

    runners, copies, compile_s = {}, {}, {}
    for name, cfg in variants(args).items():
        prepared = prepare(name, cfg)
        if prepared is not None:
            runners[name], copies[name], compile_s[name] = prepared
    times = time_runs(runners, args.repeats)
    rows = report(args, times, copies, compile_s)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    return rows


def variants(args: Args) -> dict[str, Any]:
    """The training configurations compared, by name: uniform replay, then PER on each of
    ``args.backends``."""
    from drlhet.agents.dqn import DQNConfig
    from drlhet.runtime.config import TrainConfig

    base = TrainConfig(
        env=args.env,
        num_envs=args.num_envs,
        sgd_steps=args.sgd_steps,
        batch_size=args.batch_size,
        buffer_size=args.buffer_size,
        warmup=args.buffer_size // 2,
        eval_every=args.iterations * args.num_envs,
        dqn=DQNConfig(hidden=args.hidden),
    )
    configs = {"uniform": dataclasses.replace(base, uniform=True)}
    for b in args.backends:
        configs[f"per-{b}"] = dataclasses.replace(base, backend=b)
    return configs


def prepare(name: str, cfg: Any) -> tuple[Callable[[], None], int | None, float] | None:
    """Builds, warms up and compiles the training iteration of ``cfg``, and runs it once: a
    call that runs one more iteration, the whole-tree copies in the compiled program (None for
    uniform replay, which has no tree) and the seconds it took to compile; None (and a note)
    when its backend cannot load here."""
    import jax

    from drlhet.backends import BackendUnavailable
    from drlhet.runtime.compiling import jit  # as a run compiles its programs
    from drlhet.runtime.trainer import make_trainer

    try:
        tr = make_trainer(cfg)
    except BackendUnavailable as e:
        print(f"note: {name} skipped: {e}")
        return None
    state = jit(tr.warmup)(jit(tr.init)(jax.random.key(0)))
    step = jit(tr.iterate, donate_argnums=0)
    t = time.perf_counter()
    compiled = step.lower(state).compile()
    compile_s = time.perf_counter() - t
    size = state.replay.tree.nodes.shape[0]
    copies = (
        None
        if cfg.uniform
        else sum(  # uniform replay has no tree
            1
            for line in compiled.as_text().splitlines()
            if " copy(" in line and f"[{size}]" in line
        )
    )
    holder = {"s": state}

    def run(step=step, holder=holder):
        s, out = step(holder["s"])
        jax.block_until_ready(s)
        holder["s"] = s

    run()  # first touch
    return run, copies, compile_s


def time_runs(runners: dict[str, Callable[[], None]], repeats: int) -> dict[str, list[float]]:
    """The seconds of each of ``repeats`` calls of each runner, the runners alternating."""
    times: dict[str, list[float]] = {n: [] for n in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            t = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t)
    return times


def report(
    args: Args,
    times: dict[str, list[float]],
    copies: dict[str, int | None],
    compile_s: dict[str, float],
) -> list[dict[str, Any]]:
    """Prints the table of the variants' rates and their ratios to uniform replay; returns
    the rows written."""
    machine = f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})"
    rows: list[dict[str, Any]] = []
    print(
        f"machine: {machine}; threading {args.threading}; env {args.env}, MLP {args.hidden}, "
        f"batch {args.batch_size}, {args.num_envs} envs, replay ratio "
        f"{args.sgd_steps / args.num_envs} SGD steps per env step, capacity {args.buffer_size}"
    )
    print(
        f"{'variant':<12} {'trained samples/s':>18} {'min':>10} {'max':>10} {'env steps/s':>12} "
        f"{'tree copies':>11} {'compile s':>9}"
    )
    for name, ts in times.items():
        row = measured_row(args, name, ts, copies[name], compile_s[name], machine)
        rows.append(row)
        med, env_sps = row["trained_samples_per_s"], row["env_steps_per_s"]
        print(
            f"{name:<12} {med:>18,.0f} {row['min']:>10,.0f} {row['max']:>10,.0f} "
            f"{env_sps:>12,.0f} "
            f"{copies[name] if copies[name] is not None else '-':>11} {compile_s[name]:>9.1f}"
        )
    uni = next((r["trained_samples_per_s"] for r in rows if r["variant"] == "uniform"), None)
    for r in rows:
        if uni and r["variant"] != "uniform":
            print(f"{r['variant']} / uniform = {r['trained_samples_per_s'] / uni:.2f}x")
    return rows


def measured_row(
    args: Args, name: str, ts: list[float], copies: int | None, compile_s: float, machine: str
) -> dict[str, Any]:
    """The row of variant ``name`` from the seconds ``ts`` of its timed repeats: the median,
    least and most trained samples/s, env steps/s, and what was measured how."""
    rates = sorted(args.iterations * args.sgd_steps * args.batch_size / t for t in ts)
    med = statistics.median(rates)
    env_sps = med / (args.sgd_steps * args.batch_size) * args.num_envs
    return {
        "variant": name,
        "trained_samples_per_s": med,
        "min": rates[0],
        "max": rates[-1],
        "env_steps_per_s": env_sps,
        "tree_copies": copies,
        "compile_s": compile_s,
        "machine": machine,
        "threading": args.threading,
        **{k: str(v) for k, v in vars(args).items()},
        "measured": True,
        "run": run_info(),
    }


LEAST = {
    "hidden": 1,
    "batch_size": 1,
    "num_envs": 1,
    "sgd_steps": 1,
    "buffer_size": 1,
    "iterations": 1,
    "repeats": 1,
}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST)
