"""The CUDA backend (kernels/cuda, drlhet.backends.cuda, drlhet.backends.cuda_cupy).

On any machine with nvcc: the library and the CuPy fatbin are built by the install and export
the FFI handlers; each GPU thread's logic (`DescendOne`; the update's phases `ValidEntry`,
`WinnerMerge`, `IsWinner`, `RecomputeNode` from kernels/include/drlhet/sum_tree.h) runs on the
CPU through kernels/cpu/header_probe.cc and equals the NumPy oracle bit for bit on whole trees.
On a GPU, and on a CPU device where the same custom calls run the kernels under the host
emulation of CUDA (cuda_places.py): the calls equal the reference on the same device (the
conformance suite runs them too), for K up to 64, capacities that are not powers of K,
duplicates, inside a jitted scan, on both update paths; on a GPU also through CuPy.
"""

from __future__ import annotations

import ctypes
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from conformance import random_tree, random_updates
from cuda_places import devices

from drlhet import backends
from drlhet.backends import cuda
from drlhet.backends.native import library_path
from drlhet.replay import sum_tree as st

F32 = np.float32
KS_CAPACITIES = [(2, 1000), (3, 100), (16, 5000), (32, 3000), (64, 5000), (16, 1), (3, 7)]


def _ptr(a, ctype):
    return a.ctypes.data_as(ctypes.POINTER(ctype))


@pytest.fixture(scope="module")
def probe() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_path()))  # the CPU library (always built by `make test`)
    lib.drlhet_descend_one.restype = ctypes.c_int
    lib.drlhet_update_phases.restype = ctypes.c_int
    return lib


def descend_one(lib, nodes, capacity, k, targets):
    """Every target through `DescendOne` on the host: (indices, values, total)."""
    nodes, t = np.ascontiguousarray(nodes, F32), np.ascontiguousarray(targets, F32)
    idx, val, total = np.zeros(t.size, np.int32), np.zeros(t.size, F32), np.zeros(1, F32)
    rc = lib.drlhet_descend_one(
        _ptr(nodes, ctypes.c_float), ctypes.c_int64(capacity), ctypes.c_int(k),
        _ptr(t, ctypes.c_float), ctypes.c_int64(t.size), _ptr(idx, ctypes.c_int32),
        _ptr(val, ctypes.c_float), _ptr(total, ctypes.c_float),
    )  # fmt: skip
    assert rc == 0
    return idx, val, total[0]


def update_phases(lib, nodes, capacity, k, indices, values, keep, top=-1):
    """The GPU update's phases, serially on the host, levels ``0..top`` recomputed whole:
    (return code, nodes)."""
    out = np.array(nodes, F32)
    idx = np.ascontiguousarray(indices, np.int32)
    val = np.ascontiguousarray(values, F32)
    kp = np.ascontiguousarray(keep, np.bool_)
    winner = np.empty(capacity, np.int32)
    rc = lib.drlhet_update_phases(
        _ptr(out, ctypes.c_float), ctypes.c_int64(capacity), ctypes.c_int(k),
        _ptr(idx, ctypes.c_int32), _ptr(val, ctypes.c_float), _ptr(kp, ctypes.c_bool),
        ctypes.c_int32(idx.size), _ptr(winner, ctypes.c_int32), ctypes.c_int(top),
    )  # fmt: skip
    return rc, out


def narrow_top(lib, capacity, k, batch, max_nodes):
    return lib.drlhet_narrow_top(
        ctypes.c_int64(capacity), ctypes.c_int(k), ctypes.c_int64(batch), ctypes.c_int64(max_nodes)
    )


def bits(x):
    return np.asarray(x, F32).view(np.uint32)


# ---- on every machine: the build, and each thread's logic on the CPU --------------------------


def test_library_and_fatbin_are_built_where_nvcc_works():
    if shutil.which("nvcc") is None:
        pytest.skip("missing library: the CUDA toolkit (nvcc is not on PATH)")
    path = library_path("drlhet_cuda", "the CUDA kernels")  # BackendUnavailable fails the test
    lib = ctypes.CDLL(str(path))
    for symbol in cuda.FFI_SYMBOLS:
        assert hasattr(lib, symbol), f"{path} does not export {symbol}"
    from drlhet.backends.cuda_cupy import fatbin_path

    fatbin = fatbin_path().read_bytes()
    for kernel in (b"drlhet_cuda_find", b"drlhet_cuda_update_claim", b"drlhet_cuda_update_level"):
        assert kernel in fatbin, f"the fatbin has no kernel {kernel!r}"


