"""The cluster update's claims in a table kept between calls, each slot tagged with the update
that claimed it (kernels/cuda/tag_table.cuh; `drlhet.backends.cuda.TAGGED_CLAIMS`), under the
host emulation: first the kernel on a table this test keeps (its slots and each tree's last tag
set as earlier updates would have left them, the wrap of the tags included), then the tagged
custom calls inside jit on the emulated CPU device, where each call keeps its own table (the
FFI handler's state) across the calls of its executable. Bit for bit the oracle's or the
reference's.
"""

from __future__ import annotations

import ctypes

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
import test_cuda_emu
from conformance import random_tree
from cuda_places import devices
from test_cuda_buffer import bits, leaf_values
from test_cuda_emu import PATHS, emu_update, two_trees_and_batches, written_then_one_tree_refused

from drlhet import backends
from drlhet.backends import cuda
from drlhet.replay import sum_tree as st

emu, schedule = test_cuda_emu.emu, test_cuda_emu.schedule  # the emulation's fixtures
F32 = np.float32
POS_BITS = 13  # kTagPosBits: a slot is (tag << 13 | position) << 32 | the value's bits
TAG_MAX = 2 ** (32 - POS_BITS) - 1  # kTagMax: past it a tree's slots are cleared, tags from 1
CLUSTER = PATHS["one cluster per tree"]
STALE = F32(1e30)  # the value in an earlier update's slots: a sum that took it would show


def slot(tag: int, pos: int, value) -> int:
    """A claim's slot (TagSlot)."""
    return (tag << POS_BITS | pos) << 32 | int(np.asarray(value, F32).view(np.uint32))


def table(trees: int, capacity: int, last: int) -> np.ndarray:
    """A claims table (uint64 [V * (C + 1)]: the slots, then each tree's last tag) as ``last``
    updates would leave it at worst: every slot that update's, at the largest position, with a
    value no update of these tests writes (`STALE`)."""
    t = np.full(trees * (capacity + 1), slot(last, 2**POS_BITS - 1, STALE), np.uint64)
    t[trees * capacity :] = last
    return t


@pytest.fixture(params=[False, True], ids=["parents after a barrier", "parents from the slots"])
def siblings(request) -> bool:
    """Whether the winners sum their leaves' parents from the table (TAGGED_SIBLINGS)."""
    return request.param


def slots_and_lasts(t: np.ndarray, trees: int, capacity: int):
    return t[: trees * capacity].reshape(trees, capacity), t[trees * capacity :]


def claimed(idx, keep, capacity) -> dict[int, int]:
    """Each leaf a batch's kept valid entries claim, and its last such entry's position."""
    pairs = enumerate(zip(idx, keep, strict=True))
    return {int(i): p for p, (i, k) in pairs if k and 0 <= i < capacity}


@pytest.mark.parametrize(
    "k, capacity, batch",
    [(16, 2**16, 1024), (2, 3000, 700), (3, 5000, 1024), (64, 777, 300), (32, 4097, 513)],
)
def test_tagged_claims_beat_every_slot_an_earlier_update_left(
    emu, schedule, siblings, k, capacity, batch
):
    """Two trees, a table whose every slot holds the last update's tag at the largest position:
    the cluster update (duplicates across its blocks, dropped entries) equals the oracle, then
    the same batch with one tree refused; each tree's last tag counts both updates, and each
    claimed leaf's slot holds the second update's tag, its last kept entry's position and
    value."""
    trees, idx, vals, keep = two_trees_and_batches(capacity, k, batch, seed=70)
    tags = table(2, capacity, last=41)
    refuse = (1, 0, capacity)
    written_then_one_tree_refused(emu, CLUSTER, trees, capacity, k, idx, vals, keep, refuse, tags,
                                  siblings)  # fmt: skip
    slots, lasts = slots_and_lasts(tags, 2, capacity)
    assert lasts.tolist() == [43, 43]
    idx[1, 0], keep[1, 0] = capacity, True  # the refused tree's batch: its other entries claim
    for v in range(2):
        for leaf, pos in claimed(idx[v], keep[v], capacity).items():
            assert int(slots[v, leaf]) == slot(43, pos, vals[v, pos]), (v, leaf)


