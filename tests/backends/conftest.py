"""Fixtures of the backend tests: where the CUDA backend's custom calls run (cuda_places.py)."""

from __future__ import annotations

import os

import jax
import pytest
from cuda_places import (
    CLUSTER_PATH,
    GPU_ONLY,
    PATHS,
    PLACES,
    SORTED_PATH,
    TAGGED_CLAIMS_PATH,
    TAGGED_PATH,
    WIDE_PATH,
    WIDE_WORKSPACE_PATH,
    devices,
)

from drlhet import backends
from drlhet.backends import cuda

# the paths whose kernels wait on other blocks: experiments/gpu_checks.sh runs each one's cases
# on a GPU in a stage of its own
MARKS = {
    CLUSTER_PATH: [pytest.mark.cuda_cluster],
    TAGGED_CLAIMS_PATH: [pytest.mark.cuda_tagged],
    TAGGED_PATH: [pytest.mark.cuda_tagged],
    WIDE_PATH: [pytest.mark.cuda_wide],
    WIDE_WORKSPACE_PATH: [pytest.mark.cuda_wide],
    SORTED_PATH: [pytest.mark.cuda_sorted],
}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(f"{p}, {q}", marks=MARKS.get(q, []))
        for p in PLACES
        for q in PATHS
        if p == "gpu" or q not in GPU_ONLY  # the emulation's tests of those: cuda_places.py
    ],
)
def place(request):
    """The cuda backend's ops (`TreeOps`, its own buffer calls included), run on one place's
    first device with one update path. The cluster, tagged claims, 16-block cluster and sorted
    runs paths' cases are marked ``cuda_cluster``, ``cuda_tagged``, ``cuda_wide`` and
    ``cuda_sorted``:
    ``experiments/gpu_checks.sh`` runs each on a GPU in a stage of its own, since only their
    kernels wait on other blocks (a hang there costs that stage, not the other tests)."""
    where, path = request.param.split(", ")
    device = devices(where)[0]
    ops = backends.tree_ops("cuda")
    with pytest.MonkeyPatch.context() as mp, jax.default_device(device):
        for name, value in PATHS[path].items():
            mp.setattr(cuda, name, value)
        jax.clear_caches()  # the path is read when a function is traced
        yield ops


@pytest.fixture(scope="module")
def gpu():
    """The cuda backend's ops on a GPU (skipped without one)."""
    devices("gpu")
    return backends.tree_ops("cuda")


KEY_TARGETS_ENV = "DRLHET_TEST_CUDA_KEY_TARGETS"
SHARED_TOP_ENV = "DRLHET_TEST_CUDA_SHARED_TOP"


@pytest.fixture(scope="session", autouse=True)
def switched_off_parts():
    """``DRLHET_TEST_CUDA_KEY_TARGETS=0`` runs the session with `cuda.KEY_TARGETS` off (XLA
    draws every sample's targets), ``DRLHET_TEST_CUDA_SHARED_TOP=0`` with `cuda.SHARED_TOP` off
    (every descent reads the tree in global memory): how ``experiments/gpu_checks.sh`` reruns
    the GPU tests that failed beside a failure of such a part, to see whether it explains
    them."""
    off = [name for env, name in ((KEY_TARGETS_ENV, "KEY_TARGETS"), (SHARED_TOP_ENV, "SHARED_TOP"))
           if os.environ.get(env, "1") == "0"]  # fmt: skip
    if not off:
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        for name in off:
            mp.setattr(cuda, name, False)
        jax.clear_caches()  # read when a function is traced
        yield
