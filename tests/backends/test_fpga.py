"""The FPGA replay module's C-simulation (backend ``fpga`` on a CPU device) against the
fixed-point reference (`drlhet.replay.fixed_point`), bit for bit: trees, sampled indices,
probabilities and IS weights, eagerly, under jit, vmap and scan, in a buffer and in training.
"""

from __future__ import annotations

import ctypes

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import buffer_trace
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from drlhet import backends
from drlhet.agents.dqn import DQNConfig
from drlhet.backends import base, fpga, rmm_spec
from drlhet.replay import fixed_point as fp
from drlhet.replay.prioritized import make_prioritized_replay
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run

BATCH = 32
# float32 priorities spanning many decades, with the format's edge cases: zero, below half a
# step, the saturating top, a subnormal
VALUES = st.floats(2.0**-23, 2.0**13, width=32) | st.sampled_from(
    [0.0, 1e-9, 2.0**-21, 4096.0, 1e-40]
)


@pytest.fixture(scope="module", autouse=True)
def module_loads():
    """The C-simulation must load wherever `make test` runs (hls4ml is a build dependency)."""
    backends.load("fpga")
    assert backends.get("fpga").numbers == backends.tree_ops("fpga").numbers == "fixed"


def assert_same(a, b) -> None:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize(
    "k,capacity",
    [
        (k, n)
        if k != 64 or n == 100_003
        else pytest.param(k, n, marks=pytest.mark.slow)  # K 64: 11 s each, 2-core VM
        for n in (12_288, 100_003, 1 << 20)
        for k in (4, 16, 64)
    ],
)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_the_c_simulation_equals_the_reference_bit_for_bit(k, capacity, data):
    ref = sim = fp.init(capacity, k)
    pool = data.draw(st.lists(st.integers(0, capacity - 1), min_size=4, max_size=40))
    for step in range(data.draw(st.integers(1, 4))):
        idx = data.draw(st.lists(st.sampled_from(pool), min_size=BATCH, max_size=BATCH))
        v = np.float32(data.draw(st.lists(VALUES, min_size=BATCH, max_size=BATCH)))
        keep = np.asarray(data.draw(st.lists(st.booleans(), min_size=BATCH, max_size=BATCH)))
        ref = fp.write(ref, np.asarray(idx), v, keep)
        sim = (fpga.write if step % 2 else jax.jit(fpga.write))(sim, np.asarray(idx), v, keep)
        assert_same(sim, ref)
        bits = jax.random.bits(jax.random.key(data.draw(st.integers(0, 99))), (64, 2), jnp.uint32)
        for stratified in (True, False):
            assert_same(fpga.draw(sim, bits, stratified), fp.draw(ref, bits, stratified))


def test_scan_and_vmap_equal_the_reference():
    n, k, b = 700, 8, 16
    keys = jax.random.split(jax.random.key(1), 8)
    idx = np.random.default_rng(2).integers(0, n, (8, b))
    v = np.random.default_rng(3).uniform(0.01, 5, (8, b)).astype(np.float32)
    start = fp.update(fp.init(n, k), np.arange(n), np.ones(n, np.float32))

    def scan(write, draw):
        def step(tree, xs):
            key, i, x = xs
            d = draw(tree, jax.random.bits(key, (b, 2), jnp.uint32))
            return write(tree, i, x), (d.indices, fp.probabilities(d))

        return jax.jit(lambda t: jax.lax.scan(step, t, (keys, idx, v)), donate_argnums=0)

    ref = scan(fp.write, fp.draw)(jax.tree.map(jnp.copy, start))
    sim = scan(fpga.write, fpga.draw)(jax.tree.map(jnp.copy, start))
    assert_same(sim, ref)
    # the reference's own calls jitted: eager, each of its ops compiles on its own
    trees = jax.jit(jax.vmap(lambda x: fp.update(fp.init(n, k), np.arange(n), x)))(
        np.random.default_rng(4).uniform(0, 2, (3, n)).astype(np.float32)
    )
    bits = jax.random.bits(jax.random.key(5), (3, b, 2), jnp.uint32)
    batched = jax.vmap(fpga.write)(trees, idx[:3], v[:3])
    drawn = jax.vmap(fpga.draw)(batched, bits)
    write, draw = jax.jit(fp.write), jax.jit(fp.draw)
    for j in range(3):
        one = jax.tree.map(lambda x, j=j: x[j], trees)
        ref_tree = write(one, idx[j], v[j])
        assert_same(jax.tree.map(lambda x, j=j: x[j], batched), ref_tree)
        assert_same(jax.tree.map(lambda x, j=j: x[j], drawn), draw(ref_tree, bits[j]))


