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

from drlhet.dse.profile import ProfileKey
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
        (see `drlhet.schedule.Mapping`), or ``auto``: the DSE's best mapping runnable here
        (`drlhet.dse`; profiles the run first if its profile is not cached); default:
        everything fused on one device.
      cpu_devices: XLA CPU devices to create (default: as many as the mapping names).
    """
    import jax

    if mapping == "auto":
        jax.config.update("jax_num_cpu_devices", cpu_devices or 2)
        mapping = auto_mapping(config, config.delay)
    elif mapping is not None or cpu_devices is not None:
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


def _cpu_devices(n: int) -> None:
    import jax

    jax.config.update("jax_num_cpu_devices", n)


def profile_command(
    shape: Annotated[ProfileKey, tyro.conf.arg(name="")],
    cache_dir: Path | None = None,
    cpu_devices: int = 2,
) -> Path:
    """Profiles every primitive of a run on this machine's CPU (every replay backend here) and
    caches the result (JSON, reused until the package or the machine changes).

    Args:
      shape: the run's shape (`drlhet.dse.ProfileKey`; its backend is ignored: every replay
        backend here is profiled).
      cache_dir: profile cache folder (default ``$DRLHET_CACHE`` or ``~/.cache/drlhet``).
      cpu_devices: XLA CPU devices (two are needed for the transfer figures).
    """
    _cpu_devices(cpu_devices)
    from drlhet.dse import ProfileCache, build_model

    cache = ProfileCache(cache_dir)
    model = build_model(shape, cache=cache, reprofile=True)
    for backend, prof in model.profiles.items():
        med = {k: f"{v['median'] * 1e6:.1f}" for k, v in prof["compute"].items()}
        print(f"{backend}: compute us per call (measured, {prof['device']}): {med}")
        med = {k: f"{v['median'] * 1e6:.1f}" for k, v in prof["call"].items()}
        print(f"{backend}: host-loop call us (measured): {med}")
    print(f"profiles: {cache.path}")
    return cache.path


def dse_command(
    shape: Annotated[ProfileKey, tyro.conf.arg(name="")],
    delay: int = 0,
    devices: str = "cpu,h100,a100,u200,u250",
    top: int = 20,
    measure: bool = False,
    cache_dir: Path | None = None,
    reprofile: bool = False,
    out: Path = Path("runs/dse.json"),
    cpu_devices: int = 2,
) -> dict:
    """Predicts the throughput of every mapping and ranks them (DESIGN section 5).

    Args:
      shape: the run's shape (`drlhet.dse.ProfileKey`; its backend is ignored: every replay
        backend here is profiled).
      delay: priority-update delay k (0: strict chain; >= 1: slowest stage).
      devices: devices to map onto: ``cpu`` (this machine's XLA CPU devices), ``cpu:N``, and
        device sheets (``h100``, ``a100``, ``u200``, ``u250``); absent ones are modeled.
      top: rows to print (the JSON has them all).
      measure: also run every runnable mapping and print its measured throughput.
      cache_dir: profile cache folder.
      reprofile: measure the profiles again even when cached.
      out: JSON with every prediction.
      cpu_devices: XLA CPU devices of this process.
    """
    _cpu_devices(cpu_devices)
    import jax

    from drlhet.dse import (
        ProfileCache,
        baselines,
        build_model,
        expand_devices,
        measure_mapping,
        replay_backends_here,
        search,
    )

    present = [f"cpu:{i}" for i in range(len(jax.devices("cpu")))]
    devs = expand_devices(devices, len(present))
    model = build_model(shape, cache=ProfileCache(cache_dir), reprofile=reprofile)
    preds = search(model, devs, delay, present=present, backends_here=replay_backends_here())
    feasible = [p for p in preds if p.note == ""]
    runnable = [p for p in feasible if p.runnable]
    measured: dict[str, float] = {}
    if measure:
        for p in runnable:
            m = measure_mapping(shape, p.mapping_text(), delay)
            measured[p.mapping_text()] = m["trained_samples_per_s"]
            print(f"measured {p.mapping_text()}: {m['trained_samples_per_s']:,.0f}", flush=True)
    print(
        f"\nDSE: {shape.algo.upper()} on {shape.env}, MLP {shape.hidden}, batch {shape.batch}, "
        f"capacity {shape.capacity}, K {shape.branching}, {shape.num_envs} envs, "
        f"{shape.sgd_steps} SGD steps/iteration, delay {delay}; {len(preds)} mappings "
        f"({len(feasible)} feasible, {len(runnable)} runnable here)"
    )
    print(
        "basis: profiled = predicted from costs measured on this machine; modeled = predicted "
        "with device sheets (drlhet/dse/sheets); measured = run here"
    )
    head = f"{'#':>3} {'mapping':<64} {'trained/s':>11} {'basis':>9} {'bottleneck':>16}"
    print(head + (f" {'measured':>11}" if measure else ""))
    for i, p in enumerate(feasible[:top]):
        line = (
            f"{i + 1:>3} {p.mapping_text():<64} {p.trained_samples_per_s:>11,.0f} "
            f"{p.basis:>9} {p.bottleneck:>16}"
        )
        if measure and p.mapping_text() in measured:
            line += f" {measured[p.mapping_text()]:>11,.0f}"
        print(line)
    best = feasible[0]
    print(f"\nbest: {best.mapping_text()} ({best.basis}) {best.trained_samples_per_s:,.0f}/s")
    if runnable:
        print(
            f"best runnable here: {runnable[0].mapping_text()} "
            f"{runnable[0].trained_samples_per_s:,.0f}/s (profiled)"
        )
    for name, b in baselines(preds, model).items():
        print(
            f"  best over {name:<32} {best.trained_samples_per_s / b.trained_samples_per_s:8.2f}x "
            f"({b.mapping_text()}, {b.basis})"
        )
    result = {
        "shape": dataclasses.asdict(shape),
        "delay": delay,
        "devices": devs,
        "predictions": [
            {
                "mapping": p.mapping_text(),
                "trained_samples_per_s": p.trained_samples_per_s,
                "env_steps_per_s": p.env_steps_per_s,
                "basis": p.basis,
                "runnable": p.runnable,
                "bottleneck": p.bottleneck,
                "note": p.note,
                "measured_trained_samples_per_s": measured.get(p.mapping_text()),
            }
            for p in preds
        ],
        "best": best.mapping_text(),
        "best_runnable": runnable[0].mapping_text() if runnable else None,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"all predictions: {out}")
    return result


def auto_mapping(config: TrainConfig, delay: int, log=print) -> str:
    """The DSE's best mapping runnable here for ``config`` (profiles from the cache)."""
    import jax

    from drlhet.dse import ProfileKey, build_model, replay_backends_here, search

    key = ProfileKey.of(config)
    present = [f"cpu:{i}" for i in range(len(jax.devices("cpu")))]
    model = build_model(key, log=log)
    preds = search(model, present, delay, present=present, backends_here=replay_backends_here())
    best = next(p for p in preds if p.runnable)
    log(
        f"--mapping auto: {best.mapping_text()} ({best.trained_samples_per_s:,.0f} trained "
        f"samples/s predicted, profiled)"
    )
    return best.mapping_text()


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``drlhet train|profile|dse ...``."""
    tyro.extras.subcommand_cli_from_dict(
        {"train": train_command, "profile": profile_command, "dse": dse_command},
        args=sys.argv[1:] if argv is None else argv,
    )


if __name__ == "__main__":
    main()
