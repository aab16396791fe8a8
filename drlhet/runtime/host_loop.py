"""The multi-segment paths: jitted stages on their devices, driven from the host.

Each group's stages (`drlhet.runtime.stages`) run on the group's device, with explicit
``device_put`` between them and JAX's asynchronous dispatch, keeping up to ``delay`` priority
updates in flight (Zhang, Meng, Prasanna, TPDS 2023, Sec. 5): with ``delay >= 1`` the replay
samples batch t+1 while the learner still trains on batch t, and the actors act with the
parameters of one iteration earlier. With ``delay = 0`` the results equal the fused loop's.

`run_iteration_loop` (one stage call per iteration and learner step, on the calling thread) runs
the strict chain (``delay < sgd_steps``); the placement of the state and the final state are
shared with the threaded pipeline (`drlhet.runtime.pipeline`, ``delay >= sgd_steps``).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.replay.delayed import PendingUpdates
from drlhet.runtime.chunks import check_replay_error, chunk_row, host_summary, split_keys
from drlhet.runtime.saving import ChunkHook
from drlhet.runtime.stages import iteration_stages
from drlhet.runtime.trainer import Trainer, TrainState

__all__ = ["run_iteration_loop", "LoopState", "place_state", "final_state"]

Entry = tuple[jax.Array, jax.Array, jax.Array]  # (indices, stamps, priorities) of one update


@dataclasses.dataclass
class LoopState:
    """The state of a host loop, each part on its group's device (mutable, host side)."""

    agent: Any
    actor_agent: Any
    env: tuple  # (env_state, obs, fifo, episode_return, key) on the actors' device
    rep: Any
    env_steps: int
    devices: dict[str, jax.Device]
    pending: Any  # the k updates not applied yet (PendingUpdates, [S, k, B]) on the replay's

    def move(self, src: str, dst: str) -> Callable[[Any], Any]:
        """``device_put`` from group ``src``'s device to ``dst``'s, or nothing on one device
        (a put costs ~10 us a leaf)."""
        if self.devices[src] == self.devices[dst]:
            return lambda x: x
        return lambda x: jax.device_put(x, self.devices[dst])


def place_state(cfg, states: TrainState, devices: dict[str, jax.Device]) -> LoopState:
    put, s = jax.device_put, states
    return LoopState(
        agent=put(s.agent, devices["learner"]),
        actor_agent=put(s.agent if cfg.delay == 0 else s.actor_agent, devices["actors"]),
        env=put((s.env_state, s.obs, s.fifo, s.episode_return, s.key), devices["actors"]),
        rep=put(s.replay, devices["replay"]),
        env_steps=int(np.asarray(s.env_steps)[0]),
        devices=devices,
        pending=put(s.pending, devices["replay"]),
    )


def final_state(cfg, loop: LoopState, pending: list[Entry]) -> TrainState:
    """The loop's state as the fused path returns it; ``pending`` holds the updates not
    applied yet, oldest first, each ``[S, n, B]``."""
    shape = (cfg.seeds, 0, cfg.batch_size)
    parts = pending or [(jnp.zeros(shape, jnp.int32),) * 2 + (jnp.zeros(shape),)]
    fields = (
        jnp.concatenate([jax.device_put(x, loop.devices["replay"]) for x in xs], axis=1)
        for xs in zip(*parts, strict=True)
    )
    env_state, obs, fifo, ret, key = loop.env
    return TrainState(
        agent=loop.agent,
        replay=loop.rep,
        env_state=env_state,
        obs=obs,
        key=key,
        env_steps=jnp.full((cfg.seeds,), loop.env_steps, jnp.int32),
        episode_return=ret,
        fifo=fifo,
        pending=PendingUpdates(*fields),
        actor_agent=loop.actor_agent if cfg.delay else None,
    )


def _end_chunk(tr, loop, i, metrics_acc, finished_acc, evaluate, t0, last, extra) -> dict:
    """Evaluates, checks the buffer's error flags and builds the chunk's row."""
    cfg = tr.config
    env_state, obs, fifo, ret, key = loop.env
    key, k_eval = split_keys(key)
    loop.env = (env_state, obs, fifo, ret, key)
    k_eval = jax.device_put(k_eval, loop.devices["learner"])
    summary = host_summary(
        cfg, metrics_acc, finished_acc, evaluate(loop.agent, k_eval), loop.env_steps
    )
    check_replay_error(loop.rep.error, i, summary, cfg)
    return {**chunk_row(cfg, tr.iterations, summary, i, t0, last), **extra}