def test_a_buffer_on_the_module_equals_the_buffer_on_the_reference():
    outs = [buffer_trace(ops) for ops in (backends.tree_ops("fpga"), fp.REFERENCE)]
    assert_same(outs[0], outs[1])
    weights = np.asarray(outs[0][1][-1].weights)
    assert weights.max() == 1 and weights.min() > 0  # IS weights, not zeros


def test_training_on_the_module_equals_training_on_the_reference(monkeypatch):
    ref = base.Backend("fixed-ref", (backends.CPU,), ("replay",), "-", lambda: fp.REFERENCE)
    monkeypatch.setitem(base._REGISTRY, ref.name, ref)
    cfg = dict(env="probe-two-step", steps=800, num_envs=4, warmup=200, batch_size=32)
    cfg.update(buffer_size=2_000, eval_every=400, eval_envs=4, sgd_steps=1, n_step=1)
    finals = []
    for backend in ("fpga", "fixed-ref"):
        states, rows = run(TrainConfig(backend=backend, dqn=DQNConfig(hidden=(8,)), **cfg))
        assert rows[-1]["backend"] == backend
        finals.append((states.agent.params, states.replay))
    assert_same(finals[0], finals[1])
    assert int(jnp.sum(finals[0][1].tree.saturated)) == 0


def test_sampling_frequencies_follow_the_quantized_priorities():
    rng = np.random.default_rng(3)
    n = 300
    v = (10.0 ** rng.uniform(-3, 1, n)).astype(np.float32)
    v[rng.random(n) < 0.1] = 0
    tree = fpga.write(fp.init(n, 16), np.arange(n), v)
    q = np.asarray(tree.leaves[:n]).astype(np.float64)
    bits = jax.random.bits(jax.random.key(7), (100, 1000, 2), jnp.uint32)
    draws = jax.jit(jax.vmap(lambda w: fpga.draw(tree, w, False).indices))(bits)
    counts = np.bincount(np.asarray(draws).ravel(), minlength=n)
    assert counts[q == 0].sum() == 0
    chi2 = stats.chisquare(counts[q > 0], q[q > 0] / q.sum() * counts.sum())
    assert chi2.pvalue > 0.01, chi2


def test_the_host_protocol_serves_the_same_tree():
    """`fpga.serve` (what a board's buffers get) equals the FFI path, command for command."""
    n, k = 1000, 16
    tree = fp.init(n, k)
    memory = tuple(np.zeros(np.shape(x), np.uint32) for x in (tree.leaves, tree.hi, tree.lo))
    rng = np.random.default_rng(0)
    for _ in range(3):
        idx = rng.integers(0, n, 64).astype(np.int32)
        v = rng.uniform(0, 10, 64).astype(np.float32)
        tree = fpga.write(tree, idx, v)
        cmd = np.array([1, 64, 0], np.uint32)
        inputs = np.concatenate([idx.astype(np.uint32), v.view(np.uint32)])
        out = np.zeros(1, np.uint32)
        assert fpga.serve(n, k, fp.DEFAULT_FRAC_BITS, memory, cmd, inputs, out) == 0
        assert_same(memory, (tree.leaves, tree.hi, tree.lo))
        bits = rng.integers(0, 2**32, (64, 2), dtype=np.uint64).astype(np.uint32)
        out = np.zeros(2 * 64 + 2, np.uint32)
        assert fpga.serve(n, k, fp.DEFAULT_FRAC_BITS, memory, np.uint32([2, 64, 1]), bits, out) == 0
        d = fpga.draw(tree, bits)
        np.testing.assert_array_equal(out[:64], np.asarray(d.indices))
        np.testing.assert_array_equal(out[64:128], np.asarray(d.values))
        np.testing.assert_array_equal(out[128:], [int(d.total.hi), int(d.total.lo)])
    lay = tree.layout
    slots = np.arange(lay.widths[1], dtype=np.uint32)  # read back level 1: the exact sums
    out = np.zeros(2 * slots.size, np.uint32)
    assert fpga.serve(n, k, 20, memory, np.uint32([3, slots.size, 1]), slots, out) == 0
    level_1 = slice(lay.offsets[1], lay.offsets[1] + lay.widths[1])
    np.testing.assert_array_equal(out[0::2], np.asarray(tree.hi[level_1]))
    np.testing.assert_array_equal(out[1::2], np.asarray(tree.lo[level_1]))
    assert out[1::2].any()
    assert fpga.serve(n, k, 20, memory, np.uint32([9, 1, 0]), inputs, out) == -1
    assert fpga.serve(n, 3, 20, memory, cmd, inputs, out) == -2


