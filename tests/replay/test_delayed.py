"""Priority updates delayed by k learner steps: exactly which priorities each sample sees."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.replay import sum_tree as st
from drlhet.replay.delayed import make_delayed_updates
from drlhet.replay.prioritized import make_prioritized_replay


@pytest.mark.parametrize("k", [0, 1, 3])
def test_each_sample_sees_updates_up_to_k_steps_old(k):
    capacity = 8
    replay = make_prioritized_replay(capacity, 1, alpha=1.0, branching=2)
    delayed = make_delayed_updates(replay, k, 1)
    rep = replay.add(
        replay.init({"x": jnp.float32(0)}), {"x": jnp.arange(capacity, dtype=jnp.float32)}
    )
    pending = delayed.init()
    push = jax.jit(delayed.push)
    for s in range(12):
        # what sample(s) sees: the updates of steps t <= s - k - 1 (scripted learner: step t sets
        # slot t % 8 to priority t + 2)
        expected = np.ones(capacity)
        for t in range(s - k):
            expected[t % capacity] = t + 2
        np.testing.assert_array_equal(st.leaves(rep.tree), expected, err_msg=f"step {s}")
        replay.sample(rep, jax.random.key(s))  # sample(s) happens here, before the push
        idx = jnp.array([s % capacity])
        rep, pending = push(rep, pending, idx, rep.stamps[idx], jnp.array([s + 2.0]))


def test_a_delayed_update_to_an_overwritten_slot_is_dropped():
    replay = make_prioritized_replay(4, 1, alpha=1.0, branching=2)
    delayed = make_delayed_updates(replay, 2, 1)
    rep = replay.add(replay.init({"x": jnp.float32(0)}), {"x": jnp.zeros(4)})
    pending = delayed.init()
    idx = jnp.array([0])
    rep, pending = delayed.push(rep, pending, idx, rep.stamps[idx], jnp.array([9.0]))
    rep = replay.add(rep, {"x": jnp.ones(1)})  # slot 0 now holds a new transition
    for _ in range(2):  # the queued update reaches the buffer two pushes later...
        rep, pending = delayed.push(
            rep, pending, jnp.array([1]), rep.stamps[jnp.array([1])], jnp.array([1.0])
        )
    assert float(st.get(rep.tree, idx)[0]) == 1.0  # ...and is dropped: stale stamp


def test_negative_delay_is_an_error():
    with pytest.raises(ValueError, match="delay"):
        make_delayed_updates(make_prioritized_replay(4, 1), -1, 1)


@pytest.mark.parametrize("how", ["numpy", "x64 jit"])
def test_a_queued_positive_priority_below_float32s_range_stays_drawable(how):
    """Applied at once, a float64 1e-50 stays drawable (at least 2^-60); queued, it was cast to
    float32 first, became 0 and was never drawn again."""
    replay = make_prioritized_replay(4, 1, alpha=0.6, branching=2)
    delayed = make_delayed_updates(replay, 1, 1)
    rep = replay.add(replay.init({"x": jnp.float32(0)}), {"x": jnp.zeros(4)})
    zeros = replay.update_priorities(rep, jnp.arange(4), jnp.zeros(4))
    direct = replay.update_priorities(zeros, jnp.arange(1), np.array([1e-50]))

    def queued(push, tiny):
        rep, pending = push(zeros, delayed.init(), jnp.arange(1), zeros.stamps[:1], tiny)
        zero = np.zeros(1, tiny.dtype)  # the next push applies the queued one
        return push(rep, pending, jnp.arange(1, 2), zeros.stamps[1:2], zero)[0]

    if how == "numpy":
        rep = queued(delayed.push, np.array([1e-50]))
    else:
        with jax.enable_x64(True):
            rep = queued(jax.jit(delayed.push), jnp.array([1e-50], jnp.float64))
    assert int(rep.error) == 0
    np.testing.assert_array_equal(st.leaves(rep.tree), st.leaves(direct.tree))
    assert np.asarray(st.leaves(rep.tree))[0] > 0