def _drive(tr, loop, calls: int, step, evaluate, t0: float, hook, extra: dict, first, get_state):
    """Runs chunks ``first..``: ``calls`` calls of ``step() -> (metrics list, finished)``, then
    the evaluation and the chunk's row (passed to ``hook.after`` with ``get_state`` at once)."""
    rows, last = [], time.perf_counter()
    for i in range(first, tr.chunks):
        metrics_acc, finished_acc = [], []
        for _ in range(calls):
            metrics, finished = step()
            metrics_acc += metrics
            finished_acc.append(finished)
        rows.append(_end_chunk(tr, loop, i, metrics_acc, finished_acc, evaluate, t0, last, extra))
        last = time.perf_counter()
        hook.after(rows[-1], get_state)
    return rows


def _one_iteration(cfg, st, loop: LoopState, queue: collections.deque, empty: Entry):
    """One iteration of the per-iteration loop; returns ``(metrics list, finished)``."""
    to_r, to_l = loop.move("actors", "replay"), loop.move("replay", "learner")
    l_to_r = loop.move("learner", "replay")
    *env, transitions, finished, learn_keys = st.actor_step(
        loop.actor_agent, *loop.env, loop.env_steps
    )
    loop.env = tuple(env)
    transitions, learn_keys = to_r((transitions, learn_keys))
    before, to_apply, metrics_acc = loop.agent, empty, []  # before: the actors' next params
    for j in range(cfg.sgd_steps):
        if j == 0:
            loop.rep, batch, k_update = st.replay_in(
                loop.rep, transitions, learn_keys[0], loop.env_steps
            )
        else:
            loop.rep, batch, k_update = st.replay_next(
                loop.rep, *to_apply, learn_keys[j], loop.env_steps
            )
        loop.agent, prio, metrics = st.learner(
            loop.agent, *to_l((batch.data, batch.weights, k_update))
        )
        metrics_acc.append(metrics)
        entry = (batch.indices, batch.stamps, prio)
        if cfg.delay == 0:
            to_apply = entry
        else:
            queue.append(entry)
            to_apply = queue.popleft() if len(queue) > cfg.delay else empty
        to_apply = l_to_r(to_apply)
    loop.rep = st.replay_apply(loop.rep, *to_apply)
    loop.actor_agent = loop.move("learner", "actors")(loop.agent if cfg.delay == 0 else before)
    loop.env_steps += cfg.num_envs
    return metrics_acc, finished


def run_iteration_loop(
    tr: Trainer,
    states: TrainState,
    devices: dict[str, jax.Device],
    t0: float,
    hook: ChunkHook,
    extra: dict | None = None,
    first: int = 0,
) -> tuple[TrainState, list[dict]]:
    """Runs chunks ``first..`` of ``tr`` with one stage call per iteration and learner step (any
    delay); after each, ``hook.after(row, state getter)``."""
    cfg = tr.config
    st = iteration_stages(cfg, tr)
    loop = place_state(cfg, states, devices)
    # The update to apply before the next sample: the current one (delay 0) or, with delay k,
    # the oldest of the k + 1 newest, kept on the host so that the replay stage never waits
    # for the learner's current step. An empty entry (stamp -1) matches no slot: dropped.
    shape = (cfg.seeds, cfg.batch_size)
    empty = jax.device_put(
        (jnp.zeros(shape, jnp.int32), jnp.full(shape, -1, jnp.int32), jnp.ones(shape)),
        devices["replay"],
    )
    # the k updates the state holds (empty ones, stamp -1, at the start of a run)
    queue: collections.deque = collections.deque(
        tuple(x[:, j] for x in loop.pending) for j in range(cfg.delay)
    )

    def step():
        return _one_iteration(cfg, st, loop, queue, empty)

    def state() -> TrainState:
        return final_state(cfg, loop, [tuple(x[:, None] for x in e) for e in queue])

    rows = _drive(tr, loop, tr.iterations, step, st.evaluate, t0, hook, extra or {}, first, state)
    return state(), rows
