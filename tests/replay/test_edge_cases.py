"""Edge cases of the replay buffers (issue 19, defects 1-6): what is refused, what is clamped,
and what stays representable, on every replay backend that loads here."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet import backends
from drlhet.replay import checks
from drlhet.replay import fixed_point as fp
from drlhet.replay import sum_tree as st
from drlhet.replay.delayed import make_delayed_updates
from drlhet.replay.prioritized import (
    ERR_BETA,
    ERR_EMPTY,
    ERR_INDEX,
    ERR_PRIORITY,
    make_prioritized_replay,
    raise_on_error,
)
from drlhet.replay.uniform import make_uniform_replay

EXAMPLE = {"obs": jnp.zeros((3,), jnp.float32), "act": jnp.int32(0)}
# every replay backend the registry runs (cuda's under its host emulation on a CPU device); a
# fixed list had left cuda out
REPLAY = [b.name for b in backends.providing("replay") if not b.modeled_only]


def rows(n: int, start: int = 0) -> dict:
    v = np.arange(start, start + n)
    return {
        "obs": np.stack([v, v + 1, v + 2], axis=1).astype(np.float32),
        "act": v.astype(np.int32),
    }


def filled(n=5, capacity=8, alpha=1.0, tree_ops=st.REFERENCE, branching=2, **kw):
    fns = make_prioritized_replay(
        capacity, 4, alpha=alpha, branching=branching, tree_ops=tree_ops, **kw
    )
    return fns, fns.add(fns.init(EXAMPLE), rows(n))


def snapshot(tree) -> list[np.ndarray]:
    return [np.array(x) for x in jax.tree.leaves(tree)]


def assert_same(tree, snap) -> None:
    got = jax.tree.leaves(tree)
    assert len(got) == len(snap)
    for a, b in zip(got, snap, strict=True):
        np.testing.assert_array_equal(a, b)


def leaves_of(state) -> np.ndarray:
    return np.asarray(st.leaves(state.tree))


def load(name: str) -> st.TreeOps:
    try:
        return backends.tree_ops(name)
    except backends.BackendUnavailable as e:
        pytest.skip(f"missing library: backend {name!r} needs {backends.get(name).needs} ({e})")


# ------------------------------------------------------------- 1: indices are integers, in range
@pytest.mark.parametrize(
    "indices, match",
    [
        (np.array([2**32 + 3], np.int64), "index 4294967299 outside"),
        (np.array([3.7]), "integer dtype"),
        (np.array([True]), "integer dtype"),
        ([3.0], "integer dtype"),
    ],
)
def test_update_refuses_indices_a_cast_would_change(indices, match):
    fns, s = filled()
    before = snapshot(s)
    with pytest.raises(ValueError, match=match):
        fns.update_priorities(s, indices, np.float32([9.0]))
    assert_same(s, before)


def test_update_under_jit_refuses_float_indices_and_wrapping_ones():
    fns, s = filled()
    with pytest.raises(ValueError, match="integer dtype"):
        jax.jit(fns.update_priorities)(s, jnp.float32([3.7]), jnp.float32([9.0]))
    # uint32 2^32 - 1 is -1 once cast to int32: refused, not written to slot -1
    out = jax.jit(fns.update_priorities)(s, jnp.uint32([2**32 - 1, 1]), jnp.float32([9.0, 9.0]))
    assert int(out.error) == ERR_INDEX
    np.testing.assert_array_equal(leaves_of(out), leaves_of(s))
    ok = jax.jit(fns.update_priorities)(s, jnp.uint8([3]), jnp.float32([9.0]))  # small dtypes
    assert int(ok.error) == 0 and leaves_of(ok)[3] == 9.0


def test_update_under_jit_with_x64_refuses_an_index_past_int32():
    fns, s = filled()
    with jax.enable_x64(True):
        big = jnp.asarray([2**32 + 3], jnp.int64)
        out = jax.jit(fns.update_priorities)(s, big, jnp.float32([9.0]))
    assert int(out.error) == ERR_INDEX
    np.testing.assert_array_equal(leaves_of(out), leaves_of(s))


def test_tree_updates_refuse_float_indices():
    with pytest.raises(ValueError, match="integer dtype"):
        st.update(st.init(8, 2), np.array([3.7]), np.float32([1.0]))
    with pytest.raises(ValueError, match="integer dtype"):
        fp.update(fp.init(8, 4), np.array([3.7]), np.float32([1.0]))
    with pytest.raises(ValueError, match="out of range"):
        st.update(st.init(8, 2), np.array([2**32 + 3]), np.float32([1.0]))


# ------------------------------------------------------------- 2: the representable range
@pytest.mark.parametrize(
    "priorities", [[3e38, 3e38], [1e38] * 2, [checks.PRIORITY_MAX * 2, 1.0], [np.inf, 1.0]]
)
def test_a_priority_above_the_range_is_refused(priorities):
    fns, s = filled()
    before = snapshot(s)
    with pytest.raises(ValueError, match="above the largest representable|finite"):
        fns.update_priorities(s, np.arange(2), np.float32(priorities))
    with pytest.raises(ValueError, match="above the largest representable|finite"):
        fns.add(s, rows(2), np.float32(priorities))
    assert_same(s, before)
    out = jax.jit(fns.update_priorities)(s, jnp.arange(2), jnp.float32(priorities))
    assert int(out.error) == ERR_PRIORITY
    np.testing.assert_array_equal(leaves_of(out), leaves_of(s))
    added = jax.jit(fns.add)(s, rows(2), jnp.float32(priorities))
    assert int(added.error) == ERR_PRIORITY and int(added.size) == int(s.size)


def test_priorities_fixed_inside_a_jitted_function_are_accepted():
    # a constant inside jit is a concrete array, its power (alpha != 1) a tracer: the eager
    # check must not convert the tracer to NumPy (it once did, and every such update failed)
    fns, s = filled(alpha=0.6)
    fixed = jnp.float32([2.0, 3.0])
    out = jax.jit(lambda st_: fns.update_priorities(st_, jnp.arange(2), fixed))(s)
    assert int(out.error) == 0
    np.testing.assert_allclose(leaves_of(out)[:2], np.float32([2.0, 3.0]) ** 0.6, rtol=1e-6)


def test_the_range_is_decided_after_alpha():
    # 1e12 ** 0.5 = 1e6 is in range although 1e12 is not: the check is on p ** alpha
    fns, s = filled(alpha=0.5)
    out = fns.update_priorities(s, np.arange(2), np.float32([1e12, 1.0]))
    np.testing.assert_allclose(leaves_of(out)[:2], [1e6, 1.0], rtol=1e-6)


def test_the_largest_priorities_keep_the_total_and_the_weights_finite():
    capacity = 64
    fns, s = filled(n=capacity, capacity=capacity)
    s = fns.update_priorities(s, np.arange(capacity), np.full(capacity, checks.PRIORITY_MAX))
    assert float(st.total(s.tree)) == checks.PRIORITY_MAX * capacity <= checks.TOTAL_MAX
    b = fns.sample(s, jax.random.key(0), beta=1.0)
    np.testing.assert_allclose(b.probabilities, 1 / capacity, rtol=1e-6)
    np.testing.assert_allclose(b.weights, 1.0, rtol=1e-6)


@pytest.mark.parametrize(
    "alpha, p",
    [(1.0, 1e-40), (0.6, 1e-40), (2.0, 1e-30), (1.0, 1e-25), (0.5, 1e-38)],
)
def test_a_positive_priority_is_never_stored_as_zero(alpha, p):
    # subnormal priorities (XLA flushes them) and powers that underflow are raised to the
    # smallest stored value: every stored transition stays drawable
    fns, s = filled(alpha=alpha)
    out = fns.update_priorities(s, np.arange(5), np.full(5, p, np.float32))
    want = max(np.float32(p) ** np.float32(alpha), checks.PRIORITY_MIN)
    np.testing.assert_allclose(leaves_of(out)[:5], want, rtol=1e-5)
    assert np.all(leaves_of(out)[:5] >= np.float32(checks.PRIORITY_MIN))
    b = fns.sample(out, jax.random.key(1))
    np.testing.assert_allclose(b.probabilities, 0.2, rtol=1e-5)
    np.testing.assert_allclose(b.weights, 1.0, rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_a_zero_priority_stays_zero_for_every_alpha(alpha):
    fns, s = filled(alpha=alpha)
    out = fns.update_priorities(s, np.arange(2), np.float32([0.0, -0.0]))
    np.testing.assert_array_equal(leaves_of(out)[:2], 0.0)  # 0 ** 0 would be 1
    assert np.all(np.isin(np.asarray(fns.sample(out, jax.random.key(0)).indices), [2, 3, 4]))


def test_half_precision_trees_are_refused():
    with pytest.raises(ValueError, match="float16"):
        make_prioritized_replay(8, 2, dtype=jnp.float16)
    with pytest.raises(ValueError, match="capacity"):
        make_prioritized_replay(2**31, 2)


@pytest.mark.parametrize("name", REPLAY)
@pytest.mark.parametrize(
    "indices, priorities, bit",
    [
        ([0, 1], [1.0, 3e38], ERR_PRIORITY),
        ([0, 1], [1.0, np.nan], ERR_PRIORITY),
        ([0, 1], [1.0, -1.0], ERR_PRIORITY),
        # a negative subnormal: the CUDA emulation, on XLA's CPU threads (subnormal inputs
        # taken for zero), compared it as -0 and kept it
        ([0, 1], [1.0, -1e-45], ERR_PRIORITY),
        # alone, XLA's CPU code compared it as -0 in the reference too (its vector code did not)
        ([1], [-1e-45], ERR_PRIORITY),
        ([0, 9], [1.0, 1.0], ERR_INDEX),
    ],
)
@pytest.mark.parametrize("alpha", [1.0, 0.6])
def test_a_donated_refused_update_leaves_a_usable_state(name, indices, priorities, bit, alpha):
    ops = load(name)
    fns = make_prioritized_replay(16, 4, alpha=alpha, branching=4, tree_ops=ops)
    s = fns.add(fns.init(EXAMPLE), rows(6), np.float32([1, 2, 3, 4, 5, 6]))
    before = snapshot(s)
    update = jax.jit(fns.update_priorities, donate_argnums=0)
    out = update(s, jnp.asarray(indices), jnp.float32(priorities))
    assert int(out.error) == bit
    assert_same(out._replace(error=jnp.zeros((), jnp.int32)), before)
    b = jax.jit(fns.sample)(out, jax.random.key(0))  # still usable: sample, then update
    assert int(b.error) == 0 and np.all(np.asarray(b.weights) > 0)
    again = update(out, b.indices, jnp.ones(4, jnp.float32), b.stamps)
    assert int(again.error) == bit  # the bit stays until the caller clears it
    with pytest.raises(ValueError, match="refused"):
        raise_on_error(again)


# ------------------------------------------------------------- 3: all priorities zero
@pytest.mark.parametrize("name", REPLAY)
def test_sampling_a_buffer_whose_priorities_are_all_zero_is_refused(name):
    ops = load(name)
    fns = make_prioritized_replay(16, 4, branching=4, tree_ops=ops)
    s = fns.add(fns.init(EXAMPLE), rows(5), np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="every priority .* is 0"):
        fns.sample(s, jax.random.key(0))
    b = jax.jit(fns.sample)(s, jax.random.key(0))
    assert int(b.error) == ERR_EMPTY
    np.testing.assert_array_equal(b.weights, 0)
    with pytest.raises(ValueError, match="all-zero priorities"):
        raise_on_error(b)
    empty = jax.jit(fns.sample)(fns.init(EXAMPLE), jax.random.key(0))
    assert int(empty.error) == ERR_EMPTY
    # a batch of buffers (vmap, a run's seeds): the first refused lane named, and how many
    lanes = jax.tree.map(lambda *x: jnp.stack(x), s, s, fns.add(s, rows(1), np.ones(1)))
    drawn = jax.jit(jax.vmap(fns.sample, (0, None)))(lanes, jax.random.key(0))
    np.testing.assert_array_equal(drawn.error, [ERR_EMPTY, ERR_EMPTY, 0])
    with pytest.raises(ValueError, match=r"in lane 0 \(2 of 3 lanes\): .* all-zero priorities"):
        raise_on_error(drawn)
    raise_on_error(jax.tree.map(lambda x: x[2:], drawn))  # the lane that drew: no error


# ------------------------------------------------------------- 4: add checks shapes and dtypes
BAD_ADDS = [
    ({"obs": np.zeros(3, np.float32), "act": np.zeros(3, np.int32)}, r"\['obs'\] has shape"),
    ({"obs": np.zeros(3, np.float32), "act": np.int32(1)}, r"\['act'\] has shape \(\)"),
    ({"obs": np.zeros((1, 3), np.float32), "act": np.int32(1)}, r"\['act'\] has shape"),
    ({"obs": np.zeros((2, 4), np.float32), "act": np.zeros(2, np.int32)}, r"\['obs'\] has shape"),
    ({"obs": np.zeros((2, 3), np.float32), "act": np.float32([1.7, 2.2])}, r"\['act'\] is float"),
    ({"obs": np.zeros((2, 3), np.float32), "act": np.zeros(3, np.int32)}, "same leading size"),
    ({"obs": np.zeros((2, 3), np.float32)}, "structure"),
]


@pytest.mark.parametrize("make", ["prioritized", "uniform"])
@pytest.mark.parametrize("transitions, match", BAD_ADDS)
def test_add_refuses_mismatched_fields(make, transitions, match):
    fns = make_prioritized_replay(8, 2) if make == "prioritized" else make_uniform_replay(8, 2)
    s = fns.add(fns.init(EXAMPLE), rows(2))
    before = snapshot(s)
    with pytest.raises(ValueError, match=match):
        fns.add(s, transitions)
    with pytest.raises(ValueError, match=match):
        jax.jit(fns.add)(s, transitions)  # shapes and dtypes are known while tracing
    assert_same(s, before)


@pytest.mark.parametrize("make", ["prioritized", "uniform"])
def test_add_accepts_casts_within_a_kind(make):
    fns = make_prioritized_replay(8, 2) if make == "prioritized" else make_uniform_replay(8, 2)
    s = fns.add(fns.init(EXAMPLE), {"obs": np.ones((2, 3), np.float64), "act": np.int64([4, 5])})
    np.testing.assert_array_equal(s.storage["act"][:2], [4, 5])
    assert s.storage["obs"].dtype == jnp.float32


# ------------------------------------------------------------- 5: stamps, empty batches, beta
@pytest.mark.parametrize("name", REPLAY)
def test_stamps_of_the_wrong_shape_or_dtype_are_refused_while_tracing(name):
    fns, s = filled(capacity=16, tree_ops=load(name), branching=4)
    for stamps, match in (
        (jnp.zeros((2, 1), jnp.int32), "stamps must have shape"),
        (jnp.zeros(3, jnp.int32), "stamps must have shape"),
        (jnp.zeros(2, jnp.float32), "integer dtype"),
    ):
        with pytest.raises(ValueError, match=match):
            jax.jit(fns.update_priorities)(s, jnp.arange(2), jnp.float32([2, 2]), stamps)


@pytest.mark.parametrize("name", REPLAY)
def test_empty_batches_are_no_ops(name):
    fns, s = filled(capacity=16, tree_ops=load(name), branching=4)
    before = snapshot(s)
    empty_rows = {"obs": np.zeros((0, 3), np.float32), "act": np.zeros(0, np.int32)}
    for out in (
        fns.add(s, empty_rows),
        fns.add(s, empty_rows, np.zeros(0, np.float32)),
        jax.jit(fns.add)(s, empty_rows),
        fns.update_priorities(s, np.zeros(0, np.int32), np.zeros(0, np.float32)),
        jax.jit(fns.update_priorities)(
            s, jnp.zeros(0, jnp.int32), jnp.zeros(0), jnp.zeros(0, jnp.int32)
        ),
    ):
        assert_same(out, before)


@pytest.mark.parametrize("make", ["prioritized", "uniform"])
@pytest.mark.parametrize("beta", [-0.1, 1.5, float("nan"), float("inf")])
def test_beta_outside_zero_one_is_refused(make, beta):
    fns = make_prioritized_replay(8, 4) if make == "prioritized" else make_uniform_replay(8, 4)
    s = fns.add(fns.init(EXAMPLE), rows(5))
    with pytest.raises(ValueError, match="beta must be in"):
        fns.sample(s, jax.random.key(0), beta=beta)
    b = jax.jit(fns.sample)(s, jax.random.key(0), jnp.float32(beta))
    assert int(b.error) == ERR_BETA
    np.testing.assert_array_equal(b.weights, 0)  # never NaN
    good = jax.jit(fns.sample)(s, jax.random.key(0), jnp.float32(1.0))
    assert int(good.error) == 0 and np.all(np.isfinite(good.weights))


# ------------------------------------------------------------- 6: stamps never reach -1
@pytest.mark.parametrize("make", ["prioritized", "uniform"])
def test_stamps_count_modulo_2_31_and_stay_non_negative(make):
    fns = make_prioritized_replay(8, 2) if make == "prioritized" else make_uniform_replay(8, 2)
    s = fns.init(EXAMPLE)._replace(inserted=jnp.int32(2**31 - 2))
    s = jax.jit(fns.add)(s, rows(4))
    np.testing.assert_array_equal(s.stamps[:4], [2**31 - 2, 2**31 - 1, 0, 1])
    assert int(s.inserted) == 2


def test_the_delayed_queues_empty_entry_never_matches_a_stamp_at_the_wrap():
    # 2^32 - 1 insertions (as the int32 counter holds them: -1): the next stamp was -1, the
    # delayed queue's empty entry, which then wrote its filler priority to slot 0
    fns = make_prioritized_replay(4, 1, alpha=1.0, branching=2)
    s = fns.add(fns.init(EXAMPLE), rows(4))  # position back at slot 0
    s = fns.add(s._replace(inserted=jnp.int32(-1)), rows(1), np.float32([5.0]))
    assert int(s.stamps[0]) >= 0
    delayed = make_delayed_updates(fns, 1, 1)
    s, _ = delayed.push(s, delayed.init(), jnp.int32([1]), s.stamps[1:2], jnp.float32([2.0]))
    assert leaves_of(s)[0] == 5.0  # the empty entry was dropped
