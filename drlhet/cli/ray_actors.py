"""``drlhet train --actors ray:N``: the flags of a Ray run, checked up front, and its report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drlhet.runtime.config import TrainConfig

__all__ = ["ray_config", "ray_runner", "ray_summary"]


def ray_config(
    actors: str | None,
    sync_every: int | None,
    rollout: int | None,
    address: str | None,
    mapping: str | None,
    resume: Path | None,
    checkpoint_every: int | None = None,
):
    """The `drlhet.runtime.ray_learner.RayConfig` the flags ask for (None without
    ``--actors``). ``sync_every``, ``rollout``: None for RayConfig's defaults;
    ``checkpoint_every``: None when not given (Ray runs write no checkpoints).

    Raises:
      ValueError: a bad value, a flag Ray runs do not take, a Ray run's flag without
        ``--actors`` (it would be ignored), or Ray missing; named.
    """
    if actors is None:
        ray_only = (
            ("--ray-address", address),
            ("--sync-every", sync_every),
            ("--rollout", rollout),
        )
        for name, value in ray_only:
            if value is not None:
                raise ValueError(f"{name} needs --actors ray:N (it sets how Ray actors run)")
        return None
    from drlhet.runtime.ray_learner import RayConfig, parse_actors

    n = parse_actors(actors)
    if mapping is not None:
        raise ValueError(f"--mapping {mapping} cannot be combined with --actors {actors}")
    if resume is not None:
        raise ValueError(f"--resume cannot be combined with --actors {actors} (no checkpoints)")
    if checkpoint_every:
        raise ValueError(
            f"--checkpoint-every {checkpoint_every} cannot be combined with --actors {actors} "
            "(Ray runs write no checkpoints)"
        )
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ValueError(
            f"--actors {actors}: missing library: ray (pip install 'drlhet[ray]')"
        ) from None
    flags = {"sync_every": sync_every, "rollout": rollout}
    given: dict[str, int] = {field: value for field, value in flags.items() if value is not None}
    for field, value in given.items():
        if value < 1:
            raise ValueError(f"--{field.replace('_', '-')} must be >= 1, got {value}")
    return RayConfig(actors=n, address=address, **given)


def ray_runner(remote, config: TrainConfig):
    """A runner with `drlhet.runtime.run.run`'s signature that trains ``config`` (its backends
    resolved) with Ray actors; each row also names the placement (``mapping``)."""
    from drlhet.backends import CPU, reference
    from drlhet.runtime.ray_learner import run_ray

    where = f"actors=ray:{remote.actors},replay={config.backend}@{CPU}:0,"
    where += f"learner={reference()}@{CPU}:0"

    def runner(
        cfg, mapping, on_chunk=None, start=None, saving=None, stop_asked=None
    ) -> tuple[Any, list[dict]]:
        # one placement; no checkpoints (refused up front); Python's own signal handling
        del cfg, mapping, start, saving, stop_asked

        def named(row: dict) -> None:
            row["mapping"] = where
            if on_chunk is not None:
                on_chunk(row)

        state, rows, _ = run_ray(config, remote, named)
        return state, rows

    return runner


def ray_summary(report: dict) -> str:
    """One paragraph: what the actors reported and what was inserted, faults, lag."""
    return (
        f"ray actors: env steps per seed reported {report['env_steps_reported']}, inserted "
        f"{report['env_steps_inserted']} (after {report['fill_steps']} n-step fill steps each); "
        f"duplicates {report['duplicates']}, gaps {report['gaps']}, restarts "
        f"{report['restarts']}; parameter lag (learner iterations) mean "
        f"{report['lag_mean']:.1f}, max {report['lag_max']}; {report['broadcasts']} broadcasts"
    )
