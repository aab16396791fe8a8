"""drlhet against the frameworks its users would otherwise pick, end to end (docs/results.md,
"Peers end to end").

Every system trains the same `RunSpec` (experiments/peers/spec.py) in a fresh process of its own
virtual environment, the systems alternating round by round (A B C A B C ...): drlhet
(experiments/peers/drlhet_run.py), a flashbax-PER DQN in drlhet's jitted loop
(flashbax_dqn.py), Stable-Baselines3 (sb3_run.py, uniform replay: it has no PER) and RLlib
(rllib_run.py, its prioritized episode buffer), the peers with their own tuned recipe beside the
matched one where asked. The torch peers run with one thread (``OMP_NUM_THREADS=1``,
``torch.set_num_threads(1)``); drlhet and flashbax with XLA's default threading. Metrics
(`spec.metrics`, the same for every system): trained samples/s and env steps/s after the first
chunk, wall time from launch to a return of ``--target`` (imports and compilation included).
The per-system figure is the median over the rounds; ratios are drlhet's over each peer's.

`make peers` installs the torch peers; a system whose environment is missing is reported as
skipped, with the command that installs it.

Usage:
  python experiments/fig_peers.py                      # DQN CartPole, throughput, reduced
  python experiments/fig_peers.py --full               # to a return of 475, 3 rounds
  python experiments/fig_peers.py --algo td3 --env Pendulum-v1 --systems drlhet sb3 rllib
  python experiments/fig_peers.py --grid               # drlhet / RLlib over matched configs
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).parent / "peers"))
import checked_cli
from _common import run_info
from drlhet_run import train_config  # noqa: E402
from spec import ENV_ONE_THREAD, RunSpec, metrics, read_events  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(__file__).resolve().parent / "peers"
CACHE = ROOT / "results" / "raw" / "peers_compilation_cache"
"""drlhet-cached's persistent compilation cache, warmed by one unrecorded run first."""
SYSTEMS = {
    # name: (python, runner, recipe, one torch thread)
    "drlhet": (".venv/bin/python", "drlhet_run.py", "matched", False),
    "drlhet-cached": (".venv/bin/python", "drlhet_run.py", "matched", False),
    "flashbax": (".venv/bin/python", "flashbax_dqn.py", "matched", False),
    "sb3": (".venv-peers/sb3/bin/python", "sb3_run.py", "matched", True),
    "sb3-tuned": (".venv-peers/sb3/bin/python", "sb3_run.py", "tuned", True),
    "rllib": (".venv-peers/rllib/bin/python", "rllib_run.py", "matched", True),
    "rllib-tuned": (".venv-peers/rllib/bin/python", "rllib_run.py", "tuned", True),
}
TD3_SPEC = RunSpec(
    algo="td3", env="Pendulum-v1", hidden=(256, 256), batch=256, buffer=100_000, n_step=1,
    lr=1e-3, tau=0.005, steps=30_000, eval_every=2_000, stop_at_return=-200.0,
)  # fmt: skip
"""The continuous configuration: drlhet's DDPG defaults with TD3 on (docs/results.md)."""


@dataclasses.dataclass
class Args:
    algo: Literal["dqn", "td3"] = "dqn"
    env: str | None = None
    """Default: CartPole-v1 for DQN, Pendulum-v1 for TD3."""
    systems: tuple[str, ...] = ("drlhet", "flashbax", "sb3", "rllib")
    rounds: int = 1
    """Rounds of every system (alternating); the figures are medians over them."""
    steps: int | None = None
    """Env steps per run (default: 20k reduced, the spec's with --full)."""
    eval_every: int | None = None
    """Env steps between evaluations (default: the spec's, 5k DQN / 2k TD3; ``--grid`` sizes
    its own). Throughput is timed from the first evaluation to the last (the first chunk holds
    compilation and warm-up), so a run needs at least two: `make figures` runs the matched DQN
    at 5000 / 2000 and TD3 at 3000 / 1000."""
    target: float | None = None
    """Return to time (default: 475 CartPole / -200 Pendulum with --full; none reduced)."""
    full: bool = False
    """The README's scale: train to the target (3 rounds unless --rounds)."""
    grid: bool = False
    """drlhet and RLlib (matched) over a grid of configurations, throughput only."""
    timeout_s: int = 3_600
    pin1: bool = False
    """Pin every process to one core (``taskset -c 0``), peers and drlhet alike."""
    out: Path = Path("results/fig_peers.json")
    plot: Path = Path("results/fig_peers.png")


