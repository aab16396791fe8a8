"""Learning curves with PER: DQN on CartPole-v1 and DDPG on Pendulum-v1, several seeds, one run.

Writes ``results/learning_<algo>_<env>.json`` (every chunk's per-seed evaluation returns) and
``results/learning.png``, and prints, per task, how many seeds reached the target return and
when. All returns are greedy evaluations on separate keys (measured).

Usage:
  python experiments/fig_learning.py                    # both tasks, 5 seeds (~7 min, 2 cores)
  python experiments/fig_learning.py --tasks dqn        # one task
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import checked_cli
import numpy as np
from _common import run_info

from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run

TASKS = {
    "dqn": (TrainConfig(algo="dqn", env="CartPole-v1", steps=100_000), 475.0),
    "ddpg": (TrainConfig(algo="ddpg", env="Pendulum-v1", steps=50_000), -200.0),
}


@dataclasses.dataclass
class Args:
    tasks: tuple[str, ...] = ("dqn", "ddpg")
    seeds: int = 5
    backend: str | None = None
    """Replay backend (None: the fastest that loads here)."""
    out: Path = Path("results")
    """The folder the JSON files and the plot are written into."""


def config(args: Args, task: str) -> TrainConfig:
    """The configuration that ``task`` trains."""
    return dataclasses.replace(TASKS[task][0], seeds=args.seeds, backend=args.backend)


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": an unknown task or none, or a configuration
    (``--backend``) drlhet would refuse; asked before anything is made or trained."""
    why = checked_cli.unknown_names("--tasks", args.tasks, TASKS)
    for task in args.tasks:
        why = why or checked_cli.refused_config(config(args, task))
    return why


def main(args: Args) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(args.tasks), figsize=(5.5 * len(args.tasks), 4), squeeze=False)
    summary = {}
    for ax, task in zip(axes[0], args.tasks, strict=True):
        cfg, target = config(args, task), TASKS[task][1]
        _, rows = run(cfg)
        steps = np.array([r["env_steps"] for r in rows])
        ret = np.array([r["eval_return"] for r in rows])  # [chunks, seeds]
        hit = ret >= target
        first = [
            int(steps[np.argmax(hit[:, s])]) if hit[:, s].any() else None for s in range(args.seeds)
        ]
        res = {
            "config": dataclasses.asdict(cfg),
            "target": target,
            "seeds_reaching_target": int(hit.any(axis=0).sum()),
            "first_step_at_target": first,
            "final_return": ret[-1].tolist(),
            "wall_s": rows[-1]["wall_s"],
            "rows": rows,
            "measured": True,
            "run": run_info(),
        }
        path = args.out / f"learning_{cfg.algo}_{cfg.env}.json"
        path.write_text(json.dumps(res, indent=1))
        summary[task] = {k: v for k, v in res.items() if k not in ("rows", "config")}
        print(
            f"{cfg.algo.upper()} + PER on {cfg.env}: {res['seeds_reaching_target']}/{args.seeds} "
            f"seeds reached {target} within {cfg.steps} env steps (first at {first}); final "
            f"returns {np.round(ret[-1], 1).tolist()}; {res['wall_s']:.0f} s wall ({path})"
        )
        for s in range(args.seeds):
            ax.plot(steps, ret[:, s], color="tab:blue", alpha=0.3, lw=1)
        mean, std = ret.mean(1), ret.std(1)
        ax.plot(steps, mean, color="tab:blue", lw=2, label=f"mean of {args.seeds} seeds")
        ax.fill_between(steps, mean - std, mean + std, color="tab:blue", alpha=0.15)
        ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:g}")
        ax.set_title(f"{cfg.algo.upper()} + PER, {cfg.env} (measured)")
        ax.set_xlabel("env steps per seed")
        ax.set_ylabel("greedy evaluation return")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out / "learning.png", dpi=110)
    print(f"wrote {args.out / 'learning.png'}")
    return summary


LEAST = {"seeds": 1}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused, folders=("out",))
