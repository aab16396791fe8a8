"""Bad input to the CUDA backend's calls (drlhet.backends.cuda, drlhet.backends.cuda_cupy).

Operands that are not one row per tree, a tree whose nodes are not its layout's, a sample of no
target and path switches that are not integers are refused when traced, in one line naming the
value, before XLA runs the call (whose handler would refuse them after a donated tree was given
up, naming no shape); under x64 an index int32 cannot hold is refused, not wrapped into range;
a scalar ``keep`` is the batch's, as in the reference. The CuPy path checks its arrays before a
launch and fails without CuPy or a GPU naming what is missing (run here with NumPy standing in
for CuPy: no kernel is launched).
"""

from __future__ import annotations

import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import random_tree
from cuda_places import devices

from drlhet import backends
from drlhet.backends import cuda, cuda_cupy
from drlhet.replay import buffer_ops, checks
from drlhet.replay import sum_tree as st

F32 = np.float32


@pytest.fixture(scope="module", autouse=True)
def emulated():
    """The calls on the emulated CPU device (skipped, naming the library, where not built)."""
    devices("emulated cpu")
    backends.tree_ops("cuda")


def bits(x):
    return np.asarray(x, F32).view(np.uint32)


TREE = random_tree(10, 3)
I3, V3 = jnp.arange(3, dtype=jnp.int32), jnp.ones(3, jnp.float32)
S, B = jnp.int32(10), jnp.float32(0.4)
BAD_CALLS = {  # what each call is given, and the line it answers with
    "values shorter": (lambda t: cuda.update(t, I3, V3[:2]), r"update: values has shape \(2,\)"),
    "keep shorter": (
        lambda t: cuda.update(t, I3, V3, jnp.ones(2, bool)),
        r"update: keep has shape \(2,\)",
    ),
    "a matrix of indices for one tree": (
        lambda t: cuda.update(t, jnp.zeros((2, 3), jnp.int32), jnp.ones((2, 3))),
        r"update: indices has shape \(2, 3\), expected \('B',\)",
    ),
    "raw shorter": (
        lambda t: cuda.update_checked(t, I3, V3[:2], V3, V3 > 0, S, B, jnp.int32(0)),
        r"update_checked: raw has shape \(2,\), expected \(3,\)",
    ),
    "a size per target": (
        lambda t: cuda.update_checked(t, I3, V3, V3, V3 > 0, jnp.full(3, 10), B, jnp.int32(0)),
        r"update_checked: size has shape \(3,\), expected \(\)",
    ),
    "nodes of another tree": (
        lambda t: cuda.update(st.SumTreeState(t.nodes[:7], 10, 3), I3, V3),
        r"10 leaves at K 3 has 24 nodes, got nodes of shape \(7,\)",
    ),
    "targets of two rows": (
        lambda t: cuda.find(t, jnp.ones((2, 3))),
        r"find: targets has shape \(2, 3\)",
    ),
    "no target": (lambda t: cuda.weigh(t, jnp.ones(0), S, B), r"weigh needs .*B >= 1\), got 0"),
    "beta per target": (lambda t: cuda.weigh(t, V3, S, V3), r"weigh: beta has shape \(3,\)"),
    "no key target": (
        lambda t: cuda.weigh_key(t, jax.random.key(0), S, B, 0, False),
        r"weigh_key needs .*B >= 1\), got 0",
    ),
    "negative batch": (
        lambda t: cuda.weigh_key(t, jax.random.key(0), S, B, -1, False),
        r"weigh_key needs .*B >= 1\), got -1",
    ),
    "two keys for one tree": (
        lambda t: cuda.weigh_key(t, jax.random.split(jax.random.key(0)), S, B, 4, False),
        r"weigh_key: key has shape \(2, 2\), expected \(2,\)",
    ),
}


@pytest.mark.parametrize("case", BAD_CALLS)
def test_operands_that_are_not_one_row_per_tree_are_refused_when_traced(case):
    """Eagerly and inside a jit that donates the tree: a one-line ValueError naming the shape,
    raised before the call runs, so the donated tree is still there (the handlers refused these
    when XLA ran them: a JaxRuntimeError naming no shape, the donated tree deleted)."""
    call, match = BAD_CALLS[case]
    with pytest.raises(ValueError, match=match) as eager:
        call(TREE)
    assert "\n" not in str(eager.value)
    tree = st.SumTreeState(jnp.array(TREE.nodes), 10, 3)
    with pytest.raises(ValueError, match=match):
        jax.jit(call, donate_argnums=0)(tree)
    np.testing.assert_array_equal(bits(tree.nodes), bits(TREE.nodes))  # not deleted


def test_a_scalar_keep_is_the_whole_batchs_as_in_the_reference():
    idx, vals = jnp.asarray([1, 4, 1], jnp.int32), jnp.asarray([0.5, 2.0, 0.25], jnp.float32)
    for keep in (True, False):
        got = jax.jit(cuda.update)(TREE, idx, vals, jnp.bool_(keep))
        want = st.write(TREE, idx, vals, jnp.bool_(keep))
        np.testing.assert_array_equal(bits(got.nodes), bits(want.nodes))


