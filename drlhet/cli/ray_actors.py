"""``drlhet train --actors ray:N``: the flags of a Ray run, checked up front, and its report."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

from drlhet.cli.stopping import held_while_starting
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
    max_failures: int | None = None,
    keep_checkpoints: int | None = None,
):
    """The `drlhet.runtime.ray_learner.RayConfig` the flags ask for (None without
    ``--actors``). ``sync_every``, ``rollout``, ``max_failures``: None for RayConfig's defaults;
    ``checkpoint_every``, ``keep_checkpoints``: None when not given (Ray runs write no
    checkpoints).

    Raises:
      ValueError: a bad value, a flag Ray runs do not take, a Ray run's flag without
        ``--actors`` (it would be ignored), or Ray missing; named.
    """
    if actors is None:
        ray_only = (
            ("--ray-address", address),
            ("--sync-every", sync_every),
            ("--rollout", rollout),
            ("--max-failures", max_failures),
        )
        for name, value in ray_only:
            if value is not None:
                raise ValueError(f"{name} needs --actors ray:N (it sets how Ray actors run)")
        return None
    from drlhet.runtime.ray_learner import RayConfig, parse_actors

    n = parse_actors(actors)
    if address is not None and not re.fullmatch(r"auto|(ray://)?[\w.-]+:\d{1,5}", address):
        raise ValueError(f"--ray-address must be HOST:PORT, ray://HOST:PORT or auto: {address}")
    if mapping is not None:
        raise ValueError(f"--mapping {mapping} cannot be combined with --actors {actors}")
    if resume is not None:
        raise ValueError(f"--resume cannot be combined with --actors {actors} (no checkpoints)")
    for name, value in (
        ("checkpoint-every", checkpoint_every),
        ("keep-checkpoints", keep_checkpoints),
    ):
        if value:  # 0 asks for what a Ray run does anyway
            raise ValueError(
                f"--{name} {value} cannot be combined with --actors {actors} "
                "(Ray runs write no checkpoints)"
            )
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ValueError(
            f"--actors {actors}: missing library: ray (pip install 'drlhet[ray]')"
        ) from None
    flags = {"sync_every": sync_every, "rollout": rollout, "max_failures": max_failures}
    given: dict[str, int] = {field: value for field, value in flags.items() if value is not None}
    for field, value in given.items():
        if value < 1:
            raise ValueError(f"--{field.replace('_', '-')} must be >= 1, got {value}")
    return RayConfig(actors=n, address=address, **given)


def ray_runner(remote, config: TrainConfig):
    """A runner with `drlhet.runtime.run.run`'s signature that trains ``config`` (its backends
    resolved) with Ray actors; each row also names the placement (``mapping``).

    Starts Ray here (`init_ray`), before the run's signal handlers (`drlhet.cli.stopping`)
    are put in place, which Ray's own SIGTERM handler would replace.

    Raises:
      ValueError: a run the actors cannot run as asked (`check_run`: ``--eval-every`` below
        one actor call's env steps, ``--rollout`` x ``--num-envs``, so that a chunk could get
        none; or an end past ``--steps``, as the learner takes whole calls), or a Ray cluster
        that cannot take it (`init_ray`: an address that cannot be reached, fewer CPUs than
        actors, in all or free), or an address Ray refuses.
    """
    import jax

    from drlhet.backends import reference
    from drlhet.runtime.ray_cluster import check_run, init_ray
    from drlhet.runtime.ray_learner import run_ray

    check_run(config, remote)
    with held_while_starting(signal.SIGTERM):  # Ray's handler exits 15 at once
        init_ray(remote)
    here = f"{jax.devices()[0].platform}:0"  # where run_ray's replay and learner run
    where = f"actors=ray:{remote.actors},replay={config.backend}@{here},"
    where += f"learner={config.learner or reference()}@{here}"

    def runner(
        cfg, mapping, on_chunk=None, start=None, saving=None, stop_asked=None, memory_check=False
    ) -> tuple[Any, list[dict]]:
        del cfg, mapping, start, saving, memory_check  # one placement; no checkpoints (refused
        # up front); the memory checked by the CLI

        def named(row: dict) -> None:
            row["mapping"] = where
            if on_chunk is not None:
                on_chunk(row)

        state, rows, _ = run_ray(config, remote, named, stop_asked=stop_asked)
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
