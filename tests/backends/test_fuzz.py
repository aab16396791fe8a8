"""Property fuzzing of every replay backend against its pure-JAX reference, bit for bit.

A buffer built on a backend's tree primitives and the same buffer built on the reference
(`drlhet.replay.sum_tree.REFERENCE` for float trees, `drlhet.replay.fixed_point.REFERENCE` for
fixed-point ones) get the same random sequence of ``add``, ``update_priorities`` and ``sample``
calls, eagerly or under ``jit``, over adversarial inputs: zero, -0.0, subnormal, huge, negative,
NaN and infinite priorities, duplicates in a batch, indices outside the filled slots, stale
stamps and stamps past the int32 wrap, capacities that are not powers of K.

The property: after every call the two states are equal bit for bit (storage, tree, stamps,
counters, error bits), so are the sampled batches, and either both refuse a call with the same
exception type or neither does. It says nothing about *what* the reference decides, only that
the backend decides the same.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as hst

from drlhet import backends
from drlhet.replay import fixed_point as fp
from drlhet.replay import sum_tree as st
from drlhet.replay.prioritized import make_prioritized_replay

BACKENDS = [
    b.name
    for b in backends.providing("replay")
    if not b.modeled_only and b.name != backends.reference()
]
REFERENCES = {"float": st.REFERENCE, "fixed": fp.REFERENCE}
KS = (2, 3, 16)
CAPACITIES = (1, 7, 40)  # none a power of K; 1 is a tree of one leaf
F32 = np.float32
PRIORITIES = (
    hst.sampled_from([0.0, -0.0, 1e-45, 1e-40, F32(np.finfo(F32).tiny), 1e-30, 1e30, 3e38])
    | hst.sampled_from([float(np.finfo(F32).max), -1.0, -1e-45, np.nan, np.inf, -np.inf])
    | hst.floats(float(F32(1e-8)), float(F32(1e8)), width=32)
    | hst.sampled_from([1.0, 2.0, 0.5])  # ties and duplicates of the same value
)
INT32 = np.iinfo(np.int32)
INSERTED = (0, 7, int(INT32.max) - 3)  # the stamp counter about to wrap past int32


def tree_ops_or_skip(name: str) -> tuple[st.TreeOps, st.TreeOps]:
    """``(backend's primitives, its reference's)``, or a skip naming what is missing here.

    A backend that simulates its device here (cuda's kernels under their host emulation on a
    CPU device) runs: the registry's lookup, not the device list, says whether it loads."""
    try:
        ops = backends.tree_ops(name)
    except backends.BackendUnavailable as e:
        pytest.skip(f"missing library: backend {name!r} cannot load ({e})")
    return ops, REFERENCES[ops.numbers]


def ks_for(name: str) -> tuple[int, ...]:
    """The K of `KS` the backend's trees take; where it refuses some (its registry entry's
    ``accepts``), K = 4 in their place."""
    accepts = backends.get(name).accepts
    ks = [k for k in KS if accepts is None or not accepts(64, k)]
    if len(ks) < len(KS):
        ks += [k for k in (4,) if k not in ks and not accepts(64, k)]
    return tuple(ks)


class Buffer(NamedTuple):
    """One buffer's functions: eager and jitted."""

    eager: Any
    jitted: Any


@functools.cache
def buffer(ops: st.TreeOps, capacity: int, k: int, batch: int, alpha: float, strat: bool):
    """Cached, so that jitted functions compile once per configuration, not per example."""
    fns = make_prioritized_replay(
        capacity, batch, alpha=alpha, branching=k, stratified=strat, tree_ops=ops
    )
    return Buffer(fns, fns._replace(**{f: jax.jit(getattr(fns, f)) for f in fns._fields[1:]}))


