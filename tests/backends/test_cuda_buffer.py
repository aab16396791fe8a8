"""The CUDA backend's buffer calls: the whole sample after its targets (`cuda.weigh`) and the
whole checked priority update (`cuda.update_checked`), each one custom call.

Here, on every machine: each kernel's steps run serially on the CPU (kernels/cpu/
header_probe.cc, the per-element logic of kernels/include/drlhet/prioritized.h) and equal the
buffer's own code (`drlhet.replay.buffer_ops`) on whole batches, refusals included; and the
helpers that the calls' other tests share. On any machine with nvcc, the buffer built on the
cuda ops lowers to one custom call for each (test_cuda_buffer_lowering.py). On a GPU, and on a
CPU device where the same calls run the kernels under the host emulation of CUDA
(cuda_places.py): the calls equal the buffer's code on the same device bit for bit (weights
included), on both update paths (test_cuda_buffer_device.py).
"""

from __future__ import annotations

import ctypes

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import random_tree, random_updates

from drlhet.backends import cuda
from drlhet.backends.native import library_path
from drlhet.replay import buffer_ops, checks
from drlhet.replay import sum_tree as st
from drlhet.replay.prioritized import sample_targets

F32 = np.float32
CASES = [(2, 1000), (3, 100), (16, 5000), (64, 5000), (16, 1), (3, 7)]
C_INT, C_F, C_I32 = ctypes.c_int, ctypes.c_float, ctypes.c_int32


def _ptr(a, ctype):
    return a.ctypes.data_as(ctypes.POINTER(ctype))


def bits(x):
    return np.asarray(x, F32).view(np.uint32)


@pytest.fixture(scope="module")
def probe() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_path()))  # the CPU library (always built by `make test`)
    lib.drlhet_weigh_phases.restype = C_INT
    lib.drlhet_update_checked_phases.restype = C_INT
    return lib


def weigh_phases(lib, nodes, capacity, k, targets, size, beta):
    """The GPU sample's kernels, serially: (indices, probabilities, weights, error)."""
    nodes, t = np.ascontiguousarray(nodes, F32), np.ascontiguousarray(targets, F32)
    idx, probs, w, err = (
        np.zeros(t.size, np.int32),
        np.zeros(t.size, F32),
        np.zeros(t.size, F32),
        np.zeros(1, np.int32),
    )
    rc = lib.drlhet_weigh_phases(
        _ptr(nodes, C_F), ctypes.c_int64(capacity), C_INT(k), _ptr(t, C_F),
        ctypes.c_int64(t.size), C_I32(size), C_F(beta), C_I32(checks.ERR_EMPTY),
        C_I32(checks.ERR_BETA), _ptr(idx, C_I32), _ptr(probs, C_F), _ptr(w, C_F), _ptr(err, C_I32),
    )  # fmt: skip
    assert rc == 0
    return idx, probs, w, int(err[0])


def update_checked_phases(lib, nodes, capacity, k, args, top):
    """The GPU's checked update, serially: (nodes, max_priority, error)."""
    idx, raw, values, keep, size, max_in, err_in = args
    out = np.array(nodes, F32)
    idx, raw, values = (
        np.ascontiguousarray(x, d) for x, d in ((idx, np.int32), (raw, F32), (values, F32))
    )
    keep = np.ascontiguousarray(keep, np.bool_)
    winner = np.full(capacity, 12345, np.int32)  # never cleared whole: only the batch's slots
    max_out, err_out = np.zeros(1, F32), np.zeros(1, np.int32)
    rc = lib.drlhet_update_checked_phases(
        _ptr(out, C_F), ctypes.c_int64(capacity), C_INT(k), _ptr(idx, C_I32), _ptr(raw, C_F),
        _ptr(values, C_F), _ptr(keep, ctypes.c_bool), C_I32(idx.size), C_I32(size),
        C_F(checks.PRIORITY_MAX), C_I32(checks.ERR_INDEX), C_I32(checks.ERR_PRIORITY),
        C_F(max_in), C_I32(err_in), _ptr(winner, C_I32), C_INT(top), _ptr(max_out, C_F),
        _ptr(err_out, C_I32),
    )  # fmt: skip
    assert rc == 0
    return out, max_out[0], int(err_out[0])


