"""The CUDA backend's kernels and launch sequences under the host emulation of the CUDA
execution model (kernels/cuda/emu: each block's threads as fibers, __syncthreads and the warp
collectives as barriers), called directly on every machine: what a GPU computes, not how fast.
(The same emulation behind the backend's custom calls on a CPU device: cuda_places.py.)

The same kernels and launches as the XLA FFI handlers (kernels/cuda/launch.cuh): the plain
update on both paths equals the NumPy oracle; the checked update and the sample call equal the
buffer's own code (`drlhet.replay.buffer_ops`), over one tree and over several whose entries
share warps, refusals included, with each block's threads started in order, reversed and
shuffled. The workspace starts as garbage, as XLA leaves it. A launch whose barriers can never
complete fails instead of hanging.
"""

from __future__ import annotations

import ctypes
import functools

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from conformance import random_tree, random_updates
from test_cuda_buffer import (
    REFERENCE_UPDATE,
    bits,
    leaf_values,
    stratified_targets,
    update_batches,
)

from drlhet.backends import BackendUnavailable
from drlhet.backends.native import library_path
from drlhet.replay import buffer_ops, checks
from drlhet.replay import sum_tree as st
from drlhet.replay.prioritized import sample_targets

F32 = np.float32
CASES = [(2, 1000), (3, 100), (16, 5000), (64, 777), (16, 1), (3, 7)]
# the update's paths: (block_max_batch, narrow_max_nodes, cluster_max_batch). Per level with
# 16: a level of 17 to `batch` nodes is recomputed a thread per node
# (drlhet_cuda_update_whole_level_args).
PATHS = {
    "one block per tree": (2**40, 4096, 0),
    "one launch per level": (0, 4096, 0),
    "a thread per node": (0, 16, 0),
    "one cluster per tree": (0, 4096, 2**40),
}
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
SCHEDULES = {"in order": 0, "reversed": 1, "shuffled": 12345}
P = ctypes.POINTER


C_TYPES = {np.float32: ctypes.c_float, np.int32: ctypes.c_int32, np.bool_: ctypes.c_bool}
C_TYPES[np.uint32] = ctypes.c_uint32
C_TYPES[np.uint64] = ctypes.c_uint64


def ptr(a):
    """A pointer to a NumPy array's data (None: a null pointer)."""
    return None if a is None else a.ctypes.data_as(P(C_TYPES[a.dtype.type]))


@pytest.fixture(scope="module")
def emu() -> ctypes.CDLL:
    try:
        path = library_path("drlhet_cuda_emu", "the CUDA kernels' host emulation")
    except BackendUnavailable as e:  # built wherever <ucontext.h> exists
        pytest.skip(f"missing library: the CUDA kernels' host emulation ({e})")
    lib = ctypes.CDLL(str(path))
    lib.drlhet_emu_weigh.restype = ctypes.c_int
    lib.drlhet_emu_update.restype = ctypes.c_int
    lib.drlhet_emu_divergent_barriers.restype = ctypes.c_int
    lib.drlhet_emu_cluster_ring.argtypes = [ctypes.c_uint] * 3 + [P(ctypes.c_int32)]
    return lib


@pytest.fixture(params=SCHEDULES)
def schedule(emu, request):
    """The order each block's threads start in (in order, reversed, shuffled), for one test:
    a read of another thread's write that no barrier orders gives a different result in one."""
    emu.drlhet_emu_schedule(ctypes.c_int64(SCHEDULES[request.param]))
    yield request.param
    emu.drlhet_emu_schedule(ctypes.c_int64(0))


def placed(a, offset: int):
    """A copy of ``a`` whose data starts ``offset`` bytes past a 16-byte boundary (0: aligned,
    so a K divisible by 4 takes LoadChunk's 128-bit loads; 4: not, so one child at a time)."""
    flat = np.zeros(a.size + 8, a.dtype)
    start = (-flat.ctypes.data % 16 + offset) // a.itemsize
    out = flat[start : start + a.size].reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 16 == offset
    return out


