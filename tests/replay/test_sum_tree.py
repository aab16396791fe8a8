"""Tests of the pure-JAX K-ary sum tree (drlhet.replay.sum_tree)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from drlhet.replay import descent_step
from drlhet.replay import sum_tree as st

KS = [2, 3, 4, 16, 64]
CAPACITIES = [1, 5, 100, 1000, 4097]


def seq_sum(x: np.ndarray) -> np.float32:
    acc = np.float32(x[0])
    for v in x[1:]:
        acc = np.float32(acc + np.float32(v))
    return acc


def numpy_descend(nodes: np.ndarray, lay: st.TreeLayout, k: int, u: float) -> int:
    """Scalar NumPy oracle of the documented float32 descent."""
    u = np.float32(max(u, 0))
    node = 0
    for level in range(1, lay.depth + 1):
        children = nodes[lay.offsets[level] + node * k : lay.offsets[level] + node * k + k]
        cums = np.empty(k, np.float32)
        acc = np.float32(0)
        for j in range(k):
            acc = children[j] if j == 0 else np.float32(acc + children[j])
            cums[j] = acc
        count = int(np.sum(cums <= u))
        nz = np.flatnonzero(children > 0)
        child = min(count, int(nz[-1]) if nz.size else 0)
        if child > 0:
            u = np.float32(max(np.float32(u - cums[child - 1]), np.float32(0)))
        node = node * k + child
    return node


def random_tree(capacity: int, k: int, seed: int = 0, zero_frac: float = 0.3) -> st.SumTreeState:
    rng = np.random.default_rng(seed)
    p = rng.random(capacity).astype(np.float32)
    p[rng.random(capacity) < zero_frac] = 0
    if not p.any():
        p[0] = 1
    return st.update(st.init(capacity, k), np.arange(capacity), p)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("capacity", CAPACITIES)
def test_parents_are_sequential_sums_of_children(capacity, k):
    tree = random_tree(capacity, k)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, capacity, 50)
    tree = st.update(tree, idx, rng.random(50).astype(np.float32))
    nodes, lay = np.asarray(tree.nodes), tree.layout
    for level in range(lay.depth):
        for j in range(lay.widths[level + 1] // k):
            children = nodes[lay.offsets[level + 1] + j * k : lay.offsets[level + 1] + (j + 1) * k]
            assert nodes[lay.offsets[level] + j] == seq_sum(children), (level, j)
    # padding leaves stay 0 and the root pad slots are untouched
    assert np.all(nodes[lay.offsets[-1] + capacity :] == 0)
    assert np.all(nodes[1:k] == 0)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("capacity", [5, 100, 1000])
def test_find_matches_numpy_oracle(capacity, k):
    tree = random_tree(capacity, k, seed=capacity + k)
    nodes, lay = np.asarray(tree.nodes), tree.layout
    total = float(st.total(tree))
    rng = np.random.default_rng(2)
    targets = (rng.random(300) * total).astype(np.float32)
    targets[:3] = [0.0, np.nextafter(np.float32(total), 0), total]  # edges, incl. u == total
    got = np.asarray(st.find(tree, targets))
    want = [numpy_descend(nodes, lay, k, t) for t in targets]
    np.testing.assert_array_equal(got, want)
    # And against exact float64 prefix sums: the interval holds the target up to rounding.
    leaves = nodes[lay.offsets[-1] : lay.offsets[-1] + capacity].astype(np.float64)
    cum = np.cumsum(leaves)
    tol = 1e-5 * total
    lo = np.where(got > 0, cum[np.maximum(got - 1, 0)], 0.0)
    assert np.all(leaves[got] > 0)
    assert np.all((lo - tol <= targets) & (targets < cum[got] + tol))


def test_find_on_a_hand_built_tree():
    tree = st.update(st.init(5, 2), np.arange(5), np.array([1, 0, 2, 0, 3], np.float32))
    got = st.find(tree, jnp.array([0.0, 0.99, 1.0, 2.5, 3.0, 5.99, 100.0], jnp.float32))
    np.testing.assert_array_equal(got, [0, 0, 2, 2, 4, 4, 4])


@pytest.mark.parametrize("stratified", [True, False])
def test_sampling_frequencies_follow_priorities(stratified):
    p = np.array([1, 2, 3, 4, 0, 5, 6, 7, 8, 0.5, 9, 10, 11, 12, 13], np.float32)
    tree = st.update(st.init(len(p), 4), np.arange(len(p)), p)
    keys = jax.random.split(jax.random.key(1234), 200)
    sample = jax.jit(jax.vmap(lambda key: st.sample(tree, key, 250, stratified)))
    idx, probs = sample(keys)
    counts = np.bincount(np.asarray(idx).ravel(), minlength=len(p))
    expected = p / p.sum() * counts.sum()
    assert counts[p == 0].sum() == 0
    nz = p > 0
    chi2 = stats.chisquare(counts[nz], expected[nz])
    assert chi2.pvalue > 1e-3, chi2
    np.testing.assert_allclose(np.asarray(probs), (p / p.sum())[np.asarray(idx)], rtol=1e-5)


def test_zero_priority_never_sampled():
    capacity, k = 1000, 16
    rng = np.random.default_rng(3)
    p = np.where(rng.random(capacity) < 0.9, 0, rng.random(capacity) * 1e-3).astype(np.float32)
    p[-1] = 1e6  # one huge leaf after many zeros stresses rounding at the edges
    tree = st.update(st.init(capacity, k), np.arange(capacity), p)
    keys = jax.random.split(jax.random.key(0), 64)
    for stratified in (True, False):
        idx, _ = jax.vmap(lambda key, s=stratified: st.sample(tree, key, 512, s))(keys)
        assert np.all(p[np.asarray(idx)] > 0)


@pytest.mark.parametrize("k", [2, 16])
def test_duplicate_indices_last_write_wins(k):
    tree = st.init(37, k)
    tree = st.update(tree, jnp.array([3, 7, 3, 3, 7, 9]), jnp.array([1.0, 2, 3, 4, 5, 6]))
    np.testing.assert_array_equal(st.get(tree, jnp.array([3, 7, 9])), [4.0, 5, 6])
    jitted = jax.jit(st.update)(st.init(37, k), jnp.array([5, 5, 5]), jnp.array([9.0, 8, 7]))
    assert float(st.get(jitted, jnp.array([5]))[0]) == 7.0
    assert float(st.total(jitted)) == 7.0


def test_batched_update_equals_sequential_updates():
    rng = np.random.default_rng(4)
    idx = rng.integers(0, 50, 40)
    vals = rng.random(40).astype(np.float32)
    batched = st.update(st.init(50, 3), idx, vals)
    seq = st.init(50, 3)
    for i, v in zip(idx, vals, strict=True):
        seq = st.update(seq, np.array([i]), np.array([v]))
    np.testing.assert_array_equal(batched.nodes, seq.nodes)


def test_jit_matches_eager():
    tree = random_tree(300, 4)
    idx = jnp.array([1, 5, 299, 5])
    vals = jnp.array([0.5, 0.25, 3.0, 0.75], jnp.float32)
    np.testing.assert_array_equal(
        st.update(tree, idx, vals).nodes, jax.jit(st.update)(tree, idx, vals).nodes
    )
    key = jax.random.key(7)
    eager = st.sample(tree, key, 64)
    jitted = jax.jit(st.sample, static_argnums=(2, 3))(tree, key, 64)
    np.testing.assert_array_equal(eager[0], jitted[0])
    # XLA may fuse the division by the total differently: equal to the last ulp or so.
    np.testing.assert_allclose(eager[1], jitted[1], rtol=1e-6)


def test_vmap_over_keys_matches_loop():
    tree = random_tree(100, 16)
    keys = jax.random.split(jax.random.key(9), 5)
    batched, _ = jax.vmap(lambda key: st.sample(tree, key, 32))(keys)
    for key, row in zip(keys, batched, strict=True):
        np.testing.assert_array_equal(st.sample(tree, key, 32)[0], row)


def test_vmap_over_trees():
    trees = [random_tree(64, 4, seed=s) for s in range(3)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *trees)
    idx = jnp.array([[1, 2], [3, 3], [63, 0]])
    vals = jnp.ones((3, 2), jnp.float32)
    out = jax.vmap(st.update)(stacked, idx, vals)
    for i, t in enumerate(trees):
        np.testing.assert_array_equal(out.nodes[i], st.update(t, idx[i], vals[i]).nodes)


def test_no_retrace_on_second_call():
    traces = []

    @functools.partial(jax.jit, donate_argnums=0)
    def step(tree, key, vals):
        traces.append(1)
        idx, _ = st.sample(tree, key, 16)
        return st.update(tree, idx, vals)

    tree = random_tree(128, 16)
    keys = jax.random.split(jax.random.key(0), 3)
    for key in keys:
        tree = step(tree, key, jnp.full((16,), 0.5, jnp.float32))
    assert len(traces) == 1


@pytest.mark.parametrize(
    "indices, values, match",
    [
        ([0, 1], [1.0, -1.0], "finite and >= 0"),
        ([0, 1], [np.nan, 1.0], "finite and >= 0"),
        ([0, 1], [1.0, np.inf], "finite and >= 0"),
        ([0, 10], [1.0, 1.0], "out of range"),
        ([-1, 0], [1.0, 1.0], "out of range"),
    ],
)
def test_bad_update_raises_and_changes_nothing(indices, values, match):
    tree = random_tree(10, 2)
    before = np.asarray(tree.nodes).copy()
    with pytest.raises(ValueError, match=match):
        st.update(tree, np.array(indices), np.array(values, np.float32))
    np.testing.assert_array_equal(tree.nodes, before)
    # Under jit the values are unknown: the whole batch is refused.
    out = jax.jit(st.update)(tree, jnp.array(indices), jnp.array(values, jnp.float32))
    np.testing.assert_array_equal(out.nodes, before)


def test_bad_construction_and_sampling_raise():
    with pytest.raises(ValueError, match="K must be"):
        st.init(10, 1)
    with pytest.raises(ValueError, match="capacity"):
        st.init(0, 16)
    with pytest.raises(ValueError, match="empty"):
        st.sample(st.init(10, 4), jax.random.key(0), 4)
    with pytest.raises(ValueError, match="batch_size"):
        st.sample(random_tree(10, 4), jax.random.key(0), 0)
    with pytest.raises(ValueError, match="finite"):
        st.find(random_tree(10, 4), jnp.array([np.nan], jnp.float32))


@pytest.mark.parametrize("capacity, k", [(1073741826, 2), (2013265921, 16), (2**31 - 1, 256)])
def test_a_tree_whose_slots_int32_cannot_number_is_refused(capacity, k):
    # its slot numbers wrapped inside jit (the native kernels number them in int64)
    assert st.layout(capacity, k).size > st.MAX_NODES
    with pytest.raises(ValueError, match=f"{capacity} leaves at K {k} has .* more than its int32"):
        st.init(capacity, k)
    lo, hi = 1, capacity  # the largest tree that fits: the sizes grow with the capacity
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if st.layout(mid, k).size <= st.MAX_NODES else (lo, mid)
    assert jax.eval_shape(lambda: st.init(lo, k)).nodes.shape == (st.layout(lo, k).size,)


def test_a_value_finite_only_before_the_trees_dtype_is_refused():
    # 3.4e38 is a finite float32 but bfloat16's inf: checked before the cast, it was stored
    tree = st.init(4, 2, jnp.bfloat16)
    big = np.array([3.4e38], np.float32)
    with pytest.raises(ValueError, match="finite and >= 0, got inf .* bfloat16"):
        st.update(tree, np.array([0]), big)
    out = jax.jit(st.update)(tree, jnp.array([0]), jnp.asarray(big))
    np.testing.assert_array_equal(np.asarray(out.nodes, np.float32), 0)


def test_a_total_that_overflowed_is_not_sampled():
    # finite leaves whose sum is inf: the descent would find one leaf with probability 0
    tree = st.update(st.init(4, 2), np.array([0, 1]), np.array([3e38, 3e38], np.float32))
    assert np.isinf(st.total(tree))
    with pytest.raises(ValueError, match="total is inf"):
        st.sample(tree, jax.random.key(0), 4)


def test_root_exact_after_a_million_updates():
    capacity, batch, steps = 2**16, 1000, 1000
    tree = st.init(capacity, 16)

    @functools.partial(jax.jit, donate_argnums=0)
    def run(tree, key):
        def body(t, k):
            k1, k2 = jax.random.split(k)
            idx = jax.random.randint(k1, (batch,), 0, capacity)
            vals = jax.random.exponential(k2, (batch,), jnp.float32)
            return st.write(t, idx, vals), None

        return jax.lax.scan(body, tree, jax.random.split(key, steps))[0]

    tree = run(tree, jax.random.key(42))
    # no drift: the root is the one a tree built from the final leaves at once holds, bit for
    # bit (each parent is summed again from its children, never adjusted by a delta) ...
    rebuilt = st.write(st.init(capacity, 16), jnp.arange(capacity), st.leaves(tree))
    assert np.asarray(st.total(tree)).tobytes() == np.asarray(st.total(rebuilt)).tobytes()
    # ... and that root is the float64 sum of the leaves to float32 rounding
    leaves = np.asarray(st.leaves(tree), np.float64)
    assert abs(float(st.total(tree)) - leaves.sum()) <= 1e-6 * leaves.sum()


def test_dropped_entries_never_shadow_a_kept_duplicate():
    tree = st.write(
        st.init(8, 2),
        jnp.array([3, 3, 5]),
        jnp.array([1.0, 2.0, 4.0]),
        jnp.array([True, False, True]),
    )
    np.testing.assert_array_equal(st.get(tree, jnp.array([3, 5])), [1.0, 4.0])
    assert float(st.total(tree)) == 5.0


@pytest.mark.parametrize("k, capacity", [(3, 100), (300, 700)])
def test_the_looped_descent_is_the_unrolled_one_bit_for_bit(monkeypatch, k, capacity):
    """A node wider than `UNROLLED_MAX_K` is stepped through in a loop (an unrolled K = 1024
    compiled for minutes): the same additions in the same order, so the same leaves, values
    and root, at zero children and at targets rounding pushes past the last non-zero one."""
    rng = np.random.default_rng(k)
    leaves = rng.exponential(size=capacity).astype(np.float32)
    leaves[rng.random(capacity) < 0.3] = 0  # zero-priority children, whole zero nodes
    leaves[-k:] = 0
    tree = st.write(st.init(capacity, k), jnp.arange(capacity), jnp.asarray(leaves))
    total = np.float32(st.total(tree))
    edge = [0, total, np.nextafter(total, np.float32(0)), total * np.float32(0.999999)]
    targets = jnp.asarray(np.concatenate([rng.random(60) * total, edge]), jnp.float32)
    got = []
    for unrolled in (10**6, 0):
        monkeypatch.setattr(descent_step, "UNROLLED_MAX_K", unrolled)
        descend = jax.jit(lambda t, x: st.descend(t, x))  # traced anew (a jit of st.descend
        got.append([np.asarray(x) for x in descend(tree, targets)])  # is cached once)
    for a, b in zip(*got, strict=True):
        assert a.tobytes() == b.tobytes()
    assert np.all(leaves[got[0][0]] > 0)  # never a zero leaf
