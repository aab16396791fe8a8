"""The CUDA backend's buffer calls (test_cuda_buffer.py) on a GPU, and on a CPU device where the
same calls run the kernels under the host emulation of CUDA (cuda_places.py; the `place`
fixture, conftest.py): the calls equal the buffer's code on the same device bit for bit
(weights included), on both update paths; so do the paths only a GPU runs there, on the
emulation apart, the sample spread over the grid, the descents through the copy of the tree's
top levels and the targets drawn from the key.
"""

from __future__ import annotations

import functools

import cuda_places
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import buffer_trace, random_tree, random_updates
from test_cuda_buffer import (
    CASES,
    REFERENCE_UPDATE,
    REFERENCE_WEIGH,
    bits,
    cuda_ops,
    leaf_values,
    stratified_targets,
    update_batches,
)

from drlhet.backends import cuda
from drlhet.replay import buffer_ops, checks
from drlhet.replay import sum_tree as st
from drlhet.replay.prioritized import sample_targets


@pytest.mark.parametrize("k, capacity", CASES)
def test_weigh_and_checked_update_equal_the_buffers_code(place, k, capacity):
    tree = random_tree(capacity, k, seed=k)
    targets = jnp.asarray(stratified_targets(tree, 4096, seed=k))
    for beta in (0.4, 1.0, 1.5):
        args = (tree, targets, jnp.int32(capacity), jnp.float32(beta))
        got = jax.jit(place.weigh)(*args)
        want = REFERENCE_WEIGH(*args)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    max_p, err = jnp.float32(1.5), jnp.int32(0)
    for case, idx, raw, keep, size in update_batches(capacity, 4096, seed=k):
        values = leaf_values(jnp.asarray(raw))
        args = (jnp.asarray(idx), jnp.asarray(raw), values, jnp.asarray(keep), jnp.int32(size))
        got = jax.jit(place.update)(tree, *args, max_p, err)
        want = REFERENCE_UPDATE(tree, *args, max_p, err)
        np.testing.assert_array_equal(bits(got[0].nodes), bits(want[0].nodes), err_msg=case)
        assert bits(got[1]) == bits(want[1]) and int(got[2]) == int(want[2]), case
        tree, max_p, err = want


@pytest.mark.parametrize(
    "path, b",
    [(cuda_places.TAGGED_PATH, 1024), (cuda_places.TAGGED_CLAIMS_PATH, 1024)],
    ids=["tagged claims and siblings", "tagged claims"],  # not the paths' names (GPU stages')
)
def test_the_gpu_only_paths_inside_jit_equal_the_buffers_code_on_the_emulation(
    monkeypatch, path, b
):
    """The paths the `place` fixture runs on a GPU only (cuda_places.GPU_ONLY: the cluster
    path's claims in a tagged table, `cuda.TAGGED_CLAIMS`, with and without
    `cuda.TAGGED_SIBLINGS`, at B 1024, one entry per thread of the emulation's cluster) through
    the custom calls on the emulated CPU device: the checked update's batches (duplicates,
    drops, refusals) at K 16, 2^16 leaves, and a jitted scan of vmapped plain writes over two
    trees, bit for bit the reference's."""
    k, capacity = 16, 2**16
    with jax.default_device(cuda_places.devices("emulated cpu")[0]):
        for name, value in cuda_places.PATHS[path].items():
            monkeypatch.setattr(cuda, name, value)
        jax.clear_caches()  # the paths are read when a function is traced
        try:
            ops = cuda_ops()
            tree, max_p, err = random_tree(capacity, k, seed=5), jnp.float32(1.5), jnp.int32(0)
            reference = REFERENCE_UPDATE
            for case, idx, raw, keep, size in update_batches(capacity, b, seed=5):
                values = leaf_values(jnp.asarray(raw))
                args = (tree, jnp.asarray(idx), jnp.asarray(raw), values, jnp.asarray(keep),
                        jnp.int32(size), max_p, err)  # fmt: skip
                got, want = jax.jit(ops.update)(*args), reference(*args)
                np.testing.assert_array_equal(bits(got[0].nodes), bits(want[0].nodes), case)
                assert bits(got[1]) == bits(want[1]) and int(got[2]) == int(want[2]), case
                tree, max_p, err = want
            nodes = jnp.stack([random_tree(capacity, k, seed=s).nodes for s in range(2)])
            steps = [random_updates(capacity, b, seed=s) for s in range(6)]
            idx = jnp.stack([x[0] for x in steps]).reshape(3, 2, b)
            vals = jnp.stack([x[1] for x in steps]).reshape(3, 2, b)

            def scan(write):
                def body(n, iv):
                    return write(st.SumTreeState(n, capacity, k), *iv, None).nodes, None

                return jax.jit(lambda n: jax.lax.scan(jax.vmap(body), n, (idx, vals))[0])(nodes)

            np.testing.assert_array_equal(bits(scan(ops.write)), bits(scan(st.REFERENCE.write)))
        finally:
            jax.clear_caches()  # no trace of this test's settings outlives it


