"""Bad input through the library API (review of the replay package): what the caller passes
is refused with one line naming it, and the state the caller holds is left as it was; plus the
sampling maths of PER (Schaul et al. 2016) checked through the buffer itself."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet import backends
from drlhet.replay import sum_tree as st
from drlhet.replay.delayed import make_delayed_updates
from drlhet.replay.nstep import make_nstep
from drlhet.replay.prioritized import ERR_INDEX, ERR_PRIORITY, make_prioritized_replay
from tests.replay.test_edge_cases import assert_same, load, snapshot

EXAMPLE = {"obs": jnp.zeros((3,), jnp.float32), "act": jnp.int32(0)}
REPLAY = [b.name for b in backends.providing("replay") if not b.modeled_only]


def rows(n: int, start: int = 0) -> dict:
    v = np.arange(start, start + n)
    return {"obs": np.stack([v, v + 1, v + 2], 1).astype(np.float32), "act": v.astype(np.int32)}


def filled(name: str = "jax", n: int = 5, **kw):
    fns = make_prioritized_replay(16, 4, alpha=0.6, branching=4, tree_ops=load(name), **kw)
    return fns, fns.add(fns.init(EXAMPLE), rows(n))


def drawn(fns, s, key=0) -> np.ndarray:
    return np.asarray(fns.sample(s, jax.random.key(key)).indices)


# ------------------------------------------------------------- priorities as the caller gives them
@pytest.mark.parametrize("name", REPLAY)
def test_a_positive_float64_priority_below_float32s_range_stays_drawable(name):
    # 1e-50 is 0 in float32: it was stored as 0, never drawn, against "any positive p stores
    # at least 2^-60"; -1e-50 became -0 and was accepted
    fns, s = filled(name)
    out = fns.update_priorities(s, jnp.arange(5), np.array([1e-50, 0, 0, 0, 0]))
    assert set(drawn(fns, out)) == {0}
    added = fns.add(fns.init(EXAMPLE), rows(2), np.array([1e-50, 0.0]))
    assert set(drawn(fns, added)) == {0}
    before = snapshot(s)
    with pytest.raises(ValueError, match="got -1e-50 at position 1"):
        fns.update_priorities(s, jnp.arange(2), np.array([1.0, -1e-50]))
    with pytest.raises(ValueError, match="got -1e-50 at position 0"):
        fns.add(s, rows(1), np.array([-1e-50]))
    assert_same(s, before)


def test_under_jit_with_x64_a_float64_priority_keeps_its_sign():
    fns, s = filled()
    update = jax.jit(fns.update_priorities)
    with jax.enable_x64(True):
        tiny = update(s, jnp.arange(2), jnp.array([1e-50, 0.0], jnp.float64))
        negative = update(s, jnp.arange(2), jnp.array([1.0, -1e-50], jnp.float64))
    assert int(tiny.error) == 0 and np.asarray(st.leaves(tiny.tree))[0] > 0
    assert int(negative.error) == ERR_PRIORITY  # was accepted as 0
    assert_same(negative._replace(error=s.error), snapshot(s))
    listed = fns.update_priorities(s, [0, 1], [2.0, 3.0])  # plain lists stay accepted
    assert float(listed.max_priority) == 3.0


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_a_priority_float32_cannot_hold_is_named_as_given():
    fns, s = filled()
    with pytest.raises(ValueError, match="got 1e\\+300 at position 0"):  # was "got inf"
        fns.update_priorities(s, jnp.arange(1), np.array([1e300]))


@pytest.mark.parametrize("bad", [np.array([1 + 1j, 2]), np.array(["1", "2"])])
def test_priorities_that_are_not_real_numbers_are_refused(bad):
    fns, s = filled()
    before = snapshot(s)
    with pytest.raises(ValueError, match="priorities must be real numbers"):
        fns.update_priorities(s, jnp.arange(2), bad)  # complex: the imaginary part was dropped
    with pytest.raises(ValueError, match="priorities must be real numbers"):
        fns.add(s, rows(2), bad)
    assert_same(s, before)


@pytest.mark.parametrize("name", REPLAY)
def test_a_donated_refused_add_leaves_the_state_as_it_was(name):
    # the batch's maximum (7) must not reach max_priority when the batch is refused
    fns, s = filled(name)
    before = snapshot(s)
    out = jax.jit(fns.add, donate_argnums=0)(s, rows(2, 5), jnp.float32([7.0, np.nan]))
    assert int(out.error) == ERR_PRIORITY
    assert_same(out._replace(error=jnp.zeros((), jnp.int32)), before)
    assert int(jax.jit(fns.sample)(out, jax.random.key(0)).error) == 0


def test_integers_the_storage_cannot_hold_are_refused_not_wrapped():
    # an int64 action of 2**40 was cast to int32 storage (0): stored as another action
    fns, s = filled()
    before = snapshot(s)
    big = {**rows(2, 5), "act": np.array([1, 2**40], np.int64)}
    with pytest.raises(ValueError, match=r"field \['act'\] holds 1099511627776, outside the int32"):
        fns.add(s, big)
    assert_same(s, before)
    neg = {**rows(2, 5), "act": np.array([-(2**31) - 1, 0], np.int64)}
    with pytest.raises(ValueError, match="holds -2147483649"):
        fns.add(s, neg)
    fits = {**rows(2, 5), "act": np.array([3, -(2**31)], np.int64)}  # within int32: taken
    assert np.asarray(fns.add(s, fits).storage["act"])[5:7].tolist() == [3, -(2**31)]


# ------------------------------------------------------------- the sampling maths
@pytest.mark.parametrize("name", REPLAY)
def test_the_buffers_sample_is_stratified_and_proportional(name):
    # the buffer's own targets (`sample_targets`) were never checked: i.i.d. targets passed
    fns = make_prioritized_replay(8, 8, alpha=1.0, branching=4, tree_ops=load(name))
    s = fns.add(fns.init(EXAMPLE), rows(8), np.ones(8, np.float32))
    for key in range(5):  # one draw in each eighth of the total: every slot once
        np.testing.assert_array_equal(np.sort(drawn(fns, s, key)), np.arange(8))
    iid = make_prioritized_replay(8, 8, alpha=1.0, branching=4, stratified=False)
    s_iid = iid.add(iid.init(EXAMPLE), rows(8), np.ones(8, np.float32))
    assert any(len(set(drawn(iid, s_iid, key))) < 8 for key in range(5))
    # stratified: slot i is drawn B * P(i) times, give or take one (P(i) = p_i / sum)
    big = make_prioritized_replay(8, 1000, alpha=1.0, branching=4, tree_ops=load(name))
    s = big.add(big.init(EXAMPLE), rows(4), np.float32([1, 2, 3, 4]))
    counts = np.bincount(drawn(big, s), minlength=4)
    assert np.all(np.abs(counts - 1000 * np.array([0.1, 0.2, 0.3, 0.4])) <= 1)


def test_the_trees_jitted_sample_of_an_empty_tree_gives_zero_probabilities():
    _, probs = jax.jit(st.sample, static_argnums=(2, 3))(st.init(5, 2), jax.random.key(0), 3)
    np.testing.assert_array_equal(probs, 0)  # was NaN


@pytest.mark.parametrize("targets", [jnp.ones((2, 1)), jnp.float32(1.0)])
def test_find_refuses_targets_that_are_not_a_vector(targets):
    tree = st.update(st.init(5, 2), jnp.arange(5), jnp.ones(5))
    with pytest.raises(ValueError, match="shape \\[B\\]"):
        st.find(tree, targets)


# ------------------------------------------------------------- the delayed-update queue
BAD_PUSHES = [
    (jnp.int32([0, 1]), jnp.float32([1.0, np.nan]), "got nan at position 1"),
    (jnp.int32([0, 1]), jnp.float32([-1.0, 1.0]), "got -1 at position 0"),
    (jnp.int32([0, 9]), jnp.float32([1.0, 1.0]), "index 9 outside the filled slots"),
    (np.int64([2**32 + 3, 1]), jnp.float32([1.0, 1.0]), "index 4294967299 outside"),
    (jnp.float32([0.0, 1.0]), jnp.float32([1.0, 1.0]), "integer dtype"),
    (jnp.int32([0, 1, 2]), jnp.float32([1.0, 1.0, 1.0]), "shape \\(2,\\)"),
    # p ** alpha above the tree's largest leaf: the buffer's alpha (it was checked with 0)
    (jnp.int32([0, 1]), jnp.float32([1e30, 1.0]), "1.00000002e\\+30 at position 0"),
]


@pytest.mark.parametrize("indices, priorities, match", BAD_PUSHES)
def test_a_bad_delayed_update_is_refused_when_pushed_and_the_queue_goes_on(
    indices, priorities, match
):
    # it was queued as given and failed k pushes later, blaming that push, and every push
    # after it: the queue was stuck behind it
    fns, s = filled()
    delayed = make_delayed_updates(fns, 1, 2)
    pending = delayed.init()
    before = snapshot((s, pending))
    stamps = jnp.zeros(np.shape(indices), jnp.int32)
    with pytest.raises(ValueError, match=match):
        delayed.push(s, pending, indices, stamps, priorities)
    assert_same((s, pending), before)
    s, pending = delayed.push(s, pending, jnp.int32([0, 1]), s.stamps[:2], jnp.float32([5, 5]))
    s, pending = delayed.push(s, pending, jnp.int32([2, 3]), s.stamps[2:4], jnp.float32([1, 1]))
    np.testing.assert_allclose(np.asarray(st.leaves(s.tree))[:2], 5.0**0.6, rtol=1e-6)


def test_a_bad_delayed_update_under_jit_is_refused_when_applied():
    fns, s = filled()
    delayed = make_delayed_updates(fns, 1, 2)
    push = jax.jit(delayed.push)
    s1, pending = push(s, delayed.init(), jnp.int32([0, 9]), s.stamps[:2], jnp.float32([3, 3]))
    s2, _ = push(s1, pending, jnp.int32([1, 2]), s.stamps[1:3], jnp.float32([1, 1]))
    assert int(s2.error) == ERR_INDEX
    assert_same(s2._replace(error=s.error), snapshot(s))
    with pytest.raises(ValueError, match="shape \\(2,\\)"):  # shapes: while tracing
        push(s, delayed.init(), jnp.int32([0]), jnp.int32([0]), jnp.float32([1]))


@pytest.mark.parametrize("delay, batch", [(1.5, 2), (-1, 2), (1, 0), (1, -1), (True, 2), (1, True)])
def test_a_delayed_queue_of_a_bad_size_is_refused(delay, batch):
    fns, _ = filled()
    with pytest.raises(ValueError, match="delay|batch_size"):
        make_delayed_updates(fns, delay, batch)


def test_a_push_of_another_size_is_refused_at_delay_0_as_at_delay_1():
    fns, s = filled()
    for delay in (0, 1):
        delayed = make_delayed_updates(fns, delay, 2)
        with pytest.raises(ValueError, match="shape \\(2,\\), got \\(3,\\)"):
            delayed.push(s, delayed.init(), jnp.int32([0, 1, 2]), None, jnp.ones(3))


# ------------------------------------------------------------- the buffer's arguments
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"alpha": "0.6"}, "alpha must be a finite number >= 0, got '0.6'"),
        ({"alpha": None}, "alpha must be a finite number >= 0, got None"),
        ({"stratified": "no"}, "stratified must be True or False, got 'no'"),
        ({"capacity": True}, "capacity must be an integer .* got True"),
        ({"batch_size": True}, "batch_size must be an integer >= 1, got True"),
        ({"tree_ops": "native"}, "tree_ops must be a TreeOps .* got str 'native'"),
    ],
)
def test_a_buffer_argument_of_the_wrong_kind_is_refused_naming_it(kwargs, match):
    args = {"capacity": 8, "batch_size": 4} | kwargs
    with pytest.raises(ValueError, match=match):
        make_prioritized_replay(**args)


# ------------------------------------------------------------- the n-step FIFO
NSTEP_EXAMPLE = {
    "obs": jnp.zeros((2,), jnp.float32),
    "action": jnp.int32(0),
    "reward": jnp.float32(0),
    "discount": jnp.float32(0),
    "next_obs": jnp.zeros((2,), jnp.float32),
}
OBS, ACT, REW, NO = jnp.zeros((4, 2)), jnp.zeros(4, jnp.int32), jnp.zeros(4), jnp.zeros(4, bool)
BAD_STEPS = [
    ((OBS, jnp.ones(4), REW, OBS, NO, NO), "action is float32, the FIFO holds int32"),
    ((OBS, ACT, REW, OBS, jnp.zeros(4), NO), "terminated is float32, the FIFO holds bool"),
    ((OBS, ACT, REW, OBS, NO, jnp.zeros(4, jnp.int32)), "truncated is int32"),
    ((jnp.zeros((3, 2)), ACT, REW, OBS, NO, NO), "obs has shape \\(3, 2\\), expected \\(4, 2\\)"),
    ((OBS, ACT, jnp.zeros((4, 1)), OBS, NO, NO), "reward has shape"),
    ((OBS, ACT, REW, jnp.zeros((4, 3)), NO, NO), "next_obs has shape"),
]


@pytest.mark.parametrize("step, match", BAD_STEPS)
def test_an_nstep_push_of_another_shape_or_kind_is_refused_naming_the_field(step, match):
    # a float action turned the int32 FIFO into float32 (a scan's carry then fails); an int
    # `terminated` went in as int; shapes failed inside concatenate with a TypeError
    fns = make_nstep(3, 0.9)
    fifo = fns.init(NSTEP_EXAMPLE, 4)
    before = snapshot(fifo)
    with pytest.raises(ValueError, match=match):
        fns.push(fifo, *step)
    with pytest.raises(ValueError, match=match):
        jax.jit(fns.push)(fifo, *step)
    assert_same(fifo, before)


def test_an_nstep_push_keeps_the_fifos_dtypes():
    fns = make_nstep(2, 0.9)
    fifo = fns.init({**NSTEP_EXAMPLE, "reward": 0.0}, 4)  # a Python float: float32
    out = fns.push(fifo, OBS.astype(jnp.float16), ACT.astype(jnp.int8), ACT, OBS, NO, NO)
    assert jax.tree.map(lambda x: x.dtype, out) == jax.tree.map(lambda x: x.dtype, fifo)
    with pytest.raises(ValueError, match="lacks reward"):
        fns.init({"obs": OBS[0], "action": ACT[0], "next_obs": OBS[0]}, 4)


@pytest.mark.parametrize(
    "name, kwargs, match",
    [
        ("native", {"branching": 300}, "the native backend supports K <= 256, got 300"),
        (
            "native",
            {"dtype": jnp.bfloat16},
            "the native backend supports float32 trees, got bfloat16",
        ),
        ("fpga", {"branching": 3}, r"the FPGA replay module supports K in \(4, .*\), got 3"),
        ("fpga", {"branching": 2}, r"the FPGA replay module supports K in \(4, .*\), got 2"),
    ],
)
def test_a_tree_the_backend_cannot_hold_is_refused_as_the_buffer_is_built(name, kwargs, match):
    # it was refused at `init`, and the FPGA's K 3 in words that listed K 2 as taken
    with pytest.raises(ValueError, match=f"^{match}$"):
        make_prioritized_replay(64, 4, tree_ops=load(name), **kwargs)