def test_the_tags_wrap_once_with_every_slot_cleared(emu, schedule, siblings):
    """A tree whose last tag is one short of the largest: the first update claims with the
    largest tag, the next clears the tree's slots and claims with tag 1 (a slot left with the
    largest tag would beat every claim of it, and the oracle would disagree); then a checked
    update that wraps, its maximum and error word as the oracle's."""
    k, capacity, batch = 16, 2**14, 1000
    trees, idx, vals, keep = two_trees_and_batches(capacity, k, batch, seed=71)
    tags = table(2, capacity, last=TAG_MAX - 1)
    nodes = trees
    for step, last in enumerate((TAG_MAX, 1)):
        step_vals = (vals + F32(step)).astype(F32)
        got, bad, _, _ = emu_update(emu, nodes, capacity, k, idx, step_vals, keep, CLUSTER,
                                    tags=tags, siblings=siblings)  # fmt: skip
        assert not bad.any()
        for v in range(2):
            want = oracle.write(nodes[v], capacity, k, idx[v], step_vals[v], keep[v])
            np.testing.assert_array_equal(bits(got[v]), bits(want), err_msg=f"{step}, {v}")
        slots, lasts = slots_and_lasts(tags, 2, capacity)
        assert lasts.tolist() == [last, last]
        nodes = got
    untouched = np.setdiff1d(np.arange(capacity), idx[0][keep[0]])
    assert (slots[0, untouched] == 0).all()
    raw = np.random.default_rng(72).random(batch).astype(F32) + F32(0.5)
    values = np.asarray(leaf_values(jnp.asarray(raw)))
    checked = (raw, [capacity], [F32(1.0)], [0])
    one = table(1, capacity, last=TAG_MAX)  # this update wraps: every stale slot the largest
    args = (emu, nodes[:1], capacity, k, idx[0], values, keep[0], CLUSTER, checked)
    got, bad, got_max, got_err = emu_update(*args, tags=one, siblings=siblings)
    assert slots_and_lasts(one, 1, capacity)[1].tolist() == [1]
    assert not bad.any() and got_err[0] == 0
    assert got_max[0] == max(F32(1.0), raw[keep[0]].max())
    want = oracle.write(nodes[0], capacity, k, idx[0], values, keep[0])
    np.testing.assert_array_equal(bits(got[0]), bits(want))


def test_parents_from_the_slots_at_the_last_parent_and_between_siblings(emu, schedule):
    """The leaves' parents summed from the table where the last parent has padding leaves (4805
    leaves, K 16: five leaves and eleven of padding, whose slots the table does not have; the
    next tree's first slots, claimed by the same update, lie right after them) and where every
    leaf of a parent is written by the update, some several times: the oracle's bits."""
    k, capacity, batch = 16, 16 * 300 + 5, 200
    trees, idx, vals, keep = two_trees_and_batches(capacity, k, batch, seed=79)
    idx[0, :24] = np.repeat(np.arange(capacity - 5, capacity), 5)[:24]  # the last parent's leaves
    idx[1, :32] = np.tile(np.arange(16), 2)  # the next tree's first parent, each leaf twice
    keep[:, :32] = True
    tags = table(2, capacity, last=9)
    written_then_one_tree_refused(emu, CLUSTER, trees, capacity, k, idx, vals, keep,
                                  (1, 40, -1), tags, siblings=True)  # fmt: skip


def test_a_batch_past_one_entry_per_thread_claims_in_the_workspace(emu, schedule, siblings):
    """B 1025, past the emulation's 8 x 128 threads a cluster: the workspace's claims take it,
    bit for bit the oracle's, the table untouched."""
    k, capacity, batch = 4, 9000, 1025
    trees, idx, vals, keep = two_trees_and_batches(capacity, k, batch, seed=73)
    tags = table(2, capacity, last=5)
    before = tags.copy()
    written_then_one_tree_refused(emu, CLUSTER, trees, capacity, k, idx, vals, keep, (0, 3, -1),
                                  tags, siblings)  # fmt: skip
    np.testing.assert_array_equal(tags, before)


