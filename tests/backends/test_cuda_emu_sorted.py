"""The cluster update's sorted runs (kernels/cuda/sorted_runs.cuh; `drlhet.backends.cuda.
SORTED_RUNS`) under the host emulation: a batch of sorted indices (a stratified sample's, written
back) written run by run, each run's subtree by its last thread, bit for bit the oracle's or the
buffer's; a batch out of order, out of range or with a run of more than 64 entries left to the
claims (nothing written before the vote), bit for bit too. Each test checks which path its
updates took (the emulation counts the clusters that wrote by the sorted runs), so that a vote
that always declined, or never did, fails here.
"""

from __future__ import annotations

import ctypes

import jax.numpy as jnp
import numpy as np
import oracle
import pytest
import test_cuda_emu
from conformance import random_tree
from test_cuda_buffer import REFERENCE_UPDATE, bits, leaf_values, update_batches
from test_cuda_emu import PATHS, emu_update

from drlhet.replay import checks
from drlhet.replay import sum_tree as st

emu, schedule = test_cuda_emu.emu, test_cuda_emu.schedule  # the emulation's fixtures
F32 = np.float32
CLUSTER = PATHS["one cluster per tree"]
MAX_RUN = 64  # kSortedMaxRun


def sorted_runs_taken(lib) -> int:
    """The clusters that have written their tree by the sorted runs so far."""
    lib.drlhet_emu_sorted_updates.restype = ctypes.c_int64
    return int(lib.drlhet_emu_sorted_updates())


def sorted_batches(capacity: int, batch: int, seed: int, trees: int = 2):
    """For each of ``trees`` trees, a batch of sorted indices as a stratified sample gives them
    (duplicates adjacent: a tenth of the entries repeat their neighbour's), values with zeros
    among them, about a tenth dropped: (idx, values, keep [V, B])."""
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.integers(0, capacity, (trees, batch)), axis=1).astype(np.int32)
    repeat = rng.random((trees, batch)) < 0.1
    repeat[:, 0] = False
    for v in range(trees):
        for j in np.nonzero(repeat[v])[0]:
            idx[v, j] = idx[v, j - 1]
    vals = (rng.random((trees, batch)) * rng.choice([0, 1, 100], (trees, batch))).astype(F32)
    keep = rng.random((trees, batch)) < 0.9
    return idx, vals, keep


def trees_of(capacity: int, k: int, seed: int, trees: int = 2) -> np.ndarray:
    """``trees`` random trees of (capacity, K): nodes [V, T]."""
    return np.stack([np.asarray(random_tree(capacity, k, seed=seed + v).nodes)
                     for v in range(trees)])  # fmt: skip


def update(lib, nodes, capacity, k, idx, vals, keep, **kw):
    """The cluster path's update with the sorted runs on: (nodes, bad, max, err, sorted runs
    taken by it)."""
    before = sorted_runs_taken(lib)
    got = emu_update(lib, nodes, capacity, k, idx, vals, keep, CLUSTER, sorted_runs=True, **kw)
    return (*got, sorted_runs_taken(lib) - before)


def assert_oracle(got, nodes, capacity, k, idx, vals, keep):
    for v in range(len(nodes)):
        want = oracle.write(nodes[v], capacity, k, idx[v], vals[v], keep[v])
        np.testing.assert_array_equal(bits(got[v]), bits(want), err_msg=f"tree {v}")


@pytest.mark.parametrize(
    "k, capacity, batch",
    [(16, 2**14, 1000), (2, 3000, 700), (3, 5000, 1000), (64, 777, 300), (32, 4097, 513),
     (16, 1, 5), (3, 7, 64)],
)  # fmt: skip
def test_a_sorted_batch_is_written_run_by_run_as_the_oracle_writes_it(
    emu, schedule, k, capacity, batch
):
    # runs of 1 to about 30 entries (on the tiny trees, C 1 and 7, a run is one leaf's
    # duplicates); the emulation's clusters have 8 blocks of at most 128 threads
    nodes = trees_of(capacity, k, seed=3)
    idx, vals, keep = sorted_batches(capacity, batch, seed=k + batch)
    # a claims table given: the sorted kernels never use it (a declined batch is claimed in
    # the workspace)
    table = np.zeros(2 * (capacity + 1), np.uint64)
    got, bad, _, _, taken = update(emu, nodes, capacity, k, idx, vals, keep, tags=table)
    assert not bad.any() and taken == 2, taken
    assert_oracle(got, nodes, capacity, k, idx, vals, keep)
    # the next update from the written trees, out of order: the claims again, the same bits
    rev = idx[:, ::-1].copy()
    got2, bad, _, _, taken = update(emu, got, capacity, k, rev, vals, keep, tags=table)
    still_sorted = sum(bool(np.all(np.diff(r) >= 0)) for r in rev)  # one leaf's only (C 1)
    assert taken == still_sorted and not bad.any()
    assert_oracle(got2, got, capacity, k, rev, vals, keep)


