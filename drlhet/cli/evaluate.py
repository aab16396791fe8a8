"""``drlhet eval RUN``: a trained agent's greedy returns over many episodes, from its run's
checkpoint.

The evaluation after each chunk of a run (its ``eval_return``) is the mean of one episode in
each of ``--eval-envs`` environments: a noisy figure for a run's curve. This command restores
a checkpoint's agents (every seed's) and plays ``--episodes`` greedy episodes with each, side by
side (`drlhet.runtime.trainer.make_evaluation`), on this machine's default JAX device, then
prints each seed's mean, standard deviation, minimum and maximum, and those over all seeds.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import tyro

from drlhet.checkpoint import CheckpointError, Checkpoints
from drlhet.cli.checkpoints import CHECKPOINTS, resume_run
from drlhet.cli.common import bad_input
from drlhet.cli.report import agent_name
from drlhet.runtime.config import MAX_SEED
from drlhet.writable import check_writable

__all__ = ["eval_command", "MAX_EPISODES"]

MAX_EPISODES = 100_000
"""The most episodes per seed (they run side by side: one environment each)."""
RETRIES = 3
"""Reads again of a live run's checkpoints that changed while they were read."""
RUN_FILES = ("config.json", "metrics.jsonl", "curve.png")
"""The files ``drlhet train`` writes in a run directory (besides its checkpoints)."""


def eval_command(
    run: Annotated[Path, tyro.conf.Positional],
    episodes: int = 100,
    chunk: int | None = None,
    seed: int = 0,
    out: Path | None = None,
    progress: bool = True,
) -> dict:
    """Plays greedy episodes with a run's saved agents and reports their returns (measured).

    Args:
      run: a run directory of ``drlhet train`` with checkpoints (``--checkpoint-every``).
      episodes: greedy episodes per seed, run side by side (one environment each).
      chunk: the checkpoint of this chunk (default: the newest that reads back intact).
      seed: the seed of the episodes' randomness (resets, stochastic environments).
      out: also write the result to this JSON file.
      progress: show a progress bar over the episodes' steps as they are played (one compiled
        call: the bar is fed from inside it).
    """
    with bad_input():
        _check(run, episodes, chunk, out, seed)
        config, mapping, saved = _restore(run, chunk)
    import jax

    from drlhet.runtime.compiling import jit
    from drlhet.runtime.trainer import make_evaluation

    bars: list = []  # the bar over the steps, made at the first step played

    def on_step(t: int, total: int) -> None:
        if not bars:
            bars.append(_bar(total))
        bars[0].update(max(0, t + 1 - bars[0].n))  # a seed whose episodes ended repeats

    with bad_input():
        evaluate = make_evaluation(config, episodes, on_step if progress else None)
    steps = int(np.asarray(saved.states.env_steps).reshape(-1)[0])
    print(
        f"evaluating {run} after chunk {saved.chunk} ({steps:,} env steps per seed): "
        f"{episodes:,} greedy episodes per seed of {agent_name(config)} on {config.env}"
    )
    t0 = time.perf_counter()
    keys = jax.random.split(jax.random.key(seed), config.seeds)
    # compiled first and said so: a long evaluation is then seen playing, not compiling
    play = jit(jax.vmap(evaluate)).lower(saved.states.agent, keys).compile()
    compile_s = time.perf_counter() - t0
    print(f"compiled in {compile_s:.1f} s; playing the episodes ...", flush=True)
    try:
        returns = np.asarray(play(saved.states.agent, keys))  # [S, episodes]
    finally:
        for bar in bars:
            bar.close()
    result = _summary(returns)
    result |= {"run": str(run), "chunk": saved.chunk, "env_steps": steps, "mapping": mapping}
    result |= {"episodes": episodes, "seed": seed, "wall_s": time.perf_counter() - t0}
    result["compile_s"] = compile_s  # of wall_s
    result["run_eval_return"] = saved.rows[-1].get("eval_return") if saved.rows else None
    _print(result, config.eval_envs)
    if out is not None:
        _write(out, json.dumps(_jsonable(result), allow_nan=False) + "\n")
        print(f"written: {out}")
    return result


def _bar(total: int):
    """The progress bar over the episodes' ``total`` steps."""
    from tqdm import tqdm

    return tqdm(total=total, desc="episode steps", unit="step", dynamic_ncols=True)