@pytest.fixture
def tagged(monkeypatch, siblings):
    """The cuda backend's ops with every update on the cluster path's tagged claims (the leaves'
    parents from the table or not), on the emulated CPU device."""
    with jax.default_device(devices("emulated cpu")[0]):
        settings = {"BLOCK_MAX_BATCH": 0, "CLUSTER_MAX_BATCH": 2**40, "TAGGED_CLAIMS": True}
        for name, value in (settings | {"TAGGED_SIBLINGS": siblings}).items():
            monkeypatch.setattr(cuda, name, value)
        jax.clear_caches()  # the paths are read when a function is traced
        yield backends.tree_ops("cuda")
    jax.clear_caches()


def scanned_writes(write, tree, idx, vals, keep):
    """Each step's nodes of a jitted scan of ``write`` over the batches (one call site, called
    at every step)."""

    def body(t, batch):
        t = write(t, *batch)
        return t, t.nodes

    return jax.jit(lambda t: jax.lax.scan(body, t, (idx, vals, keep))[1])(tree)


def test_a_tagged_call_keeps_its_table_across_the_steps_of_a_scan(tagged):
    """Six steps of a jitted scan, each a batch of 512 over 40 leaves (every leaf claimed again
    at every step, by entries at other positions), K 16, 5000 leaves; then the same batches
    vmapped over two trees, and the jitted call called six times: the same bits as the
    reference at every step."""
    k, capacity, steps, batch = 16, 5000, 6, 512
    rng = np.random.default_rng(74)
    idx = rng.integers(0, 40, (steps, batch)).astype(np.int32)
    vals = rng.random((steps, batch)).astype(F32)
    keep = rng.random((steps, batch)) < 0.8
    tree = random_tree(capacity, k, seed=75)
    got = scanned_writes(tagged.write, tree, idx, vals, keep)
    want = scanned_writes(st.REFERENCE.write, tree, idx, vals, keep)
    np.testing.assert_array_equal(bits(got), bits(want))
    two = jax.tree.map(lambda x: jnp.stack([x, x[::-1]]), (idx, vals, keep))
    write = jax.vmap(tagged.write, in_axes=(None, 0, 0, 0))
    got = jax.jit(write)(tree, *(x[:, 0] for x in two)).nodes
    want = jax.vmap(st.REFERENCE.write, in_axes=(None, 0, 0, 0))(tree, *(x[:, 0] for x in two))
    np.testing.assert_array_equal(bits(got), bits(want.nodes))
    call, t, r = jax.jit(tagged.write), tree, tree
    for s in range(steps):
        t, r = call(t, idx[s], vals[s], keep[s]), st.REFERENCE.write(r, idx[s], vals[s], keep[s])
        np.testing.assert_array_equal(bits(t.nodes), bits(r.nodes), err_msg=f"call {s}")


def test_a_tagged_call_claims_in_its_table_not_in_its_workspace(tagged, siblings):
    """The tagged custom call (B 6, one entry per thread of the cluster) claims in its table:
    the winner slots of its workspace (its second result, from XLA, never cleared) are not
    written, where the untagged call's hold each leaf's last position. The only sign of the
    path through the call: a handler that dropped its table (claiming in the workspace, the
    same bits) failed no other test. The tagged call runs first, so that no buffer XLA hands it
    can hold the untagged call's claims."""
    k, capacity = 4, 3001
    tree = random_tree(capacity, k, seed=79)
    idx = jnp.asarray([7, 3000, 12, 7, 500, 1], jnp.int32)
    vals = jnp.asarray([0.5, 1.0, 2.0, 0.25, 3.0, 0.0], jnp.float32)
    last = {7: 3, 3000: 1, 12: 2, 500: 4, 1: 5}  # each leaf's last position in the batch
    attrs = {"branching": k, "capacity": capacity, "block_max_batch": 0, "narrow_max_nodes": 16,
             "cluster_max_batch": 2**40, "tagged_siblings": int(siblings),
             "cluster_blocks": 8, "sorted_runs": 0}  # fmt: skip
    out = (jax.ShapeDtypeStruct(tree.nodes.shape, jnp.float32),
           jax.ShapeDtypeStruct((capacity + 1,), jnp.int32))  # fmt: skip

    def claims(target):
        call = jax.ffi.ffi_call(target, out, input_output_aliases={0: 0})
        run = jax.jit(lambda n: call(n, idx, vals, jnp.ones(6, bool),
                                     **{a: np.int64(v) for a, v in attrs.items()}))  # fmt: skip
        nodes, work = run(tree.nodes)
        want = st.REFERENCE.write(tree, idx, vals, None).nodes
        np.testing.assert_array_equal(bits(nodes), bits(want), err_msg=target)
        return [int(np.asarray(work)[leaf]) for leaf in last]

    from drlhet.backends import cuda_ffi

    assert claims(cuda_ffi.tagged("drlhet_cuda_update")) != list(last.values())
    assert claims("drlhet_cuda_update") == list(last.values())


