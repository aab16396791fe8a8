"""The native C++/OpenMP backend's own behaviour: input validation, threads, its library.

Its results against the reference are in the conformance suite (`conformance.py`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import random_tree, random_updates

from drlhet import backends
from drlhet.backends import BackendUnavailable, native
from drlhet.replay import sum_tree as st

try:
    native.library_path()
except BackendUnavailable as e:  # the package's own library: `make test` builds it
    pytest.fail(f"libdrlhet_cpu is not built ({e})", pytrace=False)


@pytest.mark.parametrize(
    "indices, values, match",
    [
        ([0, 10], [1.0, 1.0], "out of range"),
        ([-1, 0], [1.0, 1.0], "out of range"),
        ([0, 1], [1.0, -1.0], "finite and >= 0"),
        ([0, 1], [np.nan, 1.0], "finite and >= 0"),
        ([0, 1], [1.0, np.inf], "finite and >= 0"),
        # a negative subnormal: its sign from its bits (SignBitClear, as cuda), since XLA's CPU
        # threads take subnormal inputs for zero and `< 0` kept it; named in full, not -0.000000
        ([0, 1], [1.0, -1e-45], r"priority -1\.40129846e-45 at position 1 is not finite and >= 0"),
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


def test_zero_and_minus_zero_priorities_are_written():
    """The sign-bit test refuses -1e-45 but not -0.0 (the reference writes it, bit for bit)."""
    tree = random_tree(10, 2)
    idx, vals = jnp.array([3, 7]), jnp.array([-0.0, 0.0], jnp.float32)
    out = jax.jit(native.update)(tree, idx, vals)
    assert np.asarray(out.nodes).tobytes() == np.asarray(st.write(tree, idx, vals).nodes).tobytes()


def test_indices_past_int32_are_refused_not_wrapped():
    """A kept index that int32 cannot hold (2**32 + 3) is refused before the handler's int32
    cast, which would wrap it to 3 and write leaf 3; a dropped one is never read."""
    tree = random_tree(8, 2)
    before = np.asarray(tree.nodes).copy()
    big = np.array([2**32 + 3], np.int64)
    with pytest.raises(ValueError, match=r"index 4294967299 out of range \[0, 8\)"):
        native.update(tree, big, np.array([5.0], np.float32))
    np.testing.assert_array_equal(tree.nodes, before)
    out = native.update(tree, big, np.array([5.0], np.float32), np.array([False]))
    np.testing.assert_array_equal(out.nodes, before)


def test_a_find_of_no_targets_is_refused():
    """B >= 1, as the reference's: the handler gave no total for no targets (the caller got
    whatever the allocator held)."""
    with pytest.raises(ValueError, match="at least one target"):
        native.find(random_tree(10, 2), jnp.zeros((0,), jnp.float32))


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


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, "float64"])
def test_native_rejects_trees_that_are_not_float32(dtype):
    with jax.enable_x64(dtype == "float64"):  # float64 exists only with x64 on
        tree = st.init(8, 2, dtype)
        assert tree.nodes.dtype == jnp.dtype(dtype)
        with pytest.raises(ValueError, match="supports float32 trees"):
            native.find(tree, jnp.zeros(2, dtype))
        with pytest.raises(ValueError, match="supports float32 trees"):
            native.update(tree, jnp.zeros(2, jnp.int32), jnp.ones(2, dtype))


def test_native_rejects_a_branching_its_kernels_do_not_hold():
    assert native.accepts(1000, 256) == ""
    tree = st.init(1000, 257)
    with pytest.raises(ValueError, match="supports K <= 256, got 257"):
        native.find(tree, jnp.zeros(2, jnp.float32))
    with pytest.raises(ValueError, match="supports K <= 256, got 257"):
        native.update(tree, jnp.zeros(2, jnp.int32), jnp.ones(2, jnp.float32))


def test_a_missing_library_is_backend_unavailable(monkeypatch):
    monkeypatch.setattr(native, "_LIB_NAMES", ("no-such-library.so",))
    with pytest.raises(BackendUnavailable, match="not built"):
        native.library_path()
    assert backends.load("native").find is native.find  # already loaded: the cache answers