def test_bad_input_gets_the_buffers_clear_errors_and_changes_nothing():
    fns = make_prioritized_replay(64, 8, branching=16, tree_ops=backends.tree_ops("fpga"))
    s = fns.add(fns.init(jnp.zeros(2)), jnp.ones((10, 2)))
    for bad in (-1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="finite and >= 0"):
            fns.update_priorities(s, jnp.arange(2), jnp.float32([1.0, bad]))
        refused = jax.jit(fns.update_priorities)(s, jnp.arange(2), jnp.float32([1.0, bad]))
        assert_same(refused.tree, s.tree)
        assert int(refused.error) != 0
    with pytest.raises(ValueError, match="index 10 outside the filled slots"):
        fns.update_priorities(s, jnp.array([10]), jnp.float32([1.0]))
    empty = make_prioritized_replay(64, 8, tree_ops=backends.tree_ops("fpga"))
    with pytest.raises(ValueError, match="empty replay buffer"):
        empty.sample(empty.init(jnp.zeros(2)), jax.random.key(0))
    for k, match in ((2, "supports K in"), (3, "branching factor K 3")):
        with pytest.raises(ValueError, match=match):
            fpga.write(fp.init(64, k), np.arange(2), np.ones(2, np.float32))
    huge = fp.FixedTreeState(*(jnp.zeros(1, jnp.uint32),) * 3, jnp.int32(0), 1 << 32, 16, 20)
    with pytest.raises(ValueError, match="holds <= 1073741824 leaves"):
        fpga.draw(huge, jnp.zeros((1, 2), jnp.uint32))


def test_buffers_and_shapes_the_module_would_read_past_are_refused():
    """`serve` (the boards' stand-in) checked dtypes only: a sample of 4 into a 1-word ``out``
    wrote 9 words past it; `write` read B values from a ``values [1]`` and `draw` two words a
    draw from ``bits [B, 1]``. Now: refused, or broadcast as the reference does."""
    tree = fp.init(16, 4)
    memory = tuple(np.zeros(x.size, np.uint32) for x in (tree.leaves, tree.hi, tree.lo))
    cmd = np.array([2, 4, 0], np.uint32)  # sample B 4
    with pytest.raises(ValueError, match="out holds 1 words; op 2 of B 4 needs 10"):
        fpga.serve(16, 4, 20, memory, cmd, np.zeros(8, np.uint32), np.zeros(1, np.uint32))
    with pytest.raises(ValueError, match="leaves holds 8 words"):
        small = (np.zeros(8, np.uint32), *memory[1:])
        fpga.serve(16, 4, 20, small, cmd, np.zeros(8, np.uint32), np.zeros(10, np.uint32))
    idx, one = jnp.arange(8), jnp.ones(1, jnp.float32)
    got, want = fpga.write(tree, idx, one), fp.write(tree, idx, one)
    np.testing.assert_array_equal(got.leaves, want.leaves)
    with pytest.raises(ValueError, match=r"two words a draw\), got \(4, 1\)"):
        fpga.draw(got, jnp.zeros((4, 1), jnp.uint32))


def test_batches_of_another_rank_are_refused_outside_vmap():
    """``write`` took indices ``[2, 4]`` on one tree as one batch of 8 (the reference refuses
    it), and ``draw`` bits ``[2, 4, 2]`` failed inside the module ("tree buffers do not
    match"). Now both are refused naming the shape; under vmap they are [B] and [B, 2]."""
    tree = fp.update(fp.init(64, 4), np.arange(64), np.ones(64, np.float32))
    with pytest.raises(ValueError, match=r"indices must be \[B\].*got \(2, 4\)"):
        fpga.write(tree, jnp.zeros((2, 4), jnp.int32), jnp.ones((2, 4)))
    with pytest.raises(ValueError, match=r"bits must be \[B, 2\].*got \(2, 4, 2\)"):
        fpga.draw(tree, jnp.zeros((2, 4, 2), jnp.uint32))
    trees = jax.tree.map(lambda x: jnp.stack([x, x]), tree)
    drawn = jax.vmap(fpga.draw)(trees, jnp.zeros((2, 4, 2), jnp.uint32))
    assert drawn.indices.shape == (2, 4)