def _restore(run: Path, chunk: int | None) -> tuple:
    """`resume_run`'s ``(config, mapping, checkpoint)``; read again (up to `RETRIES` times)
    when the run is still being written and its checkpoints changed while they were read (it
    deletes the oldest after each save). Its errors are named ``eval RUN: ...``."""
    for attempt in range(RETRIES + 1):
        listed = Checkpoints(run / CHECKPOINTS).chunks()
        try:
            return resume_run(run, chunk, option="eval")
        except CheckpointError as e:
            if attempt < RETRIES and Checkpoints(run / CHECKPOINTS).chunks() != listed:
                continue  # a live run saved and deleted checkpoints meanwhile: read the new ones
            raise ValueError(f"eval {run}: no checkpoint reads back: {e}") from e
    raise AssertionError("unreachable")


def _write(out: Path, text: str) -> None:
    """``text`` into ``out`` (its missing folders made), whole or not at all: a temporary file
    beside it, renamed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(f".{out.name}.part")
    try:
        part.write_text(text)
        part.replace(out)
    finally:
        part.unlink(missing_ok=True)


def _jsonable(x):
    """``x`` with every float that is not finite as None (JSON has no NaN or infinity)."""
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _check(run: Path, episodes: int, chunk: int | None, out: Path | None, seed: int) -> None:
    """Refuses, naming the option, what the evaluation cannot take, before JAX starts."""
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(
            f"--seed must be in [0, {MAX_SEED}] (JAX's key keeps 32 bits of it), got {seed}"
        )
    if not (run / CHECKPOINTS).is_dir():
        what = "no run directory" if not run.is_dir() else f"no {CHECKPOINTS}/ folder in it"
        raise ValueError(f"eval {run}: {what} (a run of drlhet train with checkpoints)")
    if not 1 <= episodes <= MAX_EPISODES:
        raise ValueError(f"--episodes must be in [1, {MAX_EPISODES:,}], got {episodes}")
    if chunk is not None and chunk < 0:
        raise ValueError(f"--chunk must be >= 0, got {chunk}")
    if out is not None:
        if out.is_dir():
            raise ValueError(f"--out {out} is a folder; name a JSON file")
        if _runs_own(run, out):
            owned = ", ".join([*RUN_FILES, f"{CHECKPOINTS}/"])
            raise ValueError(f"--out {out} is one of the run's own files ({owned}); name another")
        check_writable(out.parent, f"--out {out}", "file")


def _runs_own(run: Path, out: Path) -> bool:
    """Whether ``out`` is one of the files ``drlhet train`` writes in ``run`` or lies in its
    checkpoints (which the evaluation reads)."""
    run, out = run.resolve(), out.resolve()
    return out in [run / name for name in RUN_FILES] or out.is_relative_to(run / CHECKPOINTS)


def _summary(returns: np.ndarray) -> dict:
    """Per seed: mean, std, min, max of ``returns`` ``[S, episodes]``; over all seeds: the
    mean, the pooled std of every episode and the std of the S seeds' means (None for one
    seed)."""
    per_seed = {
        "mean": returns.mean(axis=1).tolist(),
        "std": returns.std(axis=1).tolist(),
        "min": returns.min(axis=1).tolist(),
        "max": returns.max(axis=1).tolist(),
    }
    means = returns.mean(axis=1)
    overall = {
        "mean": float(returns.mean()),
        "std": float(returns.std()),  # over every episode of every seed, pooled
        # across the seeds' means (sample std, ddof 1): how much the training seed matters
        "std_of_seed_means": float(means.std(ddof=1)) if len(means) > 1 else None,
    }
    return {"per_seed": per_seed, "all_seeds": overall, "returns": returns.tolist()}


def _print(result: dict, eval_envs: int) -> None:
    """The result's lines: each seed's (beside the run's own evaluation after that chunk, over
    ``eval_envs`` episodes), then all seeds' (measured here)."""
    seeds, ran = result["per_seed"], result["run_eval_return"]
    for s, (mean, std) in enumerate(zip(seeds["mean"], seeds["std"], strict=True)):
        low, high = seeds["min"][s], seeds["max"][s]
        said = f"; the run's evaluation: {ran[s]:.1f} over {eval_envs}" if ran else ""
        print(f"seed {s}: return {mean:.1f} +- {std:.1f} (min {low:.1f}, max {high:.1f}{said})")
    overall, n = result["all_seeds"], len(seeds["mean"]) * result["episodes"]
    if not all(math.isfinite(v) for v in overall.values() if v is not None):
        print("note: some returns are not finite numbers")
    across = overall["std_of_seed_means"]
    spread = f"; +- {across:.1f} across the {len(seeds['mean'])} seeds' means" if across else ""
    if across == 0.0:
        spread = f"; the {len(seeds['mean'])} seeds' means are equal"
    print(
        f"all seeds: return {overall['mean']:.1f} +- {overall['std']:.1f} over {n:,} episodes"
        f"{spread} (measured, this machine, {result['wall_s']:.1f} s with compiling)"
    )
