"""The CUDA backend's sample call under the host emulation of CUDA (test_cuda_emu.py), called
directly on every machine: per launch, in one cluster per tree and spread over the grid, its
descents through each block's copy of the tree's top levels or not, the targets given or drawn
from each tree's key, it equals the buffer's own code (`drlhet.replay.buffer_ops`) over
several trees whose entries share warps, refusals included, with each block's threads started
in order, reversed and shuffled; its outputs start as garbage, as XLA leaves them. Trees off a
16-byte boundary, and random shapes through one cluster per tree, update and sample as the
oracle and the buffer's code do.
"""

from __future__ import annotations

import ctypes
import functools

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
import test_cuda_emu
from conformance import random_tree, random_updates
from test_cuda_buffer import bits, stratified_targets
from test_cuda_emu import CASES, PATHS, emu_update, frozen, placed, ptr

from drlhet.replay import buffer_ops, checks
from drlhet.replay import sum_tree as st
from drlhet.replay.prioritized import sample_targets

emu, schedule = test_cuda_emu.emu, test_cuda_emu.schedule  # the emulation's fixtures
F32 = np.float32
# the sample's: cluster_max_batch (a batch of at most 1024 per tree takes one block either way)
# or spread_min_batch (every batch spread over the grid, where the emulation's cooperative
# launch holds it: at most 16 blocks of SPREAD_THREADS, 1024 threads in all)
SAMPLE_PATHS = {
    "per launch": {"cluster_max": 0},
    "one cluster per tree": {"cluster_max": 2**40},
    "spread over the grid": {"spread_min": 1},
}
NEVER = 2**62  # a spread_min_batch no batch reaches
SPREAD_THREADS = 64


def emu_weigh(
    lib, nodes, capacity, k, targets, size, beta, offset=0, cluster_max=0, key=None, strat=1,
    top=True, spread_min=NEVER, blocks=8,
):  # fmt: skip
    """The sample call on V trees (their nodes ``offset`` bytes past a 16-byte boundary; spread
    over the grid in blocks of SPREAD_THREADS from ``spread_min`` targets per tree where the
    launch fits, else in one cluster per tree up to ``cluster_max`` targets per tree):
    (indices, probabilities, weights [V, B], error [V]). With ``key`` (uint32 [V, 2]), the call
    that draws the targets from it (stratified or not: ``strat``); ``targets`` then only gives
    their shape. ``top``: the descents read the trees' top levels from each block's copy in
    shared memory. ``blocks``: the cluster path's blocks a cluster."""
    nodes = placed(np.array(nodes, F32, ndmin=2), offset)
    trees = nodes.shape[0]
    t = np.ascontiguousarray(np.reshape(targets, (trees, -1)), F32)
    size, beta = np.ascontiguousarray(size, np.int32), np.ascontiguousarray(beta, F32)
    # the outputs start as garbage, as XLA leaves them: a launch that skips a write (a refused
    # tree's zero weights, say) cannot pass on zeros it never wrote
    idx, err = np.full(t.shape, -1, np.int32), np.full(trees, -1, np.int32)
    probs, w = np.full(t.shape, np.nan, F32), np.full(t.shape, np.nan, F32)
    rc = lib.drlhet_emu_weigh(
        ptr(nodes), ctypes.c_int64(capacity), ctypes.c_int(k), ptr(t), ctypes.c_int64(trees),
        ctypes.c_int64(t.shape[1]), ptr(size), ptr(beta), ctypes.c_int32(checks.ERR_EMPTY),
        ctypes.c_int32(checks.ERR_BETA), ctypes.c_int64(cluster_max), ptr(idx), ptr(probs),
        ptr(w), ptr(err), None if key is None else ptr(np.ascontiguousarray(key, np.uint32)),
        ctypes.c_int32(strat), ctypes.c_int32(top), ctypes.c_int64(spread_min),
        ctypes.c_int32(SPREAD_THREADS), ctypes.c_int32(blocks),
    )  # fmt: skip
    assert rc == 0
    return idx, probs, w, err


def spread(lib, trees: int, batch: int, k: int, spread_min: int = 1) -> bool:
    """Whether the sample call of ``trees`` trees of ``batch`` targets takes the spread path
    (launch.cuh's InSpread, in blocks of SPREAD_THREADS), so that a test of it cannot pass on
    another path."""
    return bool(
        lib.drlhet_emu_in_spread(
            ctypes.c_int64(trees), ctypes.c_int64(batch), ctypes.c_int(k),
            ctypes.c_int64(spread_min), ctypes.c_int32(SPREAD_THREADS),
        )
    )  # fmt: skip


