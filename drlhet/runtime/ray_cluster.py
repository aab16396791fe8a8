"""Ray for a run with actors (`drlhet.runtime.ray_learner`), checked before the run starts: the
cluster's address answers, it has a free CPU for each actor, and the run, which the learner
takes in whole actor calls, ends within its ``steps``.
`start_actors` then places the actors, each on a CPU reserved for it.

Each check replaces a failure that came late or never: ``ray.init`` retries an address nothing
answers at for minutes on end (a closed port: 20 tries of about 35 s); an actor Ray cannot
place never answers (the learner waited for it, then gave up after minutes; and a CPU free at
the check can be taken by another job before the actor is placed: `reserve_cpus` holds them
first); a run ended at the first whole actor call at or past its last chunk's end, which could
be past ``steps``.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import time
import warnings
from typing import TYPE_CHECKING, Any

import jax

from drlhet.backends import CPU
from drlhet.runtime.config import TrainConfig, chunks_of

if TYPE_CHECKING:
    from drlhet.runtime.ray_learner import RayConfig

__all__ = [
    "PROBE_S",
    "FREE_WAIT_S",
    "address_named",
    "check_address",
    "check_run",
    "end_steps",
    "init_ray",
    "reserve_cpus",
    "start_actors",
    "warmup_end",
]

PROBE_S = 3.0
"""Seconds a cluster's address has to accept a TCP connection before ``ray.init`` is tried."""

FREE_WAIT_S = 5.0
"""Seconds to wait for the CPUs the actors need to come free (a run's actors, killed at its end,
give theirs back a moment later) before a cluster whose CPUs other jobs hold is refused."""

_HOST_PORT = re.compile(r"(?:ray://)?(?P<host>[\w.-]+):(?P<port>\d+)")


def address_named(address: str | None) -> tuple[str | None, str]:
    """The address ``ray.init(address)`` joins and how to name it in an error: ``address``
    (``--ray-address``), or where it is None, ``RAY_ADDRESS`` from the environment, which
    ``ray.init`` reads then (None, "" where neither is set)."""
    if address is not None:
        return address, f"--ray-address {address}"
    env = os.environ.get("RAY_ADDRESS") or None
    return env, ("" if env is None else f"RAY_ADDRESS={env} (from the environment)")


def check_address(address: str | None, timeout_s: float = PROBE_S) -> None:
    """Refuses a cluster's address, ``HOST:PORT`` (its head's GCS) or ``ray://HOST:PORT`` (Ray
    Client), where nothing accepts a TCP connection within ``timeout_s``: ``ray.init`` would
    retry it for minutes on end. None stands for ``RAY_ADDRESS`` (`address_named`); anything
    else (``auto``, ``local``, neither set) is left to Ray.

    Raises:
      ValueError: the address, named with the reason (refused, no answer, unknown host, a port
        out of range).
    """
    address, named = address_named(address)
    match = None if address is None else _HOST_PORT.fullmatch(address)
    if match is None:
        return
    port = int(match["port"])
    if not 0 < port < 65536:
        raise ValueError(f"{named}: the port must be in [1, 65535]")
    try:
        with socket.create_connection((match["host"], port), timeout=timeout_s):
            return
    except TimeoutError:
        why = f"no answer in {timeout_s:g} s"
    except OSError as e:  # refused, unreachable, unknown host
        why = e.strerror or type(e).__name__
    raise ValueError(f"{named} cannot be reached ({why}); is its cluster started?")


def init_ray(rc: RayConfig, free_wait_s: float = FREE_WAIT_S) -> None:
    """Starts Ray (or joins ``rc.address``, once `check_address` finds it answering) unless it
    runs, and checks that its cluster has a CPU for each actor, free (an actor Ray cannot place
    never answers; the learner would wait for it): if fewer are free, waits up to
    ``free_wait_s`` for them. Ray puts its own SIGTERM handler in place: start it first.

    Ray's processes are started with SIGTERM blocked (they inherit the mask): a SIGTERM sent to
    the whole process group (``timeout``, a batch system's cancel) then stops the run, not the
    Ray head it needs to end its chunk (Ray stops its processes with SIGKILL when they do not
    end).

    Raises:
      ValueError: an address that cannot be reached, or where Ray joins no cluster; too few
        CPUs in all, or free (other jobs hold them); named.
    """
    import ray

    if not ray.is_initialized():
        check_address(rc.address)
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            _start(ray, rc.address)
        finally:
            if signal.SIGTERM not in held:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    resource = CPU.upper()  # Ray's name of the resource
    cpus = ray.cluster_resources().get(resource, 0)
    if cpus < rc.actors:
        raise ValueError(f"--actors ray:{rc.actors} needs a CPU each; the Ray cluster has {cpus:g}")
    deadline = time.monotonic() + free_wait_s
    while (free := ray.available_resources().get(resource, 0)) < rc.actors:
        if time.monotonic() > deadline:
            raise ValueError(
                f"--actors ray:{rc.actors} needs a free CPU each; the Ray cluster has {cpus:g}, "
                f"{free:g} free (other jobs hold the rest)"
            )
        time.sleep(0.1)


