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
import numpy as np

from drlhet.replay import checks
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
        (with k = 0, applies this one at once). What it queues is checked first, as the update
        will check it (eagerly a bad index or priority raises ``ValueError``, nothing queued).
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
    """Builds a priority-update queue of ``delay`` learner steps for ``replay`` (paper
    Sec. 4.3: the update of a learner step is applied ``delay`` steps later).

    Args:
      replay: the buffer the updates go to.
      delay: k >= 0, learner steps an update waits (0: applied at once, no queue).
      batch_size: B, entries of one learner step's update (each push takes ``[B]`` arrays).

    Raises:
      ValueError: a ``delay`` or ``batch_size`` that is not such an integer; a push of another
        size than ``B`` or of values the buffer's update would refuse (eagerly; the queue and
        the buffer unchanged).
    """
    if not _integer(delay) or delay < 0:
        raise ValueError(f"delay must be an integer >= 0, got {delay!r}")
    if not _integer(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    delay, batch_size = int(delay), int(batch_size)

    def init() -> PendingUpdates:
        return PendingUpdates(
            jnp.zeros((delay, batch_size), jnp.int32),
            jnp.full((delay, batch_size), -1, jnp.int32),
            jnp.ones((delay, batch_size), jnp.float32),
        )

    def push(rep, pending: PendingUpdates, indices, stamps, priorities):
        if delay == 0:
            if jnp.shape(indices) != (batch_size,):  # as a queue of this B would refuse it
                raise ValueError(
                    f"index array must have shape ({batch_size},), got {jnp.shape(indices)}"
                )
            return replay.update_priorities(rep, indices, priorities, stamps), pending
        new = _checked(replay, rep, indices, stamps, priorities, batch_size)
        # `indices` are the ones just sampled: the write waits for the sample's reads
        stamps0 = after_sample(pending.stamps[0], new[0])
        rep = replay.update_priorities(rep, pending.indices[0], pending.priorities[0], stamps0)
        pending = PendingUpdates(
            *(jnp.concatenate([q[1:], x[None]], axis=0) for q, x in zip(pending, new, strict=True))
        )
        return rep, pending

    return DelayedUpdates(init, push)


def _integer(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def _checked(
    replay: ReplayFns, rep, indices, stamps, priorities, b: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(indices, stamps, priorities)`` ``[B]`` to queue (int32, int32, float32), checked now as
    `ReplayFns.update_priorities` checks them when they are applied: dtypes and shapes always;
    eagerly, an index outside the filled slots and a negative, NaN or infinite priority raise
    ``ValueError`` (queued, a bad value would fail every later push, the queue stuck behind
    it; the buffer's own check, `ReplayFns.check_priorities`, says what its alpha and tree
    refuse); a positive priority float32 makes 0 is queued as float32's smallest, still drawn as
    when applied at once. Under ``jit`` an index int32 cannot hold is queued as -1 and its
    stamp as -1 (never matched); the update that applies the batch refuses it
    (``state.error``)."""
    idx, _ = checks.indices_in_range(indices, rep.size)  # before any cast: 2^32 + 3 is not 3
    if idx.shape != (b,):
        raise ValueError(f"index array must have shape ({b},), got {idx.shape}")
    want, _ = checks.int32_or_never(stamps, (b,), "stamps")  # -1 where int32 cannot hold it
    checks.leaf_values(priorities, 0.0, jnp.float32, (b,))  # eager: raises on a bad value
    if replay.check_priorities is not None:  # p ** alpha within the tree's range (eager)
        replay.check_priorities(priorities)
    return idx, want, checks.cast_keeping_sign(priorities, jnp.float32)
