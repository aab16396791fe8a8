"""The replay-primitive contract, for every replay backend in the registry.

Each backend's tree primitives (`drlhet.replay.sum_tree.TreeOps`), the pure-JAX reference's
included, must equal a NumPy restatement of the rules (`oracle`) bit for bit: ``find`` on any
tree and target, ``write`` with duplicates (the last kept one wins) and dropped entries, under
``jit``, ``vmap`` (against one call per tree) and ``lax.scan``, in place when the tree is
donated. Every other backend must also equal the reference itself, and so must a buffer and a
whole training run built on it.

The backends come from the registry, so a new one is tested as soon as its module exists. A
backend that does not load here is skipped with its reason, unless this machine must run it:
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest

from drlhet import backends
from drlhet.agents.dqn import DQNConfig
from drlhet.replay import sum_tree as st
from drlhet.replay.delayed import make_delayed_updates
from drlhet.replay.prioritized import make_prioritized_replay
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run

# Backends that must load on every machine that runs `make test` (a failure, never a skip).
MUST_LOAD = ("jax", "native")

# float trees here; fixed-point trees against their own reference (test_fpga.py)
REPLAY = [
    b.name for b in backends.providing("replay") if not b.modeled_only and b.numbers == "float"
]
OTHERS = [name for name in REPLAY if name != backends.reference()]
CASES = [(2, 1000), (3, 100), (4, 1000), (16, 5000), (64, 5000), (16, 1), (3, 7)]


def load_or_skip(name: str) -> st.TreeOps:
    """The backend's tree primitives; a backend in `MUST_LOAD` that cannot load fails, any
    other skips with the registry's reason (the library or device it lacks here)."""
    try:
        return backends.tree_ops(name)
    except backends.BackendUnavailable as e:
        if name in MUST_LOAD:
            pytest.fail(f"backend {name!r} must load here: {e}")
        needs = backends.get(name).needs  # the library or device, as the registry names it
        pytest.skip(f"missing library or device for backend {name!r}: {needs} ({e})")


@pytest.fixture(params=REPLAY)
def ops(request) -> st.TreeOps:
    """The tree primitives of one backend (skipped with the reason when it cannot load)."""
    return load_or_skip(request.param)


@pytest.fixture(params=OTHERS)
def other(request) -> str:
    """A backend other than the reference (skipped like `ops` when it cannot load)."""
    load_or_skip(request.param)
    return request.param


