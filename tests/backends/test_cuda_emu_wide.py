"""The cluster path in clusters of 16 blocks (`drlhet.backends.cuda.CLUSTER_BLOCKS`; a
non-portable cluster size that the H100 and H200 allow) under the host emulation: the update
with its claims in the workspace and in a tagged table (the leaves' parents from the tree or
from the slots), plain and checked, and the sample from targets and from the key, each bit for
bit the oracle's or the buffer's, each launch seen to take 16 blocks a cluster (a width that the
launches ignored would fail here). The emulation's blocks have at most 128 threads, so a batch
of 1500 spreads over all 16 blocks of each cluster.
"""

from __future__ import annotations

import ctypes

import numpy as np
import oracle
import pytest
import test_cuda_emu
from test_cuda_buffer import bits
from test_cuda_emu import PATHS, checked_update_cases, emu_update, two_trees_and_batches
from test_cuda_emu_sample import NEVER, emu_weigh, sample_case

emu, schedule = test_cuda_emu.emu, test_cuda_emu.schedule  # the emulation's fixtures
CLUSTER = PATHS["one cluster per tree"]
WIDE = 16


def last_cluster(lib) -> int:
    """The blocks a cluster of the emulation's last launch had (1: not in clusters)."""
    lib.drlhet_emu_last_cluster.restype = ctypes.c_int
    return int(lib.drlhet_emu_last_cluster())


@pytest.mark.parametrize("tagged", [None, False, True], ids=["workspace", "tagged", "siblings"])
@pytest.mark.parametrize("k, capacity, batch", [(16, 2**14, 1500), (3, 5000, 1100)])
def test_an_update_in_clusters_of_16_blocks_equals_the_oracle(
    emu, schedule, k, capacity, batch, tagged
):
    # claims in the workspace, or in a table (one entry a thread: 1500 <= 16 x 128) whose
    # winners sum the leaves' parents after a barrier or from the slots
    trees, idx, vals, keep = two_trees_and_batches(capacity, k, batch, seed=5)
    tags = None if tagged is None else np.zeros(2 * (capacity + 1), np.uint64)
    got, bad, _, _ = emu_update(emu, trees, capacity, k, idx, vals, keep, CLUSTER, tags=tags,
                                siblings=bool(tagged), blocks=WIDE)  # fmt: skip
    assert last_cluster(emu) == WIDE
    assert not bad.any()
    for v in range(2):
        want = oracle.write(trees[v], capacity, k, idx[v], vals[v], keep[v])
        np.testing.assert_array_equal(bits(got[v]), bits(want), err_msg=f"tree {v}")


@pytest.mark.parametrize("k, capacity", [(16, 2**12 + 5), (3, 1000)])
def test_a_checked_update_in_clusters_of_16_blocks_equals_the_buffers(emu, k, capacity):
    # batches of 300 (blocks of 32 threads: the last six blocks of each cluster without an
    # entry), refused ones among them: the words merged over the 16 blocks
    for case, nodes, idx, raw, values, keep, size, max_p, err, *want in checked_update_cases(
        k, capacity
    ):
        checked = (raw, [size], [max_p], [err])
        got, _, got_max, got_err = emu_update(emu, nodes, capacity, k, idx, values, keep,
                                              CLUSTER, checked, blocks=WIDE)  # fmt: skip
        assert last_cluster(emu) == WIDE
        np.testing.assert_array_equal(bits(got[0]), bits(want[0]), err_msg=case)
        assert bits(got_max[0]) == bits(want[1]) and got_err[0] == want[2], case


@pytest.mark.parametrize("key", [False, True], ids=["targets", "key"])
def test_a_sample_in_clusters_of_16_blocks_equals_the_buffers(emu, schedule, key):
    k, capacity, batch = 16, 5000, 1500
    nodes, targets, sizes, betas, wants = sample_case(k, capacity, batch)
    keys = None
    if key:  # the same draws from the key on both widths: the width is all that differs
        keys = np.arange(6, dtype=np.uint32).reshape(3, 2) + 11
        wants = [tuple(w) for w in zip(*emu_weigh(emu, nodes, capacity, k, targets, sizes, betas,
                                                  cluster_max=2**40, key=keys, strat=0),
                                       strict=True)]  # fmt: skip
        assert last_cluster(emu) == 8
    got = emu_weigh(emu, nodes, capacity, k, targets, sizes, betas, cluster_max=2**40,
                    key=keys, strat=0, spread_min=NEVER, blocks=WIDE)  # fmt: skip
    assert last_cluster(emu) == WIDE
    for v, want in enumerate(wants):
        np.testing.assert_array_equal(got[0][v], want[0])
        np.testing.assert_array_equal(bits(got[1][v]), bits(want[1]))
        if key:
            np.testing.assert_array_equal(bits(got[2][v]), bits(want[2]))
        else:  # against the buffer's weights: the host's powf
            np.testing.assert_allclose(got[2][v], want[2], rtol=5e-7, atol=0)
        assert got[3][v] == want[3], v
