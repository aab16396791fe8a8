"""``drlhet train``: one run, written to a run directory; ``drlhet backends``: what runs here."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Annotated

import tyro

from drlhet.backends import describe
from drlhet.cli.common import enable_compilation_cache, set_cpu_devices
from drlhet.cli.dse import auto_mapping
from drlhet.runtime.config import TrainConfig, check
from drlhet.runtime.mapping import Mapping, cpu_devices_named
from drlhet.runtime.run import default_mapping, run

__all__ = ["train_command", "backends_command", "plot_curves"]


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


class _Stop(Exception):
    """Raised from the chunk callback once the target return is reached."""


def train_command(
    config: Annotated[TrainConfig, tyro.conf.arg(name="")],
    out: Path = Path("runs"),
    name: str | None = None,
    stop_at_return: float | None = None,
    progress: bool = True,
    mapping: str | None = None,
    cpu_devices: int | None = None,
    compilation_cache: bool = True,
) -> Path:
    """Trains, writing ``config.json``, ``metrics.jsonl`` and ``curve.png`` to a run directory.

    Args:
      config: the run (see `drlhet.runtime.config.TrainConfig`); ``--backend`` names the replay
        backend (``drlhet backends`` lists them; default: the fastest that loads here).
      out: parent folder of run directories.
      name: run directory name (default: time, algorithm and environment).
      stop_at_return: stop once the mean evaluation return over seeds reaches this value.
      progress: show a progress bar.
      mapping: where each group runs, e.g. ``actors=cpu:0,replay=native@cpu:1,learner=cpu:1``
        (see `drlhet.runtime.mapping.Mapping`), or ``auto``: the DSE's best mapping runnable
        here (profiles the run first if its profile is not cached); default: everything fused
        on one device.
      cpu_devices: XLA CPU devices to create (default: as many as the mapping names).
      compilation_cache: keep compiled programs in the user's cache folder (JAX's persistent
        compilation cache), so that running the same configuration again does not compile.
    """
    if compilation_cache:
        enable_compilation_cache()
    if mapping == "auto":
        set_cpu_devices(cpu_devices or 2)
        mapping = auto_mapping(config, config.delay)
    elif mapping is not None or cpu_devices is not None:
        set_cpu_devices(cpu_devices or cpu_devices_named(mapping or ""))
    check(config)  # bad input: one line, before anything is written or compiled
    placed = Mapping.parse(mapping) if mapping is not None else default_mapping(config)
    placed.validate()
    run_dir = out / (name or f"{time.strftime('%Y%m%d-%H%M%S')}-{config.algo}-{config.env}")
    rows, reached, wall = _train(config, placed, run_dir, stop_at_return, progress)
    if rows:
        _report(config, rows, reached, stop_at_return, wall, run_dir)
    return run_dir


def _train(config, mapping, run_dir: Path, stop_at_return, progress: bool):
    """Runs ``config``, streaming rows to ``metrics.jsonl``; ``-> (rows, reached, wall_s)``."""
    from tqdm import tqdm

    run_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    reached: dict = {}
    bar = tqdm(total=config.steps, unit="step", disable=not progress, dynamic_ncols=True)

    def on_chunk(row: dict) -> None:
        if not rows:  # the backend is resolved by now: record the configuration that ran
            ran = dataclasses.replace(config, backend=row["backend"])
            (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(ran), indent=1))
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
            raise _Stop

    t0 = time.perf_counter()
    with (run_dir / "metrics.jsonl").open("w") as metrics:
        try:
            run(config, mapping, on_chunk=on_chunk)
        except _Stop:
            pass
        finally:
            bar.close()
    return rows, reached, time.perf_counter() - t0


def _report(config, rows, reached, stop_at_return, wall: float, run_dir: Path) -> None:
    """Prints the run's returns and measured throughput, and plots its curve."""
    plot_curves(rows, f"{config.algo.upper()} on {config.env} (measured)", run_dir / "curve.png")
    steady = rows[1:] or rows  # the first chunk includes compilation
    env_sps = sum(r["env_steps_per_s"] for r in steady) / len(steady)
    trained_sps = sum(r["trained_samples_per_s"] for r in steady) / len(steady)
    best = [max(r["eval_return"][s] for r in rows) for s in range(config.seeds)]
    print(f"\nrun: {run_dir} (replay backend {rows[-1]['backend']}, {rows[-1]['mapping']})")
    print(f"final evaluation return per seed: {[round(x, 1) for x in rows[-1]['eval_return']]}")
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
    print(f"wall time {wall:.1f} s; curve: {run_dir / 'curve.png'}")


def backends_command() -> list[dict]:
    """Lists every backend: where it runs, what it provides, and whether it loads here."""
    rows = describe()
    for r in rows:
        where = "/".join(r["platforms"])
        groups = "+".join(r["provides"])
        print(f"{r['name']:<8} {where:<8} {groups:<22} rank {r['rank']:<3} {r['status']}")
        if r["summary"]:
            print(f"{'':<8} {r['summary']}")
    return rows