def reserve_cpus(rc: RayConfig, wait_s: float = FREE_WAIT_S):
    """A Ray placement group holding one CPU for each of ``rc.actors`` actors (bundle i for
    actor i), reserved at once: a CPU that `init_ray` found free may be taken by another job
    before an actor is placed on it, and an actor Ray cannot place never answers. Remove it
    (``ray.util.remove_placement_group``) when the actors are done. Ray must be started.

    Raises:
      ValueError: the CPUs could not all be reserved within ``wait_s`` seconds; named.
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{CPU.upper(): 1}] * rc.actors)
    try:
        ray.get(group.ready(), timeout=wait_s)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        raise ValueError(
            f"--actors ray:{rc.actors} needs a free CPU each; Ray could not reserve them within "
            f"{wait_s:g} s (other jobs took them after the check)"
        ) from None
    return group


def start_actors(cfg: TrainConfig, rc: RayConfig, cls: type) -> tuple[list, list[str], Any]:
    """Starts Ray (`init_ray`) and ``rc.actors`` actors of ``cls`` (`drlhet.runtime.ray_actor
    .RolloutActor`), each in its bundle of a placement group (`reserve_cpus`); ``-> (actors,
    their names, the group)``: kill the actors and remove the group when the run ends."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    init_ray(rc)
    group = reserve_cpus(rc)
    remote: Any = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0)(cls)
    # one CPU each: one XLA device, one compute thread
    flags = "--xla_force_host_platform_device_count=1 --xla_cpu_multi_thread_eigen=false"
    env = {"JAX_PLATFORMS": CPU, "XLA_FLAGS": flags, "OMP_NUM_THREADS": "1"}
    env.update(_shared_cache(rc))
    stamp = f"{time.time_ns():x}"
    names = [f"drlhet-{stamp}-actor-{i}" for i in range(rc.actors)]
    actors = [
        remote.options(
            name=n,
            runtime_env={"env_vars": env},
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, i),
        ).remote(cfg, i, rc.rollout)
        for i, n in enumerate(names)
    ]
    return actors, names, group


def _shared_cache(rc: RayConfig, config: Any = jax.config) -> dict[str, str]:
    """The environment that points local actors at this process's persistent compilation
    cache, when it has one: an actor started again after a crash, or in a later run, loads its
    programs instead of compiling them. Not for a remote cluster (``--ray-address``), whose
    nodes need not have this machine's folder."""
    folder = config.jax_compilation_cache_dir
    if rc.address is not None or not folder:
        return {}
    return {
        "JAX_COMPILATION_CACHE_DIR": str(folder),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": str(
            config.jax_persistent_cache_min_compile_time_secs
        ),
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": str(
            config.jax_persistent_cache_min_entry_size_bytes
        ),
    }


def _start(ray, address: str | None) -> None:
    """``ray.init`` at ``address``; a cluster it does not join there (something else answers,
    e.g. a proxy, or ``auto`` finds none) is a ``ValueError`` naming the address, after Ray's
    own retries (about 20 s)."""
    try:
        with warnings.catch_warnings():  # Ray forks its processes after JAX started: harmless
            warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
            ray.init(
                address=address,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
    except ConnectionError as e:
        joined, named = address_named(address)
        if joined is None:
            raise
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{named}: no Ray cluster joined there ({why})") from None


def warmup_end(cfg: TrainConfig, rc: RayConfig) -> int:
    """The env steps per seed a Ray run's warm-up ends at: the first whole actor call
    (``rollout`` x ``num_envs`` env steps) at or past ``warmup``."""
    call = rc.rollout * cfg.num_envs
    return -(-cfg.warmup // call) * call


def end_steps(cfg: TrainConfig, rc: RayConfig) -> int:
    """The env steps per seed a Ray run of ``cfg`` ends at: the learner takes whole actor calls
    (``rollout`` x ``num_envs`` env steps each), so each chunk, the last one too, ends at the
    first call's end at or past its own (``warmup`` + i x ``eval_every``, `chunks_of`)."""
    call = rc.rollout * cfg.num_envs
    end = cfg.warmup + chunks_of(cfg) * cfg.eval_every
    return -(-end // call) * call


def check_run(cfg: TrainConfig, rc: RayConfig) -> None:
    """Refuses a Ray run of ``cfg`` whose chunks could get no actor call (``eval_every`` below
    one call's env steps), or which would end past ``steps`` (`end_steps`). An exact end would
    need programs for a shorter call on both sides (the actors' rollout and the learner's scan
    have a static length): the message names the ``steps`` that fits instead.

    Raises:
      ValueError: either, named with the numbers to change.
    """
    call = rc.rollout * cfg.num_envs
    sizes = f"--rollout {rc.rollout} x --num-envs {cfg.num_envs}"
    if cfg.eval_every < call:
        raise ValueError(
            f"--eval-every {cfg.eval_every} is below one Ray actor call's env steps "
            f"({sizes} = {call})"
        )
    end = end_steps(cfg, rc)
    if end > cfg.steps:
        raise ValueError(
            f"--steps {cfg.steps}: a Ray run moves in whole actor calls of {call} env steps "
            f"({sizes}) and would end at {end}, past it; pass --steps {end} (the same chunks)"
        )