@pytest.mark.parametrize("run, sorted_path", [(MAX_RUN, True), (MAX_RUN + 1, False)])
def test_a_run_past_64_entries_is_left_to_the_claims(emu, run, sorted_path):
    # every entry on one leaf: one run of `run` entries, its last kept one the winner
    capacity, k = 5000, 16
    nodes = trees_of(capacity, k, seed=8)
    idx = np.full((2, run), 1234, np.int32)
    vals = np.arange(2 * run, dtype=F32).reshape(2, run) / 7
    keep = np.ones((2, run), bool)
    keep[:, -1] = False  # the winner is the entry before the last
    got, bad, _, _, taken = update(emu, nodes, capacity, k, idx, vals, keep)
    assert not bad.any() and taken == (2 if sorted_path else 0)
    assert_oracle(got, nodes, capacity, k, idx, vals, keep)
    leaves = st.layout(capacity, k).offsets[-1]
    assert bits(got[0][leaves + 1234]) == bits(vals[0, -2])


def test_a_bad_value_in_a_sorted_batch_refuses_its_tree_alone(emu):
    capacity, k = 5000, 16
    nodes = trees_of(capacity, k, seed=9)
    idx, vals, keep = sorted_batches(capacity, 500, seed=4)
    vals[1, 250] = np.nan
    keep[1, 250] = True
    got, bad, _, _, taken = update(emu, nodes, capacity, k, idx, vals, keep)
    assert taken == 2 and [bool(b) for b in bad] == [False, True]
    np.testing.assert_array_equal(bits(got[1]), bits(nodes[1]))
    want = oracle.write(nodes[0], capacity, k, idx[0], vals[0], keep[0])
    np.testing.assert_array_equal(bits(got[0]), bits(want))


@pytest.mark.parametrize("k, capacity", [(16, 5000), (3, 100), (2, 1000)])
def test_a_sorted_checked_update_equals_the_buffers_update(emu, k, capacity):
    # the checked update's batches, each sorted by index (its raw priorities and keep flags
    # moved along): the good ones by the sorted runs, the refused ones refused there, those with
    # an index of -1 by the claims
    tree, max_p, err = random_tree(capacity, k, seed=2), F32(1.5), checks.ERR_EMPTY
    paths = set()
    for case, idx, raw, keep, size in update_batches(capacity, 300, seed=k):
        order = np.argsort(idx, kind="stable")
        idx, raw, keep = idx[order], raw[order], keep[order]
        values = np.asarray(leaf_values(jnp.asarray(raw)))
        want = REFERENCE_UPDATE(
            tree, jnp.asarray(idx), jnp.asarray(raw), jnp.asarray(values), jnp.asarray(keep),
            jnp.int32(size), jnp.float32(max_p), jnp.int32(err),
        )  # fmt: skip
        checked = (raw, [size], [max_p], [err])
        got, _, got_max, got_err, taken = update(
            emu, np.asarray(tree.nodes), capacity, k, idx, values, keep, checked=checked
        )
        paths.add((case, taken))
        np.testing.assert_array_equal(bits(got[0]), bits(want[0].nodes), err_msg=case)
        assert bits(got_max[0]) == bits(want[1]) and got_err[0] == want[2], case
        tree, max_p, err = want[0], F32(want[1]), int(want[2])
    assert ("good", 1) in paths and ("below", 0) in paths and ("nan", 1) in paths, paths


@pytest.mark.slow
def test_random_sorted_and_unsorted_batches_equal_the_oracle(emu):
    """40 random (K, capacity, trees, batch, thread order): sorted batches with runs of every
    length up to past 64 (a few leaves or all of them), some reversed, values with zeros and
    bad ones, each update from the last one's trees. About 45 s."""
    rng = np.random.default_rng(91)
    for case in range(40):
        k = int(rng.choice([2, 3, 4, 5, 8, 16, 17, 32, 64]))
        capacity, trees = int(rng.integers(1, 20000)), int(rng.integers(1, 4))
        emu.drlhet_emu_schedule(ctypes.c_int64(int(rng.integers(0, 1000))))
        nodes = trees_of(capacity, k, seed=case, trees=trees)
        for _ in range(3):
            batch = int(rng.integers(1, 1025))
            leaves = int(rng.choice([min(capacity, 4), capacity]))
            idx = np.sort(rng.integers(0, leaves, (trees, batch)), axis=1).astype(np.int32)
            if rng.random() < 0.2:
                idx = idx[:, ::-1].copy()
            vals = (rng.random((trees, batch)) * rng.choice([0, 1, 50], (trees, batch))).astype(F32)
            if rng.random() < 0.2:
                vals[0, batch // 2] = -1.0  # tree 0 refused
            keep = rng.random((trees, batch)) < 0.8
            keep[0, batch // 2] |= vals[0, batch // 2] < 0
            got, bad, _, _, _ = update(emu, nodes, capacity, k, idx, vals, keep)
            for v in range(trees):
                if bad[v]:
                    np.testing.assert_array_equal(bits(got[v]), bits(nodes[v]), err_msg=f"{case}")
                    continue
                want = oracle.write(nodes[v], capacity, k, idx[v], vals[v], keep[v])
                np.testing.assert_array_equal(bits(got[v]), bits(want), err_msg=f"{case} {v}")
            nodes = got
    emu.drlhet_emu_schedule(ctypes.c_int64(0))
