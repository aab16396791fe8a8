"""The CUDA backend's kernels and launch sequences under the host emulation of the CUDA
execution model (kernels/cuda/emu: each block's threads as fibers, __syncthreads and the warp
collectives as barriers), called directly on every machine: what a GPU computes, not how fast.
(The same emulation behind the backend's custom calls on a CPU device: cuda_places.py.)

The same kernels and launches as the XLA FFI handlers (kernels/cuda/launch.cuh). Here the
update: the plain update on every path equals the NumPy oracle, the checked update the buffer's
own code (`drlhet.replay.buffer_ops`), over one tree and over several whose entries share warps,
refusals included, with each block's threads started in order, reversed and shuffled; the
workspace starts as garbage, as XLA leaves it. And the helpers that the emulation's other tests
share: the sample call in test_cuda_emu_sample.py, the emulation's own execution model
(schedules, barriers, clusters) in test_cuda_emu_launch.py, the claims in a tagged table in
test_cuda_tagged.py.
"""

from __future__ import annotations

import ctypes
import functools

import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from conformance import random_tree, random_updates
from test_cuda_buffer import (
    REFERENCE_UPDATE,
    bits,
    leaf_values,
    update_batches,
)

from drlhet.backends import BackendUnavailable
from drlhet.backends.native import library_path
from drlhet.replay import checks

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
               tags=None, siblings=False, blocks=8, sorted_runs=False):  # fmt: skip
    """One update of V = len(nodes) trees on ``path`` (block_max_batch, narrow_max_nodes,
    cluster_max_batch), the nodes ``offset`` bytes past a
    16-byte boundary, with the claims table ``tags`` (uint64 [V * (C + 1)], kept by the
    caller; None: none), whose winners sum their leaves' parents from it with ``siblings``,
    the cluster path in clusters of ``blocks`` blocks, trying the sorted runs with
    ``sorted_runs``:
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
        ptr(err_out), ptr(bad), ptr(tags), ctypes.c_int64(siblings), ctypes.c_int32(blocks),
        ctypes.c_int32(sorted_runs),
    )  # fmt: skip
    assert rc == 0
    return out, bad, max_out, err_out


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