def base_spec(args: Args) -> RunSpec:
    """The matched configuration the arguments ask for."""
    spec = TD3_SPEC if args.algo == "td3" else RunSpec(algo=args.algo)
    target = args.target
    if target is None and args.full:
        target = spec.stop_at_return
    steps = args.steps or (spec.steps if args.full else 20_000)
    return dataclasses.replace(
        spec,
        steps=steps,
        stop_at_return=target,
        env=args.env or spec.env,
        eval_every=args.eval_every or spec.eval_every,
    )


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": an unknown system or none, an ``--env``
    that cannot be run (`refused_env`), an ``--eval-every`` that is not a multiple of the
    envs stepped together, or a run drlhet would refuse (`refused_run`); asked before any
    system is launched or anything is written."""
    why = checked_cli.unknown_names("--systems", args.systems, SYSTEMS)
    why = why or refused_env(args)
    if not why and args.target is not None and math.isnan(args.target):
        why = "--target must be a number, got nan"
    envs = base_spec(args).num_envs
    every = args.eval_every
    if not why and every is not None and (every <= 0 or every % envs):
        why = (
            f"--eval-every {every} must be a positive multiple of the {envs} envs stepped together"
        )
    return why or refused_run(args)


def refused_run(args: Args) -> str:
    """Why drlhet would refuse a run of the comparison (`checked_cli.refused_config` of the
    `TrainConfig` drlhet_run.py trains; every system runs the same spec), in one line naming
    the options that size it (``--steps 8 --eval-every 5000``, or the ``--grid``
    configuration), or "". Builds the environment (imports jax)."""
    if args.grid:
        runs = [(f"--grid configuration {o}", grid_spec(args, o)) for o in GRID]
    else:
        spec = base_spec(args)
        runs = [(f"--steps {spec.steps} --eval-every {spec.eval_every}", spec)]
    for shown, spec in runs:
        why = checked_cli.refused_config(train_config(spec))
        if why:
            return f"{shown}: drlhet would refuse the run: {why}"
    return ""


def refused_env(args: Args) -> str:
    """Why ``--env`` cannot be the comparison's environment, in one line naming it, or "" (not
    given: the algorithm's own): a name drlhet does not know (a gymnax id, ``gymnasium:<id>``),
    which every system would fail on after its launch, or one whose actions do not suit
    ``--algo`` (DQN: discrete, TD3: continuous). Builds the environment (imports jax)."""
    if args.env is None:
        return ""
    from drlhet.envs import make_env

    try:
        discrete = make_env(args.env).discrete
    except ValueError as e:
        return f"--env {args.env!r}: {e}"
    wants = "discrete" if args.algo == "dqn" else "continuous"
    if discrete != (wants == "discrete"):
        return f"--env {args.env!r}: its actions are not {wants}, as --algo {args.algo} needs"
    return ""


def launch(system: str, spec: RunSpec, args: Args) -> dict:
    """Runs one system on ``spec`` in a fresh process; its metrics, or ``{"skipped": why}``."""
    python, runner, recipe, one_thread = SYSTEMS[system]
    if not (ROOT / python).exists():
        hint = "make peers" if "peers" in python else "make install"
        return {"system": system, "skipped": f"missing environment {python} ({hint})"}
    spec = dataclasses.replace(spec, recipe=recipe)
    env = dict(os.environ, **(ENV_ONE_THREAD if one_thread else {}))
    cmd = [str(ROOT / python), str(PEERS / runner), "--spec", spec.to_json()]
    if system == "drlhet-cached":
        cmd += ["--compilation-cache", str(CACHE)]
    if args.pin1:
        cmd = ["taskset", "-c", "0", *cmd]
    cmd += ["--launched-at", repr(time.time())]
    try:
        got = subprocess.run(
            cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout_s
        )
    except subprocess.TimeoutExpired:
        return {"system": system, "failed": f"timed out after {args.timeout_s} s"}
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"system": system, "failed": f"exit {got.returncode}: {last}"}
    try:
        row = metrics(spec, read_events(got.stdout))
    except (ValueError, StopIteration) as e:
        return {"system": system, "failed": f"unreadable events: {e!r}"}
    return {**row, "system": system, "runner_system": row["system"], "recipe": recipe}


def compare(spec: RunSpec, args: Args, rounds: int) -> list[dict]:
    """Every system ``rounds`` times, alternating (rotated each round); one row per run."""
    runs = []
    if "drlhet-cached" in args.systems:  # warm its cache: what a run after the first finds
        print(_line({**launch("drlhet-cached", spec, args), "system": "(cache warm-up)"}))
    for rnd in range(rounds):
        order = list(
            args.systems[rnd % len(args.systems) :] + args.systems[: rnd % len(args.systems)]
        )
        for system in order:
            row = {**launch(system, spec, args), "round": rnd, "spec": dataclasses.asdict(spec)}
            runs.append(row)
            print(_line(row), flush=True)
    return runs


def _line(row: dict) -> str:
    if "skipped" in row or "failed" in row:
        return f"  {row['system']:12s} {row.get('skipped') or row.get('failed')}"
    ttr, tps, eps = row["time_to_return_s"], row["trained_samples_per_s"], row["env_steps_per_s"]
    return (
        f"  {row['system']:12s} {'-' if tps is None else f'{tps:,.0f}':>12} samples/s "
        f"{'-' if eps is None else f'{eps:,.0f}':>9} env steps/s  to target "
        f"{'-' if ttr is None else f'{ttr:.1f} s':>8}  final {row['final_return']}"
    )


def summarize(runs: list[dict], systems: tuple[str, ...]) -> dict:
    """Median per system over its rounds, and drlhet's ratio over each peer."""
    out: dict = {}
    for system in systems:
        ok = [r for r in runs if r["system"] == system and "time_to_return_s" in r]
        if not ok:
            continue
        ttr = [r["time_to_return_s"] for r in ok]
        out[system] = {
            "trained_samples_per_s": _median(r["trained_samples_per_s"] for r in ok),
            "env_steps_per_s": _median(r["env_steps_per_s"] for r in ok),
            "time_to_return_s": statistics.median(ttr) if None not in ttr else None,
            "reached": sum(t is not None for t in ttr),
            "runs": len(ok),
        }
    base = out.get("drlhet")
    for system, s in out.items():
        if base is None or system == "drlhet":
            continue
        s["drlhet_ratio"] = {
            "trained_samples_per_s": _ratio(base, s, "trained_samples_per_s"),
            "env_steps_per_s": _ratio(base, s, "env_steps_per_s"),
            "time_to_return": (
                s["time_to_return_s"] / base["time_to_return_s"]
                if s["time_to_return_s"] and base["time_to_return_s"]
                else None
            ),
        }
    return out


