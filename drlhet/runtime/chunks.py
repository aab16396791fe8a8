"""What every run path reports per chunk: one row of metrics and measured throughput."""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

from drlhet.replay.prioritized import ERR_PRIORITY, refusals
from drlhet.runtime.compiling import jit
from drlhet.runtime.config import TrainConfig

__all__ = ["chunk_row", "host_summary", "check_replay_error", "ReplayRefused", "split_keys"]


class ReplayRefused(ValueError):
    """A seed's replay buffer refused an operation during a run's chunk (its bits set in the
    buffer's ``error``): ``chunk`` (from 0), ``errors`` (the bits per seed, ``[S]``)."""

    def __init__(self, message: str, chunk: int, errors: list[int]):
        super().__init__(message)
        self.chunk, self.errors = chunk, errors


def check_replay_error(
    error: Any, chunk: int, summary: dict | None = None, cfg: TrainConfig | None = None
) -> None:
    """Raises `ReplayRefused` when any seed's buffer refused an operation (``error`` ``[S]``)
    during chunk ``chunk``, in words: which seeds, what was refused and, for a priority, why a
    training run gets one (its learner diverged: the chunk's ``summary`` gives its loss, the
    run's ``cfg`` its learning rates)."""
    err = np.asarray(error).reshape(-1)
    bad = [int(s) for s in np.flatnonzero(err)]
    if not bad:
        return
    bits = int(np.bitwise_or.reduce(err))
    seeds = f"seed {bad[0]}" if len(bad) == 1 else f"seeds {', '.join(map(str, bad))}"
    where = f" by env step {int(np.asarray(summary['env_steps'])[0]):,}" if summary else ""
    message = (
        f"the replay buffer of {seeds} refused {' and '.join(refusals(bits))}{where} "
        f"(chunk {chunk}; error bits per seed {err.tolist()})"
    )
    if bits & ERR_PRIORITY:  # a run's only priorities not made by the buffer: |TD| + eps
        message += (
            ": the learner's new priorities (|TD error| + eps) were NaN, infinite or past the "
            f"largest the tree holds, so training diverged{_losses(summary, bad)}; try "
            f"{_lower_rates(cfg)}"
        )
    raise ReplayRefused(message, chunk, err.tolist())


def _lower_rates(cfg: TrainConfig | None) -> str:
    """What to lower, named as the configuration's fields with their values."""
    if cfg is None:
        return "a lower learning rate"
    if cfg.algo == "dqn":
        return f"a lower learning rate (dqn.learning_rate {cfg.dqn.learning_rate:g})"
    rates = f"ddpg.critic_lr {cfg.ddpg.critic_lr:g}, ddpg.actor_lr {cfg.ddpg.actor_lr:g}"
    return f"lower learning rates ({rates})"


def _losses(summary: dict | None, seeds: list[int]) -> str:
    """`` (loss nan, mean |TD| inf)``: the chunk's mean metrics of the first of ``seeds``."""
    said = []
    for key, name in (("loss", "loss"), ("abs_td", "mean |TD|")):
        if summary and key in summary:
            said.append(f"{name} {float(np.asarray(summary[key]).reshape(-1)[seeds[0]]):.3g}")
    return f" ({', '.join(said)})" if said else ""


def chunk_row(
    cfg: TrainConfig,
    iterations: int,
    summary: dict,
    chunk: int,
    t0: float,
    last: float,
    now: float | None = None,
    stepped: int | None = None,
) -> dict:
    """One chunk's row: the per-seed summary as lists, plus ``env_steps`` (seed 0), ``chunk``,
    ``wall_s`` (since ``t0``), ``chunk_s`` (since ``last``) and the chunk's measured
    throughput, ``env_steps_per_s`` and ``trained_samples_per_s`` (all seeds together); ``now``
    is when the chunk's work ended (default: the time of the call); ``stepped``: the env steps
    per seed the chunk ran (default ``--eval-every``; a Ray run's move in whole actor calls)."""
    now = time.perf_counter() if now is None else now
    dt = now - last
    row = {k: np.asarray(v).tolist() for k, v in summary.items() if k != "replay_error"}
    row.update(
        env_steps=int(np.asarray(summary["env_steps"])[0]),
        chunk=chunk,
        wall_s=now - t0,
        chunk_s=dt,
        env_steps_per_s=cfg.seeds * (cfg.eval_every if stepped is None else stepped) / dt,
        trained_samples_per_s=cfg.seeds * iterations * cfg.sgd_steps * cfg.batch_size / dt,
        backend=cfg.backend,
        delay=cfg.delay,
    )
    return row


def host_summary(
    cfg: TrainConfig, metrics_acc: list, finished_acc: list, eval_return: Any, env_steps: int
) -> dict:
    """A chunk's per-seed summary (as the fused chunk returns it) from the host loops'
    accumulated per-call outputs: ``finished`` pairs ``(return sum [S], episodes [S])``."""
    # one fetch of everything, then NumPy: stacking hundreds of device arrays with jnp would
    # compile a program per chunk length and dispatch on the host thread while stages run
    metrics_acc, finished_acc = jax.device_get((metrics_acc, finished_acc))
    metrics = jax.tree.map(lambda *x: np.mean(np.stack(x), axis=0), *metrics_acc)
    ret_sum = sum(np.asarray(f[0]) for f in finished_acc)
    n_done = sum(np.asarray(f[1]) for f in finished_acc)
    summary = dict(metrics)
    summary["eval_return"] = jax.device_get(eval_return)
    summary["train_return"] = ret_sum / np.maximum(n_done, 1)
    summary["env_steps"] = np.full((cfg.seeds,), env_steps)
    return summary


@jit
def split_keys(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``[S]`` keys -> two ``[S]`` keys (the carried one and a fresh one)."""
    pair = jax.vmap(jax.random.split)(key)
    return pair[:, 0], pair[:, 1]
