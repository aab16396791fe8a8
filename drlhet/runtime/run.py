"""One entry point for every run: `run(cfg, mapping)` picks the path the mapping needs.

* one segment (every group on one device, or no mapping): the fused ``lax.scan``
  (`drlhet.runtime.fused`);
* several segments, ``delay < sgd_steps``: the strict host loop (`drlhet.runtime.host_loop`);
* several segments, ``delay >= sgd_steps``: the pipeline, one host thread per device group
  (`drlhet.runtime.pipeline`).

Every path returns the same `drlhet.runtime.trainer.TrainState` (batched over seeds) and the
same rows, and with ``delay = 0`` the same numbers for the same seed. Every path can start from
a saved state (`Start`) and hand its state out for checkpoints (`drlhet.runtime.saving`): a run
resumed from the state after chunk c goes on bit for bit as the run that was not stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from drlhet.envs.host import failure_in, is_host_env
from drlhet.replay.nstep import cut
from drlhet.runtime.board_state import onto_board
from drlhet.runtime.compiling import jit
from drlhet.runtime.config import (
    ConfigError,
    TrainConfig,
    check,
    differences,
    said,
    tree_shape,
)
from drlhet.runtime.fused import run_fused
from drlhet.runtime.host_loop import run_iteration_loop
from drlhet.runtime.mapping import Mapping, Placement, replay_backend_named, segments
from drlhet.runtime.memory_check import check_memory
from drlhet.runtime.pipeline import run_pipeline
from drlhet.runtime.saving import ChunkHook, Saving
from drlhet.runtime.trainer import Trainer, TrainState, make_trainer

__all__ = ["run", "default_mapping", "Start", "RESUMABLE", "initial_example"]


class Start(NamedTuple):
    """Where a resumed run starts: the state of every seed (``[S]``, host or device arrays,
    placed by the run) after chunk ``chunk``; the run goes on with chunk ``chunk + 1`` (none
    after the run's last chunk: the states come back as given). The run takes the states:
    device arrays already on the devices it places them on are donated to its first chunk
    (deleted), as the state of a fresh run is; keep a copy (``jax.device_get``) to use them
    again.

    ``config``: the configuration the states were saved with (a checkpoint's
    ``Saved.meta["config"]``, or a `TrainConfig`; `from_saved` sets it). `run` then refuses
    a ``cfg`` that differs from it in any field but those a resume may change (`RESUMABLE`:
    the mapping sets them), naming each field and both values, before it touches the states.
    None (``Start(states, chunk)``): the fields are unchecked, the run goes on with whatever
    ``cfg`` says (as a longer run from a shorter one's state). Either way, when chunks are
    left to run, ``states`` must have the structure, shapes and dtypes of ``cfg``'s state
    (`initial_example`), else ``ValueError`` names the first leaf that differs."""

    states: Any
    chunk: int
    config: Any = None
    wall_s: float = 0.0
    """Seconds the run had trained before (its last saved row's ``wall_s``): the resumed
    rows' ``wall_s`` go on from it, so a curve over wall time does not restart at 0."""

    @classmethod
    def from_saved(cls, saved: Any) -> Start:
        """The checked start from a restored checkpoint (`drlhet.checkpoint.Saved`)."""
        config = saved.meta.get("config")
        if not isinstance(config, dict):
            raise ValueError(f"checkpoint {saved.path} records no configuration to check")
        wall = saved.rows[-1].get("wall_s", 0.0) if saved.rows else 0.0
        return cls(saved.states, saved.chunk, config, float(wall))


RESUMABLE = ("backend", "learner", "learner_board", "replay_board")
"""`TrainConfig` fields a resume may change: the mapping places the replay and the learner,
on a board or not (``drlhet train --resume`` takes every other field from the checkpoint)."""


def run(
    cfg: TrainConfig,
    mapping: Mapping | str | None = None,
    on_chunk: Callable[[dict], None] | None = None,
    start: Start | None = None,
    saving: Saving | None = None,
    stop_asked: Callable[[], bool] | None = None,
    memory_check: bool = True,
) -> tuple[TrainState, list[dict]]:
    """Trains ``cfg.seeds`` seeds of ``cfg`` with its groups placed by ``mapping``.

    Args:
      cfg: the run. Its ``backend`` is the replay backend when no mapping is given (None: the
        fastest that loads on JAX's default device); a mapping's replay placement overrides it.
      mapping: a `Mapping`, its text (``"actors=cpu:0,replay=native@cpu:1,learner=cpu:1"``), or
        None: every group fused on JAX's default device.
      on_chunk: called with each chunk's row as soon as it is measured (progress, early stop:
        an exception it raises ends the run), after the chunk's checkpoint if one is due.
      start: resume from a saved state (`drlhet.checkpoint`) instead of a fresh one; one with
        a ``config`` must have been saved with ``cfg`` (`Start`).
      saving: write checkpoints during the run.
      stop_asked: ``() -> bool``: once true (it stays so: a later false is not read; also
        when ``on_chunk`` made it true for the row it was given), end after the chunk that
        runs (the pipeline: after the chunks its threads have begun, which may run ahead of
        the rows reported, and with in-program channels where a
        device's program runs one stage a call ahead of the other, one chunk more:
        `drlhet.runtime.threads.ChunkEnd`; its host thread asks at each row and every 50 ms
        while it waits for one), that chunk saved, by raising
        `drlhet.runtime.saving.Stopped`.
      memory_check: refuse, before anything is allocated, a run whose state (twice with
        ``saving``: a host copy for each checkpoint) needs more memory than this machine has
        available now (`drlhet.runtime.memory_check`); False runs it anyway.

    Returns:
      ``(states, rows)``: the final `TrainState` (``[S]`` seeds; each group's fields on its
      device) and one row per chunk run (from ``start.chunk + 1`` when resumed): per-seed
      ``eval_return``, ``train_return``, ``loss``, ... (the learner's metrics: their mean
      over the chunk's SGD steps) as lists, ``env_steps``, ``wall_s`` since the start
      (compilation included), and the chunk's measured ``env_steps_per_s`` and
      ``trained_samples_per_s`` (all seeds).

    Raises:
      ValueError: a bad configuration or mapping; `ConfigError` naming the fields where
        ``cfg`` differs from ``start.config``; a run beyond the memory available
        (``memory_check``).
      BackendUnavailable: a backend or device the mapping names is missing here.
      Stopped: ``stop_asked`` ended the run early.
    """
    _check_arguments(cfg, mapping, on_chunk, start, saving, stop_asked)
    if start is not None and start.config is not None:
        _check_resumed(cfg, start.config)
    if saving is not None and saving.config is not None:
        _check_saving(cfg, saving.config)
    if cfg.uniform:
        _check_uniform(cfg, mapping)
    if isinstance(mapping, str):
        mapping = Mapping.parse(mapping, tree_shape(cfg))
    if mapping is None:
        mapping = default_mapping(cfg)
    devices = mapping.validate()
    cfg = dataclasses.replace(cfg, backend=mapping.replay.backend, learner=mapping.learner.backend)
    tr = make_trainer(cfg)
    if memory_check:
        check_memory(tr, cfg.seeds, 1 + (saving is not None))
    segs = segments(mapping)
    extra = {"mapping": str(mapping), "segments": [[d, list(n)] for d, n in segs]}
    t0 = time.perf_counter() - (start.wall_s if start is not None else 0.0)
    with _host_failures_named():
        return _start_and_run(tr, cfg, start, devices, extra, t0, saving, on_chunk, stop_asked)


def _start_and_run(tr, cfg, start, devices, extra, t0, saving, on_chunk, stop_asked):
    """`run` from its fresh or resumed states on, down the path its segments take."""
    if start is None:
        keys = jax.random.split(jax.random.key(cfg.seed), cfg.seeds)
        with jax.default_device(devices["replay"]):
            states = jit(jax.vmap(tr.init))(keys)
            states = jit(jax.vmap(tr.warmup), donate_argnums=0)(states)
    else:
        if start.chunk + 1 >= tr.chunks:  # resumed after its last chunk: nothing left to run
            return start.states, []
        states = onto_board(start.states, cfg)  # a tree saved from (or for) a board: loaded
        _check_start_states(states, _example(tr, cfg))
        states = _fresh_episodes(tr, states) if is_host_env(cfg.env) else states
    first = 0 if start is None else start.chunk + 1
    hook = ChunkHook(tr.chunks, saving, on_chunk, stop_asked)
    if len(extra["segments"]) == 1:
        return run_fused(tr, states, devices["replay"], t0, hook, extra, first)
    if cfg.delay >= cfg.sgd_steps:
        return _pipeline_segments(tr, states, devices, t0, hook, extra, first)
    return run_iteration_loop(tr, states, devices, t0, hook, extra, first)


@contextlib.contextmanager
def _host_failures_named():
    """A host environment's failure (`HostEnvError`) as itself: in a callback of a jitted
    program, XLA raises another error that quotes it (`drlhet.envs.host.failure_in`)."""
    try:
        yield
    except Exception as e:
        failure = failure_in(e)
        if failure is None or failure is e:
            raise
        raise failure from e


def _check_uniform(cfg: TrainConfig, mapping: Mapping | str | None) -> None:
    """Refuses a replay backend named for uniform replay, which has no tree: ``cfg.backend``
    (`check`) or one in a mapping's text; a `Mapping` always names one, and places it alone."""
    check(cfg)
    named = replay_backend_named(mapping) if isinstance(mapping, str) else None
    if named is not None:
        device = named.split("@")[-1]
        why = f"uniform replay has no tree for it: place the replay on {device} alone"
        raise ConfigError(f"mapping {named} names a replay backend, and {why}", "uniform")


def _check_arguments(cfg, mapping, on_chunk, start, saving, stop_asked) -> None:
    """Raises ``TypeError`` naming the first of `run`'s arguments of the wrong kind (before
    anything is built or trained: a callback found not callable after the first chunk would
    lose it), and ``ValueError`` for a ``start.chunk`` that is no chunk index."""
    kinds = (
        ("cfg", cfg, TrainConfig, "a TrainConfig"),
        ("mapping", mapping, (Mapping, str, type(None)), "a Mapping, its text or None"),
        ("start", start, (Start, type(None)), "a Start or None"),
        ("saving", saving, (Saving, type(None)), "a Saving (drlhet.checkpoint_saving) or None"),
    )
    for name, value, kind, what in kinds:
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    for name, value in (("on_chunk", on_chunk), ("stop_asked", stop_asked)):
        if value is not None and not callable(value):
            raise TypeError(f"{name} must be callable or None, got {value!r}")
    if start is not None:
        chunk = start.chunk
        if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < -1:
            raise ValueError(
                f"start.chunk must be the index of the chunk the states were saved after "
                f"(an integer >= -1; -1: before the first), got {chunk!r}"
            )


def _check_saving(cfg: TrainConfig, made_for: TrainConfig) -> None:
    """Raises ``ValueError`` when ``saving`` was made (`drlhet.checkpoint_saving`) for another
    configuration than the run's: its checkpoints would record that one, and a resume would
    then be checked against the wrong fields."""
    differ = differences(cfg, made_for, RESUMABLE)
    if differ:
        raise ValueError(
            f"saving was made for another configuration than the run's: {said(differ)}"
        )


def _check_resumed(cfg: TrainConfig, saved: Any) -> None:
    """Raises `ConfigError` naming every field but `RESUMABLE` where ``cfg`` differs from
    ``saved`` (a checkpoint's JSON config, where a missing field has its default, as the
    CLI's resume reads it; or a `TrainConfig`), with both values."""
    if not isinstance(saved, dict | TrainConfig):
        raise ValueError(
            f"start.config must be a checkpoint's config (a dict) or a TrainConfig, "
            f"got {type(saved).__name__}"
        )
    differ = differences(cfg, saved, RESUMABLE)
    if differ:
        message = f"start: the checkpoint was saved with another configuration: {said(differ)}"
        raise ConfigError(message, *(k for k, _, _ in differ))


def _fresh_episodes(tr: Trainer, states: Any) -> Any:
    """``states`` (``[S]`` seeds) with their host environments started afresh: a checkpoint
    holds no simulator state. Each seed's environments are reset from a key split off its own
    (new episodes, their returns from 0), and the episodes its n-step FIFO holds are cut where
    they stood (`drlhet.replay.nstep.cut`): the transitions still to come out of it end at the
    last step taken and bootstrap from the observation after it. (Without it, the first step
    of the resumed run inserted a transition per environment of an action never taken.)"""

    def fresh(fifo, episode_return, key):
        key, k_env = jax.random.split(key)
        obs, env_state = tr.env.reset(k_env)
        return env_state, obs.astype(jnp.float32), cut(fifo), jnp.zeros_like(episode_return), key

    env_state, obs, fifo, ret, key = jit(jax.vmap(fresh))(
        states.fifo, states.episode_return, states.key
    )
    return states._replace(env_state=env_state, obs=obs, fifo=fifo, episode_return=ret, key=key)


def _pipeline_segments(tr: Trainer, states, devices, t0, hook: ChunkHook, extra, first: int):
    """The pipeline in segments that end where a checkpoint is due (its state is out only
    when its threads have ended); one segment without checkpoints."""
    rows: list[dict] = []
    for a, b in hook.segments(first):
        part = tr._replace(chunks=b - a)
        states, got = run_pipeline(part, states, devices, t0, hook, extra, first=a)
        rows += got
        hook.ended(states)
    return states, rows


def initial_example(cfg: TrainConfig) -> Any:
    """The shapes and dtypes of a run's state (``[S]`` seeds), as `jax.eval_shape` gives them:
    what a checkpoint of ``cfg`` must hold (a tree on a board as the C-simulation holds it:
    `drlhet.runtime.board_state`)."""
    return _example(make_trainer(dataclasses.replace(cfg, replay_board=None)), cfg)


def _example(tr: Trainer, cfg: TrainConfig) -> Any:
    def fresh():  # as `run` makes it
        keys = jax.random.split(jax.random.key(cfg.seed), cfg.seeds)
        return jax.vmap(lambda k: tr.warmup(tr.init(k)))(keys)

    return jax.eval_shape(fresh)


def _check_start_states(states: Any, example: Any) -> None:
    """Raises ``ValueError`` (naming the first leaf that differs) unless ``states`` has the
    structure, shapes and dtypes of ``example``: a resumed state of another buffer size,
    seed count or network would otherwise train (or fail mid-chunk) on the wrong arrays."""
    want, want_def = jax.tree_util.tree_flatten_with_path(example)
    try:
        got, got_def = jax.tree_util.tree_flatten_with_path(states)
    except Exception as e:  # not a pytree JAX reads
        raise ValueError(f"start.states is not a run's state: {e}") from e
    if [p for p, _ in got] != [p for p, _ in want]:
        raise ValueError(
            f"start.states has another structure than this configuration's state "
            f"({len(got)} arrays, {len(want)} here): not a state of this agent and replay"
        )
    for (path, have), (_, need) in zip(got, want, strict=True):
        shape, dtype = getattr(have, "shape", None), getattr(have, "dtype", None)
        if shape is None or tuple(shape) != tuple(need.shape) or dtype != need.dtype:
            said = f"{dtype}{list(shape)}" if shape is not None else type(have).__name__
            raise ValueError(
                f"start.states{jax.tree_util.keystr(path)} is {said}, "
                f"{need.dtype}{list(need.shape)} in this configuration"
            )
    if str(got_def) != str(
        want_def
    ):  # the same arrays, other static fields (a tree's capacity or K)
        a, b = str(got_def), str(want_def)
        i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), 0)
        raise ValueError(
            f"start.states has other static fields than this configuration's state: "
            f"...{a[max(i - 40, 0) : i + 20]}... there, ...{b[max(i - 40, 0) : i + 20]}... here"
        )


def default_mapping(cfg: TrainConfig) -> Mapping:
    """Every group fused on JAX's default device, the replay on ``cfg.backend`` (None: the
    fastest that loads there and holds its tree), the learner on ``cfg.learner`` (None: the
    agents' JAX step)."""
    device = jax.devices()[0]
    mapping = Mapping.fused(f"{device.platform}:0", cfg.backend, tree_shape(cfg))
    if cfg.learner is None:
        return mapping
    return dataclasses.replace(mapping, learner=Placement(cfg.learner, mapping.learner.device))