def _median(values) -> float | None:
    """The median of the values that are not None (None if none is)."""
    have = [v for v in values if v is not None]
    return statistics.median(have) if have else None


def _ratio(base: dict, peer: dict, key: str) -> float | None:
    return base[key] / peer[key] if base[key] and peer[key] else None


GRID = [
    dict(batch=b, hidden=h, sgd_steps=s)
    for b in (32, 256, 1024)
    for h in ((64, 64), (256, 256))
    for s in (1, 8)
]
"""The matched configurations of ``--grid`` (batch, network, replay ratio: ``sgd_steps`` SGD
steps per 4 env steps), DQN on CartPole; with ``--algo td3`` the same on Pendulum."""


GRID_UPDATES = 250
"""SGD steps per chunk of a grid run: each configuration's chunk is sized by its learner work
(``eval_every`` env steps = this many updates at its replay ratio), three chunks a run."""


def grid_spec(args: Args, overrides: dict) -> RunSpec:
    """The `RunSpec` of one grid configuration, throughput only (no target)."""
    spec = dataclasses.replace(base_spec(args), stop_at_return=None, **overrides)
    per_update = spec.num_envs / spec.sgd_steps  # env steps per SGD step
    eval_every = max(spec.num_envs, int(GRID_UPDATES * per_update) // spec.num_envs * spec.num_envs)
    warmup = max(spec.warmup, spec.batch)
    return dataclasses.replace(
        spec, eval_every=eval_every, warmup=warmup, steps=warmup + 3 * eval_every
    )


def grid(args: Args) -> list[dict]:
    """drlhet and RLlib (matched) over `GRID`, throughput only; one row per configuration."""
    rows = []
    grid_args = dataclasses.replace(args, systems=("drlhet", "rllib"))
    for overrides in GRID:
        spec = grid_spec(args, overrides)
        print(f"grid {overrides}", flush=True)
        runs = compare(spec, grid_args, args.rounds)
        rows.append(
            {"config": overrides, "runs": runs, "summary": summarize(runs, ("drlhet", "rllib"))}
        )
    return rows


def main(args: Args) -> dict:
    if args.full and args.rounds == 1:
        args = dataclasses.replace(args, rounds=3)
    machine = f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})"
    print(f"machine: {machine}; {'pinned to one core' if args.pin1 else 'not pinned'}")
    result: dict = {
        "machine": machine,
        "date": time.strftime("%Y-%m-%d"),
        "label": "measured (cpu)",
        "threads": "torch peers: 1 thread (OMP_NUM_THREADS=1); drlhet, flashbax: XLA default"
        + ("; every process pinned to core 0" if args.pin1 else ""),
        "run": run_info(),
    }
    if args.grid:
        print(f"note: --grid draws no figure: {args.plot} is not written")
        result["grid"] = grid(args)
        result["range"] = _range(result["grid"])
    else:
        spec = base_spec(args)
        runs = compare(spec, args, args.rounds)
        result.update(spec=dataclasses.asdict(spec), runs=runs)
        result["summary"] = summarize(runs, args.systems)
        if not result["summary"]:  # nothing measured: --out and --plot are left as they are
            why = "; ".join(f"{r['system']}: {r.get('skipped') or r.get('failed')}" for r in runs)
            failed = args.out.with_suffix(".failed.json")
            failed.parent.mkdir(parents=True, exist_ok=True)
            failed.write_text(json.dumps(result, indent=1))
            raise SystemExit(f"fig_peers: failed: no system ran ({why}); rows in {failed}")
        _plot(result["summary"], spec, args.plot)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result.get("summary") or result.get("range"), indent=1))
    return result


