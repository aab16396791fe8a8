"""Command line: ``drlhet train`` (also ``python -m drlhet train``).

The only module of the package that reads flags; everything else takes configuration objects.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from pathlib import Path
from typing import Annotated

import tyro

from drlhet.train import TrainConfig

__all__ = ["main", "train_command"]


def plot_curves(rows: list[dict], title: str, path: Path) -> None:
    """Writes the evaluation-return curve of every seed (and their mean) to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    steps = np.array([r["env_steps"] for r in rows])
    ret = np.array([r["eval_return"] for r in rows])  # [chunks, seeds]
    fig, ax = plt.subplots(figsize=(6, 4))
    for s in range(ret.shape[1]):
        ax.plot(steps, ret[:, s], color="tab:blue", alpha=0.3, lw=1)
    ax.plot(steps, ret.mean(axis=1), color="tab:blue", lw=2, label=f"mean of {ret.shape[1]} seeds")
    ax.set_xlabel("env steps (per seed)")
    ax.set_ylabel("greedy evaluation return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def train_command(
    config: Annotated[TrainConfig, tyro.conf.arg(name="")],
    out: Path = Path("runs"),
    name: str | None = None,
    stop_at_return: float | None = None,
    progress: bool = True,
    mapping: str | None = None,
    cpu_devices: int | None = None,
) -> Path:
    """Trains, writing ``config.json``, ``metrics.jsonl`` and ``curve.png`` to a run directory.

    Args:
      config: the run (see `drlhet.train.TrainConfig`).
      out: parent folder of run directories.
      name: run directory name (default: time, algorithm and environment).
      stop_at_return: stop once the mean evaluation return over seeds reaches this value.
      progress: show a progress bar.
      mapping: where each primitive runs, e.g. ``actors=cpu:0,replay=native@cpu:1,learner=cpu:1``
        (see `drlhet.schedule.Mapping`); default: everything fused on one device.
      cpu_devices: XLA CPU devices to create (default: as many as the mapping names).
    """
    import jax

    if mapping is not None or cpu_devices is not None:
        named = [int(x) for x in re.findall(r"cpu:(\d+)", mapping or "")]
        wanted = cpu_devices or 1 + max(named, default=0)
        jax.config.update("jax_num_cpu_devices", wanted)
    from tqdm import tqdm

    from drlhet.train import train

    run = out / (name or f"{time.strftime('%Y%m%d-%H%M%S')}-{config.algo}-{config.env}")
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=1))
    metrics = (run / "metrics.jsonl").open("w")
    bar = tqdm(total=config.steps, unit="step", disable=not progress, dynamic_ncols=True)
    reached: dict = {}

    class Stop(Exception):
        pass

    def on_chunk(row: dict) -> None:
        rows.append(row)
        metrics.write(json.dumps(row) + "\n")
        metrics.flush()
        mean_ret = sum(row["eval_return"]) / len(row["eval_return"])
        bar.n = min(row["env_steps"], config.steps)
        bar.set_postfix(
            ret=f"{mean_ret:.1f}",
            env_sps=f"{row['env_steps_per_s']:.3g}",
            trained_sps=f"{row['trained_samples_per_s']:.3g}",
        )
        bar.refresh()
        if stop_at_return is not None and mean_ret >= stop_at_return and not reached:
            reached.update(env_steps=row["env_steps"], wall_s=row["wall_s"])
            raise Stop

    rows: list[dict] = []
    t0 = time.perf_counter()
    try:
        if mapping is None:
            train(config, on_chunk=on_chunk)
        else:
            from drlhet.schedule import Mapping
            from drlhet.schedule import run as run_mapped

            run_mapped(config, Mapping.parse(mapping), on_chunk=on_chunk)
    except Stop:
        pass
    bar.close()
    metrics.close()
    wall = time.perf_counter() - t0
    if rows:
        plot_curves(rows, f"{config.algo.upper()} on {config.env} (measured)", run / "curve.png")
        last = rows[-1]
        steady = rows[1:] or rows  # the first chunk includes compilation
        env_sps = sum(r["env_steps_per_s"] for r in steady) / len(steady)
        trained_sps = sum(r["trained_samples_per_s"] for r in steady) / len(steady)
        best = [max(r["eval_return"][s] for r in rows) for s in range(config.seeds)]
        print(f"\nrun: {run}")
        print(f"final evaluation return per seed: {[round(x, 1) for x in last['eval_return']]}")
        print(f"best evaluation return per seed:  {[round(x, 1) for x in best]}")
        print(
            f"throughput (measured, this machine, all seeds, after the first chunk): "
            f"{env_sps:,.0f} env steps/s, {trained_sps:,.0f} trained samples/s"
        )
        if reached:
            print(
                f"mean evaluation return reached {stop_at_return} after {reached['env_steps']} "
                f"env steps, {reached['wall_s']:.1f} s wall time including compilation"
            )
        print(f"wall time {wall:.1f} s; curve: {run / 'curve.png'}")
    return run


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``drlhet train ...``."""
    tyro.extras.subcommand_cli_from_dict(
        {"train": train_command}, args=sys.argv[1:] if argv is None else argv
    )


if __name__ == "__main__":
    main()
