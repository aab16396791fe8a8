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

__all__ = ["PendingUpdates", "DelayedUpdates", "make_delayed_updates"]


class PendingUpdates(NamedTuple):
    """Updates not applied yet, oldest first. Each field ``[k, B]``."""

    indices: jax.Array
    stamps: jax.Array  # -1: an empty entry (matches no filled slot, so it is dropped)
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
        rep = replay.update_priorities(
            rep, pending.indices[0], pending.priorities[0], pending.stamps[0]
        )
        new = (indices, stamps, priorities.astype(jnp.float32))
        pending = PendingUpdates(
            *(jnp.concatenate([q[1:], x[None]], axis=0) for q, x in zip(pending, new, strict=True))
        )
        return rep, pending

    return DelayedUpdates(init, push)