SPREAD_CASES = {  # place: (batches of one tree, batch of each of 3 trees)
    "gpu": ((1, 33, 1024, 1500, 4096, 5000), 1500),
    "emulated cpu": ((1, 33, 300, 1000), 300),  # <= 16 blocks, 1024 threads (cuda_emu.h)
}
SPREAD_TESTS = [  # (place, K, capacity, threads a block)
    *[("emulated cpu", k, c, 64) for k, c in ((16, 5000), (3, 777), (64, 20000))],
    # on a GPU: every K the issue names, and at K 16 each block size `gpu_checks.sh spread`
    # times (SPREAD_AB_THREADS), since its pick may make any of them the library's
    *[("gpu", 16, 5000, t) for t in (64, 128, 256)],
    *[("gpu", k, c, 128) for k, c in ((2, 3000), (3, 777), (32, 5000), (64, 20000))],
]


@pytest.mark.cuda_spread
@pytest.mark.parametrize("where, k, capacity, threads", SPREAD_TESTS)
def test_the_sample_spread_over_the_grid_equals_the_buffers_code(
    monkeypatch, where, k, capacity, threads
):
    """`cuda.SPREAD_MIN_BATCH` (every batch here) through the custom calls inside jit: `weigh`
    over one tree (partial warps and blocks), `weigh_key`, and three vmapped trees with their
    own sizes and betas (one refused), bit for bit the buffer's code on the same device."""
    device = cuda_places.devices(where)[0]
    batches, each = SPREAD_CASES[where]
    monkeypatch.setattr(cuda, "SPREAD_MIN_BATCH", 1)
    monkeypatch.setattr(cuda, "SPREAD_THREADS", threads)
    reference = functools.partial(buffer_ops.weigh, st.REFERENCE.find)
    jax.clear_caches()  # read when a function is traced
    try:
        with jax.default_device(device):
            tree = random_tree(capacity, k, seed=k)
            size, beta = jnp.int32(capacity - 3), jnp.float32(0.6)
            for b in batches:
                targets = jnp.asarray(stratified_targets(tree, b, seed=b))
                got = jax.jit(cuda.weigh)(tree, targets, size, beta)
                want = jax.jit(reference)(tree, targets, size, beta)
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_array_equal(np.asarray(g), np.asarray(w), f"B {b}")
            key = jax.random.key(3)
            if cuda.KEY_TARGETS:  # off: `weigh_key` declines (gpu_checks.sh's reruns)
                got = jax.jit(cuda.weigh_key, static_argnums=(4, 5))(
                    tree, key, size, beta, 256, True
                )
                want = jax.jit(reference)(tree, sample_targets(key, st.total(tree), 256, True),
                                          size, beta)  # fmt: skip
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_array_equal(np.asarray(g), np.asarray(w), "weigh_key")
            trees = [random_tree(capacity, k, seed=s) for s in range(3)]
            nodes = jnp.stack([t.nodes for t in trees])
            targets = jnp.asarray(
                np.stack([stratified_targets(t, each, s) for s, t in enumerate(trees)])
            )
            sizes, betas = jnp.asarray([capacity, 50, 1], jnp.int32), jnp.asarray([0.4, 1.0, 1.5])

            def vmapped(fn):
                return jax.jit(jax.vmap(lambda n, *a: fn(st.SumTreeState(n, capacity, k), *a)))(
                    nodes, targets, sizes, betas
                )

            for g, w in zip(vmapped(cuda.weigh), vmapped(reference), strict=True):
                np.testing.assert_array_equal(np.asarray(g), np.asarray(w), "vmapped")
    finally:
        jax.clear_caches()  # no trace of this test's settings outlives it


