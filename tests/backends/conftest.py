"""Fixtures of the backend tests: where the CUDA backend's custom calls run (cuda_places.py)."""

from __future__ import annotations

import os

import jax
import pytest
from cuda_places import CLUSTER_PATH, PATHS, PLACES, devices

from drlhet import backends
from drlhet.backends import cuda


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(f"{p}, {q}", marks=[pytest.mark.cuda_cluster] if q == CLUSTER_PATH else [])
        for p in PLACES
        for q in PATHS
    ],
)
def place(request):
    """The cuda backend's ops (`TreeOps`, its own buffer calls included), run on one place's
    first device with one update path. The cluster path's cases are marked ``cuda_cluster``:
    ``experiments/gpu_checks.sh`` runs them on a GPU in a stage of their own, since only its
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


@pytest.fixture(scope="session", autouse=True)
def key_targets_setting():
    """``DRLHET_TEST_CUDA_KEY_TARGETS=0`` runs the session with `cuda.KEY_TARGETS` off (XLA
    draws every sample's targets): how ``experiments/gpu_checks.sh`` reruns the GPU tests that
    failed beside a failure of the key-drawn targets, to see whether that part explains them."""
    if os.environ.get(KEY_TARGETS_ENV, "1") != "0":
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cuda, "KEY_TARGETS", False)
        jax.clear_caches()  # read when a function is traced
        yield