def stratified_targets(tree, b, seed):
    total = np.float32(st.total(tree))
    u = np.random.default_rng(seed).random(b).astype(F32)
    return (np.arange(b, dtype=F32) + u) * (total / F32(b))


def cuda_ops() -> st.TreeOps:
    return st.TreeOps(
        cuda.find, cuda.update, weigh=cuda.weigh, update=cuda.update_checked,
        weigh_key=cuda.weigh_key,
    )  # fmt: skip


@pytest.mark.parametrize("k, capacity", CASES)
@pytest.mark.parametrize("beta", [0.4, 0.0, 1.0, 1.5, -0.25, float("nan")])
def test_the_weigh_phases_equal_the_buffers_sample(probe, k, capacity, beta):
    tree = random_tree(capacity, k, seed=k)
    targets = stratified_targets(tree, 257, seed=capacity)
    targets[:3] = [0.0, -1.0, np.nan]  # descend as 0
    size = capacity - capacity // 3
    got = weigh_phases(probe, tree.nodes, capacity, k, targets, size, beta)
    want = jax.jit(lambda t, x: buffer_ops.weigh(st.REFERENCE.find, t, x, jnp.int32(size), beta))(
        tree, targets
    )
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(bits(got[1]), bits(want[1]))
    # the host's powf may differ from XLA's CPU pow in the last place (a GPU takes both from
    # libdevice: compared bit for bit there); beta 0 or refused: no power, the same bits
    np.testing.assert_allclose(got[2], want[2], rtol=5e-7, atol=0)
    if not 0 < beta <= 1:
        np.testing.assert_array_equal(bits(got[2]), bits(want[2]))
    assert got[3] == int(want[3]) == (0 if 0 <= beta <= 1 else checks.ERR_BETA)


def test_an_all_zero_tree_is_refused_as_empty(probe):
    capacity, k = 100, 4
    tree = st.init(capacity, k)
    targets = np.linspace(0, 1, 64, dtype=F32)
    _, probs, weights, err = weigh_phases(probe, tree.nodes, capacity, k, targets, 50, 0.4)
    assert err == checks.ERR_EMPTY and not probs.any() and not weights.any()
    want = buffer_ops.weigh(st.REFERENCE.find, tree, targets, jnp.int32(50), 0.4)
    assert int(want[3]) == checks.ERR_EMPTY


@jax.jit
def leaf_values(raw):
    """The leaf values of ``raw`` as the buffer computes them under jit (no eager refusal)."""
    return checks.leaf_values(raw, 0.6, jnp.float32, raw.shape)[0]


REFERENCE_WEIGH = jax.jit(lambda *a: buffer_ops.weigh(st.REFERENCE.find, *a))
REFERENCE_UPDATE = jax.jit(lambda *a: buffer_ops.update(st.REFERENCE.write, *a))
"""The buffer's sample and priority update around the reference tree, jitted once for the
module and those that import them (test_cuda_buffer_device.py, test_cuda_emu.py): each shape
compiles once on a device, not once per test."""