def test_lookup_loads_on_a_gpu_and_as_a_simulation_on_the_cpu(monkeypatch):
    if not cuda.gpu_devices():
        devices("emulated cpu")  # skips, naming the library, where it was not built
    ops = backends.tree_ops("cuda")
    assert ops.find is cuda.find and ops.weigh is cuda.weigh
    b = backends.get("cuda")
    assert b.runs_on(backends.GPU, "replay") and not b.simulates(backends.GPU)
    assert b.simulates(backends.CPU, "replay")  # never a default nor a candidate on a CPU
    assert "cuda" not in [x.name for x in backends.providing("replay", backends.CPU)]
    assert backends.default("replay", backends.GPU) == "cuda"
    # without a GPU and without the emulation, the error names both
    monkeypatch.setattr(cuda, "gpu_devices", lambda: [])
    monkeypatch.setattr(cuda, "_library", _missing_emulation)
    with pytest.raises(backends.BackendUnavailable, match="no GPU.*host emulation"):
        cuda.BACKEND.loader()


def test_trees_the_kernels_do_not_hold_are_refused_before_a_call(monkeypatch):
    assert cuda.accepts(2**31 - 1, 256) == ""
    assert "K <= 256, got 257" in cuda.accepts(1000, 257)
    assert "capacity <= 2^31 - 1, got 2147483648" in cuda.accepts(2**31, 16)
    monkeypatch.setattr(cuda, "_library", lambda: None)  # no library needed to refuse
    tree = st.init(1000, 257)
    with pytest.raises(ValueError, match="supports K <= 256, got 257"):
        cuda.find(tree, jnp.zeros(2, jnp.float32))
    with pytest.raises(ValueError, match="supports K <= 256, got 257"):
        cuda.update(tree, jnp.zeros(2, jnp.int32), jnp.ones(2, jnp.float32))


@pytest.mark.parametrize("blocks", [0, 17, 8.0, True])
def test_a_cluster_width_outside_1_to_16_is_refused_naming_it(monkeypatch, blocks):
    monkeypatch.setattr(cuda, "_library", lambda: None)  # refused before any call
    monkeypatch.setattr(cuda, "CLUSTER_BLOCKS", blocks)
    tree = st.init(1000, 16)
    with pytest.raises(ValueError, match=f"cuda.CLUSTER_BLOCKS must be an integer 1 to 16, got "
                                         f"{blocks!r}"):  # fmt: skip
        cuda.update(tree, jnp.zeros(2, jnp.int32), jnp.ones(2, jnp.float32))


@pytest.mark.parametrize("name", sorted(cuda.REMOVED))
def test_a_removed_switch_set_is_refused_not_ignored(monkeypatch, name):
    monkeypatch.setattr(cuda, "_library", lambda: None)  # refused before any call
    monkeypatch.setattr(cuda, name, 512, raising=False)
    tree = st.init(1000, 16)
    for call in (
        lambda: cuda.find(tree, jnp.zeros(2, jnp.float32)),
        lambda: cuda.update(tree, jnp.zeros(2, jnp.int32), jnp.ones(2, jnp.float32)),
    ):
        with pytest.raises(ValueError, match=f"cuda.{name} was removed with .*delete the"):
            call()
    monkeypatch.delattr(cuda, name)
    with pytest.raises(ValueError, match="supports K <= 256"):  # the next check: it got past
        cuda.find(st.init(1000, 257), jnp.zeros(2, jnp.float32))


def _missing_emulation():
    raise backends.BackendUnavailable("the CUDA kernels' host emulation are not built")


