"""Reward parity of a split mapping: DQN + PER on CartPole-v1, fused against the pipeline.

The same configuration and seeds run fused on one device and split over the two XLA CPU devices
(the threaded pipeline, docs/design.md section 6), one after the other in one process, at the
same delay k. Writes ``results/mapping_parity.json`` (every chunk's per-seed greedy evaluation
returns, measured) and ``results/mapping_parity.png``, and prints how many seeds of each reached
the target and when.

Usage:
  python experiments/fig_mapping_parity.py                  # k = 16, 5 seeds (~4 min, 2 cores)
  python experiments/fig_mapping_parity.py --delay 4 \
      --split "actors=cpu:0,replay=native@cpu:1,learner=cpu:1"
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import checked_cli
import numpy as np
from _common import run_info


@dataclasses.dataclass
class Args:
    delay: int = 16
    seeds: int = 5
    steps: int = 100_000
    target: float = 475.0
    fused: str = "actors=cpu:0,replay=jax@cpu:0,learner=cpu:0"
    split: str = "actors=cpu:0,replay=jax@cpu:0,learner=cpu:1"
    """The best split measured by experiments/bench_mapping.py (2026-11-23, k = 16)."""
    out: Path = Path("results")
    """The folder the JSON file and the plot are written into."""


def _two_cpu_devices() -> None:
    """Both mappings' XLA CPU devices: set before jax makes its devices (the first check)."""
    import jax

    jax.config.update("jax_num_cpu_devices", 2)


def _config(args: Args):
    """The configuration both mappings train."""
    from drlhet.runtime.config import TrainConfig

    cfg = TrainConfig(algo="dqn", env="CartPole-v1", steps=args.steps, seeds=args.seeds)
    return dataclasses.replace(cfg, delay=args.delay)


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": the configuration, or either mapping (one
    that does not parse, or names a backend or device that is not here); both asked before
    the first run trains."""
    if math.isnan(args.target):  # no return reaches it: every run would train for nothing
        return "--target must be a number, got nan"
    _two_cpu_devices()
    cfg = _config(args)
    why = checked_cli.refused_config(cfg, args.fused, "--fused")
    return why or checked_cli.refused_config(cfg, args.split, "--split")


def _curve(args: Args, mapping: str) -> dict:
    from drlhet.runtime.run import run

    _, rows = run(_config(args), mapping)
    steps = [r["env_steps"] for r in rows]
    ret = np.array([r["eval_return"] for r in rows])  # [chunks, seeds]
    steady = [r["trained_samples_per_s"] for r in rows[1:]]  # the first chunk compiles
    hit = ret >= args.target
    first = [
        int(steps[int(np.argmax(hit[:, s]))]) if hit[:, s].any() else None
        for s in range(args.seeds)
    ]
    return {
        "mapping": mapping,
        "delay": args.delay,
        "seeds_reaching_target": int(hit.any(axis=0).sum()),
        "first_step_at_target": first,
        "final_return": ret[-1].tolist(),
        "wall_s": rows[-1]["wall_s"],
        # one chunk (a short --steps): no steady state to time, not NaN (which JSON lacks)
        "trained_samples_per_s": float(np.median(steady)) if steady else None,
        "env_steps": steps,
        "eval_return": ret.tolist(),
        "measured": True,
        "run": run_info(),
    }


def main(args: Args) -> dict:
    import matplotlib

    _two_cpu_devices()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {"fused": _curve(args, args.fused), "split": _curve(args, args.split)}
    fig, ax = plt.subplots(figsize=(6, 4))
    for (name, c), color in zip(curves.items(), ("tab:blue", "tab:orange"), strict=True):
        ret = np.array(c["eval_return"])
        print(
            f"{name} ({c['mapping']}, k={args.delay}): {c['seeds_reaching_target']}/{args.seeds} "
            f"seeds reached {args.target:g} (first at {c['first_step_at_target']}); final "
            f"{np.round(ret[-1], 1).tolist()}; {c['wall_s']:.0f} s wall, "
            + (
                f"{tps:,.0f} trained samples/s (measured)"
                if (tps := c["trained_samples_per_s"])
                else "one chunk: no steady state to time"
            )
        )
        for s in range(args.seeds):
            ax.plot(c["env_steps"], ret[:, s], color=color, alpha=0.25, lw=1)
        ax.plot(c["env_steps"], ret.mean(1), color=color, lw=2, label=f"{name}: {c['mapping']}")
    ax.axhline(args.target, color="gray", ls="--", lw=1)
    ax.set_title(f"DQN + PER, CartPole-v1, k = {args.delay}, {args.seeds} seeds (measured)")
    ax.set_xlabel("env steps per seed")
    ax.set_ylabel("greedy evaluation return")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "mapping_parity.png", dpi=110)
    (args.out / "mapping_parity.json").write_text(json.dumps(curves, indent=1))
    print(f"wrote {args.out / 'mapping_parity.png'}")
    return curves


LEAST = {"delay": 0, "seeds": 1, "steps": 1}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused, folders=("out",))