@pytest.fixture(autouse=True)
def fresh_programs():
    """Each test starts without the programs of the tests before it (they serve another
    backend or K). Without this the long tests of one process held every executable they
    compiled, and the fifth of them (6 GB, 53,000 memory maps after 4 minutes, measured
    2026-11-27) died in XLA's compiler when an mmap failed at Linux's limit of 65,530 maps."""
    buffer.cache_clear()
    jax.clear_caches()


def transitions(start: int, n: int) -> dict:
    """``n`` distinct transitions ``[n, ...]`` numbered from ``start``."""
    i = np.arange(start, start + n)
    return {"obs": np.stack([i, -i], 1).astype(F32), "act": i.astype(np.int32)}


def same_bits(a, b, what: str) -> None:
    """Asserts two pytrees hold the same arrays, bit for bit (NaN and -0.0 included)."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b), what
    for n, (x, y) in enumerate(zip(la, lb, strict=True)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, (what, n, x.dtype, y.dtype)
        assert x.tobytes() == y.tobytes(), f"{what}, leaf {n}: {x!r} != {y!r}"


def call(fn, *args):
    """``(result, None)`` or ``(None, exception type)``; waits for the result."""
    try:
        return jax.block_until_ready(fn(*args)), None
    except Exception as e:  # noqa: BLE001  (any refusal: its type is compared)
        return None, type(e)


STAMPS = hst.sampled_from([-1, 0, 1, int(INT32.min), int(INT32.max)]) | hst.integers(
    int(INT32.min), int(INT32.max)
)


def draw_update(data, state, last_stamps, capacity: int):
    """Indices ``[B]`` (duplicates, some maybe outside the filled slots), priorities ``[B]`` and
    stamps ``[B]`` (none, the slots' own, those of an earlier sample, or arbitrary)."""
    size = int(state.size)
    n = data.draw(hst.sampled_from([1, 5]), "update size")
    inside = hst.integers(0, max(size - 1, 0))
    outside = hst.sampled_from([-1, -7, size, capacity, capacity + 3, int(INT32.max)])
    pick = inside | outside if data.draw(hst.booleans(), "out of range") else inside
    idx = np.asarray(data.draw(hst.lists(pick, min_size=n, max_size=n), "indices"), np.int32)
    if data.draw(hst.booleans(), "duplicate"):
        idx[-1] = idx[0]
    pri = np.asarray(data.draw(hst.lists(PRIORITIES, min_size=n, max_size=n), "priorities"), F32)
    how = data.draw(hst.sampled_from(["none", "current", "stale", "arbitrary"]), "stamps")
    stamps = None
    if how == "current":
        stamps = np.asarray(state.stamps)[np.clip(idx, 0, capacity - 1)]
    elif how == "stale" and last_stamps is not None:
        stamps = np.resize(last_stamps, n)
    elif how == "arbitrary":
        stamps = np.asarray(data.draw(hst.lists(STAMPS, min_size=n, max_size=n)), np.int32)
    return idx, pri, stamps


def draw_add(data, capacity: int):
    """``(A, priorities [A] | None)``; A may exceed the capacity (a refusal)."""
    n = data.draw(hst.sampled_from([1, 2, 3, capacity, capacity + 1]), "add size")
    if data.draw(hst.booleans(), "default priority"):
        return n, None
    return n, np.asarray(data.draw(hst.lists(PRIORITIES, min_size=n, max_size=n)), F32)


def run_both(data, ops: st.TreeOps, ref: st.TreeOps, k: int, steps: int) -> None:
    """The property: one random sequence of calls on a buffer over ``ops`` and on one over
    ``ref``; equal states, samples and refusals after every call."""
    capacity = data.draw(hst.sampled_from(CAPACITIES), "capacity")
    batch = data.draw(hst.sampled_from([3, 8]), "batch")
    alpha = data.draw(hst.sampled_from([0.6, 1.0]), "alpha")
    strat = data.draw(hst.booleans(), "stratified")
    got_b, want_b = (buffer(o, capacity, k, batch, alpha, strat) for o in (ops, ref))
    example = {k_: x[0] for k_, x in transitions(0, 1).items()}
    start = data.draw(hst.sampled_from(INSERTED), "first stamp")
    got = got_b.eager.init(example)._replace(inserted=jnp.int32(start))
    want = want_b.eager.init(example)._replace(inserted=jnp.int32(start))
    same_bits(got, want, "init")
    last_stamps, counter = None, 0
    for step in range(steps):
        mode = "jitted" if data.draw(hst.booleans(), "jit") else "eager"
        g_fns, w_fns = getattr(got_b, mode), getattr(want_b, mode)
        op = data.draw(hst.sampled_from(["add", "update", "sample"]), "op")
        if op == "add":
            n, pri = draw_add(data, capacity)
            args: tuple = (transitions(counter, n), pri)
            counter += n
            g, w = call(g_fns.add, got, *args), call(w_fns.add, want, *args)
        elif op == "update":
            args = draw_update(data, want, last_stamps, capacity)
            g = call(g_fns.update_priorities, got, *args)
            w = call(w_fns.update_priorities, want, *args)
        else:
            key, beta = jax.random.key(data.draw(hst.integers(0, 2**16))), 0.4
            g, w = call(g_fns.sample, got, key, beta), call(w_fns.sample, want, key, beta)
        what = f"step {step}: {mode} {op}"
        assert g[1] == w[1], f"{what}: backend refused with {g[1]}, reference with {w[1]}"
        if w[1] is not None:
            continue
        same_bits(g[0], w[0], what)
        if op == "sample":
            last_stamps = np.asarray(w[0].stamps)
        else:
            got, want = g[0], w[0]


CASES = [(name, k) for name in BACKENDS for k in ks_for(name)]


@pytest.mark.parametrize("name, k", CASES)
@settings(max_examples=5, deadline=None)
@given(data=hst.data())
def test_backend_equals_reference(name, k, data):
    ops, ref = tree_ops_or_skip(name)
    run_both(data, ops, ref, k, steps=6)


@pytest.mark.slow
@pytest.mark.parametrize("name, k", CASES)
@settings(max_examples=200, deadline=None)
@given(data=hst.data())
def test_backend_equals_reference_long(name, k, data):
    ops, ref = tree_ops_or_skip(name)
    run_both(data, ops, ref, k, steps=16)


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("k", (*KS, 5, 64))
def test_backend_takes_exactly_the_k_its_entry_accepts(name, k):
    """Every K the registry entry says the backend takes builds a buffer that stores what it
    is given; every other K is refused in words naming it."""
    ops, _ = tree_ops_or_skip(name)
    accepts = backends.get(name).accepts
    if accepts is not None and accepts(64, k):  # refused as the buffer is built
        with pytest.raises(ValueError, match=f"K.*{k}"):
            make_prioritized_replay(10, 2, branching=k, tree_ops=ops)
    else:
        fns = make_prioritized_replay(10, 2, branching=k, tree_ops=ops)
        added = fns.add(fns.init({"x": F32(0)}), {"x": np.arange(1, 4, dtype=F32)})
        assert int(added.size) == 3
        np.testing.assert_array_equal(np.asarray(added.storage["x"][:3]), [1, 2, 3])


def _one_ulp_up(write):
    """A planted defect: every written value one float32 ulp too large."""

    def bad_write(tree, indices, values, keep=None):
        return write(tree, indices, jnp.nextafter(values, jnp.float32(np.inf)), keep)

    return bad_write


def test_the_property_catches_a_planted_defect():
    # the reference against itself with the defect planted: the property must fail
    ref = st.REFERENCE
    bad = ref._replace(write=_one_ulp_up(ref.write))

    @settings(
        max_examples=20,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        report_multiple_bugs=False,
    )
    @given(data=hst.data())
    def prop(data):
        run_both(data, bad, ref, 3, steps=8)

    with pytest.raises(AssertionError, match="step"):
        prop()