def test_the_update_names_its_path_and_writes_the_tree_in_place(monkeypatch):
    """The custom call as JAX lowers it (no GPU needed): the update-path thresholds
    `cuda.BLOCK_MAX_BATCH` and `cuda.CLUSTER_MAX_BATCH`, the narrow levels' limit
    `cuda.NARROW_MAX_NODES` and the tagged claims' `cuda.TAGGED_SIBLINGS` read at trace time,
    the tagged handler's target with `cuda.TAGGED_CLAIMS`, and the tree aliased to the first
    result. (Every path gives the same bits: a switch the call dropped failed no other test.)"""
    devices("emulated cpu")  # lowered on the CPU device; skips where the emulation is not built
    tree = random_tree(100, 4)
    for block_max, narrow_max, cluster_max, tagged, siblings in (
        (77, 5, 0, False, True), (0, 4096, 9000, True, False), (0, 4096, 9000, True, True),
    ):  # fmt: skip
        monkeypatch.setattr(cuda, "BLOCK_MAX_BATCH", block_max)
        monkeypatch.setattr(cuda, "NARROW_MAX_NODES", narrow_max)
        monkeypatch.setattr(cuda, "CLUSTER_MAX_BATCH", cluster_max)
        monkeypatch.setattr(cuda, "TAGGED_CLAIMS", tagged)
        monkeypatch.setattr(cuda, "TAGGED_SIBLINGS", siblings)
        fresh = lambda t, i, v: cuda.update(t, i, v)  # noqa: E731 - a new trace each time
        text = (
            jax.jit(fresh, donate_argnums=0)
            .lower(tree, jnp.arange(5), jnp.ones(5, jnp.float32))
            .as_text()
        )
        call = next(ln for ln in text.splitlines() if "@drlhet_cuda_update" in ln)
        assert ("@drlhet_cuda_update_tagged" in call) == tagged
        assert f"block_max_batch = {block_max} : i64" in call
        assert f"narrow_max_nodes = {narrow_max} : i64" in call
        assert f"cluster_max_batch = {cluster_max} : i64" in call
        assert f"tagged_siblings = {int(siblings)} : i64" in call
        assert "output_operand_aliases" in call and "operand_index = 0" in call


@pytest.mark.parametrize("k, capacity", KS_CAPACITIES)
def test_each_thread_descends_as_the_reference(probe, k, capacity):
    tree = np.asarray(random_tree(capacity, k, seed=k).nodes)
    total = float(st.total(st.SumTreeState(jnp.asarray(tree), capacity, k)))
    rng = np.random.default_rng(capacity)
    targets = np.concatenate(
        [rng.random(300) * total, [0.0, -1.0, np.nan, total, total * 1.5, np.nextafter(total, 0)]]
    ).astype(F32)
    got = descend_one(probe, tree, capacity, k, targets)
    want = oracle.descend(tree, capacity, k, np.nan_to_num(targets, nan=0.0))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(bits(got[1]), bits(want[1]))
    assert bits(got[2]) == bits(want[2])


def test_descent_at_prefix_boundaries_never_takes_a_zero(probe):
    k, capacity = 4, 64
    leaves = np.zeros(capacity, F32)
    leaves[[0, 5, 6, 63]] = [1.0, 2.0, 0.5, 0.25]
    tree = np.asarray(st.update(st.init(capacity, k), np.arange(capacity), leaves).nodes)
    prefix = np.cumsum(leaves[leaves > 0], dtype=F32)
    targets = np.concatenate([[0.0], prefix, np.nextafter(prefix, 0)]).astype(F32)
    idx, val, _ = descend_one(probe, tree, capacity, k, targets)
    assert (leaves[idx] > 0).all() and (val > 0).all()
    np.testing.assert_array_equal(idx, oracle.descend(tree, capacity, k, targets)[0])


@pytest.mark.parametrize("k, capacity", KS_CAPACITIES)
@pytest.mark.parametrize("whole", ["none", "narrow", "all"])
def test_the_update_phases_equal_the_reference_write(probe, k, capacity, whole):
    # the levels recomputed whole (every node, not each winner's ancestor): none, those the GPU
    # picks for a batch of 257 (NarrowTop), or every level; the same bits each time, over a
    # sequence of updates (each starts from the tree the last one wrote)
    depth = len(st.layout(capacity, k).offsets) - 1
    top = {"none": -1, "narrow": narrow_top(probe, capacity, k, 257, 4096), "all": depth - 1}
    tree = np.asarray(random_tree(capacity, k, seed=1).nodes)
    for seed in range(3):
        idx, vals = (np.asarray(x) for x in random_updates(capacity, 257, seed))
        keep = np.random.default_rng(seed).random(257) < 0.8
        rc, got = update_phases(probe, tree, capacity, k, idx, vals, keep, top[whole])
        assert rc == 0
        want = oracle.write(tree, capacity, k, idx, vals, keep)
        np.testing.assert_array_equal(bits(got), bits(want))
        tree = want