def emu_update(lib, nodes, capacity, k, idx, values, keep, path, checked=None, offset=0,
               tags=None, siblings=False):  # fmt: skip
    """One update of V = len(nodes) trees on ``path`` (block_max_batch, narrow_max_nodes,
    cluster_max_batch), the nodes ``offset`` bytes past a
    16-byte boundary, with the claims table ``tags`` (uint64 [V * (C + 1)], kept by the
    caller; None: none), whose winners sum their leaves' parents from it with ``siblings``:
    (nodes [V, T], bad [V], max [V], err [V])."""
    block_max, narrow_max, cluster_max = path
    out = placed(np.array(nodes, F32, ndmin=2), offset)
    trees, batch = out.shape[0], np.asarray(idx).reshape(out.shape[0], -1).shape[1]
    idx, values = (np.ascontiguousarray(x, d) for x, d in ((idx, np.int32), (values, F32)))
    keep = np.ascontiguousarray(keep, np.bool_)
    raw = size = max_in = err_in = None
    if checked is not None:
        raw, size, max_in, err_in = (
            np.ascontiguousarray(x, d)
            for x, d in zip(checked, (F32, np.int32, F32, np.int32), strict=True)
        )
    max_out, err_out = np.zeros(trees, F32), np.zeros(trees, np.int32)
    bad = np.zeros(trees, np.int32)
    rc = lib.drlhet_emu_update(
        ptr(out), ctypes.c_int64(capacity), ctypes.c_int(k), ptr(idx), ptr(values), ptr(keep),
        ctypes.c_int64(trees), ctypes.c_int64(batch), ctypes.c_int64(block_max),
        ctypes.c_int64(narrow_max), ctypes.c_int64(cluster_max), ptr(raw),
        ptr(size), ctypes.c_float(checks.PRIORITY_MAX), ctypes.c_int32(checks.ERR_INDEX),
        ctypes.c_int32(checks.ERR_PRIORITY), ptr(max_in), ptr(err_in), ptr(max_out),
        ptr(err_out), ptr(bad), ptr(tags), ctypes.c_int64(siblings),
    )  # fmt: skip
    assert rc == 0
    return out, bad, max_out, err_out


def emu_weigh(
    lib, nodes, capacity, k, targets, size, beta, offset=0, cluster_max=0, key=None, strat=1,
    top=True, spread_min=NEVER,
):  # fmt: skip
    """The sample call on V trees (their nodes ``offset`` bytes past a 16-byte boundary; spread
    over the grid in blocks of SPREAD_THREADS from ``spread_min`` targets per tree where the
    launch fits, else in one cluster per tree up to ``cluster_max`` targets per tree):
    (indices, probabilities, weights [V, B], error [V]). With ``key`` (uint32 [V, 2]), the call
    that draws the targets from it (stratified or not: ``strat``); ``targets`` then only gives
    their shape. ``top``: the descents read the trees' top levels from each block's copy in
    shared memory."""
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
        ctypes.c_int32(SPREAD_THREADS),
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


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("k, capacity", CASES)
def test_the_plain_update_equals_the_oracle_over_three_trees(emu, schedule, k, capacity, path):
    # 3 trees of 300 entries: warps that straddle two trees; garbage in the workspace
    trees = np.stack([np.asarray(random_tree(capacity, k, seed=s).nodes) for s in range(3)])
    for step in range(2):
        batch = [random_updates(capacity, 300, seed=10 * step + s) for s in range(3)]
        idx = np.stack([np.asarray(b[0]) for b in batch])
        vals = np.stack([np.asarray(b[1]) for b in batch])
        keep = np.random.default_rng(step).random((3, 300)) < 0.85
        idx[~keep] = np.where(np.arange(300) % 2 == 0, -7, 2**31 - 1)[np.nonzero(~keep)[1]]
        got, bad, _, _ = emu_update(emu, trees, capacity, k, idx, vals, keep, PATHS[path])
        assert not bad.any()
        for v in range(3):
            want = oracle.write(trees[v], capacity, k, idx[v], vals[v], keep[v])
            np.testing.assert_array_equal(bits(got[v]), bits(want), err_msg=f"tree {v}")
        trees = got