@pytest.mark.parametrize("k, capacity", [(2, 1000), (3, 7), (64, 5000)])
def test_weigh_of_batches_no_larger_than_a_block_equals_the_buffers_code(place, k, capacity):
    """Up to 1024 targets a tree, one block per tree samples (the grid's launches above it)."""
    tree = random_tree(capacity, k, seed=k + 1)
    for b, beta in ((1, 0.4), (33, 1.0), (1024, 0.6)):  # 33: a partial second warp
        targets = jnp.asarray(stratified_targets(tree, b, seed=b))
        args = (tree, targets, jnp.int32(capacity), jnp.float32(beta))
        got = jax.jit(place.weigh)(*args)
        want = REFERENCE_WEIGH(*args)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=f"B {b}")


def test_the_buffer_with_its_own_calls_equals_the_buffer_over_find_and_write(place, monkeypatch):
    fused = buffer_trace(place)
    targets_in_xla = buffer_trace(place._replace(weigh_key=None))
    plain = buffer_trace(place._replace(weigh=None, update=None, weigh_key=None))
    monkeypatch.setattr(cuda, "OWN_SAMPLE_MAX_BATCH", 8)  # buffer_trace samples 16: around find
    declined = buffer_trace(place)
    for a, b, c, d in zip(
        *map(jax.tree.leaves, (fused, targets_in_xla, plain, declined)), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
        np.testing.assert_array_equal(np.asarray(b), np.asarray(c))
        np.testing.assert_array_equal(np.asarray(d), np.asarray(c))


@pytest.mark.cuda_shared_top
@pytest.mark.parametrize("k, capacity", [(16, 20000), (3, 777)])
def test_the_top_copy_gives_the_bits_of_descents_that_read_the_tree(place, k, capacity):
    """`cuda.SHARED_TOP` on and off (the sample's descents through a copy of the tree's top
    levels in each block's shared memory, or every level from the tree) give the same indices,
    probabilities, weights and error, in one block (B 64, 1024) and above (B 4096: one cluster
    per tree, or the grid's launches). The test ``experiments/gpu_checks.sh`` reads as the
    copy's: where it fails on a GPU, the copy is turned off for the rest of the call."""
    tree = random_tree(capacity, k, seed=k + 2)
    size, beta = jnp.int32(capacity - 3), jnp.float32(0.6)
    got = {}
    try:
        for on in (True, False):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(cuda, "SHARED_TOP", on)
                jax.clear_caches()  # read when a function is traced
                for b in (64, 1024, 4096):
                    targets = jnp.asarray(stratified_targets(tree, b, seed=b))
                    got[on, b] = jax.jit(place.weigh)(tree, targets, size, beta)
                # the switch reaches the call (the same bits either way: dropped, it failed no test)
                text = jax.jit(place.weigh).lower(tree, targets, size, beta).as_text()
                assert f"shared_top = {int(on)} : i64" in text, on
    finally:
        jax.clear_caches()  # no trace of this test's settings outlives it
    for b in (64, 1024, 4096):
        for g, w in zip(got[True, b], got[False, b], strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=f"B {b}")


@pytest.mark.cuda_key_targets
@pytest.mark.parametrize("stratified", [True, False])
def test_the_sample_from_the_key_equals_the_sample_from_xlas_targets(place, stratified):
    """The targets drawn in the kernel (drlhet/jax_random.h) against jax.random's on the same
    device, through the whole sample: one tree, and three vmapped trees with their own keys."""
    k, capacity = 16, 5000
    tree = random_tree(capacity, k, seed=3)
    size, beta = jnp.int32(capacity - 7), jnp.float32(0.4)
    for b in (1, 64, 1024, 4096):  # one block; one block; one block; above a block
        for seed in (0, 7):
            key = jax.random.key(seed)
            got = jax.jit(place.weigh_key, static_argnums=(4, 5))(
                tree, key, size, beta, b, stratified
            )
            targets = sample_targets(key, st.total(tree), b, stratified)
            want = REFERENCE_WEIGH(tree, targets, size, beta)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=f"B {b}")
    trees = jnp.stack([random_tree(capacity, k, seed=s).nodes for s in range(3)])
    keys = jax.random.split(jax.random.key(1), 3)

    def per_tree(fn):
        return jax.jit(jax.vmap(lambda n, key: fn(st.SumTreeState(n, capacity, k), key)))(
            trees, keys
        )

    got = per_tree(lambda t, key: place.weigh_key(t, key, size, beta, 512, stratified))
    want = per_tree(
        lambda t, key: buffer_ops.weigh(
            st.REFERENCE.find, t, sample_targets(key, st.total(t), 512, stratified), size, beta
        )
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_vmapped_calls_equal_the_buffers_code_tree_by_tree(place):
    k, capacity, b = 16, 777, 300  # 300 entries: warps that straddle two trees
    trees = [random_tree(capacity, k, seed=s) for s in range(3)]
    nodes = jnp.stack([t.nodes for t in trees])
    targets = jnp.asarray(np.stack([stratified_targets(t, b, s) for s, t in enumerate(trees)]))
    sizes, betas = jnp.asarray([777, 500, 1], jnp.int32), jnp.asarray([0.4, 1.0, 1.5])

    def weigh(fn):
        return jax.jit(jax.vmap(lambda n, *a: fn(st.SumTreeState(n, capacity, k), *a)))(
            nodes, targets, sizes, betas
        )

    got, want = weigh(place.weigh), weigh(functools.partial(buffer_ops.weigh, st.REFERENCE.find))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    idx = jnp.asarray(np.random.default_rng(0).integers(0, 500, (3, b)), jnp.int32)
    raw = jnp.asarray(np.random.default_rng(1).random((3, b)), jnp.float32)
    raw = raw.at[2, 7].set(jnp.nan)  # tree 2 refuses its batch
    values = jax.vmap(leaf_values)(raw)
    keep = jnp.asarray(np.random.default_rng(2).random((3, b)) < 0.8)
    maxs, errs = jnp.full(3, 1.5, jnp.float32), jnp.zeros(3, jnp.int32)

    def update(fn):
        step = jax.vmap(lambda n, *a: fn(st.SumTreeState(n, capacity, k), *a))
        return jax.jit(step)(nodes, idx, raw, values, keep, sizes, maxs, errs)

    got, want = (
        update(place.update),
        update(functools.partial(buffer_ops.update, st.REFERENCE.write)),
    )
    np.testing.assert_array_equal(bits(got[0].nodes), bits(want[0].nodes))
    np.testing.assert_array_equal(bits(got[1]), bits(want[1]))
    np.testing.assert_array_equal(np.asarray(got[2]), np.asarray(want[2]))
    # tree 1's indices are all below its size 500; tree 2 holds 1 transition and a NaN
    assert list(np.asarray(want[2])) == [0, 0, checks.ERR_PRIORITY | checks.ERR_INDEX]
