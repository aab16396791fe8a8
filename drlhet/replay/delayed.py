"""Priority updates delayed by k learner steps (Zhang, Meng, Prasanna, TPDS 2023, Sec. 5).

Strict PER makes sample(t+1) wait for the priorities of batch t, which wait for train(t). With
delay k >= 1 the priorities computed at learner step t are applied after sample(t+k), so the
samples of steps t+1..t+k do not wait for them; k = 0 is strict PER, exactly. A queue of the last
k updates lives in the training state; insertion stamps make an update to a slot that was
overwritten in the meantime a no-op (`drlhet.replay.prioritized`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from drlhet.replay.prioritized import ReplayFns

__all__ = ["PendingUpdates", "DelayedUpdates", "after_sample", "make_delayed_updates"]


class PendingUpdates(NamedTuple):
    """Updates not applied yet, oldest first. Each field ``[k, B]``."""

    indices: jax.Array
    stamps: jax.Array  # -1: an empty entry (stamps of filled slots are >= 0: it is dropped)
    priorities: jax.Array


class DelayedUpdates(NamedTuple):
    """Functions of a k-step priority-update queue.

    Attributes:
      init: ``() -> PendingUpdates``, empty.
      push: ``(replay_state, pending, indices [B], stamps [B], priorities [B])
        -> (replay_state, pending)``: queues this update and applies the one pushed k calls ago
        (with k = 0, applies this one at once).
    """

    init: Any
    push: Any


def after_sample(stamps: jax.Array, sampled: jax.Array) -> jax.Array:
    """``stamps`` ``[B]`` of a delayed update, made to depend on ``sampled`` ``[B]`` (the
    indices this learner step's sample just drew; the values are unchanged unless one of them
    is the int32 minimum, which no sample draws).

    A delayed update does not depend on the sample it follows, so nothing orders its in-place
    write of the tree after the sample's reads of it, and XLA keeps the reads intact by copying
    the whole tree (twice per learner step inside ``lax.scan``: about 9 MB at 2^20 leaves, which
    made the fused loop 4-6x slower with ``delay >= 1`` than with 0 at 2^20 on this 2-core
    machine). Routing the stamps, which gate the write, through the sampled indices orders it
    as the data of a strict update would.
    """
    # never false for a sampled index; XLA cannot prove that, so the dependency stays (an
    # always-true test it can fold, or an optimization barrier, leaves the copies in)
    return jnp.where(jnp.min(sampled) != jnp.iinfo(jnp.int32).min, stamps, -1)


def make_delayed_updates(replay: ReplayFns, delay: int, batch_size: int) -> DelayedUpdates:
    """Builds a priority-update queue of ``delay`` learner steps for ``replay``."""
    if delay < 0:
        raise ValueError(f"delay must be >= 0, got {delay}")

    def init() -> PendingUpdates:
        return PendingUpdates(
            jnp.zeros((delay, batch_size), jnp.int32),
            jnp.full((delay, batch_size), -1, jnp.int32),
            jnp.ones((delay, batch_size), jnp.float32),
        )

    def push(rep, pending: PendingUpdates, indices, stamps, priorities):
        if delay == 0:
            return replay.update_priorities(rep, indices, priorities, stamps), pending
        # `indices` are the ones just sampled: the write waits for the sample's reads
        stamps0 = after_sample(pending.stamps[0], indices)
        rep = replay.update_priorities(rep, pending.indices[0], pending.priorities[0], stamps0)
        new = (indices, stamps, priorities.astype(jnp.float32))
        pending = PendingUpdates(
            *(jnp.concatenate([q[1:], x[None]], axis=0) for q, x in zip(pending, new, strict=True))
        )
        return rep, pending

    return DelayedUpdates(init, push)