def two_trees_and_batches(capacity, k, batch, seed):
    """Two random trees and a batch of ``batch`` entries for each: duplicates across the
    cluster's blocks (from entry ``2 * batch // 3``, the first ``min(100, batch // 10)`` leaves
    again), about a tenth dropped. (trees [2, T], indices, values, keep [2, batch])."""
    trees = np.stack([np.asarray(random_tree(capacity, k, seed=s).nodes) for s in range(2)])
    batches = [random_updates(capacity, batch, seed=s + seed) for s in range(2)]
    idx = np.stack([np.asarray(b[0]) for b in batches])
    vals = np.stack([np.asarray(b[1]) for b in batches])
    dup = min(100, batch // 10)
    idx[:, batch * 2 // 3 : batch * 2 // 3 + dup] = idx[:, :dup]
    keep = np.random.default_rng(k).random((2, batch)) < 0.9
    return trees, idx, vals, keep


def cluster_update_is_the_oracles(emu, trees, capacity, k, idx, vals, keep):
    """The cluster path's update of every tree, bit for bit the oracle's; none refused."""
    got, bad, _, _ = emu_update(
        emu, trees, capacity, k, idx, vals, keep, PATHS["one cluster per tree"]
    )
    assert not bad.any()
    for v in range(len(trees)):
        want = oracle.write(trees[v], capacity, k, idx[v], vals[v], keep[v])
        np.testing.assert_array_equal(bits(got[v]), bits(want), err_msg=f"tree {v}")


def written_then_one_tree_refused(
    emu, path, trees, capacity, k, idx, vals, keep, refuse, tags=None, siblings=False
):  # fmt: skip
    """The update of every tree on ``path`` (with the claims table ``tags`` and ``siblings``,
    `emu_update`), bit for bit the oracle's, none refused; then the same batch with ``refuse`` =
    (tree, entry, a bad index) planted: that tree comes back refused and unchanged, the others
    written."""
    got, bad, _, _ = emu_update(
        emu, trees, capacity, k, idx, vals, keep, path, tags=tags, siblings=siblings
    )
    assert not bad.any()
    for v in range(len(trees)):
        want = oracle.write(trees[v], capacity, k, idx[v], vals[v], keep[v])
        np.testing.assert_array_equal(bits(got[v]), bits(want), err_msg=f"tree {v}")
    tree, at, index = refuse
    idx, keep = idx.copy(), keep.copy()
    idx[tree, at], keep[tree, at] = index, True
    got, bad, _, _ = emu_update(
        emu, trees, capacity, k, idx, vals, keep, path, tags=tags, siblings=siblings
    )
    assert [bool(b) for b in bad] == [v == tree for v in range(len(trees))]
    np.testing.assert_array_equal(bits(got[tree]), bits(trees[tree]))
    for v in set(range(len(trees))) - {tree}:
        want = oracle.write(trees[v], capacity, k, idx[v], vals[v], keep[v])
        np.testing.assert_array_equal(bits(got[v]), bits(want), err_msg=f"tree {v}")


@pytest.mark.parametrize("k, capacity, batch", [(16, 2**16, 1024), (2, 3000, 700), (4, 9000, 1024)])
def test_a_cluster_hands_its_last_wide_level_to_its_first_block_in_shared_memory(
    emu, schedule, k, capacity, batch
):
    """HandLevel and BlockTopLevels' rows of the cluster (kernels/cuda/sum_tree_kernels.cuh):
    with the batch no larger than the cluster's threads (8 blocks of 128 here), the level under
    the first block's is summed into each block's shared memory and read by the first block over
    distributed shared memory (one slot per block rank on the emulation); at K 16, 2^16 leaves,
    B 1024 that is level 2 (256 nodes) under level 1; duplicates, dropped entries, a refused
    batch, two trees."""
    trees, idx, vals, keep = two_trees_and_batches(capacity, k, batch, seed=20)
    path = PATHS["one cluster per tree"]
    written_then_one_tree_refused(emu, path, trees, capacity, k, idx, vals, keep, (1, 7, capacity))


@pytest.mark.parametrize("path", ["one block per tree", "one launch per level"])
def test_narrow_levels_wider_than_the_shared_rows_are_read_from_the_tree(emu, path):
    """BlockTopLevels (kernels/cuda/sum_tree_kernels.cuh) keeps a level in shared memory only
    where its padded width fits 2048 slots: at K 2, 20000 leaves and B 3000 the narrow levels
    start at 2500 nodes (summed from the tree, kept in the tree only), then 1250 (summed from
    the tree, kept in shared memory too), then the rest from the shared rows."""
    k, capacity = 2, 20000
    nodes = np.asarray(random_tree(capacity, k, seed=8).nodes)
    idx, vals = (np.asarray(x) for x in random_updates(capacity, 3000, seed=9))
    keep = np.random.default_rng(9).random(3000) < 0.9
    got, bad, _, _ = emu_update(emu, nodes, capacity, k, idx, vals, keep, PATHS[path])
    assert not bad.any()
    want = oracle.write(nodes, capacity, k, idx, vals, keep)
    np.testing.assert_array_equal(bits(got[0]), bits(want))


@pytest.mark.parametrize("k, capacity", [(16, 5000), (3, 2000), (2, 1500)])
def test_a_cluster_whose_threads_take_several_entries_equals_the_oracle(emu, schedule, k, capacity):
    """Batches of 1500 over the emulation's clusters of 8 blocks of 128 threads: up to two
    entries per thread, levels wider than the batch, no wider (over the cluster), and no wider
    than a block (the first block's alone), duplicates and dropped entries, on two trees."""
    trees, idx, vals, keep = two_trees_and_batches(capacity, k, 1500, seed=0)
    cluster_update_is_the_oracles(emu, trees, capacity, k, idx, vals, keep)


@pytest.mark.parametrize("path", PATHS)
def test_a_bad_kept_entry_refuses_its_tree_only(emu, path):
    k, capacity = 4, 300
    trees = np.stack([np.asarray(random_tree(capacity, k, seed=s).nodes) for s in range(2)])
    idx = np.tile(np.arange(40, dtype=np.int32), (2, 1))
    vals = np.ones((2, 40), F32)
    vals[1, 17] = np.nan
    keep = np.ones((2, 40), bool)
    got, bad, _, _ = emu_update(emu, trees, capacity, k, idx, vals, keep, PATHS[path])
    assert list(bad) == [0, 1]
    np.testing.assert_array_equal(bits(got[1]), bits(trees[1]))
    want = oracle.write(trees[0], capacity, k, idx[0], vals[0])
    np.testing.assert_array_equal(bits(got[0]), bits(want))


def frozen(*arrays):
    """NumPy copies that cannot be written: a case cached for many tests stays as made."""
    out = tuple(np.array(a) for a in arrays)
    for a in out:
        a.setflags(write=False)
    return out


@functools.cache
def checked_update_cases(k: int, capacity: int) -> tuple:
    """`update_batches` at (K, C), each with the tree, maximum and error word it starts from
    (the buffer's own update of the batch before) and the buffer's update of it: computed once,
    for every path and schedule. Each: (case, nodes, idx, raw, values, keep, size, max, err,
    want nodes, want max, want err)."""
    tree, max_p, err = random_tree(capacity, k, seed=2), F32(1.5), checks.ERR_EMPTY
    reference = REFERENCE_UPDATE
    cases = []
    for case, idx, raw, keep, size in update_batches(capacity, 300, seed=k):
        values = np.asarray(leaf_values(jnp.asarray(raw)))
        want = reference(
            tree, jnp.asarray(idx), jnp.asarray(raw), jnp.asarray(values), jnp.asarray(keep),
            jnp.int32(size), jnp.float32(max_p), jnp.int32(err),
        )  # fmt: skip
        arrays = frozen(tree.nodes, idx, raw, values, keep, want[0].nodes)
        cases.append((case, *arrays[:5], size, max_p, err, arrays[5], F32(want[1]), int(want[2])))
        tree, max_p = want[0], F32(want[1])
    return tuple(cases)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("k, capacity", CASES)
def test_the_checked_update_equals_the_buffers_update(emu, schedule, k, capacity, path):
    for case, nodes, idx, raw, values, keep, size, max_p, err, *want in checked_update_cases(
        k, capacity
    ):
        checked = (raw, [size], [max_p], [err])
        got, _, got_max, got_err = emu_update(
            emu, nodes, capacity, k, idx, values, keep, PATHS[path], checked
        )
        np.testing.assert_array_equal(bits(got[0]), bits(want[0]), err_msg=case)
        assert bits(got_max[0]) == bits(want[1]) and got_err[0] == want[2], case


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


def test_each_blocks_layout_built_by_its_first_warp_is_make_layouts(emu):
    """WarpLayout (kernels/cuda/block_layout.cuh): the 32 lanes' ceilings, suffix scan and
    writes give every member MakeLayout gives, for every thread of the block; bad arguments and
    capacities of 2^31 and more fall back to MakeLayout itself."""
    rng = np.random.default_rng(17)
    cases = [(1, 2), (2, 2), (1, 256), (2**31 - 1, 2), (2**31 - 1, 256), (2**31, 16),
             (2**20, 16), (2**20 + 1, 16), (5000, 3), (777, 64), (7, 3), (0, 4), (100, 1),
             (100, 257)]  # fmt: skip
    cases += [(int(rng.integers(1, 2**31)), int(rng.integers(2, 257))) for _ in range(40)]
    cases += [(int(rng.integers(1, 5000)), int(rng.integers(2, 9))) for _ in range(40)]
    for capacity, k in cases:
        threads = int(rng.choice([32, 64, 256]))
        got = emu.drlhet_emu_block_layout_matches(
            ctypes.c_int64(capacity), ctypes.c_int(k), ctypes.c_uint(threads)
        )
        assert got == 1, (capacity, k, threads)


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


def test_the_schedules_start_the_threads_in_order_reversed_and_shuffled(emu, schedule):
    order = np.full(64, -1, np.int32)
    assert emu.drlhet_emu_start_order(64, ptr(order)) == 0
    assert sorted(order) == list(range(64))  # every thread ran once
    if schedule == "in order":
        assert list(order) == list(range(64))
    elif schedule == "reversed":
        assert list(order) == list(range(63, -1, -1))
    else:
        assert list(order) not in (list(range(64)), list(range(63, -1, -1)))


def test_a_launch_whose_barriers_never_complete_fails_instead_of_hanging(emu):
    assert emu.drlhet_emu_divergent_barriers() == -2
    # the emulation is usable after it
    tree = random_tree(50, 4)
    got, bad, _, _ = emu_update(
        emu, tree.nodes, 50, 4, np.arange(3), np.ones(3, F32), [1] * 3, (0, 4096, 0)
    )
    np.testing.assert_array_equal(
        bits(got[0]), bits(oracle.write(tree.nodes, 50, 4, [0, 1, 2], [1.0] * 3))
    )


def test_a_cluster_barrier_orders_the_writes_of_every_block_of_the_cluster(emu, schedule):
    """ClusterRing (emu/emu_entry.cc): each thread reads, after the barrier, what the same thread
    of the next block of its cluster wrote before it, in clusters of 1, 2 and 8."""
    for cluster in (1, 2, 8):
        grid, threads = 8, 64
        seen = np.full(grid * threads, -1, np.int32)
        assert emu.drlhet_emu_cluster_ring(grid, threads, cluster, ptr(seen)) == 0
        block = np.arange(grid)
        want = block // cluster * cluster + (block % cluster + 1) % cluster
        got = seen.reshape(grid, threads)
        np.testing.assert_array_equal(got, np.repeat(want[:, None], threads, 1), str(cluster))


@pytest.mark.parametrize("grid, cluster", [(18, 9), (12, 8), (8, 0)])
def test_a_cluster_launch_beyond_the_gpus_limits_fails(emu, grid, cluster):
    # more than 8 blocks a cluster, a grid not of whole clusters, no cluster
    seen = np.zeros(grid * 32, np.int32)
    assert emu.drlhet_emu_cluster_ring(grid, 32, cluster, ptr(seen)) == -2


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