@pytest.mark.parametrize("top", [True, False], ids=["top copied", "no copy"])
@pytest.mark.parametrize(
    "path, batch",
    [("per launch", 300), ("per launch", 1500), ("one cluster per tree", 1500),
     ("spread over the grid", 300)],
)  # fmt: skip
@pytest.mark.parametrize("k, capacity", CASES)
def test_the_sample_call_equals_the_buffers_sample_over_three_trees(
    emu, schedule, k, capacity, path, batch, top
):
    # 300: one block per tree, or spread over 5 blocks of 64 per tree (the last two warps
    # partly live); 1500: a memset and two launches (blocks of 256 threads, one of which
    # straddles two trees and copies no top), or one cluster per tree whose threads take one or
    # two targets each (the emulation's clusters have 8 blocks of <= 128)
    assert spread(emu, 3, batch, k, SAMPLE_PATHS[path].get("spread_min", NEVER)) == (
        path == "spread over the grid"
    )
    nodes, targets, sizes, betas, wants = sample_case(k, capacity, batch)
    got = emu_weigh(emu, nodes, capacity, k, targets, sizes, betas, top=top, **SAMPLE_PATHS[path])
    for v, want in enumerate(wants):
        np.testing.assert_array_equal(got[0][v], want[0])
        np.testing.assert_array_equal(bits(got[1][v]), bits(want[1]))
        np.testing.assert_allclose(got[2][v], want[2], rtol=5e-7, atol=0)  # host powf
        assert got[3][v] == want[3], v
    assert list(got[3]) == [0, 0, checks.ERR_BETA] and not got[2][2].any()


