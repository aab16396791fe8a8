"""Tests of the prioritized replay buffer (drlhet.replay.prioritized)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from drlhet.replay import sum_tree as st
from drlhet.replay.prioritized import (
    ERR_INDEX,
    ERR_PRIORITY,
    make_prioritized_replay,
    raise_on_error,
)

ALPHA = 0.6


def example():
    return {"obs": jnp.zeros((3,), jnp.float32), "act": jnp.int32(0)}


def batch(values) -> dict:
    v = np.asarray(values, np.float32)
    return {"obs": np.stack([v, v + 1, v + 2], axis=1), "act": v.astype(np.int32)}


def tree_equal(a, b) -> bool:
    return all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def test_add_sample_roundtrip_and_max_priority():
    fns = make_prioritized_replay(8, 4, alpha=ALPHA, branching=3)
    s = fns.init(example())
    s = fns.add(s, batch([10, 11, 12]))
    assert int(s.size) == 3 and int(s.position) == 3
    np.testing.assert_allclose(st.leaves(s.tree)[:3], 1.0)  # initial max priority 1
    s = fns.update_priorities(s, jnp.array([1]), jnp.array([5.0]))
    s = fns.add(s, batch([13]))  # new items get the running max (5)
    np.testing.assert_allclose(st.leaves(s.tree)[3], 5.0**ALPHA, rtol=1e-6)
    b = fns.sample(s, jax.random.key(0))
    # data rows belong to the sampled slots
    np.testing.assert_array_equal(b.data["act"], np.asarray(b.indices) + 10)
    np.testing.assert_array_equal(b.data["obs"][:, 1], np.asarray(b.indices) + 11)


def test_ring_buffer_wraps_and_stamps_count():
    fns = make_prioritized_replay(5, 2, branching=2)
    s = fns.init(example())
    for start in range(0, 12, 3):
        s = fns.add(s, batch(np.arange(start, start + 3)))
    # 12 items into 5 slots: slot i holds the last item written there
    np.testing.assert_array_equal(s.storage["act"], [10, 11, 7, 8, 9])
    np.testing.assert_array_equal(s.stamps, [10, 11, 7, 8, 9])
    assert int(s.size) == 5 and int(s.position) == 2 and int(s.inserted) == 12


def test_importance_weights_formula():
    fns = make_prioritized_replay(4, 64, alpha=1.0, branching=2)
    s = fns.add(fns.init(example()), batch([0, 1, 2, 3]), jnp.array([1.0, 2.0, 3.0, 4.0]))
    b = fns.sample(s, jax.random.key(3), beta=0.5)
    p = np.array([1, 2, 3, 4]) / 10.0
    np.testing.assert_allclose(b.probabilities, p[np.asarray(b.indices)], rtol=1e-6)
    w = (4 * p[np.asarray(b.indices)]) ** -0.5
    np.testing.assert_allclose(b.weights, w / w.max(), rtol=1e-5)
    assert float(jnp.max(b.weights)) == pytest.approx(1.0)


def test_stale_stamps_are_dropped():
    fns = make_prioritized_replay(4, 2, alpha=1.0, branching=2)
    s = fns.add(fns.init(example()), batch([0, 1, 2, 3]))
    b = fns.sample(s, jax.random.key(0))
    s = fns.add(s, batch([4]))  # overwrites slot 0 with a new transition (stamp 4)
    idx = jnp.array([0, 1])
    stamps = jnp.array([0, 1])  # as sampled before the overwrite
    s2 = fns.update_priorities(s, idx, jnp.array([7.0, 9.0]), stamps)
    np.testing.assert_allclose(st.leaves(s2.tree)[:2], [1.0, 9.0])  # slot 0 kept its priority
    assert b.stamps.shape == (2,)
    # without stamps nothing is dropped
    s3 = fns.update_priorities(s, idx, jnp.array([7.0, 9.0]))
    np.testing.assert_allclose(st.leaves(s3.tree)[:2], [7.0, 9.0])


def test_update_duplicates_last_write_wins():
    fns = make_prioritized_replay(6, 2, alpha=1.0, branching=4)
    s = fns.add(fns.init(example()), batch(range(6)))
    s = fns.update_priorities(s, jnp.array([2, 4, 2]), jnp.array([3.0, 4.0, 0.5]))
    np.testing.assert_allclose(np.asarray(st.leaves(s.tree))[[2, 4]], [0.5, 4.0])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda f, s: f.update_priorities(s, jnp.array([0]), jnp.array([-1.0])), "finite"),
        (lambda f, s: f.update_priorities(s, jnp.array([0]), jnp.array([np.nan])), "finite"),
        (lambda f, s: f.update_priorities(s, jnp.array([0]), jnp.array([np.inf])), "finite"),
        (lambda f, s: f.update_priorities(s, jnp.array([3]), jnp.array([1.0])), "outside"),
        (lambda f, s: f.update_priorities(s, jnp.array([-1]), jnp.array([1.0])), "outside"),
        (lambda f, s: f.add(s, batch([1, 2]), jnp.array([1.0, np.nan])), "finite"),
        (lambda f, s: f.add(s, batch(range(9))), "capacity"),
    ],
)
def test_bad_input_raises_and_leaves_buffer_unchanged(call, match):
    fns = make_prioritized_replay(8, 2)
    s = fns.add(fns.init(example()), batch([0, 1, 2]))
    snapshot = jax.tree.map(np.array, s)
    with pytest.raises(ValueError, match=match):
        call(fns, s)
    assert tree_equal(s, snapshot)


@pytest.mark.parametrize(
    "indices, priorities, bit",
    [([0, 1], [1.0, np.nan], ERR_PRIORITY), ([0, 5], [1.0, 1.0], ERR_INDEX)],
)
def test_refused_under_jit_sets_error_and_changes_nothing(indices, priorities, bit):
    fns = make_prioritized_replay(8, 2)
    s = fns.add(fns.init(example()), batch([0, 1, 2]))
    out = jax.jit(fns.update_priorities)(s, jnp.array(indices), jnp.array(priorities))
    assert int(out.error) == bit
    assert tree_equal(out._replace(error=s.error), s)
    with pytest.raises(ValueError, match="refused"):
        raise_on_error(out)
    refused_add = jax.jit(fns.add)(s, batch([7, 8]), jnp.array([1.0, -2.0]))
    assert int(refused_add.error) == ERR_PRIORITY
    assert tree_equal(refused_add._replace(error=s.error), s)


def test_sampling_empty_buffer():
    fns = make_prioritized_replay(8, 2)
    s = fns.init(example())
    with pytest.raises(ValueError, match="empty"):
        fns.sample(s, jax.random.key(0))
    b = jax.jit(fns.sample)(s, jax.random.key(0))  # traced: zero weights, nothing to learn from
    np.testing.assert_array_equal(b.weights, 0)


def test_bad_configuration():
    with pytest.raises(ValueError, match="batch_size"):
        make_prioritized_replay(8, 0)
    with pytest.raises(ValueError, match="capacity"):
        make_prioritized_replay(0, 2)
    with pytest.raises(ValueError, match="K must be"):
        make_prioritized_replay(8, 2, branching=1)
    with pytest.raises(ValueError, match="alpha"):
        make_prioritized_replay(8, 2, alpha=float("nan"))


# ----------------------------------------------------------------- random sequences vs NumPy
CAP, ADD, UPD, BATCH = 7, 3, 4, 5


@functools.cache
def jitted_fns():
    fns = make_prioritized_replay(CAP, BATCH, alpha=ALPHA, branching=3)
    return fns, jax.jit(fns.add), jax.jit(fns.update_priorities), jax.jit(fns.sample)


class NumpyModel:
    def __init__(self):
        self.act = np.zeros(CAP, np.int64)
        self.prio = np.zeros(CAP, np.float64)  # raw priorities
        self.size = self.pos = 0
        self.max_p = 1.0

    def add(self, values, prios):
        for v, p in zip(values, prios, strict=True):
            self.act[self.pos] = v
            self.prio[self.pos] = self.max_p if p is None else p
            self.pos = (self.pos + 1) % CAP
            self.size = min(self.size + 1, CAP)
        if prios[0] is not None:
            self.max_p = max(self.max_p, max(prios))

    def update(self, idx, prios):
        for i, p in zip(idx, prios, strict=True):
            self.prio[i] = p
        self.max_p = max(self.max_p, max(prios))


# zero, or a priority float32 keeps positive: 2e-211 is positive for the float64 model and 0 in
# the float32 buffer (what a priority that underflows should do is issue 19's edge cases)
priority = hst.one_of(hst.just(0.0), hst.floats(1e-6, 10))
op_strategy = hst.one_of(
    hst.tuples(
        hst.just("add"),
        hst.lists(hst.integers(0, 99), min_size=ADD, max_size=ADD),
        hst.booleans(),
        hst.lists(priority, min_size=ADD, max_size=ADD),
    ),
    hst.tuples(
        hst.just("update"),
        hst.lists(hst.integers(0, CAP - 1), min_size=UPD, max_size=UPD),
        hst.lists(priority, min_size=UPD, max_size=UPD),
    ),
    hst.tuples(hst.just("sample"), hst.integers(0, 2**31 - 1)),
)


@settings(max_examples=40, deadline=None)
@given(hst.lists(op_strategy, min_size=1, max_size=12))
def test_random_operation_sequence_matches_numpy_model(ops):
    fns, add, update, sample = jitted_fns()
    s = fns.init(example())
    model = NumpyModel()
    for op in ops:
        if op[0] == "add":
            _, values, given_p, prios = op
            s = add(s, batch(values), jnp.array(prios, jnp.float32) if given_p else None)
            model.add(values, prios if given_p else [None] * ADD)
        elif op[0] == "update":
            _, idx, prios = op
            idx = [i % max(model.size, 1) for i in idx]
            s = update(s, jnp.array(idx), jnp.array(prios, jnp.float32))
            if model.size:
                model.update(idx, np.float32(prios).tolist())
            else:
                assert int(s.error) == ERR_INDEX  # refused: no filled slot yet
                s = s._replace(error=jnp.zeros((), jnp.int32))
        elif model.size and model.prio[: model.size].sum() > 0:
            b = sample(s, jax.random.key(op[1]))
            idx = np.asarray(b.indices)
            assert np.all(idx < model.size)
            assert np.all(model.prio[idx] > 0)
            np.testing.assert_array_equal(np.asarray(b.data["act"]), model.act[idx])
            expect = model.prio**ALPHA / (model.prio**ALPHA).sum()
            np.testing.assert_allclose(b.probabilities, expect[idx], rtol=1e-4)
        assert int(s.error) == 0
        assert int(s.size) == model.size
        np.testing.assert_array_equal(
            np.asarray(s.storage["act"])[: model.size], model.act[: model.size]
        )
        np.testing.assert_allclose(st.leaves(s.tree), model.prio**ALPHA, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(s.max_priority), model.max_p, rtol=1e-6)


# ----------------------------------------------------------------- no hidden copy of the tree
def tree_copies(fn, *args) -> int:
    """Counts whole-tree `copy` instructions in the compiled program of ``fn``."""
    text = jax.jit(fn, donate_argnums=0).lower(*args).compile().as_text()
    size = args[0].tree.nodes.shape[0] if hasattr(args[0], "tree") else args[0].nodes.shape[0]
    return sum(1 for line in text.splitlines() if " copy(" in line and f"[{size}]" in line)


def test_fused_step_makes_no_copy_of_the_tree():
    capacity, b = 2**16, 256
    fns = make_prioritized_replay(capacity, b)
    s = fns.add(fns.init(example()), batch(np.arange(capacity) % 100))

    def steps(s, key):
        def body(s, k):
            k1, k2 = jax.random.split(k)
            sample = fns.sample(s, k1)
            new = jax.random.uniform(k2, (b,)) + 1e-3  # independent of the sample's weights
            s = fns.update_priorities(s, sample.indices, new, sample.stamps)
            return s, sample.weights.sum() + sample.probabilities.sum()

        return jax.lax.scan(body, s, jax.random.split(key, 4))

    assert tree_copies(steps, s, jax.random.key(0)) == 0

    # The detector is not vacuous: re-reading the root after sampling, a pattern this module
    # avoids, makes XLA copy the tree.
    def bad(s, key):
        def body(s, k):
            sample = fns.sample(s, k)
            reread = sample.probabilities / st.total(s.tree)
            return fns.update_priorities(s, sample.indices, jnp.ones((b,))), reread.sum()

        return jax.lax.scan(body, s, jax.random.split(key, 4))

    assert tree_copies(bad, s, jax.random.key(0)) > 0