def test_the_narrow_levels_are_those_no_wider_than_the_batch_and_the_limit(probe):
    # 2^20 leaves, K 16: levels of 1, 16, 256, 4096 and 65536 nodes above the leaves
    capacity, k = 1 << 20, 16
    assert [narrow_top(probe, capacity, k, b, 4096) for b in (1, 16, 255, 256, 4096, 1 << 16)] == [
        0, 1, 1, 2, 3, 3,
    ]  # fmt: skip
    assert narrow_top(probe, capacity, k, 1 << 16, 1 << 16) == 4  # every level above the leaves
    assert narrow_top(probe, 10, 3, 1, 4096) == 0  # 10 leaves: 4, 2, 1 nodes above them
    assert narrow_top(probe, 10, 3, 4, 4096) == 2
    assert narrow_top(probe, 1, 16, 8, 4096) == 0  # one leaf still has a root above it
    # 5000 leaves, K 16: 1, 2, 20 and 313 nodes above them
    assert narrow_top(probe, 5000, 16, 64, 4096) == 2
    assert narrow_top(probe, 5000, 16, 64, 1) == 0  # the limit, not the batch
    assert narrow_top(probe, 5000, 16, 64, 0) == -1
    assert narrow_top(probe, 10, 1, 4, 4096) == -2  # K = 1: no layout


def test_cupy_picks_the_narrow_levels_as_the_ffi_handler_does(probe):
    # CupyTree.update launches the same kernels from Python: its choice of levels must be the
    # header's, or its trees would differ from the FFI path's on a GPU
    from drlhet.backends.cuda_cupy import NARROW_MAX_NODES
    from drlhet.backends.cuda_cupy import narrow_top as py_narrow_top

    for k in (2, 3, 16, 64):
        for capacity in (1, 2, 7, 100, 1000, 5000, 1 << 20):
            for batch in (1, 3, 16, 255, 256, 4096, 1 << 16):
                for limit in (0, 1, 300, NARROW_MAX_NODES):
                    want = narrow_top(probe, capacity, k, batch, limit)
                    assert py_narrow_top(capacity, k, batch, limit) == want, (k, capacity, batch)


def test_last_kept_duplicate_wins_and_dropped_entries_write_nothing(probe):
    k, capacity = 3, 10
    tree = np.asarray(st.init(capacity, k).nodes)
    idx = np.array([4, 4, 4, 2, 2], np.int32)
    vals = np.array([1.0, 2.0, 3.0, 5.0, 7.0], F32)
    keep = np.array([True, True, False, True, False])
    _, got = update_phases(probe, tree, capacity, k, idx, vals, keep)
    leaves = got[st.layout(capacity, k).offsets[-1] :][:capacity]
    assert leaves[4] == 2.0 and leaves[2] == 5.0  # the last *kept* of each index
    assert (
        got[st.layout(capacity, k).offsets[1] : st.layout(capacity, k).offsets[1] + k].sum() == 7.0
    )


@pytest.mark.parametrize(
    "index, value", [(-1, 1.0), (10, 1.0), (3, -1.0), (3, np.nan), (3, np.inf)]
)
def test_an_invalid_entry_refuses_the_whole_batch(probe, index, value):
    k, capacity = 3, 10
    tree = np.asarray(random_tree(capacity, k).nodes)
    idx = np.array([1, index, 2], np.int32)
    vals = np.array([0.5, value, 0.25], F32)
    rc, got = update_phases(probe, tree, capacity, k, idx, vals, np.ones(3, bool))
    assert rc == 1
    np.testing.assert_array_equal(bits(got), bits(tree))
    # a dropped invalid entry is not looked at
    rc, _ = update_phases(probe, tree, capacity, k, idx, vals, np.array([True, False, True]))
    assert rc == 0


# ---- on a GPU, and under the host emulation on a CPU device (cuda_places.py) -----------------


