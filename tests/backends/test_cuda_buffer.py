"""The CUDA backend's buffer calls: the whole sample after its targets (`cuda.weigh`) and the
whole checked priority update (`cuda.update_checked`), each one custom call.

On any machine with nvcc: each kernel's steps run serially on the CPU (kernels/cpu/
header_probe.cc, the per-element logic of kernels/include/drlhet/prioritized.h) and equal the
buffer's own code (`drlhet.replay.buffer_ops`) on whole batches, refusals included; the buffer
built on the cuda ops lowers to one custom call for each. On a GPU, and on a CPU device where
the same calls run the kernels under the host emulation of CUDA (cuda_places.py): the calls
equal the buffer's code on the same device bit for bit (weights included), on both update paths.
"""

from __future__ import annotations

import ctypes
import functools
import re
import shutil

import cuda_places
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import buffer_trace, random_tree, random_updates

from drlhet.backends import cuda
from drlhet.backends.native import library_path
from drlhet.replay import buffer_ops, checks
from drlhet.replay import sum_tree as st
from drlhet.replay.prioritized import make_prioritized_replay, sample_targets

F32 = np.float32
CASES = [(2, 1000), (3, 100), (16, 5000), (64, 5000), (16, 1), (3, 7)]
NO_NVCC = "missing library: the CUDA toolkit (nvcc is not on PATH)"
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


