"""The fixed-point sum tree (drlhet.replay.fixed_point) against exact integer oracles."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from drlhet.replay import fixed_point as fp
from drlhet.replay import uint64 as u64

F = fp.DEFAULT_FRAC_BITS
BATCH = 32


def oracle_quantize(v: np.ndarray, frac_bits: int = F) -> np.ndarray:
    """Half-to-even rounding of v * 2^F in float64 (exact for float32 v), clamped to [1, 2^32 - 1]
    for positive v."""
    scaled = np.rint(np.asarray(v, np.float32).astype(np.float64) * 2.0**frac_bits)
    q = np.clip(scaled, 0, 2**32 - 1)
    v = np.asarray(v, np.float32)
    q = np.where(v < np.finfo(np.float32).tiny, 0, q)  # subnormals count as zero
    return np.where((v >= np.finfo(np.float32).tiny) & (q == 0), 1, q).astype(np.uint64)


def level_values(tree: fp.FixedTreeState) -> list[np.ndarray]:
    """Each level's node values as exact integers, root level first, leaves last."""
    lay = tree.layout
    inner = u64.to_int(u64.U64(tree.hi, tree.lo))
    levels = [
        inner[lay.offsets[lvl] : lay.offsets[lvl] + lay.widths[lvl]] for lvl in range(lay.depth)
    ]
    return [*levels, np.asarray(tree.leaves).astype(np.uint64)]


def assert_exact_sums(tree: fp.FixedTreeState) -> None:
    k, levels = tree.branching, level_values(tree)
    for parent, children in zip(levels[:-1], levels[1:], strict=True):
        sums = children.reshape(-1, k).astype(object).sum(axis=1)  # Python ints: no overflow
        np.testing.assert_array_equal(parent[: sums.size].astype(object), sums)


def oracle_find(leaves: np.ndarray, t: list[int]) -> np.ndarray:
    prefix = np.cumsum(leaves.astype(object))
    return np.array([int(np.searchsorted(prefix, x, side="right")) for x in t])


@functools.cache
def jitted(name: str):
    return jax.jit(getattr(fp, name))


def _write_cases() -> list:
    """(K, capacity): every K at 12,288 (3 x 64^2), 100,003 and 2^20. Each about 4-6 s on a
    2-core host since the descent's inner levels became one loop (2026-11-29): unrolled, XLA
    compiled the 2^20 descents for minutes, and at K 4 for over half an hour on a slow host,
    so these ran only with ``-m slow``."""
    return [(k, c) for k in (4, 16, 64) for c in (12_288, 100_003, 1 << 20)]


@pytest.mark.parametrize("k,capacity", _write_cases())
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_writes_with_duplicates_are_exact_and_descents_match_the_prefix_sums(k, capacity, data):
    tree, model = fp.init(capacity, k), {}
    pool = data.draw(st.lists(st.integers(0, capacity - 1), min_size=4, max_size=12))
    for _ in range(data.draw(st.integers(1, 4))):  # batches with many duplicates
        idx = data.draw(st.lists(st.sampled_from(pool), min_size=BATCH, max_size=BATCH))
        v = data.draw(
            st.lists(st.floats(0, 3000, width=32) | st.just(0.0), min_size=BATCH, max_size=BATCH)
        )
        keep = data.draw(st.lists(st.booleans(), min_size=BATCH, max_size=BATCH))
        tree = jitted("write")(tree, np.asarray(idx), np.float32(v), np.asarray(keep))
        for i, x, kept in zip(idx, v, keep, strict=True):
            if kept:
                model[i] = int(oracle_quantize(np.float32([x]))[0])
    leaves = np.asarray(tree.leaves).astype(np.uint64)
    expect = np.zeros_like(leaves)
    for i, q in model.items():
        expect[i] = q
    np.testing.assert_array_equal(leaves, expect)
    assert_exact_sums(tree)
    root = int(u64.to_int(fp.total(tree)))
    if root:
        t = sorted({0, root - 1, *data.draw(st.lists(st.integers(0, root - 1), max_size=8))})
        t += [t[-1]] * (10 - len(t))  # one shape, so the descent compiles once per tree
        t_u64 = u64.U64(
            jnp.asarray([x >> 32 for x in t], jnp.uint32),
            jnp.asarray([x & 0xFFFFFFFF for x in t], jnp.uint32),
        )
        draw = jitted("descend")(tree, t_u64)
        np.testing.assert_array_equal(np.asarray(draw.indices), oracle_find(leaves, t))
        assert np.all(np.asarray(draw.values) > 0)  # never a zero leaf


