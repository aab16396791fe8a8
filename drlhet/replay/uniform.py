"""Uniform replay with the prioritized buffer's API, the baseline PER is compared against.

``sample`` draws slots uniformly from the filled ones (IS weights 1); ``update_priorities`` is a
no-op. Same state type as `drlhet.replay.prioritized` (the tree stays empty and unused), and the
same checks of ``add`` (fields' shapes and dtypes, A = 0 a no-op), stamps (modulo 2^31) and
``sample`` (an empty buffer or a ``beta`` outside [0, 1]: eagerly ``ValueError``, under ``jit``
zero weights and a bit in ``sample.error``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from drlhet.replay import checks, sum_tree
from drlhet.replay.prioritized import (
    ERR_BETA,
    ERR_EMPTY,
    STAMP_MASK,
    PrioritizedReplayState,
    PrioritizedSample,
    ReplayFns,
    make_prioritized_replay,
)

__all__ = ["make_uniform_replay"]


def make_uniform_replay(capacity: int, batch_size: int) -> ReplayFns:
    """Builds a uniform ring-buffer replay of ``capacity`` slots sampling ``batch_size``."""
    # the prioritized buffer's state with a one-leaf tree in place of its tree (never used),
    # so that no capacity is refused for its tree's size and none is allocated
    no_tree = sum_tree.REFERENCE._replace(init=lambda c, k, dtype: sum_tree.init(1, 2, dtype))
    base = make_prioritized_replay(capacity, batch_size, tree_ops=no_tree)
    init = base.init

    def add(state: PrioritizedReplayState, transitions, priorities=None):
        n = checks.batch_size_of(state.storage, transitions)
        checks.check_add_size(n, capacity)
        if n == 0:
            return state
        slots = (state.position + jnp.arange(n, dtype=jnp.int32)) % capacity
        storage = jax.tree.map(
            lambda buf, x: buf.at[slots].set(jnp.asarray(x, buf.dtype)), state.storage, transitions
        )
        new_stamps = (state.inserted + jnp.arange(n, dtype=jnp.int32)) & STAMP_MASK
        return state._replace(
            storage=storage,
            stamps=state.stamps.at[slots].set(new_stamps),
            position=(state.position + n) % capacity,
            size=jnp.minimum(state.size + n, capacity),
            inserted=(state.inserted + n) & STAMP_MASK,
        )

    def sample(state: PrioritizedReplayState, key, beta: float = 0.4) -> PrioritizedSample:
        beta_ok = checks.check_beta(beta)
        if checks.concrete(state.size) and int(state.size) == 0:
            raise ValueError("cannot sample from an empty replay buffer (size 0)")
        idx = jax.random.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1), jnp.int32)
        data = jax.tree.map(lambda buf: buf[idx], state.storage)
        ones = jnp.ones((batch_size,), jnp.float32)
        probs = ones / jnp.maximum(state.size, 1).astype(jnp.float32)
        nonempty = state.size > 0
        weights = jnp.where(nonempty & beta_ok, ones, 0)
        error = jnp.where(nonempty, 0, ERR_EMPTY) | jnp.where(beta_ok, 0, ERR_BETA)
        error = jnp.asarray(error, jnp.int32)
        return PrioritizedSample(idx, state.stamps[idx], data, probs, weights, error)

    def update_priorities(state, indices, priorities, stamps=None):
        return state

    return ReplayFns(init, add, sample, update_priorities)