# ---- on every machine: the kernels' steps on the CPU --------------------------------------


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
module (and test_cuda_emu.py): each shape compiles once on a device, not once per test."""


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


# ---- on every machine with nvcc: what the buffer asks of XLA -------------------------------


def lowered(fn, *args) -> str:
    if shutil.which("nvcc") is None:
        pytest.skip(NO_NVCC)
    return jax.jit(fn).lower(*args).as_text()


def cuda_ops() -> st.TreeOps:
    return st.TreeOps(
        cuda.find, cuda.update, weigh=cuda.weigh, update=cuda.update_checked,
        weigh_key=cuda.weigh_key,
    )  # fmt: skip


def sample_call() -> str:
    """The custom call of the buffer's sample as `cuda.KEY_TARGETS` says now: the targets drawn
    in it (`weigh_key`), or by XLA before it (`weigh`; how ``gpu_checks.sh`` reruns these tests
    after a failure of the key's draw on a GPU)."""
    return "@drlhet_cuda_weigh_key" if cuda.KEY_TARGETS else "@drlhet_cuda_weigh("


def test_the_buffer_on_cuda_samples_and_updates_in_one_custom_call_each():
    fns = make_prioritized_replay(1000, 64, branching=16, tree_ops=cuda_ops())
    state = fns.init({"x": jnp.float32(0)})
    text = lowered(fns.sample, state, jax.random.key(0))
    # one sample call; the targets drawn in it: no XLA random bits before it
    other = "@drlhet_cuda_weigh(" if cuda.KEY_TARGETS else "@drlhet_cuda_weigh_key"
    assert text.count(sample_call()) == 1 and "@drlhet_cuda_find" not in text
    assert other not in text and ("threefry" in text) != cuda.KEY_TARGETS
    assert f"cluster_max_batch = {cuda.CLUSTER_MAX_BATCH} : i64" in text
    assert ("stratified = 1 : i64" in text) == cuda.KEY_TARGETS  # weigh_key's attribute
    idx, pr = jnp.arange(64), jnp.ones(64)
    text = lowered(lambda s: fns.update_priorities(s, idx, pr, jnp.zeros(64, jnp.int32)), state)
    calls = [ln for ln in text.splitlines() if "@drlhet_cuda_update" in ln]
    assert len(calls) == 1 and "@drlhet_cuda_update_checked" in calls[0], calls
    assert f"block_max_batch = {cuda.BLOCK_MAX_BATCH} : i64" in calls[0]
    assert f"narrow_max_nodes = {cuda.NARROW_MAX_NODES} : i64" in calls[0]
    assert f"cluster_max_batch = {cuda.CLUSTER_MAX_BATCH} : i64" in calls[0]
    assert "priority_max = 4.2949673E+9 : f32" in calls[0]
    # the tree, the maximum and the error word in place (no copies of them in a loop carry)
    aliases = re.findall(r"output_tuple_indices = \[(\d+)\], operand_index = (\d+)", calls[0])
    assert sorted(aliases) == [("0", "0"), ("1", "6"), ("2", "7")], aliases


def test_vmapped_buffers_pass_one_row_per_tree():
    fns = make_prioritized_replay(100, 8, branching=4, tree_ops=cuda_ops())
    states = jax.vmap(lambda _: fns.init({"x": jnp.float32(0)}))(jnp.arange(3))
    keys = jax.random.split(jax.random.key(0), 3)
    text = lowered(jax.vmap(fns.sample), states, keys)
    call = next(ln for ln in text.splitlines() if sample_call() in ln)
    # the key's words (or the targets), the size; probabilities, weights
    assert ("tensor<3x2xui32>" in call) == cuda.KEY_TARGETS and "tensor<3xi32>" in call
    assert "tensor<3x8xf32>" in call


@pytest.mark.cuda_key_targets
@pytest.mark.parametrize(
    "batch, stratified, key, in_call",
    [
        (300, True, jax.random.key(0), False),  # total / 300 is not exact: XLA's targets
        (300, False, jax.random.key(0), True),  # u * total: any batch
        (256, True, jax.random.PRNGKey(0), True),  # raw threefry words
        (256, True, jax.random.key(0, impl="rbg"), False),  # another generator
    ],
)
def test_the_targets_are_drawn_in_the_call_only_where_they_equal_xlas(
    batch, stratified, key, in_call
):
    fns = make_prioritized_replay(1000, batch, branching=16, tree_ops=cuda_ops(),
                                  stratified=stratified)  # fmt: skip
    text = lowered(fns.sample, fns.init({"x": jnp.float32(0)}), key)
    assert ("@drlhet_cuda_weigh_key" in text) == in_call
    assert ("@drlhet_cuda_weigh(" in text) != in_call
    assert cuda.draws_like_jax(key, batch, stratified) == in_call


@pytest.mark.cuda_key_targets
@pytest.mark.parametrize("on", [False, True])
def test_key_targets_turned_off_draws_the_targets_in_xla(monkeypatch, on):
    monkeypatch.setattr(cuda, "KEY_TARGETS", on)  # read when traced: a fresh buffer each case
    fns = make_prioritized_replay(1000, 256, branching=16, tree_ops=cuda_ops())
    text = lowered(fns.sample, fns.init({"x": jnp.float32(0)}), jax.random.key(0))
    assert ("@drlhet_cuda_weigh_key" in text) == on
    assert ("@drlhet_cuda_weigh(" in text) != on


@pytest.mark.parametrize("limit, call", [(256, "key"), (255, "find"), (1 << 62, "key")])
def test_batches_above_the_own_sample_limit_are_sampled_around_find(monkeypatch, limit, call):
    """`cuda.OWN_SAMPLE_MAX_BATCH`: up to it the buffer's sample is cuda's own call, above it
    XLA's code around `find` (`weigh` and `weigh_key` decline, the update stays cuda's)."""
    monkeypatch.setattr(cuda, "OWN_SAMPLE_MAX_BATCH", limit)  # read when traced
    fns = make_prioritized_replay(1000, 256, branching=16, tree_ops=cuda_ops())
    state = fns.init({"x": jnp.float32(0)})
    text = lowered(fns.sample, state, jax.random.key(0))
    assert (sample_call() in text) == (call == "key")
    assert ("@drlhet_cuda_find" in text) == (call == "find")
    assert text.count("@drlhet_cuda_weigh") == (call == "key")  # weigh or weigh_key, not both
    monkeypatch.setattr(cuda, "KEY_TARGETS", False)  # a fresh buffer: a new trace
    fns = make_prioritized_replay(1000, 256, branching=16, tree_ops=cuda_ops())
    text = lowered(fns.sample, state, jax.random.key(0))
    assert ("@drlhet_cuda_weigh(" in text) == (call == "key")
    idx, pr = jnp.arange(256), jnp.ones(256)
    text = lowered(lambda s: fns.update_priorities(s, idx, pr, jnp.zeros(256, jnp.int32)), state)
    assert "@drlhet_cuda_update_checked" in text


def test_a_weigh_that_declines_with_no_find_is_refused_by_name():
    ops = st.TreeOps(None, cuda.update, weigh=lambda *a: None)
    fns = make_prioritized_replay(100, 8, branching=4, tree_ops=ops)
    state = fns.init({"x": jnp.float32(0)})._replace(size=jnp.int32(5))
    with pytest.raises(ValueError, match="`weigh` declines a batch of 8 and there is no `find`"):
        fns.sample(state, jax.random.key(0))


@pytest.mark.cuda_key_targets
def test_targets_are_never_drawn_in_the_call_without_the_partitionable_layout():
    key = jax.random.key(0)
    assert cuda.draws_like_jax(key, 64, True)
    assert not cuda.draws_like_jax(jnp.zeros(3, jnp.uint32), 64, False)  # not a key
    if not hasattr(jax.config, "jax_threefry_partitionable"):
        return  # a jax with the partitionable layout only: nothing else to check
    jax.config.update("jax_threefry_partitionable", False)
    try:
        assert not cuda.draws_like_jax(key, 64, True)
    finally:
        jax.config.update("jax_threefry_partitionable", True)


# ---- on a GPU, and under the host emulation on a CPU device (cuda_places.py) -----------------


@pytest.mark.parametrize("k, capacity", CASES)
def test_weigh_and_checked_update_equal_the_buffers_code(place, k, capacity):
    tree = random_tree(capacity, k, seed=k)
    targets = jnp.asarray(stratified_targets(tree, 4096, seed=k))
    for beta in (0.4, 1.0, 1.5):
        args = (tree, targets, jnp.int32(capacity), jnp.float32(beta))
        got = jax.jit(place.weigh)(*args)
        want = REFERENCE_WEIGH(*args)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    max_p, err = jnp.float32(1.5), jnp.int32(0)
    for case, idx, raw, keep, size in update_batches(capacity, 4096, seed=k):
        values = leaf_values(jnp.asarray(raw))
        args = (jnp.asarray(idx), jnp.asarray(raw), values, jnp.asarray(keep), jnp.int32(size))
        got = jax.jit(place.update)(tree, *args, max_p, err)
        want = REFERENCE_UPDATE(tree, *args, max_p, err)
        np.testing.assert_array_equal(bits(got[0].nodes), bits(want[0].nodes), err_msg=case)
        assert bits(got[1]) == bits(want[1]) and int(got[2]) == int(want[2]), case
        tree, max_p, err = want


@pytest.mark.parametrize(
    "path, b",
    [(cuda_places.TAGGED_PATH, 1024), (cuda_places.TAGGED_CLAIMS_PATH, 1024)],
    ids=["tagged claims and siblings", "tagged claims"],  # not the paths' names (GPU stages')
)
def test_the_gpu_only_paths_inside_jit_equal_the_buffers_code_on_the_emulation(
    monkeypatch, path, b
):
    """The paths the `place` fixture runs on a GPU only (cuda_places.GPU_ONLY: the cluster
    path's claims in a tagged table, `cuda.TAGGED_CLAIMS`, with and without
    `cuda.TAGGED_SIBLINGS`, at B 1024, one entry per thread of the emulation's cluster) through
    the custom calls on the emulated CPU device: the checked update's batches (duplicates,
    drops, refusals) at K 16, 2^16 leaves, and a jitted scan of vmapped plain writes over two
    trees, bit for bit the reference's."""
    k, capacity = 16, 2**16
    with jax.default_device(cuda_places.devices("emulated cpu")[0]):
        for name, value in cuda_places.PATHS[path].items():
            monkeypatch.setattr(cuda, name, value)
        jax.clear_caches()  # the paths are read when a function is traced
        try:
            ops = cuda_ops()
            tree, max_p, err = random_tree(capacity, k, seed=5), jnp.float32(1.5), jnp.int32(0)
            reference = REFERENCE_UPDATE
            for case, idx, raw, keep, size in update_batches(capacity, b, seed=5):
                values = leaf_values(jnp.asarray(raw))
                args = (tree, jnp.asarray(idx), jnp.asarray(raw), values, jnp.asarray(keep),
                        jnp.int32(size), max_p, err)  # fmt: skip
                got, want = jax.jit(ops.update)(*args), reference(*args)
                np.testing.assert_array_equal(bits(got[0].nodes), bits(want[0].nodes), case)
                assert bits(got[1]) == bits(want[1]) and int(got[2]) == int(want[2]), case
                tree, max_p, err = want
            nodes = jnp.stack([random_tree(capacity, k, seed=s).nodes for s in range(2)])
            steps = [random_updates(capacity, b, seed=s) for s in range(6)]
            idx = jnp.stack([x[0] for x in steps]).reshape(3, 2, b)
            vals = jnp.stack([x[1] for x in steps]).reshape(3, 2, b)

            def scan(write):
                def body(n, iv):
                    return write(st.SumTreeState(n, capacity, k), *iv, None).nodes, None

                return jax.jit(lambda n: jax.lax.scan(jax.vmap(body), n, (idx, vals))[0])(nodes)

            np.testing.assert_array_equal(bits(scan(ops.write)), bits(scan(st.REFERENCE.write)))
        finally:
            jax.clear_caches()  # no trace of this test's settings outlives it


SPREAD_CASES = {  # place: (batches of one tree, batch of each of 3 trees)
    "gpu": ((1, 33, 1024, 1500, 4096, 5000), 1500),
    "emulated cpu": ((1, 33, 300, 1000), 300),  # <= 16 blocks, 1024 threads (cuda_emu.h)
}
SPREAD_TESTS = [  # (place, K, capacity, threads a block)
    *[("emulated cpu", k, c, 64) for k, c in ((16, 5000), (3, 777), (64, 20000))],
    # on a GPU: every K the issue names, and at K 16 each block size `gpu_checks.sh spread`
    # times (SPREAD_AB_THREADS), since its pick may make any of them the library's
    *[("gpu", 16, 5000, t) for t in (64, 128, 256)],
    *[("gpu", k, c, 128) for k, c in ((2, 3000), (3, 777), (32, 5000), (64, 20000))],
]


@pytest.mark.cuda_spread
@pytest.mark.parametrize("where, k, capacity, threads", SPREAD_TESTS)
def test_the_sample_spread_over_the_grid_equals_the_buffers_code(
    monkeypatch, where, k, capacity, threads
):
    """`cuda.SPREAD_MIN_BATCH` (every batch here) through the custom calls inside jit: `weigh`
    over one tree (partial warps and blocks), `weigh_key`, and three vmapped trees with their
    own sizes and betas (one refused), bit for bit the buffer's code on the same device."""
    device = cuda_places.devices(where)[0]
    batches, each = SPREAD_CASES[where]
    monkeypatch.setattr(cuda, "SPREAD_MIN_BATCH", 1)
    monkeypatch.setattr(cuda, "SPREAD_THREADS", threads)
    reference = functools.partial(buffer_ops.weigh, st.REFERENCE.find)
    jax.clear_caches()  # read when a function is traced
    try:
        with jax.default_device(device):
            tree = random_tree(capacity, k, seed=k)
            size, beta = jnp.int32(capacity - 3), jnp.float32(0.6)
            for b in batches:
                targets = jnp.asarray(stratified_targets(tree, b, seed=b))
                got = jax.jit(cuda.weigh)(tree, targets, size, beta)
                want = jax.jit(reference)(tree, targets, size, beta)
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_array_equal(np.asarray(g), np.asarray(w), f"B {b}")
            key = jax.random.key(3)
            if cuda.KEY_TARGETS:  # off: `weigh_key` declines (gpu_checks.sh's reruns)
                got = jax.jit(cuda.weigh_key, static_argnums=(4, 5))(
                    tree, key, size, beta, 256, True
                )
                want = jax.jit(reference)(tree, sample_targets(key, st.total(tree), 256, True),
                                          size, beta)  # fmt: skip
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_array_equal(np.asarray(g), np.asarray(w), "weigh_key")
            trees = [random_tree(capacity, k, seed=s) for s in range(3)]
            nodes = jnp.stack([t.nodes for t in trees])
            targets = jnp.asarray(
                np.stack([stratified_targets(t, each, s) for s, t in enumerate(trees)])
            )
            sizes, betas = jnp.asarray([capacity, 50, 1], jnp.int32), jnp.asarray([0.4, 1.0, 1.5])

            def vmapped(fn):
                return jax.jit(jax.vmap(lambda n, *a: fn(st.SumTreeState(n, capacity, k), *a)))(
                    nodes, targets, sizes, betas
                )

            for g, w in zip(vmapped(cuda.weigh), vmapped(reference), strict=True):
                np.testing.assert_array_equal(np.asarray(g), np.asarray(w), "vmapped")
    finally:
        jax.clear_caches()  # no trace of this test's settings outlives it


def test_the_spread_samples_workspace_holds_a_word_pair_per_warp(monkeypatch):
    """The sample call's workspace (its last result): two int32 a warp where the spread path
    may take the batch (launch.cuh's SampleWorkWords), two per tree where not."""
    tree = random_tree(1000, 16, seed=1)
    try:
        for limit, words in ((1 << 62, 2), (100, 2 * 5), (1, 2 * 5), (131, 2)):
            monkeypatch.setattr(cuda, "SPREAD_MIN_BATCH", limit)
            jax.clear_caches()  # read when a function is traced
            text = (
                jax.jit(cuda.weigh)
                .lower(tree, jnp.zeros(130), jnp.int32(1000), jnp.float32(0.5))
                .as_text()
            )
            assert f"tensor<{words}xi32>" in text, (limit, words)  # 130 targets: 5 warps
            assert f"spread_min_batch = {limit} : i64" in text
    finally:
        jax.clear_caches()


@pytest.mark.parametrize("threads", [0, 48, 2048])
def test_a_spread_block_that_is_not_whole_warps_is_refused_when_traced(monkeypatch, threads):
    monkeypatch.setattr(cuda, "SPREAD_THREADS", threads)
    jax.clear_caches()  # read when a function is traced
    with pytest.raises(ValueError, match=f"SPREAD_THREADS: whole warps, 32 to 1024, got {threads}"):
        jax.jit(cuda.weigh).lower(
            random_tree(100, 4, seed=0), jnp.zeros(64), jnp.int32(100), jnp.float32(0.5)
        )


@pytest.mark.parametrize("k, capacity", [(2, 1000), (3, 7), (64, 5000)])
def test_weigh_of_batches_no_larger_than_a_block_equals_the_buffers_code(place, k, capacity):
    """Up to 1024 targets a tree, one block per tree samples (the grid's launches above it)."""
    tree = random_tree(capacity, k, seed=k + 1)
    for b, beta in ((1, 0.4), (33, 1.0), (1024, 0.6)):  # 33: a partial second warp
        targets = jnp.asarray(stratified_targets(tree, b, seed=b))
        args = (tree, targets, jnp.int32(capacity), jnp.float32(beta))
        got = jax.jit(place.weigh)(*args)
        want = REFERENCE_WEIGH(*args)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=f"B {b}")


