"""Return curves for priority-update delays k (docs/design.md section 4), several seeds, one run
per k.

DQN on CartPole-v1 (100k env steps) and DDPG on Pendulum-v1 (50k), PER, k in {0, 1, 4, 16, 64};
TD3 + PER on gymnasium's MuJoCo Hopper-v5 (``td3-hopper``: 100k env steps, one environment,
one SGD step per env step, 10k random warm-up steps, 3-step returns; the gymnasium extra;
1-step returns reached 600, not 1,000, at 100k: docs/results.md). Writes
``results/delay_<task>.json`` and the plot (``--plot``); prints the final mean return and spread
across seeds per k, and whether each k is within one standard deviation of k = 0
(``within_one_std_of_k0``: k = 0's final mean and spread, wherever 0 stands in ``--delays``;
``--delays`` without 0 is refused up front, as there is no baseline to compare against). A
``delay_<task>.json`` already under ``--out`` that holds another configuration's curves (another
figure's data) is not replaced: the run is refused up front, naming the fields that differ.

Usage:
  python experiments/fig_delay.py                 # both tasks (about 35 minutes on 2 cores)
  python experiments/fig_delay.py --tasks dqn
  python experiments/fig_delay.py --tasks td3-hopper --delays 0 4 16 --seeds 3 \
      --plot delay_hopper.png                     # 45-100 minutes on 2 cores
  python experiments/fig_delay.py --tasks td3-hopper --delays 0 4 16 --seeds 3 \
      --plot delay_hopper.png --from-runs results/raw/hopper_n3   # plot `drlhet train` runs
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import checked_cli
import numpy as np
from _common import run_info

from drlhet.agents.ddpg import DDPGConfig
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run

TASKS = {
    "dqn": TrainConfig(algo="dqn", env="CartPole-v1", steps=100_000),
    "ddpg": TrainConfig(algo="ddpg", env="Pendulum-v1", steps=50_000),
    "td3-hopper": TrainConfig(
        algo="ddpg",
        env="gymnasium:Hopper-v5",
        steps=100_000,
        num_envs=1,
        sgd_steps=1,
        warmup=10_000,
        buffer_size=200_000,
        batch_size=256,
        eval_every=5_000,
        eval_envs=5,
        n_step=3,
        ddpg=DDPGConfig(td3=True),
    ),  # fmt: skip
}
"""The tasks; ``td3-hopper`` is also ``drlhet train --algo ddpg --ddpg.td3 --env
gymnasium:Hopper-v5 --num-envs 1 --sgd-steps 1 --warmup 10000 --buffer-size 200000
--batch-size 256 --steps 100000 --eval-every 5000 --eval-envs 5 --n-step 3 --seeds 3
--delay K``, whose run directories ``td3-hopper-k<K>`` `--from-runs` reads."""


@dataclasses.dataclass
class Args:
    tasks: tuple[str, ...] = ("dqn", "ddpg")
    delays: tuple[int, ...] = (0, 1, 4, 16, 64)
    """The priority-update delays k, one run each; 0, the baseline each k is compared against,
    must be among them (in any place)."""
    seeds: int = 5
    final_chunks: int = 2
    """The final return is the mean over the last this-many evaluations (and over seeds)."""
    out: Path = Path("results")
    """The folder the JSON files and the plot are written into."""
    plot: str = "delay.png"
    """File name of the plot under ``out`` (a name, not a path)."""
    steps: int | None = None
    """Env steps per seed (default: the task's); a reduced run."""
    from_runs: Path | None = None
    """Read each k's rows from ``<from_runs>/<task>-k<k>/metrics.jsonl`` instead of training."""


def _config(args: Args, task: str, k: int) -> TrainConfig:
    """The configuration that task ``task`` trains at delay ``k``."""
    cfg = dataclasses.replace(TASKS[task], seeds=args.seeds, delay=k)
    if args.steps is not None:
        cfg = dataclasses.replace(cfg, steps=args.steps)
    return cfg


def _run_file(args: Args, task: str, k: int) -> Path:
    """Where `--from-runs` reads the rows of task ``task`` at delay ``k``."""
    assert args.from_runs is not None
    return args.from_runs / f"{task}-k{k}" / "metrics.jsonl"


def _ran_configs(args: Args, task: str) -> dict[int, dict]:
    """`--from-runs`: each k's configuration as its run saved it (``config.json`` beside the
    rows; a k whose run has none is left out)."""
    assert args.from_runs is not None
    found = {}
    for k in args.delays:
        path = _run_file(args, task, k).with_name("config.json")
        if path.is_file():
            found[k] = json.loads(path.read_text())
    return found


ROW_KEYS = ("env_steps", "eval_return", "wall_s")
"""What the figure reads of each row of a run's ``metrics.jsonl``."""


def _unreadable_run(args: Args, task: str, k: int) -> str:
    """Why `--from-runs`' run of ``task`` at ``k`` cannot be read, in one line, or "": a row of
    its ``metrics.jsonl`` that is not JSON or lacks what the figure reads (a run killed while
    writing it), or a ``config.json`` that is not a configuration."""
    rows = _run_file(args, task, k)
    try:
        for i, line in enumerate(rows.read_text().splitlines()):
            why = checked_cli.lacking(json.loads(line), ROW_KEYS, f"row {i}")
            if why:
                return f"--from-runs {rows}: {why}"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"--from-runs {rows}: not JSON lines ({e})"
    config = rows.with_name("config.json")
    if config.is_file():
        why = checked_cli.unreadable_json(config, lambda d: checked_cli.lacking(d, ("delay",)))
        return f"--from-runs {why}" if why else ""
    return ""


def _mixed_runs(args: Args, task: str) -> str:
    """Why `--from-runs`' runs of ``task`` are not one experiment, in one line, or "": a run
    that cannot be read (`_unreadable_run`), one whose saved configuration is not at its
    folder's k, or two whose configurations differ in anything but the delay (their curves
    would be drawn as one study's)."""
    for k in args.delays:
        if why := _unreadable_run(args, task, k):
            return why
    configs = _ran_configs(args, task)
    for k, cfg in configs.items():
        if cfg["delay"] != k:
            run = _run_file(args, task, k).parent
            return f"--from-runs: {run} ran at delay {cfg['delay']!r}, not {k}"
    if not configs:
        return ""
    (k0, first), *rest = configs.items()
    for k, cfg in rest:
        differ = sorted(f for f in first.keys() | cfg.keys()
                        if f != "delay" and first.get(f) != cfg.get(f))  # fmt: skip
        if differ:
            f = differ[0]
            return (
                f"--from-runs: {_run_file(args, task, k0).parent} and "
                f"{_run_file(args, task, k).parent} differ in {', '.join(differ)} "
                f"({f} {first.get(f)!r} vs {cfg.get(f)!r}): not one experiment's runs"
            )
    return ""


def _rows(args: Args, task: str, k: int) -> list[dict]:
    """The rows of task ``task`` at delay ``k``: trained now, or read from a run directory."""
    if args.from_runs is not None:
        return [json.loads(line) for line in _run_file(args, task, k).read_text().splitlines()]
    return run(_config(args, task, k))[1]


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": an unknown task or none, ``--delays``
    without 0 (the baseline), a plot that is not a file name under ``--out``, a run file of
    `--from-runs` that is missing (every task and k is looked for before any is read), or a
    configuration drlhet would refuse (without `--from-runs`); asked before anything is made,
    read or trained."""
    why = checked_cli.unknown_names("--tasks", args.tasks, TASKS)
    if not why and 0 not in args.delays:
        given = " ".join(map(str, args.delays))
        why = f"--delays {given}: no k = 0, the baseline every k is compared against; add 0"
    if not why and (Path(args.plot).name != args.plot or args.plot in ("", ".", "..")):
        why = f"--plot {args.plot!r}: a file name (written under --out), not a path"
    why = why or checked_cli.refused_output(args.out / args.plot, "--plot", "plot")
    for task in args.tasks if args.from_runs is not None else ():
        why = why or checked_cli.missing_files(*(_run_file(args, task, k) for k in args.delays))
        why = why or _mixed_runs(args, task)
    for task in args.tasks if args.from_runs is None else ():
        for k in args.delays:
            why = why or checked_cli.refused_config(_config(args, task, k))
    for task in args.tasks:
        why = why or _other_curves(args, task)
    return why


def _other_curves(args: Args, task: str) -> str:
    """Why ``delay_<task>.json`` under ``--out`` must not be replaced: it holds the curves of
    another configuration (a figure's data: the 1-step Hopper runs redrawn over the 3-step
    ones, or a run shortened by ``--steps`` over the full one), or ""."""
    path = args.out / f"delay_{task}.json"
    try:
        kept = json.loads(path.read_text()).get("config")
    except (OSError, ValueError, AttributeError):
        return ""  # none there, or not a result of this script: nothing of a figure's to keep
    if not isinstance(kept, dict):
        return ""
    drawn, kept = _leaves(json.loads(json.dumps(_drawn_config(args, task)[0]))), _leaves(kept)
    # fields both name (one added since is at its default), the delay and placement aside
    differ = [k for k in sorted(drawn.keys() & kept.keys())
              if k not in ("delay", "backend", "learner") and drawn[k] != kept[k]]  # fmt: skip
    if not differ:
        return ""
    said = ", ".join(f"{k} {json.dumps(kept[k])} there, {json.dumps(drawn[k])} here"
                     for k in differ[:3])  # fmt: skip
    return (
        f"{path} holds the curves of another configuration ({said}): move it, or pass another "
        f"--out, so that its figure's data is not replaced"
    )


def _leaves(config: dict, prefix: str = "") -> dict:
    """``{"ddpg.td3": False, ...}``: a configuration's fields, nested ones by dotted name."""
    out: dict = {}
    for k, v in config.items():
        out |= _leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def _drawn_config(args: Args, task: str) -> tuple[dict, str]:
    """The configuration ``task``'s curves ran with (any k's, the delay aside) and where it
    was read: the runs' own with `--from-runs` (their ``config.json``), else the task's."""
    ran = _ran_configs(args, task) if args.from_runs is not None else {}
    if ran:
        k, cfg = next(iter(ran.items()))
        return cfg, str(_run_file(args, task, k).with_name("config.json"))
    config = dataclasses.replace(TASKS[task], steps=args.steps or TASKS[task].steps)
    return dataclasses.asdict(config), "the task's configuration (fig_delay.TASKS)"


def _title(cfg: dict) -> str:
    """``TD3 + PER, 3-step, Hopper-v5`` for configuration ``cfg`` (a `TrainConfig` as a dict)."""
    td3 = cfg["algo"] == "ddpg" and (cfg.get("ddpg") or {}).get("td3")
    name = "TD3" if td3 else str(cfg["algo"]).upper()
    n = cfg.get("n_step")
    nstep = f", {n}-step" if n and n > 1 else ""
    return f"{name} + PER{nstep}, {str(cfg['env']).removeprefix('gymnasium:')}"


def main(args: Args) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(args.tasks), figsize=(5.5 * len(args.tasks), 4), squeeze=False)
    report = {}
    for ax, task in zip(axes[0], args.tasks, strict=True):
        res = {}
        for k in args.delays:
            rows = _rows(args, task, k)
            steps = np.array([r["env_steps"] for r in rows])
            ret = np.array([r["eval_return"] for r in rows])  # [chunks, seeds]
            final = ret[-args.final_chunks :].mean(axis=0)  # per seed
            res[k] = {
                "final_per_seed": final.tolist(),
                "final_mean": float(final.mean()),
                "final_std": float(final.std()),
                "steps": steps.tolist(),
                "eval_return": ret.tolist(),
                "wall_s": rows[-1]["wall_s"],
            }
            print(
                f"{task} k={k}: final return {final.mean():.1f} +- {final.std():.1f} "
                f"({rows[-1]['wall_s']:.0f} s)",
                flush=True,
            )
            mean = ret.mean(axis=1)
            ax.plot(steps, mean, lw=2, marker="o", ms=2, label=f"k = {k}")
            ax.fill_between(steps, mean - ret.std(1), mean + ret.std(1), alpha=0.1)
        base = res[0]  # the baseline: k = 0 wherever it stands in --delays (`refused`)
        for r in res.values():
            r["within_one_std_of_k0"] = bool(
                abs(r["final_mean"] - base["final_mean"]) <= base["final_std"]
            )
        cfg, source = _drawn_config(args, task)
        seeds = len(res[args.delays[0]]["final_per_seed"])
        ax.set_title(f"{_title(cfg)}: delay k (measured)")
        ax.set_xlabel("env steps per seed")
        ax.set_ylabel(f"greedy eval. return: mean, +-1 std of {seeds} seeds", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend()
        (args.out / f"delay_{task}.json").write_text(
            json.dumps(
                {
                    "config": cfg,
                    "config_from": source,
                    "seeds": seeds,
                    "measured": True,
                    "by_delay": {str(k): v for k, v in res.items()},
                    "run": run_info(),
                },
                indent=1,
            )
        )
        report[task] = {
            k: (r["final_mean"], r["final_std"], r["within_one_std_of_k0"]) for k, r in res.items()
        }
        print(task, report[task], flush=True)
    fig.tight_layout()
    fig.savefig(args.out / args.plot, dpi=110)
    print(f"wrote {args.out / args.plot}")
    return report


LEAST = {"delays": 0, "seeds": 1, "final_chunks": 1, "steps": 1}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused, folders=("out",))