@pytest.mark.parametrize("k, capacity", KS_CAPACITIES)
def test_trees_and_samples_equal_jax_on_the_same_device(place, k, capacity):
    tree = random_tree(capacity, k)
    rng = np.random.default_rng(k)
    targets = jnp.asarray(rng.random(4096) * float(st.total(tree)), jnp.float32)
    for got, want in zip(place.find(tree, targets), st.REFERENCE.find(tree, targets), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    idx, vals = random_updates(capacity, 4096, seed=k)
    got = place.write(tree, idx, vals, None).nodes
    want = st.REFERENCE.write(tree, idx, vals, None).nodes
    np.testing.assert_array_equal(bits(got), bits(want))


def test_scan_of_sample_and_update_equals_jax(place):
    k, capacity, steps = 32, 3000, 20

    def run(ops):
        def body(tree, key):
            k1, k2 = jax.random.split(key)
            targets = jax.random.uniform(k1, (256,)) * st.total(tree)
            idx, _, _ = ops.find(tree, targets)
            return ops.write(tree, idx, jax.random.uniform(k2, (256,)), None), idx

        keys = jax.random.split(jax.random.key(0), steps)
        return jax.jit(lambda t: jax.lax.scan(body, t, keys), donate_argnums=0)(
            random_tree(capacity, k)
        )

    (tree_g, idx_g), (tree_j, idx_j) = run(place), run(st.REFERENCE)
    np.testing.assert_array_equal(np.asarray(idx_g), np.asarray(idx_j))
    np.testing.assert_array_equal(bits(tree_g.nodes), bits(tree_j.nodes))


def test_vmapped_writes_equal_the_reference_tree_by_tree(place):
    k, capacity, trees = 16, 777, 3
    nodes = jnp.stack([random_tree(capacity, k, seed=s).nodes for s in range(trees)])
    batch = [random_updates(capacity, 300, seed=s) for s in range(trees)]
    idx, vals = jnp.stack([b[0] for b in batch]), jnp.stack([b[1] for b in batch])
    keep = jnp.asarray(np.random.default_rng(0).random((trees, 300)) < 0.9)

    def write(ops):
        return jax.jit(
            jax.vmap(lambda n, i, v, kp: ops.write(st.SumTreeState(n, capacity, k), i, v, kp).nodes)
        )(nodes, idx, vals, keep)

    np.testing.assert_array_equal(bits(write(place)), bits(write(st.REFERENCE)))


@pytest.mark.parametrize("value", [np.nan, np.inf, -1.0, -1e-45])
def test_a_bad_batch_is_refused_on_the_device(place, value):
    """Eagerly and inside a jit that donates the tree. -1e-45 too: the emulated kernels, on
    XLA's CPU threads (denormals taken as zero), compared it as -0 and wrote it (a GPU and the
    reference refuse it)."""
    tree = random_tree(100, 4)
    for write in (place.write, jax.jit(place.write, donate_argnums=0)):
        given = st.SumTreeState(jnp.array(tree.nodes), 100, 4)
        bad = write(given, jnp.asarray([1, 2]), jnp.asarray([1.0, value], jnp.float32), None)
        np.testing.assert_array_equal(bits(bad.nodes), bits(tree.nodes))


def test_dropped_entries_outside_the_tree_are_never_read(place):
    tree = random_tree(100, 4)
    idx = jnp.asarray([1, 2**31 - 1, -5, 3], jnp.int32)
    vals = jnp.asarray([0.5, 1.0, 1.0, 0.25], jnp.float32)
    keep = jnp.asarray([True, False, False, True])
    got = jax.jit(place.write)(tree, idx, vals, keep).nodes
    want = st.REFERENCE.write(tree, idx, vals, keep).nodes
    np.testing.assert_array_equal(bits(got), bits(want))


def test_cupy_kernels_equal_the_reference(gpu):
    from drlhet.backends import cuda_cupy

    pytest.importorskip("cupy", reason="missing library: cupy (pip install drlhet[cuda])")
    cuda_cupy.fatbin_path()  # built with the library wherever nvcc works: its absence fails
    k, capacity = 16, 5000
    tree = random_tree(capacity, k)
    ct = cuda_cupy.CupyTree(cuda_cupy.to_cupy(jnp.array(tree.nodes)), capacity, k)
    targets = np.random.default_rng(0).random(1000).astype(F32) * float(st.total(tree))
    got = ct.find(cuda_cupy.to_cupy(jnp.asarray(targets)))
    want = oracle.descend(np.asarray(tree.nodes), capacity, k, targets)
    np.testing.assert_array_equal(np.asarray(cuda_cupy.to_jax(got[0])), want[0])
    idx, vals = random_updates(capacity, 1000, seed=3)
    assert ct.update(cuda_cupy.to_cupy(idx), cuda_cupy.to_cupy(vals))
    want_nodes = oracle.write(
        np.asarray(tree.nodes), capacity, k, np.asarray(idx), np.asarray(vals)
    )
    np.testing.assert_array_equal(bits(np.asarray(cuda_cupy.to_jax(ct.nodes))), bits(want_nodes))
