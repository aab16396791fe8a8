"""The kernels' shared per-element header, kernels/include/drlhet/sum_tree.h, tested directly
(that it compiles for CUDA and HLS: test_kernel_header_compiles.py).

* Its descent step (ChooseChild, NextTarget) and node sum (SeqSum), exported from the CPU kernel
  library by kernels/cpu/header_probe.cc and called through ctypes, equal bit for bit a NumPy
  float32 statement of one level of the pure-JAX reference (``level_step`` in
  `drlhet.replay.sum_tree.descend`, and ``_seq_sum``), which is itself checked against
  ``descend`` on one-level trees.
* The CPU kernel, which calls the header per SIMD lane, equals the reference bit for bit on the
  same edge cases (-0.0 leaves, targets on prefix boundaries, trailing zero children, rounding).
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst
from oracle import level_step, seq_sum

from drlhet.replay import sum_tree as st

MAX_BRANCHING = 256  # kMaxBranching in the header
LIB_NAMES = ("libdrlhet_cpu.so", "libdrlhet_cpu.dylib", "drlhet_cpu.dll")
F32 = np.float32
TINY = float(np.finfo(F32).smallest_subnormal)


def _find_library() -> Path | None:
    """The built kernel library, where `drlhet.backends.native.library_path` looks for it."""
    spec = importlib.util.find_spec("drlhet")
    for place in list(spec.submodule_search_locations or []) if spec else []:
        for name in LIB_NAMES:
            if (Path(place) / name).is_file():
                return Path(place) / name
    return None


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    path = _find_library()
    if path is None:  # the package's own library: `make test` builds it, so its absence fails
        pytest.fail(
            "libdrlhet_cpu (the native CPU kernels) is not built; `pip install -e .` builds it"
        )
    cdll = ctypes.CDLL(str(path))
    for symbol in ("drlhet_choose_child", "drlhet_seq_sum"):
        if not hasattr(cdll, symbol):
            # a stale build, not a missing library: the install is broken, so fail
            pytest.fail(f"{path} predates {symbol} (kernels/cpu/header_probe.cc); rebuild it")
    fp = ctypes.POINTER(ctypes.c_float)
    cdll.drlhet_choose_child.argtypes = [
        fp,
        ctypes.c_int,
        ctypes.c_float,
        ctypes.POINTER(ctypes.c_int32),
        fp,
        fp,
        fp,
        fp,
    ]
    cdll.drlhet_choose_child.restype = ctypes.c_int
    cdll.drlhet_seq_sum.argtypes = [fp, ctypes.c_int]
    cdll.drlhet_seq_sum.restype = ctypes.c_float
    return cdll


# ---- the header, through ctypes ------------------------------------------------------------------


def header_choose(lib, children, u):
    """ChooseChild + NextTarget of the header: (child, left, value, total, next_u)."""
    c = np.ascontiguousarray(children, F32)
    child = ctypes.c_int32(-1)
    outs = [ctypes.c_float(np.nan) for _ in range(4)]
    rc = lib.drlhet_choose_child(
        c.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
        c.size,
        ctypes.c_float(u),
        ctypes.byref(child),
        *(ctypes.byref(o) for o in outs),
    )
    assert rc == 0
    return (child.value, *(F32(o.value) for o in outs))


def header_seq_sum(lib, children):
    c = np.ascontiguousarray(children, F32)
    return F32(lib.drlhet_seq_sum(c.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), c.size))


# ---- the reference, restated in NumPy float32 ----------------------------------------------------


def bits(x) -> int:
    return int(np.asarray(x, F32).view(np.uint32))


def assert_same(lib, children, u):
    children = np.asarray(children, F32)
    u = F32(u)
    got = header_choose(lib, children, u)
    want = [x[0] for x in level_step(children[None], np.asarray([u]))]
    names = ("child", "left", "value", "total", "next_u")
    msg = f"K={children.size} u={u!r} children={children.tolist()}"
    assert got[0] == int(want[0]), f"child: {got[0]} != {want[0]}; {msg}"
    for name, g, w in zip(names[1:], got[1:], want[1:], strict=True):
        assert bits(g) == bits(w), f"{name}: {g!r} != {w!r} (bits differ); {msg}"
    assert bits(header_seq_sum(lib, children)) == bits(seq_sum(children)), msg


# ---- the NumPy statement is the reference --------------------------------------------------------


@pytest.mark.parametrize("k", [2, 3, 16, 33])
def test_numpy_statement_matches_descend_on_one_level_trees(k):
    """A tree of K leaves has one level below the root: descend is exactly one level_step.

    (``left`` and ``next_u`` are not outputs of descend; they come from the same statements.)
    """
    rng = np.random.default_rng(k)
    kinds = [
        rng.random(k),
        np.where(rng.random(k) < 0.5, 0, rng.random(k)),
        np.concatenate([rng.random(k // 2 + 1), np.zeros(k - k // 2 - 1)]),  # trailing zeros
        rng.random(k) * 1e-3 + np.where(np.arange(k) == 0, 1e7, 0),  # rounding at the sums
        np.full(k, -0.0),
        # No denormals: XLA's CPU runtime flushes them to zero while it runs (FTZ/DAZ), and so do
        # the native kernels it calls; NumPy and the ctypes calls below do not.
    ]
    lay = st.layout(k, k)
    for leaves in kinds:
        leaves = leaves.astype(F32)
        nodes = np.zeros(lay.size, F32)
        nodes[lay.offsets[1] :] = leaves
        tree = st.SumTreeState(jax.numpy.asarray(nodes), k, k)
        total = seq_sum(leaves)
        prefixes = np.cumsum(leaves, dtype=F32)  # cumsum runs sequentially in float32
        targets = np.concatenate(
            [
                rng.random(64) * total,
                prefixes,
                np.nextafter(prefixes, F32(0)),
                np.nextafter(prefixes, F32(np.inf)),
                [0, total, np.nextafter(total, F32(np.inf))],
            ]
        ).astype(F32)
        idx, value, root = jax.jit(st.descend)(tree, targets)
        child, _, want_value, want_total, _ = level_step(
            np.tile(leaves, (targets.size, 1)), targets
        )
        np.testing.assert_array_equal(np.asarray(idx), child)
        np.testing.assert_array_equal(np.asarray(value).view(np.uint32), want_value.view(np.uint32))
        assert bits(root) == bits(want_total[0])


# ---- the header against the NumPy statement ------------------------------------------------------


EDGE_CASES = [
    ([0, 0], 0),  # an empty node: child 0, nothing to fall back on
    ([0, 0], 1),
    ([0] * 256, 0),
    ([-0.0] * 16, 0),  # the sum of -0.0 children is -0.0 (not 0.0 + -0.0 == +0.0)
    ([-0.0, 0, -0.0], 0),
    ([-0.0, 1, 2], 0),
    ([2, 0], 0),
    ([2, 0], 2),  # u == total: past every child, falls back to the last non-zero one
    ([1, 2, 0, 0], 3),  # trailing zeros
    ([1, 2, 0, 0], 2.9999998),
    ([0, 0, 5], 0),  # leading zeros are skipped
    ([1, 0, 1], 1),  # u exactly at a prefix boundary skips the zero child after it
    ([1, 1, 1, 1], 1),  # boundaries: prefix[j] <= u takes child j + 1
    ([1, 1, 1, 1], 2),
    ([1, 1, 1, 1], 3.9999998),
    ([1, 1, 1, 1], 4),
    ([1, 1, 1, 1], 5),
    ([1e8, 1, 1, 1], 1e8),  # 1e8 + 1 rounds to 1e8: u >= total from rounding
    ([1e8, 1, 1, 1], 99999992),
    ([1, 1e8, 1, 1], 1e8 + 8),
    ([0.1] * 10, 1.0000001),  # the sequential sum of 0.1s, not 1.0
    ([0.1] * 10, 0.70000005),
    ([1] * 256, 255.5),
    ([1] * 256, 0.5),
    ([3e38, 3e38], 3e38),  # the total overflows to inf
    ([TINY, TINY, TINY], TINY),  # denormals
    ([TINY, TINY, TINY], 2 * TINY),
    ([TINY, 0, 2 * TINY], 3 * TINY),
    ([1.2e-38, 1e-39, 1e-45], 1.3e-38),
    ([1e-39] * 16, 8e-39),
]


# (capacity, K): powers of K and not, 2^31 - 1 (the last capacity in 32-bit arithmetic) and past
# it (MakeLayout's and AncestorAt's 64-bit path, which no kernel takes today: C < 2^31 there)
LAYOUT_CASES = [
    (1, 2),
    (1, 16),
    (10, 3),
    (1000, 7),
    (1 << 20, 16),
    (3**13 + 1, 3),
    (2**31 - 1, 2),
    (2**31 + 5, 16),
    (2**40 + 3, 3),
    (2**40, 256),
]
MAX_LEVELS = 64  # kMaxLevels in the header


def _layout(lib, capacity: int, k: int):
    i64 = ctypes.c_int64
    lib.drlhet_layout.argtypes = [i64, ctypes.c_int, ctypes.POINTER(i64)] + 2 * [
        np.ctypeslib.ndpointer(np.int64, flags="C_CONTIGUOUS")
    ]
    lib.drlhet_layout.restype = ctypes.c_int
    size, offsets, counts = (
        i64(-1),
        np.full(MAX_LEVELS, -1, np.int64),
        np.full(MAX_LEVELS, -1, np.int64),
    )
    depth = lib.drlhet_layout(capacity, k, ctypes.byref(size), offsets, counts)
    return depth, size.value, offsets, counts


@pytest.mark.parametrize("capacity, k", LAYOUT_CASES)
def test_make_layout_equals_the_reference_layout(lib, capacity, k):
    """MakeLayout's depth, size and offsets are `drlhet.replay.sum_tree.layout`'s, its node
    counts are ceil(C / K^(depth - level)) (NodesAt), and every level past the depth is 0."""
    depth, size, offsets, counts = _layout(lib, capacity, k)
    ref = st.layout(capacity, k)
    assert (depth, size) == (ref.depth, ref.size)
    assert tuple(offsets[: depth + 1].tolist()) == ref.offsets
    assert counts[: depth + 1].tolist() == [
        -(-capacity // k ** (depth - lv)) for lv in range(depth + 1)
    ]
    assert not offsets[depth + 1 :].any() and not counts[depth + 1 :].any()


@pytest.mark.parametrize("capacity, k", [(0, 16), (10, 1), (10, MAX_BRANCHING + 1)])
def test_make_layout_refuses_bad_arguments_and_zeroes_the_layout(lib, capacity, k):
    depth, size, offsets, counts = _layout(lib, capacity, k)
    assert depth == -1 and size == 0 and not offsets.any() and not counts.any()


@pytest.mark.parametrize("capacity, k", LAYOUT_CASES)
def test_ancestor_at_is_integer_division_by_a_power_of_k(lib, capacity, k):
    lib.drlhet_ancestor_at.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_int64, ctypes.c_int]
    lib.drlhet_ancestor_at.restype = ctypes.c_int64
    depth = st.layout(capacity, k).depth
    leaves = {
        0,
        capacity - 1,
        capacity // 2,
        min(capacity - 1, 2**31 - 1),
        min(capacity - 1, 2**31),
    }
    for leaf in sorted(leaves):
        got = [lib.drlhet_ancestor_at(capacity, k, leaf, lv) for lv in range(depth + 1)]
        assert got == [leaf // k ** (depth - lv) for lv in range(depth + 1)], leaf


@pytest.mark.parametrize("children, u", EDGE_CASES)
def test_choose_child_edge_cases(lib, children, u):
    assert_same(lib, children, u)


@pytest.mark.parametrize("k", [2, 3, 4, 7, 15, 16, 17, 64, 255, 256])
def test_choose_child_random_nodes(lib, k):
    rng = np.random.default_rng(k)
    for _ in range(60):
        children = rng.random(k).astype(F32) * F32(10.0 ** rng.integers(-40, 30))
        children[rng.random(k) < rng.random()] = 0
        total = seq_sum(children)
        prefixes = np.cumsum(children, dtype=F32)
        for u in [0, rng.random() * total, total, *rng.choice(prefixes, 3)]:
            assert_same(lib, children, u)


ELEMENT = hst.one_of(
    hst.just(0.0),
    hst.just(-0.0),
    hst.floats(0, 1, width=32),
    hst.floats(0, float(F32(1e30)), width=32),
    hst.floats(0, float(F32(1e-37)), width=32),  # denormals and the smallest normals
    hst.sampled_from([1.0, 2.0, 0.5, 1e8, 3.0]),  # equal values: prefixes that tie with u
)


@settings(max_examples=400, deadline=None)
@given(
    children=hst.lists(ELEMENT, min_size=2, max_size=MAX_BRANCHING),
    trailing_zeros=hst.integers(0, 8),
    how=hst.sampled_from(["fraction", "prefix", "below_prefix", "above_prefix", "total", "over"]),
    fraction=hst.floats(0, 1),
    pick=hst.integers(0, MAX_BRANCHING - 1),
)
def test_choose_child_matches_reference_property(
    lib, children, trailing_zeros, how, fraction, pick
):
    children = np.asarray(children + [0.0] * trailing_zeros, F32)[:MAX_BRANCHING]
    prefixes = np.cumsum(children, dtype=F32)
    total = seq_sum(children)
    p = prefixes[pick % children.size]
    u = {
        "fraction": F32(fraction) * total,
        "prefix": p,
        "below_prefix": np.nextafter(p, F32(0)),
        "above_prefix": np.nextafter(p, F32(np.inf)),
        "total": total,
        "over": total * F32(1 + fraction),
    }[how]
    u = F32(u) + F32(0)  # targets are >= +0.0, and finite
    if not np.isfinite(u):
        u = F32(np.finfo(F32).max)
    assert_same(lib, children, u)


def test_choose_child_rejects_bad_k(lib):
    c = np.ones(MAX_BRANCHING + 1, F32)
    ptr = c.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    out = [ctypes.c_float() for _ in range(5)]
    child = ctypes.c_int32()
    for k in (1, 0, -3, MAX_BRANCHING + 1):
        rc = lib.drlhet_choose_child(ptr, k, 0.5, ctypes.byref(child), *map(ctypes.byref, out[:4]))
        assert rc == -1, k


# ---- the CPU kernel, which calls the header per SIMD lane, on the same edge cases ----------------


@pytest.fixture(scope="module")
def kernel(lib):
    """The CPU kernel's find and update, as FFI calls of the library.

    ``find(tree, targets) -> (indices, values, total)`` runs ChooseBlock (the header's steps per
    SIMD lane); ``update(tree, indices, values) -> nodes`` runs RecomputeParents (SeqSum's).
    """
    find_name, update_name = "drlhet_test_header_find", "drlhet_test_header_update"
    jax.ffi.register_ffi_target(find_name, jax.ffi.pycapsule(lib.DrlhetFind), platform="cpu")
    jax.ffi.register_ffi_target(update_name, jax.ffi.pycapsule(lib.DrlhetUpdate), platform="cpu")
    jnp = jax.numpy

    def attrs(tree):
        return {"branching": np.int64(tree.branching), "capacity": np.int64(tree.capacity)}

    def find(tree, targets):
        out = (
            jax.ShapeDtypeStruct(targets.shape, jnp.int32),
            jax.ShapeDtypeStruct(targets.shape, jnp.float32),
            jax.ShapeDtypeStruct((), jnp.float32),
        )
        return jax.ffi.ffi_call(find_name, out)(tree.nodes, targets, **attrs(tree))

    def update(tree, indices, values):
        out = jax.ShapeDtypeStruct(tree.nodes.shape, jnp.float32)
        keep = jnp.ones(indices.shape, bool)
        return jax.ffi.ffi_call(update_name, out)(tree.nodes, indices, values, keep, **attrs(tree))

    return jax.jit(find), jax.jit(update)


@pytest.mark.parametrize("k", [2, 3, 16])
def test_kernel_matches_reference_on_edge_case_trees(kernel, k):
    """Integer targets on a tree of ones fall on a prefix boundary at every level."""
    find, update = kernel
    cap = k**3
    ones = np.ones(cap, F32)
    trailing = np.where(np.arange(cap) % k < k // 2 + 1, 1, 0).astype(F32)  # zero children at ends
    rounding = np.where(np.arange(cap) % k == 0, 1e8, 1).astype(F32)
    for leaves in (np.full(cap, -0.0, F32), ones, trailing, rounding, np.zeros(cap, F32)):
        indices = np.arange(cap, dtype=np.int32)
        tree = jax.jit(st.write)(st.init(cap, k), indices, leaves)
        nodes = update(st.init(cap, k), indices, leaves)
        np.testing.assert_array_equal(
            np.asarray(nodes).view(np.int32), np.asarray(tree.nodes).view(np.int32)
        )
        total = float(st.total(tree))
        targets = np.concatenate([np.arange(cap + 1), [total, 0.5, total / 3]]).astype(F32)
        got = find(tree, targets)
        want = jax.jit(st.descend)(tree, targets)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(
                np.asarray(g).view(np.int32), np.asarray(w).view(np.int32)
            )