@settings(max_examples=80, deadline=None)
@given(
    root=st.integers(1, (1 << 64) - 1) | st.integers(1, 1000),
    b=st.sampled_from([1, 2, 3, 7, 32, 100, 257, 300]),  # few shapes: each one compiles
    seed=st.integers(0, 2**31),
    stratified=st.booleans(),
)
def test_targets_follow_the_integer_formula_and_stay_in_their_strata(root, b, seed, stratified):
    bits = np.random.default_rng(seed).integers(0, 2**32, (b, 2), dtype=np.uint64)
    r = [(int(h) << 32) | int(lo) for h, lo in bits]
    total = u64.U64(jnp.uint32(root >> 32), jnp.uint32(root & 0xFFFFFFFF))
    got = [int(x) for x in u64.to_int(fp.targets(total, jnp.asarray(bits, jnp.uint32), stratified))]
    u = [(root * x) >> 64 for x in r]
    if stratified:
        assert got == [(j * root + u[j]) // b for j in range(b)]
        assert all(j * root // b <= t < -(-(j + 1) * root // b) for j, t in enumerate(got))
    else:
        assert got == u
    assert all(0 <= t < root for t in got)


def test_quantization_saturates_counts_and_never_zeroes_a_positive_priority():
    tree = fp.init(100, 4)
    v = np.float32([0, 1e-9, 2.0**-22, 2.0**-21, 1.0, 4096.0, 1e30, 1e-40])
    tree = fp.update(tree, np.arange(8), v)
    q = np.asarray(tree.leaves[:8]).astype(np.uint64)
    # 2^-21 is half a step: rounds to even (0), then lifted to 1; 4096 = 2^(32 - F): too high;
    # 1e-40 is subnormal: zero
    np.testing.assert_array_equal(q, [0, 1, 1, 1, 2**20, 2**32 - 1, 2**32 - 1, 0])
    assert int(tree.saturated) == 5
    np.testing.assert_array_equal(q, oracle_quantize(v))
    draw, probs = fp.sample(tree, jax.random.key(0), 1000)
    assert 0 not in np.asarray(draw.indices) and np.all(np.asarray(probs) > 0)


def test_bad_input_is_refused_eagerly_and_under_jit():
    tree = fp.update(fp.init(50, 16), np.arange(3), np.float32([1, 2, 3]))
    for bad in (-1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="finite and >= 0"):
            fp.update(tree, np.array([0]), np.float32([bad]))
        refused = jax.jit(fp.update)(tree, np.array([0, 1]), np.float32([5, bad]))
        np.testing.assert_array_equal(np.asarray(refused.leaves), np.asarray(tree.leaves))
    with pytest.raises(ValueError, match="index 50 out of range"):
        fp.update(tree, np.array([50]), np.float32([1]))
    with pytest.raises(ValueError, match="empty sum tree"):
        fp.sample(fp.init(50, 16), jax.random.key(0), 4)
    with pytest.raises(ValueError, match="branching factor K 3"):
        fp.init(50, 3)
    with pytest.raises(ValueError, match="capacity 0"):
        fp.init(0, 16)
    with pytest.raises(ValueError, match=f"capacity {2**33}"):
        fp.init(2**33, 16)
    # leaves 2^31 .. 2^32 - 1 have no int32 index (a capacity of 2^32 was taken); past 2^30 a
    # leaf row rounded up to K reaches int32's largest index, a dropped write's (2^31 was taken)
    with pytest.raises(ValueError, match=f"capacity {2**30 + 1} outside \\[1, {2**30}\\]"):
        fp.init(2**30 + 1, 16)
    big = jax.eval_shape(lambda: fp.init(2**30, 64))
    assert big.leaves.shape == (2**30,)
    ones = jax.ShapeDtypeStruct((3,), jnp.int32), jax.ShapeDtypeStruct((3,), jnp.float32)
    assert jax.eval_shape(fp.write, big, *ones).leaves.shape == (2**30,)  # it traces
    with pytest.raises(ValueError, match="stratified sampling takes B"):
        fp.targets(fp.total(tree), jnp.zeros((u64.MAX_DIVISOR + 1, 2), jnp.uint32))


@pytest.mark.parametrize("stratified", [False, True])
def test_sampling_frequencies_follow_the_quantized_priorities(stratified):
    rng = np.random.default_rng(3)
    n, k = 300, 16
    v = (10.0 ** rng.uniform(-3, 1, n)).astype(np.float32)
    v[rng.random(n) < 0.1] = 0
    tree = fp.update(fp.init(n, k), np.arange(n), v)
    q = np.asarray(tree.leaves[:n]).astype(np.float64)
    draws = jax.jit(jax.vmap(lambda key: fp.sample(tree, key, 1000, stratified)[0].indices))(
        jax.random.split(jax.random.key(7), 100)
    )
    counts = np.bincount(np.asarray(draws).ravel(), minlength=n)
    assert counts[q == 0].sum() == 0
    expected = q[q > 0] / q.sum() * counts.sum()
    chi2 = stats.chisquare(counts[q > 0], expected)
    assert chi2.pvalue > 0.01, chi2
    if not stratified:  # the test has power: the float priorities' frequencies, skewed, fail
        skewed = np.where(q > 0, q * (1 + 0.3 * (np.arange(n) % 2)), 0)
        skewed = skewed[q > 0] / skewed.sum() * counts.sum()
        assert stats.chisquare(counts[q > 0], skewed).pvalue < 0.01


def test_the_documented_precision_bound_holds_over_six_decades():
    rng = np.random.default_rng(5)
    n = 20_000
    v = (10.0 ** rng.uniform(-3, 3, n)).astype(np.float32)
    tree = jitted("update")(fp.init(n, 16), np.arange(n), v)
    q = np.asarray(tree.leaves[:n]).astype(np.float64)
    exact = v.astype(np.float64) / v.astype(np.float64).sum()
    err = np.abs(q / q.sum() - exact) / exact
    bound = fp.precision_bound(float(v.min()))
    assert err.max() <= bound
    assert err.max() > bound / 50  # the bound is not vacuous: the error is of its order
    assert fp.level_bits(1 << 20, 16) == (52, 48, 44, 40, 36, 32)


def test_a_jitted_scan_equals_the_eager_calls():
    n, k, b = 500, 4, 8
    keys = jax.random.split(jax.random.key(1), 6)
    idx = np.random.default_rng(2).integers(0, n, (6, b))
    v = np.random.default_rng(3).uniform(0.01, 5, (6, b)).astype(np.float32)
    start = fp.update(fp.init(n, k), np.arange(n), np.ones(n, np.float32))

    def step(tree, xs):
        key, i, x = xs
        draw, probs = fp.sample(tree, key, b)
        return fp.write(tree, i, x), (draw.indices, probs)

    scanned, (s_idx, s_probs) = jax.jit(lambda t: jax.lax.scan(step, t, (keys, idx, v)))(start)
    tree, eager_idx, eager_probs = start, [], []
    for key, i, x in zip(keys, idx, v, strict=True):
        tree, (di, dp) = step(tree, (key, i, x))
        eager_idx.append(di)
        eager_probs.append(dp)
    for a, c in zip(jax.tree.leaves(scanned), jax.tree.leaves(tree), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
    np.testing.assert_array_equal(np.asarray(s_idx), np.stack(eager_idx))
    np.testing.assert_array_equal(np.asarray(s_probs), np.stack(eager_probs))


def test_a_kept_index_outside_the_tree_writes_nothing_as_in_the_module():
    """Index 10 of a 10-leaf tree (K 4: padding leaves 10 and 11) and -1 were written into
    the padding (a draw could then return index 10) or wrapped to the last slot; the module
    skips them, and now so does the reference. +inf quantizes to 0 (refused), as in the
    module, not to the largest leaf."""
    tree = fp.init(10, 4)
    out = fp.write(tree, jnp.array([10, -1, 3]), jnp.array([1.0, 1.0, 0.5], jnp.float32))
    assert np.asarray(out.leaves).tolist() == [0, 0, 0, 1 << 19] + [0] * 8
    assert int(fp.total(out).lo) == 1 << 19 and int(out.saturated) == 0
    q, clamped = fp.quantize(jnp.array([np.inf, -np.inf, np.nan, 3.4e38], jnp.float32), 20)
    assert np.asarray(q).tolist() == [0, 0, 0, 0xFFFFFFFF]
    assert np.asarray(clamped).tolist() == [False, False, False, True]
