"""What ``drlhet train`` says and draws: its plan before the run; at its end its returns and
measured throughput, its curve, and which placements only simulated their hardware."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drlhet.backends import get
from drlhet.cli.ray_actors import ray_summary
from drlhet.runtime.config import TrainConfig, chunks_of, warmup_steps
from drlhet.runtime.ray_cluster import end_steps, warmup_end
from drlhet.runtime.saving import Stopped

__all__ = ["agent_name", "curve_title", "plan_line", "plot_curves", "report_run", "simulated"]


def plot_curves(rows: list[dict], title: str, path: Path) -> None:
    """Writes the evaluation-return curve of every seed (and their mean) to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    steps = np.array([r["env_steps"] for r in rows])
    ret = np.array([r["eval_return"] for r in rows])  # [chunks, seeds]
    fig, ax = plt.subplots(figsize=(6, 4))
    seeds = ret.shape[1]
    for s in range(seeds if seeds > 1 else 0):  # one seed: its curve is the mean's
        ax.plot(steps, ret[:, s], color="tab:blue", alpha=0.3, lw=1)
    label = f"mean of {seeds} seeds" if seeds > 1 else "one seed"
    ax.plot(steps, ret.mean(axis=1), color="tab:blue", lw=2, marker="o", ms=3, label=label)
    ax.set_xlabel("env steps (per seed)")
    ax.set_ylabel("greedy evaluation return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def agent_name(config) -> str:
    """``"DQN"``, ``"DDPG"``, or ``"TD3"`` where DDPG runs with its twin critics."""
    return "TD3" if config.algo == "ddpg" and config.ddpg.td3 else config.algo.upper()


def curve_title(config) -> str:
    """``"TD3 + PER on Pendulum-v1 (measured)"``: the agent (`agent_name`), its replay and the
    environment."""
    replay = "uniform replay" if config.uniform else "PER"
    return f"{agent_name(config)} + {replay} on {config.env} (measured)"


def plan_line(config: TrainConfig, chunks: int, mapping: str, remote: Any = None) -> str:
    """What the run will do, in env steps per seed, and on what: a placement that simulates its
    hardware is named before the wait, not only beside the figures. A Ray run (``remote``, its
    `RayConfig`) ends its warm-up and chunks on whole actor calls (`end_steps`)."""
    warm = warmup_steps(config)
    total = warm + chunks * config.eval_every
    whole = ""
    if remote is not None:
        call = remote.rollout * config.num_envs
        warm, total = warmup_end(config, remote), end_steps(config, remote)
        whole = f", each ending on a whole actor call of {call:,}"
    notes = "".join(
        f"\nnote: {part} simulates its hardware here (right results, not its speed)"
        for part in simulated(mapping)
    )
    return (
        f"training {total:,} env steps per seed (--steps {config.steps:,}): {warm:,} of warm-up "
        f"with random actions, then {chunks} chunk{'s' * (chunks > 1)} of {config.eval_every:,}"
        f" (--eval-every){whole}, each followed by an evaluation{notes}"
    )


def report_run(
    config, rows, reached, stop_at_return, wall: float, run_dir: Path, warm: int | None = None
) -> None:
    """Prints the run's returns and measured throughput, and plots its curve to
    ``run_dir/curve.png``; ``reached``: `drlhet.cli.train`'s (the return reached, or the
    `Stopped` that ended the run); ``warm``: the env steps of its warm-up, where they are not
    `warmup_steps` (a Ray run's end on a whole actor call, `drlhet.runtime.ray_cluster`)."""
    plot_curves(rows, curve_title(config), run_dir / "curve.png")
    steady = rows[1:] or rows  # the first chunk includes compilation
    which = "after the first chunk" if rows[1:] else "one chunk, compilation included"
    warm = warmup_steps(config) if warm is None else warm
    env_sps = sum(r["env_steps_per_s"] for r in steady) / len(steady)
    trained_sps = sum(r["trained_samples_per_s"] for r in steady) / len(steady)
    best = [max(r["eval_return"][s] for r in rows) for s in range(config.seeds)]
    replay = "uniform replay" if config.uniform else f"replay backend {rows[-1]['backend']}"
    print(f"\nrun: {run_dir} ({replay}, {rows[-1]['mapping']})")
    print(
        f"env steps per seed: {rows[-1]['env_steps']:,} of --steps {config.steps:,} "
        f"({warm:,} of warm-up, then {len(rows)} of {chunks_of(config)} "
        f"chunks of {config.eval_every:,})"
    )
    print(f"final evaluation return per seed: {[round(x, 1) for x in rows[-1]['eval_return']]}")
    print(f"best evaluation return per seed:  {[round(x, 1) for x in best]}")
    print(
        f"throughput (measured, this machine, all seeds, {which}): "
        f"{env_sps:,.0f} env steps/s, {trained_sps:,.0f} trained samples/s"
    )
    _simulation_notes(config, rows[-1]["mapping"])
    if "ray" in rows[-1]:
        print(ray_summary(rows[-1]["ray"]))
    if "stopped" in reached:
        print(_stopped_line(reached["stopped"], run_dir, "ray" in rows[-1]))
    elif reached:
        print(
            f"mean evaluation return reached {stop_at_return:g} after {reached['env_steps']:,} "
            f"env steps, {reached['wall_s']:.1f} s wall time including compilation"
        )
    print(f"wall time {wall:.1f} s; curve: {run_dir / 'curve.png'}")


def _stopped_line(stopped: Stopped, run_dir: Path, ray: bool = False) -> str:
    """What a stop request left: how to go on, or that nothing was saved (and why: a Ray run
    writes no checkpoints, another had ``--checkpoint-every 0``)."""
    if stopped.saved:
        return f"stopped after chunk {stopped.chunk}, saved: drlhet train --resume {run_dir}"
    why = "Ray runs write no checkpoints" if ray else "--checkpoint-every 0"
    return f"stopped after chunk {stopped.chunk}; nothing saved ({why})"


def simulated(mapping: str) -> list[str]:
    """The placements of a mapping's text (``group=backend@device,...``) whose backend only
    simulates its hardware on that device (``replay=cuda@cpu:0``, ``learner=fpga@cpu:0``)."""
    out = []
    for part in mapping.split(","):
        group, _, place = part.partition("=")
        backend, _, device = place.partition("@")
        if device and get(backend).simulates(device.split(":")[0], group):
            out.append(part)
    return out


def _simulation_notes(config: TrainConfig, mapping: str) -> None:
    """Which parts of the run simulated their hardware, and which ran on a board (a board's
    parts are not simulated; ``sim`` is)."""
    boards = {"replay": config.replay_board, "learner": config.learner_board}
    for part in simulated(mapping):
        board = boards.get(part.partition("=")[0])
        if board is None or board == "sim":
            print(f"note: {part} is a simulation of its hardware: its speed is not that hardware's")
        else:
            print(f"note: {part} ran its module on the board of {board}, the rest on this host")