@functools.cache
def sample_case(k: int, capacity: int, batch: int) -> tuple:
    """Three random trees, ``batch`` stratified targets each (the first tree's first two not >
    0), their sizes and betas (the last out of [0, 1]), and the buffer's sample of each
    (indices, probabilities, weights, error): computed once, for every path, copy and schedule.
    (nodes [3, T], targets [3, B], sizes, betas, wants)."""
    trees = [random_tree(capacity, k, seed=s) for s in range(3)]
    targets = np.stack([stratified_targets(t, batch, seed=s) for s, t in enumerate(trees)])
    targets[0, :2] = [np.nan, -1.0]
    sizes, betas = [capacity, max(1, capacity // 2), 1], [0.4, 1.0, 1.5]
    wants = []
    for v, tree in enumerate(trees):
        want = buffer_ops.weigh(
            st.REFERENCE.find, tree, jnp.asarray(targets[v]), jnp.int32(sizes[v]), betas[v]
        )
        wants.append((*frozen(*want[:3]), int(want[3])))
    nodes, targets = frozen(np.stack([np.asarray(t.nodes) for t in trees]), targets)
    return nodes, targets, sizes, betas, tuple(wants)


@pytest.mark.parametrize("path", SAMPLE_PATHS)
@pytest.mark.parametrize("batch, stratified", [(64, 1), (256, 1), (2048, 1), (1500, 0), (300, 0)])
def test_the_sample_from_each_trees_key_equals_the_sample_from_its_targets(
    emu, schedule, path, batch, stratified
):
    """drlhet_cuda_weigh_key's launches: the targets drawn from each tree's key in the descent
    (one block; per launch, one cluster per tree, or spread over the grid where the emulation
    holds the launch: B 64, 256, 300) give what the targets jax draws give."""
    k, capacity = 16, 3000
    if path == "spread over the grid":
        assert spread(emu, 2, batch, k) == (batch <= 300)
    trees = [random_tree(capacity, k, seed=s) for s in range(2)]
    nodes = np.stack([np.asarray(t.nodes) for t in trees])
    keys = jax.random.split(jax.random.key(batch), 2)
    targets = np.stack(
        [np.asarray(sample_targets(key, st.total(t), batch, bool(stratified)))
         for key, t in zip(keys, trees, strict=True)]
    )  # fmt: skip
    sizes, betas = [capacity, 2000], [0.4, 1.0]
    want = emu_weigh(emu, nodes, capacity, k, targets, sizes, betas, **SAMPLE_PATHS[path])
    words = np.asarray(jax.random.key_data(keys), np.uint32)
    got = emu_weigh(
        emu, nodes, capacity, k, np.zeros_like(targets), sizes, betas, key=words,
        strat=stratified, **SAMPLE_PATHS[path],
    )  # fmt: skip
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("k, capacity", [(16, 5000), (64, 777), (4, 300), (20, 999)])
def test_trees_off_a_16_byte_boundary_read_one_child_at_a_time_with_the_same_bits(emu, k, capacity):
    """LoadChunk's two branches (kernels/cuda/wide_loads.cuh): an aligned tree with K divisible
    by 4 is read four children per load, one 4 bytes off the boundary a child at a time; both
    update and sample as the oracle and the buffer's code do."""
    tree = random_tree(capacity, k, seed=3)
    nodes = np.asarray(tree.nodes)
    idx, vals = (np.asarray(x) for x in random_updates(capacity, 300, seed=4))
    want = oracle.write(nodes, capacity, k, idx, vals)
    targets = stratified_targets(tree, 300, seed=5)
    want_idx, want_p, _, _ = buffer_ops.weigh(
        st.REFERENCE.find, tree, jnp.asarray(targets), jnp.int32(capacity), 0.4
    )
    for offset in (0, 4):
        for name, path in PATHS.items():
            got, bad, _, _ = emu_update(
                emu, nodes, capacity, k, idx, vals, np.ones(300, bool), path, offset=offset
            )
            assert not bad.any()
            np.testing.assert_array_equal(bits(got[0]), bits(want), err_msg=f"{offset} {name}")
        got_idx, got_p, _, err = emu_weigh(
            emu, nodes, capacity, k, targets, [capacity], [0.4], offset=offset
        )
        np.testing.assert_array_equal(got_idx[0], want_idx, err_msg=str(offset))
        np.testing.assert_array_equal(bits(got_p[0]), bits(want_p), err_msg=str(offset))
        assert err[0] == 0


@pytest.mark.parametrize("k, capacity", [*CASES, (16, 2**20), (2, 2**20), (32, 2**20)])
def test_the_descents_copy_the_deepest_top_levels_that_fit_a_blocks_copy(emu, k, capacity):
    """TopLevelsFor (kernels/cuda/sample_kernels.cuh): the deepest level L whose levels 0..L fit
    6144 slots, so that the sample tests above run their descents through the copy."""
    lay = st.layout(capacity, k)
    slots = [*lay.offsets[2:], lay.size]  # levels 0..L for L = 1 .. depth
    want = max((lev for lev, n in enumerate(slots, start=1) if n <= 6144), default=0)
    assert emu.drlhet_emu_top_levels(ctypes.c_int64(capacity), ctypes.c_int(k)) == want
    if (k, capacity) in ((16, 2**20), (2, 2**20), (32, 2**20)):
        assert want == {16: 3, 2: 11, 32: 2}[k]
    if capacity > 1:  # a tree deeper than its root: the copy is used
        assert want >= 1


def test_an_empty_tree_is_refused_by_the_sample_call(emu):
    tree = np.asarray(st.init(50, 4).nodes)
    _, probs, weights, err = emu_weigh(emu, tree, 50, 4, np.linspace(0, 1, 64), [20], [0.4])
    assert err[0] == checks.ERR_EMPTY and not probs.any() and not weights.any()


@pytest.mark.slow
def test_random_shapes_through_one_cluster_per_tree_equal_the_oracle_and_the_buffer(emu):
    """60 random (K, capacity, trees, batch, schedule) through the cluster path: batches of 1 to
    3000 (one entry per thread and several), kept and dropped entries, duplicates; the sample
    above 1024 targets a tree. About 1 to 6 minutes on the 2-core VM, by host."""
    rng = np.random.default_rng(0)
    for case in range(60):
        k = int(rng.choice([2, 3, 4, 5, 8, 16, 17, 32, 64]))
        capacity, trees = int(rng.integers(1, 20000)), int(rng.integers(1, 4))
        batch = int(rng.integers(1, 1100) if case % 2 else rng.integers(1025, 3000))
        emu.drlhet_emu_schedule(ctypes.c_int64(int(rng.integers(0, 1000))))
        nodes = np.stack([random_tree(capacity, k, seed=s + case).nodes for s in range(trees)])
        idx = rng.integers(0, capacity, (trees, batch)).astype(np.int32)
        vals = (rng.random((trees, batch)) * 3).astype(F32)
        keep = rng.random((trees, batch)) < 0.8
        got, bad, _, _ = emu_update(
            emu, nodes, capacity, k, idx, vals, keep, PATHS["one cluster per tree"]
        )
        assert not bad.any(), case
        for v in range(trees):
            want = oracle.write(nodes[v], capacity, k, idx[v], vals[v], keep[v])
            np.testing.assert_array_equal(bits(got[v]), bits(want), err_msg=f"{case} {v}")
        if batch <= 1024:
            continue
        targets = (rng.random((trees, batch)) * nodes[:, :1]).astype(F32)
        sizes, betas = [capacity] * trees, [0.5] * trees
        got = emu_weigh(emu, nodes, capacity, k, targets, sizes, betas, cluster_max=2**40)
        for v in range(trees):
            tree = st.SumTreeState(jnp.asarray(nodes[v]), capacity, k)
            want = buffer_ops.weigh(
                st.REFERENCE.find, tree, jnp.asarray(targets[v]), jnp.int32(capacity), 0.5
            )
            np.testing.assert_array_equal(got[0][v], want[0], err_msg=str(case))
            np.testing.assert_array_equal(bits(got[1][v]), bits(want[1]), err_msg=str(case))
            np.testing.assert_allclose(got[2][v], want[2], rtol=5e-7, atol=0)  # host powf
    emu.drlhet_emu_schedule(ctypes.c_int64(0))