def _range(rows: list[dict]) -> dict:
    """The lowest and highest drlhet / RLlib trained-samples ratio over the grid, with configs."""
    have = [(r["summary"]["rllib"]["drlhet_ratio"]["trained_samples_per_s"], r["config"])
            for r in rows if "drlhet_ratio" in r["summary"].get("rllib", {})]  # fmt: skip
    if not have:
        return {}
    lo, hi = min(have, key=lambda x: x[0]), max(have, key=lambda x: x[0])
    return {
        "lowest": {"ratio": lo[0], "config": lo[1]},
        "highest": {"ratio": hi[0], "config": hi[1]},
    }


def _plot(summary: dict, spec: RunSpec, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary)
    target = spec.stop_at_return
    panels = [
        ("trained_samples_per_s", "trained samples/s (after the first chunk)", "tab:blue",
         "no steady state timed (each run stopped at its first evaluation, or failed)"),
        ("time_to_return_s",
         f"wall s, launch to a return of {target:g}" if target is not None else "wall s",
         "tab:orange",
         "no target in this run" if target is None else f"no run reached {target:g}"),
    ]  # fmt: skip
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, (key, label, color, none) in zip(axes, panels, strict=True):
        values = [summary[n][key] for n in names]
        bars = ax.bar(names, [v or 0.0 for v in values], color=color)
        for bar, v in zip(bars, values, strict=True):
            text = "n/a" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.1f}")
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height() or 1),
                        ha="center", va="bottom", fontsize=8)  # fmt: skip
        if any(values):
            ax.set_yscale("log")  # bars from a decade below the lowest: not its auto bottom,
            low = min(v for v in values if v)  # which made 1.3M against 1.1M look 10x
            ax.set_ylim(bottom=10 ** (math.floor(math.log10(low)) - 1))
        else:
            ax.set_yticks([])
            ax.text(0.5, 0.5, none, ha="center", transform=ax.transAxes, wrap=True)
        ax.set_ylabel(label, fontsize=9)
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(
        f"{spec.algo.upper()} {spec.env}, MLP {'x'.join(map(str, spec.hidden))}, batch "
        f"{spec.batch}, {spec.sgd_steps} SGD steps / {spec.num_envs} env steps (*-tuned: the "
        "peer's own recipe)\nmeasured, CPU, medians of the rounds; a missing bar: not reached, or "
        "the run stopped at its first evaluation (no steady state to time)",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


LEAST = {"rounds": 1, "steps": 1, "eval_every": 1, "timeout_s": 1}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
