"""The host emulation of the CUDA execution model itself (kernels/cuda/emu; test_cuda_emu.py):
each block's threads start in order, reversed or shuffled, as asked; a launch whose barriers
can never complete fails instead of hanging, and the emulation is usable after it; a cluster's
barrier orders the writes of all its blocks, and a cluster launch beyond a GPU's limits fails;
each block's layout, built by its first warp, is MakeLayout's.
"""

from __future__ import annotations

import ctypes

import numpy as np
import oracle
import pytest
import test_cuda_emu
from conformance import random_tree
from test_cuda_buffer import bits
from test_cuda_emu import emu_update, ptr

emu, schedule = test_cuda_emu.emu, test_cuda_emu.schedule  # the emulation's fixtures
F32 = np.float32


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
    of the next block of its cluster wrote before it, in clusters of 1, 2, 8 and 16."""
    for cluster in (1, 2, 8, 16):
        grid, threads = 16, 64
        seen = np.full(grid * threads, -1, np.int32)
        assert emu.drlhet_emu_cluster_ring(grid, threads, cluster, ptr(seen)) == 0
        block = np.arange(grid)
        want = block // cluster * cluster + (block % cluster + 1) % cluster
        got = seen.reshape(grid, threads)
        np.testing.assert_array_equal(got, np.repeat(want[:, None], threads, 1), str(cluster))


@pytest.mark.parametrize("grid, cluster", [(34, 17), (12, 8), (8, 0)])
def test_a_cluster_launch_beyond_the_gpus_limits_fails(emu, grid, cluster):
    # more than 16 blocks a cluster (the non-portable limit), a grid not of whole clusters, no
    # cluster
    seen = np.zeros(grid * 32, np.int32)
    assert emu.drlhet_emu_cluster_ring(grid, 32, cluster, ptr(seen)) == -2