def random_tree(capacity, k, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.random(capacity).astype(np.float32)
    p[rng.random(capacity) < 0.3] = 0
    p[0] = max(p[0], 0.1)
    return st.update(st.init(capacity, k), np.arange(capacity), p)


def random_updates(capacity, n, seed):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, capacity, n).astype(np.int32)
    idx[n // 2 :: 7] = idx[0]  # duplicates
    vals = (rng.random(n) * rng.choice([0, 1, 1e-3, 100], n)).astype(np.float32)
    return jnp.asarray(idx), jnp.asarray(vals)


def test_the_suite_covers_the_backends_that_must_load():
    assert set(MUST_LOAD) <= set(REPLAY)


@pytest.mark.parametrize("k, capacity", CASES)
def test_find_matches_reference_exactly(ops, k, capacity):
    tree = random_tree(capacity, k, seed=k)
    total = float(st.total(tree))
    targets = (np.random.default_rng(1).random(513) * total).astype(np.float32)
    targets[:3] = [0, np.nextafter(np.float32(total), 0), total]
    got = jax.jit(ops.find)(tree, targets)
    want = oracle.descend(tree.nodes, capacity, k, targets)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("capacity", [8, 64])
def test_find_at_prefix_boundaries_never_takes_a_zero(ops, capacity):
    # targets exactly on prefix sums, after leading and between zero leaves: the child whose
    # interval starts there is taken, never a zero-priority one
    k = 8
    p = np.zeros(capacity, np.float32)
    p[2::5], p[4::7] = 1.0, 0.5
    tree = st.update(st.init(capacity, k), np.arange(capacity), p)
    lay = st.layout(capacity, k)
    prefixes = np.cumsum(
        np.asarray(tree.nodes)[lay.offsets[1] : lay.offsets[1] + k], dtype=np.float32
    )
    targets = np.concatenate([[0.0], prefixes[:-1], np.nextafter(prefixes, 0)]).astype(np.float32)
    got = jax.jit(ops.find)(tree, targets)
    for g, w in zip(got, oracle.descend(tree.nodes, capacity, k, targets), strict=True):
        np.testing.assert_array_equal(g, w)
    assert np.all(p[np.asarray(got[0])] > 0)


@pytest.mark.parametrize("k, capacity", CASES)
def test_write_matches_reference_bitwise(ops, k, capacity):
    tree = random_tree(capacity, k, seed=k + 1)
    want = np.asarray(tree.nodes)
    for step in range(4):
        idx, vals = random_updates(capacity, 300, seed=step)
        keep = jnp.asarray(np.random.default_rng(step).random(300) < 0.9)
        tree = jax.jit(ops.write)(tree, idx, vals, keep)
        want = oracle.write(want, capacity, k, idx, vals, keep)
        np.testing.assert_array_equal(tree.nodes, want)


def test_last_kept_duplicate_wins(ops):
    tree = st.init(10, 3)
    idx = jnp.asarray([4, 4, 7, 4, 7], jnp.int32)
    vals = jnp.asarray([1.0, 2.0, 3.0, 5.0, 9.0], jnp.float32)
    keep = jnp.asarray([True, True, True, True, False])
    leaves = np.asarray(st.leaves(jax.jit(ops.write)(tree, idx, vals, keep)))
    assert leaves[4] == 5.0 and leaves[7] == 3.0 and leaves.sum() == 8.0


def test_vmap_and_scan_match_one_call_per_tree(ops):
    k, capacity, b = 4, 300, 64
    trees = [random_tree(capacity, k, seed=s) for s in range(3)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *trees)
    targets = jnp.asarray(np.random.default_rng(0).random((3, b)) * 10, jnp.float32)
    got = jax.vmap(ops.find)(stacked, targets)
    for i, tree in enumerate(trees):
        for g, w in zip(got, oracle.descend(tree.nodes, capacity, k, targets[i]), strict=True):
            np.testing.assert_array_equal(g[i], w)
    idx = jnp.asarray(np.random.default_rng(1).integers(0, capacity, (3, b)), jnp.int32)
    vals = jnp.asarray(np.random.default_rng(2).random((3, b)), jnp.float32)
    written = jax.vmap(ops.write)(stacked, idx, vals).nodes
    for i, tree in enumerate(trees):
        want = oracle.write(tree.nodes, capacity, k, idx[i], vals[i])
        np.testing.assert_array_equal(written[i], want)

    def body(t, kk):
        k1, k2 = jax.random.split(kk)
        i, v, _ = ops.find(t, jax.random.uniform(k1, (b,)) * st.total(t))
        return ops.write(t, i, jax.random.uniform(k2, (b,)) * v + 1e-3), i

    keys = jax.random.split(jax.random.key(3), 20)
    scanned, drawn = jax.jit(lambda t: jax.lax.scan(body, t, keys), donate_argnums=0)(trees[0])
    tree, step = random_tree(capacity, k, seed=0), jax.jit(body)
    for n, kk in enumerate(keys):  # the same steps, one call each, nothing donated
        tree, i = step(tree, kk)
        np.testing.assert_array_equal(drawn[n], i)
    np.testing.assert_array_equal(scanned.nodes, tree.nodes)


@pytest.mark.parametrize("k", [0, 2])
def test_a_learner_step_does_not_copy_the_tree(ops, k):
    # sample (reads the tree) then a delayed update (writes it in place): unless the write is
    # ordered after the reads, XLA copies the whole tree every step (see after_sample)
    capacity, batch = 1 << 12, 8
    replay = make_prioritized_replay(capacity, batch, tree_ops=ops)
    delayed = make_delayed_updates(replay, k, batch)
    rep = replay.add(replay.init({"x": jnp.float32(0)}), {"x": jnp.zeros(capacity)})

    def step(carry, key):
        rep, pending = carry
        b = replay.sample(rep, key)
        rep, pending = delayed.push(rep, pending, b.indices, b.stamps, b.probabilities * 2 + 1)
        return (rep, pending), b.indices

    scan = jax.jit(lambda carry, keys: jax.lax.scan(step, carry, keys), donate_argnums=0)
    keys = jax.random.split(jax.random.key(0), 6)
    hlo = scan.lower((rep, delayed.init()), keys).compile().as_text()
    tree = f"f32[{rep.tree.nodes.shape[0]}]"
    copies = [line for line in hlo.splitlines() if f"= {tree}" in line and " copy(" in line]
    assert not copies, copies[:2]
    (rep, _), drawn = scan((rep, delayed.init()), keys)
    # the updates of the first 6 - k steps were applied (priorities > 1), and no others
    changed = set(np.flatnonzero(np.asarray(st.leaves(rep.tree)) != 1.0).tolist())
    assert changed == set(np.asarray(drawn[: 6 - k]).ravel().tolist())


def buffer_trace(tree_ops: st.TreeOps):
    """A jitted buffer on ``tree_ops``: 6 rounds of add, sample, update (with stamps).
    Returns ``(final state, [samples])``; any backend's trace must equal its reference's."""
    example = {"obs": jnp.zeros(3), "act": jnp.int32(0)}
    fns = make_prioritized_replay(50, 16, branching=4, tree_ops=tree_ops)
    add, upd, sample = jax.jit(fns.add), jax.jit(fns.update_priorities), jax.jit(fns.sample)
    s, trace = fns.init(example), []
    for i in range(6):
        s = add(s, {"obs": jnp.full((12, 3), i, jnp.float32), "act": jnp.arange(12) + 12 * i})
        b = sample(s, jax.random.key(i))
        trace.append(b)
        s = upd(s, b.indices, jnp.abs(b.data["obs"][:, 0] - 2.5) + 0.1, b.stamps)
    return s, trace


def refusal_trace(tree_ops: st.TreeOps):
    """A jitted buffer on ``tree_ops`` given bad values: a beta outside [0, 1], an index at the
    first unfilled slot, a NaN, a too large and a negative priority, stale stamps, then good
    rounds. Every refusal must leave the same state and error bits as the reference's."""
    fns = make_prioritized_replay(40, 16, branching=3, tree_ops=tree_ops)
    add, upd, sample = jax.jit(fns.add), jax.jit(fns.update_priorities), jax.jit(fns.sample)
    s = add(fns.init({"x": jnp.float32(0)}), {"x": jnp.arange(30, dtype=jnp.float32)})
    trace = [sample(s, jax.random.key(0), 1.5)]  # refused: zero weights, ERR_BETA
    good = trace[0]
    for bad in ("index", "nan", "huge", "negative", "stale", None):
        idx, pr, stamps = good.indices, good.data["x"] + 1, good.stamps
        if bad == "index":
            idx = idx.at[3].set(30)  # size 30: the first unfilled slot
        elif bad in ("nan", "huge", "negative"):
            pr = pr.at[5].set({"nan": jnp.nan, "huge": 2.0**60, "negative": -1.0}[bad])
        elif bad == "stale":
            stamps = stamps.at[::2].add(1)
        s = upd(s, idx, pr, stamps)
        trace.append((s.tree, s.max_priority, s.error))
        good = sample(s, jax.random.key(len(trace)), 0.5)
        trace.append(good)
    return s, trace


def test_refusals_under_jit_equal_the_reference(other):
    outs = [refusal_trace(ops) for ops in (backends.tree_ops(other), st.REFERENCE)]
    # each refusal happened (the sample's bits are its own, the updates' the state's)
    assert int(outs[1][1][0].error) == 8 and int(outs[1][0].error) == 3
    for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_prioritized_buffer_equals_the_reference(other):
    outs = [buffer_trace(ops) for ops in (backends.tree_ops(other), st.REFERENCE)]
    for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_training_equals_the_reference(other):
    base = dict(env="probe-two-step", steps=800, num_envs=4, warmup=200, batch_size=32)
    base.update(buffer_size=2_000, eval_every=400, eval_envs=4, sgd_steps=1, n_step=1)
    finals = []
    for backend in (other, backends.reference()):
        cfg = TrainConfig(backend=backend, dqn=DQNConfig(hidden=(8,)), **base)
        states, rows = run(cfg)
        assert rows[-1]["backend"] == backend
        finals.append(states.agent.params)
    for a, b in zip(jax.tree.leaves(finals[0]), jax.tree.leaves(finals[1]), strict=True):
        np.testing.assert_array_equal(a, b)