def test_a_negative_subnormal_priority_refuses_a_tagged_batch(tagged):
    """-1e-45, which the emulated kernels (denormals taken as zero on XLA's CPU threads) had
    compared as -0 and written: the batch is refused, as on a GPU."""
    tree = random_tree(100, 4, seed=80)
    for value in (-1e-45, -1.0):
        vals = jnp.asarray([1.0, value], jnp.float32)
        got = jax.jit(tagged.write)(tree, jnp.asarray([1, 2], jnp.int32), vals)
        np.testing.assert_array_equal(bits(got.nodes), bits(tree.nodes))


@pytest.mark.slow
def test_random_runs_of_tagged_updates_on_one_table_equal_the_oracle(emu):
    """40 random (K, capacity, trees, thread order), each five updates in a row on one table
    whose last tags start at 0, anywhere, or two short of the wrap: batches of 1 to 1024 over
    few or many leaves (duplicates across the cluster's blocks), kept and dropped entries, each
    update starting from the last one's tree. About a minute."""
    rng = np.random.default_rng(77)
    for case in range(40):
        k = int(rng.choice([2, 3, 4, 5, 8, 16, 17, 32, 64]))
        capacity, trees = int(rng.integers(1, 20000)), int(rng.integers(1, 4))
        emu.drlhet_emu_schedule(ctypes.c_int64(int(rng.integers(0, 1000))))
        tags = table(trees, capacity, int(rng.choice([0, rng.integers(1, TAG_MAX), TAG_MAX - 2])))
        siblings = bool(rng.integers(0, 2))
        nodes = np.stack([random_tree(capacity, k, seed=s + case).nodes for s in range(trees)])
        for step in range(5):
            batch = int(rng.integers(1, 1025))
            leaves = int(rng.choice([min(capacity, 8), capacity]))
            idx = rng.integers(0, leaves, (trees, batch)).astype(np.int32)
            vals = (rng.random((trees, batch)) * 3).astype(F32)
            keep = rng.random((trees, batch)) < 0.8
            got, bad, _, _ = emu_update(emu, nodes, capacity, k, idx, vals, keep, CLUSTER,
                                        tags=tags, siblings=siblings)  # fmt: skip
            assert not bad.any(), (case, step)
            for v in range(trees):
                want = oracle.write(nodes[v], capacity, k, idx[v], vals[v], keep[v])
                np.testing.assert_array_equal(bits(got[v]), bits(want), err_msg=f"{case} {v}")
            nodes = got
    emu.drlhet_emu_schedule(ctypes.c_int64(0))


def test_a_jax_that_refuses_the_stateful_handlers_costs_the_switch_not_the_backend(
    tagged, monkeypatch
):
    """Where registering the tagged updates fails (a jax whose FFI has no such stage, say), a
    tagged trace raises `BackendUnavailable` naming why; with the switch off the same update
    runs."""
    from drlhet.backends import BackendUnavailable, cuda_ffi

    def refuse(platform):
        raise ValueError(f"no instantiate stage on {platform}")

    monkeypatch.setattr(cuda_ffi, "_register_tagged", refuse)
    tree = random_tree(100, 4, seed=78)
    idx, vals = jnp.arange(8, dtype=jnp.int32), jnp.ones(8, jnp.float32)
    with pytest.raises(BackendUnavailable, match="tagged updates: no instantiate stage on cpu"):
        tagged.write(tree, idx, vals)
    monkeypatch.setattr(cuda, "TAGGED_CLAIMS", False)
    got = tagged.write(tree, idx, vals)
    np.testing.assert_array_equal(bits(got.nodes), bits(st.REFERENCE.write(tree, idx, vals).nodes))
