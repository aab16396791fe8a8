"""Uniform replay, the baseline PER is compared against: same API, uniform over filled slots."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from drlhet.replay.uniform import make_uniform_replay


def filled(capacity, n, batch=8):
    fns = make_uniform_replay(capacity, batch)
    state = fns.init({"x": jnp.float32(0)})
    state = jax.jit(fns.add)(state, {"x": jnp.arange(n, dtype=jnp.float32)})
    return fns, state


def test_ring_buffer_overwrites_the_oldest_and_stamps_inserts():
    fns, state = filled(5, 3)
    state = fns.add(state, {"x": jnp.asarray([10.0, 11.0, 12.0, 13.0])})
    np.testing.assert_array_equal(state.storage["x"], [12, 13, 2, 10, 11])
    np.testing.assert_array_equal(state.stamps, [5, 6, 2, 3, 4])
    assert int(state.size) == 5 and int(state.position) == 2 and int(state.inserted) == 7
    with pytest.raises(ValueError, match="cannot add 6"):
        fns.add(state, {"x": jnp.zeros(6)})


def test_samples_only_filled_slots_uniformly_with_unit_weights():
    fns, state = filled(100, 10, batch=1000)
    b = jax.jit(fns.sample)(state, jax.random.key(0))
    idx = np.asarray(b.indices)
    assert idx.min() >= 0 and idx.max() < 10
    np.testing.assert_array_equal(b.data["x"], idx.astype(np.float32))
    np.testing.assert_array_equal(b.stamps, idx)
    np.testing.assert_array_equal(b.weights, 1.0)
    np.testing.assert_allclose(b.probabilities, 0.1)
    counts = np.bincount(idx, minlength=10)
    assert stats.chisquare(counts).pvalue > 1e-3


def test_priority_updates_are_no_ops_and_empty_sampling_is_refused():
    fns, state = filled(10, 4)
    same = fns.update_priorities(state, jnp.asarray([0, 1]), jnp.asarray([5.0, 7.0]))
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, b)
    empty = fns.init({"x": jnp.float32(0)})
    with pytest.raises(ValueError, match="empty"):
        fns.sample(empty, jax.random.key(0))


def test_no_tree_is_made_and_an_add_that_would_overflow_is_refused():
    # the uniform buffer keeps a one-leaf tree: every int32 capacity, none refused for a tree
    fns = make_uniform_replay(2**31 - 2, 4)
    state = jax.eval_shape(fns.init, {"x": jnp.zeros((), jnp.uint8)})
    assert state.tree.nodes.shape == (4,) and state.stamps.shape == (2**31 - 2,)
    jax.eval_shape(fns.add, state, {"x": jnp.zeros((1,), jnp.uint8)})
    with pytest.raises(ValueError, match="int32 position would pass 2147483647 .* at most 1"):
        jax.eval_shape(fns.add, state, {"x": jnp.zeros((2,), jnp.uint8)})