def test_serve_checks_sizes_for_every_build_the_module_takes():
    """`serve` sized the buffers from `fixed_point.init`, which refuses ``frac_bits`` past 31
    and capacities past 2^30: there it skipped the size checks and the module (which took up
    to 2^31 leaves and any ``frac_bits``) wrote past the caller's arrays. Now such a
    ``frac_bits`` is refused, such a capacity answered -2, and read-only buffers refused."""
    tree = fp.init(16, 4)
    memory = tuple(np.zeros(x.size, np.uint32) for x in (tree.leaves, tree.hi, tree.lo))
    cmd, inputs = np.uint32([1, 2, 0]), np.uint32([15, 15, 0, 0])
    for frac_bits in (40, -1):
        with pytest.raises(ValueError, match=f"frac_bits {frac_bits} outside"):
            fpga.serve(16, 4, frac_bits, memory, cmd, inputs, np.zeros(1, np.uint32))
    read = np.uint32([3, 1, 0])  # the root, one slot: in range of one-word arrays
    tiny = (np.zeros(1, np.uint32),) * 3
    out = np.zeros(2, np.uint32)
    assert fpga.serve((1 << 30) + 1, 64, 20, tiny, read, np.uint32([0]), out) == -2
    ptr = ctypes.POINTER(ctypes.c_uint32)
    words = (*tiny, read, np.uint32([0]), out)  # the module itself takes rmm_spec's capacities
    args = ((1 << 30) + 1, 64, 20, *(a.ctypes.data_as(ptr) for a in words))
    assert fpga._library().drlhet_rmm_serve(*args) == -2
    frozen = np.zeros(1, np.uint32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="must be writable"):
        fpga.serve(16, 4, 20, memory, cmd, inputs, frozen)
    assert not any(m.any() for m in memory)


def test_the_saturation_count_wraps_as_the_reference():
    """``saturated`` is int32 and wraps (`FixedTreeState`); the module's count wrapped by a
    signed overflow (undefined in C++), now by unsigned arithmetic."""
    tree = fp.init(16, 4)
    tree = fp.FixedTreeState(tree.leaves, tree.hi, tree.lo, jnp.int32(2**31 - 1), 16, 4, 20)
    v = np.float32([1e-9, 1e30])  # both clamped
    got, want = fpga.write(tree, np.arange(2), v), fp.write(tree, np.arange(2), v)
    assert int(got.saturated) == int(want.saturated) == -(2**31) + 1


@pytest.mark.parametrize("capacity, k, frac_bits", [(1000, 16, 20), (12_288, 4, 0), (5, 64, 31)])
def test_the_c_simulation_answers_the_info_op_with_its_build(capacity, k, frac_bits):
    """The protocol had no op reporting the build (``serve`` answered -1 to op 4): a board
    driver could not tell a bitstream of another K, capacity or F. Now the info op answers the
    magic, the nonce, the protocol version, K, capacity and F, and changes no node; an info op
    of B != 1 is refused, out untouched; an ``out`` too small for the answer is refused."""
    tree = fp.init(capacity, k, frac_bits)
    memory = tuple(np.zeros(np.shape(x), np.uint32) for x in (tree.leaves, tree.hi, tree.lo))
    out = np.full(rmm_spec.INFO_WORDS, 7, np.uint32)
    cmd, nonce = np.uint32([rmm_spec.INFO, 1, 0]), np.uint32([0xDEADBEEF])
    assert fpga.serve(capacity, k, frac_bits, memory, cmd, nonce, out) == 0
    version, magic = rmm_spec.PROTOCOL_VERSION, rmm_spec.INFO_MAGIC
    assert out.tolist() == [magic, 0xDEADBEEF, version, k, capacity, frac_bits]
    assert not any(m.any() for m in memory)
    for b in (0, 2):
        out[:] = 7
        bad = np.uint32([rmm_spec.INFO, b, 0])
        assert fpga.serve(capacity, k, frac_bits, memory, bad, np.zeros(2, np.uint32), out) == -1
        assert (out == 7).all()
    with pytest.raises(ValueError, match="out holds 2 words; op 4 of B 1 needs 6"):
        fpga.serve(capacity, k, frac_bits, memory, cmd, nonce, np.zeros(2, np.uint32))