def update_batches(capacity, b, seed):
    """Batches of a checked update: duplicates and zero priorities, then each refusal."""
    rng = np.random.default_rng(seed)
    cases = ("good", "good", "index", "below", "negative", "nan", "inf", "huge", "stale", "good")
    for case in cases:
        idx, raw = (np.array(x) for x in random_updates(capacity, b, seed=seed))
        keep = rng.random(b) < (0.5 if case == "stale" else 0.9)
        size = capacity if case != "index" else max(1, capacity // 2)
        if case in ("index", "below"):  # one entry at the first slot past the filled ones, or -1
            idx = idx % size
            idx[b // 3] = size if case == "index" else -1
        bad = {
            "negative": -1.0,
            "nan": np.nan,
            "inf": np.inf,
            "huge": 2.0**60,
        }  # 2^60 ** 0.6 > PRIORITY_MAX
        if case in bad:
            raw[b // 2] = bad[case]
            keep[b // 2] = False  # refused even when not kept: every entry is checked
        yield case, idx.astype(np.int32), raw.astype(F32), keep, size


@pytest.mark.parametrize("k, capacity", CASES)
@pytest.mark.parametrize("whole", ["none", "narrow", "all"])
def test_the_checked_update_phases_equal_the_buffers_update(probe, k, capacity, whole):
    from drlhet.backends.cuda_cupy import NARROW_MAX_NODES, narrow_top

    depth = st.layout(capacity, k).depth
    tree, max_p = random_tree(capacity, k, seed=1), F32(1.5)
    err = checks.ERR_EMPTY  # an earlier refusal's bit: kept, and the batch's own are added
    reference = REFERENCE_UPDATE
    for n, (case, idx, raw, keep, size) in enumerate(update_batches(capacity, 300, seed=k)):
        values = leaf_values(jnp.asarray(raw))
        top = {"none": -1, "narrow": narrow_top(capacity, k, 300, NARROW_MAX_NODES)}
        top["all"] = depth - 1
        args = (idx, raw, np.asarray(values), keep, size, max_p, err)
        got = update_checked_phases(probe, tree.nodes, capacity, k, args, top[whole])
        want_tree, want_max, want_err = reference(
            tree, jnp.asarray(idx), jnp.asarray(raw), values, jnp.asarray(keep),
            jnp.int32(size), jnp.float32(max_p), jnp.int32(err),
        )  # fmt: skip
        np.testing.assert_array_equal(bits(got[0]), bits(want_tree.nodes), err_msg=case)
        assert bits(got[1]) == bits(want_max) and got[2] == int(want_err), (n, case)
        refused = case in ("index", "below", "negative", "nan", "inf", "huge")
        assert (got[2] != checks.ERR_EMPTY) == refused, case
        if refused:
            np.testing.assert_array_equal(bits(got[0]), bits(tree.nodes))
        tree, max_p = want_tree, F32(want_max)


def test_the_largest_kept_priority_raises_the_running_maximum(probe):
    capacity, k = 10, 3
    tree = np.asarray(st.init(capacity, k).nodes)
    idx = np.array([1, 2, 3], np.int32)
    raw = np.array([5.0, 9.0, 7.0], F32)
    args = (idx, raw, raw, np.array([True, False, True]), capacity, F32(1.0), 0)
    _, max_p, err = update_checked_phases(probe, tree, capacity, k, args, -1)
    assert max_p == 7.0 and err == 0  # 9 was not kept (a stale stamp)
    args = (idx, raw, raw, np.array([True, False, True]), capacity, F32(8.0), 0)
    assert update_checked_phases(probe, tree, capacity, k, args, -1)[1] == 8.0


@pytest.mark.cuda_key_targets
@pytest.mark.parametrize("batch", [1, 3, 64, 4096])
@pytest.mark.parametrize("stratified", [True, False])
def test_targets_from_the_key_are_jax_randoms_bit_for_bit(probe, batch, stratified):
    """drlhet/jax_random.h on the CPU: the bits, uniforms and targets jax draws from a key."""
    for seed, total in ((0, 1.0), (42, 1234.567), (2**31 + 5, 3.0e-3)):
        key = jax.random.key(seed)
        k0, k1 = (int(w) for w in np.asarray(jax.random.key_data(key)))
        got_bits, got_u, got_t = (np.zeros(batch, d) for d in (np.uint32, F32, F32))
        probe.drlhet_key_targets(
            ctypes.c_uint32(k0), ctypes.c_uint32(k1), ctypes.c_int64(batch), C_F(total),
            C_INT(int(stratified)), _ptr(got_bits, ctypes.c_uint32), _ptr(got_u, C_F),
            _ptr(got_t, C_F),
        )  # fmt: skip
        want_bits = jax.random.bits(key, (batch,), jnp.uint32)
        np.testing.assert_array_equal(got_bits, np.asarray(want_bits))
        np.testing.assert_array_equal(bits(got_u), bits(jax.random.uniform(key, (batch,))))
        if stratified and batch & (batch - 1):
            continue  # not drawn in a kernel: total / B is not exact
        want = jax.jit(sample_targets, static_argnums=(2, 3))(key, F32(total), batch, stratified)
        np.testing.assert_array_equal(bits(got_t), bits(want))
