"""The native C++/OpenMP backend against the pure-JAX reference: bit-identical results."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.backends import BackendUnavailable, lookup
from drlhet.replay import sum_tree as st
from drlhet.replay.prioritized import make_prioritized_replay

native = pytest.importorskip("drlhet.backends.native")
try:
    native.library_path()
except BackendUnavailable as e:  # pragma: no cover - the build is part of `make test`
    pytest.fail(f"native kernels were not built: {e}")

CASES = [(2, 1000), (3, 100), (4, 1000), (16, 5000), (64, 5000), (16, 1), (3, 7)]


def random_tree(capacity, k, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.random(capacity).astype(np.float32)
    p[rng.random(capacity) < 0.3] = 0
    p[0] = max(p[0], 0.1)
    return st.update(st.init(capacity, k), np.arange(capacity), p)


def random_updates(capacity, n, seed):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, capacity, n).astype(np.int32)
    idx[n // 2 :: 7] = idx[0]  # duplicates
    vals = (rng.random(n) * rng.choice([0, 1, 1e-3, 100], n)).astype(np.float32)
    return jnp.asarray(idx), jnp.asarray(vals)


@pytest.mark.parametrize("k, capacity", CASES)
def test_find_matches_reference_exactly(k, capacity):
    tree = random_tree(capacity, k, seed=k)
    total = float(st.total(tree))
    rng = np.random.default_rng(1)
    targets = (rng.random(513) * total).astype(np.float32)
    targets[:3] = [0, np.nextafter(np.float32(total), 0), total]
    got = jax.jit(native.find)(tree, targets)
    want = jax.jit(st.descend)(tree, targets)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("k, capacity", CASES)
def test_update_matches_reference_bitwise(k, capacity):
    tree_n = tree_r = random_tree(capacity, k, seed=k + 1)
    for step in range(4):
        idx, vals = random_updates(capacity, 300, seed=step)
        keep = jnp.asarray(np.random.default_rng(step).random(300) < 0.9)
        tree_n = jax.jit(native.update)(tree_n, idx, vals, keep)
        tree_r = jax.jit(st.write)(tree_r, idx, vals, keep)
        np.testing.assert_array_equal(tree_n.nodes, tree_r.nodes)


def test_vmap_and_scan_match_reference():
    k, capacity, b = 4, 300, 64
    trees = [random_tree(capacity, k, seed=s) for s in range(3)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *trees)
    targets = jnp.asarray(np.random.default_rng(0).random((3, b)) * 10, jnp.float32)
    for g, w in zip(
        jax.vmap(native.find)(stacked, targets), jax.vmap(st.descend)(stacked, targets), strict=True
    ):
        np.testing.assert_array_equal(g, w)
    idx = jnp.asarray(np.random.default_rng(1).integers(0, capacity, (3, b)), jnp.int32)
    vals = jnp.asarray(np.random.default_rng(2).random((3, b)), jnp.float32)
    np.testing.assert_array_equal(
        jax.vmap(native.update)(stacked, idx, vals).nodes,
        jax.vmap(st.write)(stacked, idx, vals).nodes,
    )

    def run(find, write, tree, key):
        def body(t, kk):
            k1, k2 = jax.random.split(kk)
            u = jax.random.uniform(k1, (b,)) * st.total(t)
            i, v, _ = find(t, u)
            return write(t, i, jax.random.uniform(k2, (b,)) * v + 1e-3), i

        return jax.lax.scan(body, tree, jax.random.split(key, 20))

    fn = functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=2)
    tn, in_ = fn(run)(native.find, native.update, trees[0], jax.random.key(3))
    tr, ir = fn(run)(st.descend, st.write, random_tree(capacity, k, seed=0), jax.random.key(3))
    np.testing.assert_array_equal(in_, ir)
    np.testing.assert_array_equal(tn.nodes, tr.nodes)


@pytest.mark.parametrize(
    "indices, values, match",
    [
        ([0, 10], [1.0, 1.0], "out of range"),
        ([-1, 0], [1.0, 1.0], "out of range"),
        ([0, 1], [1.0, -1.0], "finite and >= 0"),
        ([0, 1], [np.nan, 1.0], "finite and >= 0"),
        ([0, 1], [1.0, np.inf], "finite and >= 0"),
    ],
)
def test_bad_update_is_an_error_and_changes_nothing(indices, values, match):
    tree = random_tree(10, 2)
    before = np.asarray(tree.nodes).copy()
    with pytest.raises(Exception, match=match):
        jax.block_until_ready(
            jax.jit(native.update)(tree, jnp.array(indices), jnp.array(values, jnp.float32))
        )
    np.testing.assert_array_equal(tree.nodes, before)
    # dropped entries are not validated (that is how a refused batch passes through)
    out = native.update(
        tree, jnp.array(indices), jnp.array(values, jnp.float32), jnp.zeros(2, bool)
    )
    np.testing.assert_array_equal(out.nodes, before)


def test_bad_find_target_is_an_error():
    with pytest.raises(Exception, match="not finite"):
        jax.block_until_ready(native.find(random_tree(10, 2), jnp.array([np.nan], jnp.float32)))


def test_thread_count_does_not_change_results():
    tree = random_tree(5000, 16)
    targets = jnp.asarray(np.random.default_rng(0).random(4096) * 100, jnp.float32)
    idx, vals = random_updates(5000, 4096, seed=9)
    try:
        native.set_num_threads(1)
        assert native.get_num_threads() == 1
        one = native.find(tree, targets), native.update(tree, idx, vals).nodes
        native.set_num_threads(2)
        two = native.find(tree, targets), native.update(tree, idx, vals).nodes
    finally:
        native.set_num_threads(0)
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(two), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError):
        native.set_num_threads(-1)


def test_prioritized_buffer_native_equals_jax():
    example = {"obs": jnp.zeros(3), "act": jnp.int32(0)}
    states = {}
    for backend in ("jax", "native"):
        fns = make_prioritized_replay(50, 16, branching=4, backend=backend)
        add, upd, sample = jax.jit(fns.add), jax.jit(fns.update_priorities), jax.jit(fns.sample)
        s = fns.init(example)
        trace = []
        for i in range(6):
            s = add(s, {"obs": jnp.full((12, 3), i, jnp.float32), "act": jnp.arange(12) + 12 * i})
            b = sample(s, jax.random.key(i))
            trace.append(b)
            s = upd(s, b.indices, jnp.abs(b.data["obs"][:, 0] - 2.5) + 0.1, b.stamps)
        states[backend] = (s, trace)
    for a, b in zip(jax.tree.leaves(states["jax"]), jax.tree.leaves(states["native"]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_native_rejects_float64_and_missing_library(monkeypatch):
    with pytest.raises(ValueError, match="float32"):
        native.find(st.init(8, 2, jnp.float16), jnp.zeros(2, jnp.float16))
    monkeypatch.setattr(native, "_LIB_NAMES", ("no-such-library.so",))
    with pytest.raises(BackendUnavailable, match="not built"):
        native.library_path()
    assert lookup("find", "native") is native.find  # already loaded: the cache answers