def test_the_buffer_with_its_own_calls_equals_the_buffer_over_find_and_write(place, monkeypatch):
    fused = buffer_trace(place)
    targets_in_xla = buffer_trace(place._replace(weigh_key=None))
    plain = buffer_trace(place._replace(weigh=None, update=None, weigh_key=None))
    monkeypatch.setattr(cuda, "OWN_SAMPLE_MAX_BATCH", 8)  # buffer_trace samples 16: around find
    declined = buffer_trace(place)
    for a, b, c, d in zip(
        *map(jax.tree.leaves, (fused, targets_in_xla, plain, declined)), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
        np.testing.assert_array_equal(np.asarray(b), np.asarray(c))
        np.testing.assert_array_equal(np.asarray(d), np.asarray(c))


@pytest.mark.cuda_shared_top
@pytest.mark.parametrize("k, capacity", [(16, 20000), (3, 777)])
def test_the_top_copy_gives_the_bits_of_descents_that_read_the_tree(place, k, capacity):
    """`cuda.SHARED_TOP` on and off (the sample's descents through a copy of the tree's top
    levels in each block's shared memory, or every level from the tree) give the same indices,
    probabilities, weights and error, in one block (B 64, 1024) and above (B 4096: one cluster
    per tree, or the grid's launches). The test ``experiments/gpu_checks.sh`` reads as the
    copy's: where it fails on a GPU, the copy is turned off for the rest of the call."""
    tree = random_tree(capacity, k, seed=k + 2)
    size, beta = jnp.int32(capacity - 3), jnp.float32(0.6)
    got = {}
    try:
        for on in (True, False):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(cuda, "SHARED_TOP", on)
                jax.clear_caches()  # read when a function is traced
                for b in (64, 1024, 4096):
                    targets = jnp.asarray(stratified_targets(tree, b, seed=b))
                    got[on, b] = jax.jit(place.weigh)(tree, targets, size, beta)
                # the switch reaches the call (the same bits either way: dropped, it failed no test)
                text = jax.jit(place.weigh).lower(tree, targets, size, beta).as_text()
                assert f"shared_top = {int(on)} : i64" in text, on
    finally:
        jax.clear_caches()  # no trace of this test's settings outlives it
    for b in (64, 1024, 4096):
        for g, w in zip(got[True, b], got[False, b], strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=f"B {b}")


@pytest.mark.cuda_key_targets
@pytest.mark.parametrize("stratified", [True, False])
def test_the_sample_from_the_key_equals_the_sample_from_xlas_targets(place, stratified):
    """The targets drawn in the kernel (drlhet/jax_random.h) against jax.random's on the same
    device, through the whole sample: one tree, and three vmapped trees with their own keys."""
    k, capacity = 16, 5000
    tree = random_tree(capacity, k, seed=3)
    size, beta = jnp.int32(capacity - 7), jnp.float32(0.4)
    for b in (1, 64, 1024, 4096):  # one block; one block; one block; above a block
        for seed in (0, 7):
            key = jax.random.key(seed)
            got = jax.jit(place.weigh_key, static_argnums=(4, 5))(
                tree, key, size, beta, b, stratified
            )
            targets = sample_targets(key, st.total(tree), b, stratified)
            want = REFERENCE_WEIGH(tree, targets, size, beta)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=f"B {b}")
    trees = jnp.stack([random_tree(capacity, k, seed=s).nodes for s in range(3)])
    keys = jax.random.split(jax.random.key(1), 3)

    def per_tree(fn):
        return jax.jit(jax.vmap(lambda n, key: fn(st.SumTreeState(n, capacity, k), key)))(
            trees, keys
        )

    got = per_tree(lambda t, key: place.weigh_key(t, key, size, beta, 512, stratified))
    want = per_tree(
        lambda t, key: buffer_ops.weigh(
            st.REFERENCE.find, t, sample_targets(key, st.total(t), 512, stratified), size, beta
        )
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_vmapped_calls_equal_the_buffers_code_tree_by_tree(place):
    k, capacity, b = 16, 777, 300  # 300 entries: warps that straddle two trees
    trees = [random_tree(capacity, k, seed=s) for s in range(3)]
    nodes = jnp.stack([t.nodes for t in trees])
    targets = jnp.asarray(np.stack([stratified_targets(t, b, s) for s, t in enumerate(trees)]))
    sizes, betas = jnp.asarray([777, 500, 1], jnp.int32), jnp.asarray([0.4, 1.0, 1.5])

    def weigh(fn):
        return jax.jit(jax.vmap(lambda n, *a: fn(st.SumTreeState(n, capacity, k), *a)))(
            nodes, targets, sizes, betas
        )

    got, want = weigh(place.weigh), weigh(functools.partial(buffer_ops.weigh, st.REFERENCE.find))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    idx = jnp.asarray(np.random.default_rng(0).integers(0, 500, (3, b)), jnp.int32)
    raw = jnp.asarray(np.random.default_rng(1).random((3, b)), jnp.float32)
    raw = raw.at[2, 7].set(jnp.nan)  # tree 2 refuses its batch
    values = jax.vmap(leaf_values)(raw)
    keep = jnp.asarray(np.random.default_rng(2).random((3, b)) < 0.8)
    maxs, errs = jnp.full(3, 1.5, jnp.float32), jnp.zeros(3, jnp.int32)

    def update(fn):
        step = jax.vmap(lambda n, *a: fn(st.SumTreeState(n, capacity, k), *a))
        return jax.jit(step)(nodes, idx, raw, values, keep, sizes, maxs, errs)

    got, want = (
        update(place.update),
        update(functools.partial(buffer_ops.update, st.REFERENCE.write)),
    )
    np.testing.assert_array_equal(bits(got[0].nodes), bits(want[0].nodes))
    np.testing.assert_array_equal(bits(got[1]), bits(want[1]))
    np.testing.assert_array_equal(np.asarray(got[2]), np.asarray(want[2]))
    # tree 1's indices are all below its size 500; tree 2 holds 1 transition and a NaN
    assert list(np.asarray(want[2])) == [0, 0, checks.ERR_PRIORITY | checks.ERR_INDEX]