@pytest.mark.parametrize("index", [2**32 + 3, -(2**32) + 3, 2**63 - 1])
def test_under_x64_an_index_int32_cannot_hold_is_refused_not_wrapped(index):
    """A traced int64 index past int32 (the eager call names it) refuses the plain update's
    batch and sets ERR_INDEX in the checked update, as the buffer's code does; the cast to the
    kernels' int32 had made ``2**32 + 3`` slot 3."""
    with jax.enable_x64(True):
        idx = jnp.asarray([index, 5], jnp.int64)
        vals = jnp.asarray([9.0, 1.0], jnp.float32)
        got = jax.jit(cuda.update)(TREE, idx, vals)
        np.testing.assert_array_equal(bits(got.nodes), bits(TREE.nodes))
        with pytest.raises(ValueError, match=f"index {index} out of range"):
            cuda.update(TREE, np.asarray([index, 5]), vals)
        dropped = jax.jit(cuda.update)(TREE, idx, vals, jnp.asarray([False, True]))
        want = st.write(TREE, jnp.asarray([0, 5], jnp.int32), vals, jnp.asarray([False, True]))
        np.testing.assert_array_equal(bits(dropped.nodes), bits(want.nodes))
        args = (idx, vals, vals, jnp.ones(2, bool), jnp.int32(10), jnp.float32(1), jnp.int32(0))
        tree, _, err = jax.jit(cuda.update_checked)(TREE, *args)
        ref_tree, _, ref_err = buffer_ops.update(st.write, TREE, *args)
    assert int(err) == int(ref_err) == checks.ERR_INDEX
    np.testing.assert_array_equal(bits(tree.nodes), bits(ref_tree.nodes))


@pytest.mark.parametrize("value", [float("inf"), 2**63, 1.5, "1024"])
@pytest.mark.parametrize("name", ["BLOCK_MAX_BATCH", "CLUSTER_MAX_BATCH", "SPREAD_MIN_BATCH"])
def test_a_path_switch_that_is_not_an_int64_is_refused_by_name(monkeypatch, name, value):
    monkeypatch.setattr(cuda, name, value)
    call = cuda.update if name == "BLOCK_MAX_BATCH" else lambda t, i, v: cuda.weigh(t, v, S, B)
    with pytest.raises(ValueError, match=f"cuda.{name} must be an integer .*got {value!r}"):
        jax.jit(call)(TREE, I3, V3)
    with pytest.raises(ValueError, match=f"cuda.{name} must be an integer"):
        cuda.settings()


# ---- the CuPy path, with NumPy standing in for CuPy (no kernel runs) --------------------------


class Launches:
    """A stand-in for the fatbin's module: each launch's kernel name and arguments."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []

    def get_function(self, name):
        return lambda grid, block, args: self.calls.append((name, args))


@pytest.fixture
def numpy_cupy(monkeypatch) -> Launches:
    launches = Launches()
    monkeypatch.setattr(cuda_cupy, "_cupy", lambda: np)
    monkeypatch.setattr(cuda_cupy, "_module", lambda: launches)
    return launches


def test_cupy_trees_refuse_arrays_the_kernels_would_read_past(numpy_cupy):
    size = st.layout(10, 3).size
    with pytest.raises(ValueError, match=rf"has {size} nodes; .*got \(7,\)"):
        cuda_cupy.CupyTree(np.zeros(7, F32), 10, 3)
    tree = cuda_cupy.CupyTree(np.zeros((2, size), F32), 10, 3)
    with pytest.raises(ValueError, match=r"targets has shape \(3,\), expected one \[B\] row"):
        tree.find(np.ones(3, F32))  # one row for two trees: each would take 1.5 targets
    with pytest.raises(ValueError, match=r"values has shape \(2, 2\)"):
        tree.update(np.zeros((2, 3), np.int32), np.ones((2, 2), F32))
    with pytest.raises(ValueError, match=r"keep has shape \(2, 1\)"):
        tree.update(np.zeros((2, 3), np.int32), np.ones((2, 3), F32), np.ones((2, 1), bool))
    with pytest.raises(ValueError, match="integer dtype, got float64"):
        tree.update(np.full((2, 3), 3.7), np.ones((2, 3), F32))
    assert numpy_cupy.calls == []  # nothing launched


def test_cupy_indices_int32_cannot_hold_reach_the_kernels_as_refused(numpy_cupy):
    tree = cuda_cupy.CupyTree(np.zeros(st.layout(10, 3).size, F32), 10, 3)
    tree.update(np.asarray([2**32 + 3, 4, -(2**32)], np.int64), np.ones(3, F32))
    name, args = numpy_cupy.calls[0]
    assert name == "drlhet_cuda_update_claim"
    np.testing.assert_array_equal(args[0], [-1, 4, -1])  # was [3, 4, 0]: written, not refused


def test_cupy_missing_or_without_a_gpu_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # not installed
    with pytest.raises(backends.BackendUnavailable, match=r"no cupy \(pip install drlhet\[cuda\]"):
        cuda_cupy.CupyTree(np.zeros(24, F32), 10, 3)

    class CUDARuntimeError(RuntimeError):
        pass

    def no_driver():
        raise CUDARuntimeError("cudaErrorInsufficientDriver")

    for count, match in ((lambda: 0, "CuPy sees no CUDA device"), (no_driver, "Insufficient")):
        runtime = types.SimpleNamespace(getDeviceCount=count, CUDARuntimeError=CUDARuntimeError)
        fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
        monkeypatch.setitem(sys.modules, "cupy", fake)
        with pytest.raises(backends.BackendUnavailable, match=f"no GPU: .*{match}"):
            cuda_cupy.to_cupy(np.zeros(3))
