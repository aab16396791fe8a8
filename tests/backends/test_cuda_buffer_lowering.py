"""The CUDA backend's buffer calls (test_cuda_buffer.py), on every machine with nvcc: what the
buffer built on the cuda ops asks of XLA. Its sample and its checked update lower to one custom
call each, the library's settings among the calls' attributes; the targets are drawn in the
sample call only where they equal XLA's; above `cuda.OWN_SAMPLE_MAX_BATCH` the sample is XLA's
code around `find`; the spread sample's workspace and block size, as traced.
"""

from __future__ import annotations

import re
import shutil

import jax
import jax.numpy as jnp
import pytest
from conformance import random_tree
from test_cuda_buffer import cuda_ops

from drlhet.backends import cuda
from drlhet.replay import sum_tree as st
from drlhet.replay.prioritized import make_prioritized_replay

NO_NVCC = "missing library: the CUDA toolkit (nvcc is not on PATH)"


def lowered(fn, *args) -> str:
    if shutil.which("nvcc") is None:
        pytest.skip(NO_NVCC)
    return jax.jit(fn).lower(*args).as_text()


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
