"""Where the tests run the CUDA backend's custom calls: on a GPU (the kernels themselves) and on a
CPU device, where the same handler bodies run the same kernels under the host emulation of the
CUDA execution model (kernels/cuda/emu: function, not speed). The fixtures (conftest.py) run
each place on the update paths (`cuda.BLOCK_MAX_BATCH`: every batch in one block per tree;
or every batch over the whole grid, a launch per level, with `cuda.CLUSTER_MAX_BATCH` 0 and
`cuda.NARROW_MAX_NODES` 16 so that the levels of 17 to B nodes take the launches of a thread
per node; or, with `cuda.CLUSTER_MAX_BATCH`, every batch in one cluster of blocks per tree, the
sample's too above 1024 targets, its claims in the call's workspace; or, with
`cuda.TAGGED_CLAIMS` too, the cluster path with its claims in a table kept by its custom call,
the leaves' parents summed from the tree or, with `cuda.TAGGED_SIBLINGS`, from the table, on a
GPU only: the emulation runs those paths in test_cuda_tagged.py, both ways, where the fixture's
tests on more paths would cost about 45 s of the default suite each), everything in the test
on that place's device: the reference too. Each path sets every switch that picks it, so that
a default changed in the library (as `cuda.CLUSTER_MAX_BATCH` and `cuda.TAGGED_CLAIMS` were
once measured on) does not move a path's tests onto another; every path but the two in clusters
of 16 blocks (`cuda.CLUSTER_BLOCKS`, on a GPU only) runs the library's width.
"""

from __future__ import annotations

import jax
import pytest

from drlhet import backends
from drlhet.backends import cuda
from drlhet.backends.native import library_path

NO_GPU = "missing device: no GPU (JAX sees no CUDA device here)"
CLUSTER_PATH = "one cluster per tree"
TAGGED_PATH = "claims in a table kept by the call"
TAGGED_CLAIMS_PATH = "claims in a table and parents from the tree"
WIDE_PATH = "16-block clusters with claims in a table"
WIDE_WORKSPACE_PATH = "16-block clusters with claims in the workspace"
SORTED_PATH = "sorted runs or claims in the workspace"
PATHS = {
    "one block per tree": {"BLOCK_MAX_BATCH": 2**40},
    "one launch per level": {"BLOCK_MAX_BATCH": 0, "CLUSTER_MAX_BATCH": 0, "NARROW_MAX_NODES": 16},
    CLUSTER_PATH: {"BLOCK_MAX_BATCH": 0, "CLUSTER_MAX_BATCH": 2**40, "TAGGED_CLAIMS": False},
    TAGGED_CLAIMS_PATH: {
        "BLOCK_MAX_BATCH": 0,
        "CLUSTER_MAX_BATCH": 2**40,
        "TAGGED_CLAIMS": True,
        "TAGGED_SIBLINGS": False,
    },
    TAGGED_PATH: {
        "BLOCK_MAX_BATCH": 0,
        "CLUSTER_MAX_BATCH": 2**40,
        "TAGGED_CLAIMS": True,
        "TAGGED_SIBLINGS": True,
    },
    WIDE_PATH: {
        "BLOCK_MAX_BATCH": 0,
        "CLUSTER_MAX_BATCH": 2**40,
        "TAGGED_CLAIMS": True,
        "TAGGED_SIBLINGS": False,
        "CLUSTER_BLOCKS": 16,
    },
    WIDE_WORKSPACE_PATH: {
        "BLOCK_MAX_BATCH": 0,
        "CLUSTER_MAX_BATCH": 2**40,
        "TAGGED_CLAIMS": False,
        "CLUSTER_BLOCKS": 16,
    },
    SORTED_PATH: {
        "BLOCK_MAX_BATCH": 0,
        "CLUSTER_MAX_BATCH": 2**40,
        "TAGGED_CLAIMS": True,  # the sorted kernels claim a declined batch in the workspace
        "SORTED_RUNS": True,
    },
}
"""Each update path's settings of `drlhet.backends.cuda`. The tagged claims' batches that they do
not take (more entries than the tagged kernel's cluster has threads) go to the cluster path's
workspace claims."""
GPU_ONLY = (TAGGED_CLAIMS_PATH, TAGGED_PATH, WIDE_PATH, WIDE_WORKSPACE_PATH, SORTED_PATH)
"""The paths the fixtures run on a GPU only (the emulation's tests of them: see above,
test_cuda_emu_wide.py for the clusters of 16 blocks, test_cuda_emu_sorted.py for the sorted
runs)."""
PLACES = ("gpu", "emulated cpu")


def devices(place: str) -> list:
    """The devices of ``place``; skips, naming what is missing, where it has none here."""
    if place == "gpu":
        if not cuda.gpu_devices():
            pytest.skip(NO_GPU)
        return cuda.gpu_devices()
    try:
        library_path(*cuda.EMU_LIBRARY)
    except backends.BackendUnavailable as e:  # built wherever <ucontext.h> exists
        pytest.skip(f"missing library: the CUDA kernels' host emulation ({e})")
    return jax.devices(backends.CPU)


__all__ = [
    "CLUSTER_PATH", "GPU_ONLY", "NO_GPU", "PATHS", "PLACES", "TAGGED_CLAIMS_PATH", "TAGGED_PATH",
    "SORTED_PATH", "WIDE_PATH", "WIDE_WORKSPACE_PATH", "devices",
]  # fmt: skip
