"""Fixtures of the backend tests: where the CUDA backend's custom calls run (cuda_places.py)."""

from __future__ import annotations

import jax
import pytest
from cuda_places import PATHS, PLACES, devices

from drlhet import backends
from drlhet.backends import cuda


@pytest.fixture(scope="module", params=[f"{p}, {q}" for p in PLACES for q in PATHS])
def place(request):
    """The cuda backend's ops (`TreeOps`, its own buffer calls included), run on one place's
    first device with one update path."""
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
