"""Prioritized replay buffer (Schaul et al., ICLR 2016) over a K-ary sum tree.

Storage is a ring buffer holding any pytree of transitions; the tree holds ``p_i ** alpha`` per
slot. This is the PRB of Zhang, Meng, Prasanna (TPDS 2023), with the semantics of
docs/design.md section 2:

* new transitions get the running maximum priority (or a caller-given one);
* ``sample`` is stratified by default and returns importance-sampling weights
  ``w_i = (size * P(i)) ** -beta`` normalised by the largest weight in the batch (times its
  reciprocal: the largest comes out 1 or the float32 just below);
* every slot carries an insertion stamp; ``update_priorities`` drops entries whose stamp no
  longer matches (the slot was overwritten after it was sampled), which makes delayed updates
  safe;
* bad values (negative, NaN, infinite or too large priorities, indices of unfilled slots, a
  ``beta`` outside [0, 1], sampling an empty buffer or one whose priorities are all 0) raise
  ``ValueError`` when called eagerly, the buffer unchanged. Under ``jit`` an update is refused
  whole, the buffer is left unchanged and a bit is set in ``state.error``; a refused sample
  returns zero IS weights and a bit in ``sample.error`` (see `raise_on_error`). Shapes, dtypes
  and structures are checked while tracing (``ValueError``). Empty batches (A = 0, B = 0) are
  no-ops. The representable range of priorities is `drlhet.replay.checks`'s.

The tree primitives are an argument (`drlhet.replay.sum_tree.TreeOps`; a backend provides
them, `drlhet.backends.tree_ops`), chosen statically: this package imports no backend. The code
around them is `drlhet.replay.buffer_ops`'s; a backend may run it in one call of its own each
(``TreeOps.weigh`` for the sample after its targets, ``TreeOps.weigh_key`` for the whole sample
with its targets drawn in the call from the key, bit for bit as `sample_targets` draws them, and
``TreeOps.update`` for the checked update).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.replay import buffer_ops, checks, sum_tree
from drlhet.replay.checks import ERR_BETA, ERR_EMPTY, ERR_INDEX, ERR_PRIORITY
from drlhet.replay.sum_tree import REFERENCE, SumTreeState, TreeOps

__all__ = [
    "PrioritizedReplayState",
    "PrioritizedSample",
    "ReplayFns",
    "make_prioritized_replay",
    "raise_on_error",
    "refusals",
    "sample_targets",
    "ERR_PRIORITY",
    "ERR_INDEX",
    "ERR_EMPTY",
    "ERR_BETA",
    "STAMP_MASK",
]

STAMP_MASK = 0x7FFFFFFF
"""Stamps count insertions modulo 2^31, so they stay >= 0 (-1 marks "no transition")."""
_MESSAGES = (
    (ERR_PRIORITY, "a negative, NaN, infinite or too large priority"),
    (ERR_INDEX, "an index outside the filled slots"),
    (ERR_EMPTY, "a sample of an empty buffer or of all-zero priorities"),
    (ERR_BETA, "a beta outside [0, 1]"),
)


class PrioritizedReplayState(NamedTuple):
    """Buffer state (a pytree of arrays; donate it to jitted steps).

    Attributes:
      storage: pytree of ``[N, ...]`` arrays, the ring buffer.
      tree: sum tree over ``p ** alpha``, one leaf per slot (a `SumTreeState`, or the
        backend's own tree, e.g. `drlhet.replay.fixed_point.FixedTreeState`).
      stamps: ``[N]`` int32 insertion stamp of each slot, in ``[0, 2^31)``; -1 when empty.
      position: ``[]`` int32 next slot to write.
      size: ``[]`` int32 filled slots.
      inserted: ``[]`` int32 transitions ever inserted, modulo 2^31; the next stamp.
      max_priority: ``[]`` running maximum of raw priorities (before ``alpha``).
      error: ``[]`` int32 bit mask of refused operations (``ERR_*``); 0 when all went well.
    """

    storage: Any
    tree: Any
    stamps: jax.Array
    position: jax.Array
    size: jax.Array
    inserted: jax.Array
    max_priority: jax.Array
    error: jax.Array


class PrioritizedSample(NamedTuple):
    """A sampled batch.

    Attributes:
      indices: ``[B]`` int32 slots.
      stamps: ``[B]`` int32 insertion stamps of those slots (pass back to `update_priorities`).
      data: pytree of ``[B, ...]`` transitions.
      probabilities: ``[B]`` sampling probabilities ``P(i)``.
      weights: ``[B]`` importance-sampling weights, their largest 1 to within one float32
        ulp (times the reciprocal of the batch's largest raw weight: 0.99999994 may come out;
        `drlhet.replay.buffer_ops`); all 0 when the sample was refused.
      error: ``[]`` int32 bit mask (``ERR_EMPTY``, ``ERR_BETA``) of why the sample was refused
        under ``jit``; 0 when it was not. None where a sampler does not report it.
    """

    indices: jax.Array
    stamps: jax.Array
    data: Any
    probabilities: jax.Array
    weights: jax.Array
    error: jax.Array | None = None


class ReplayFns(NamedTuple):
    """Pure functions of a prioritized replay buffer.

    Attributes:
      init: ``(example_transition) -> state``; the example is one unbatched transition.
      add: ``(state, transitions [A, ...], priorities [A] | None) -> state``.
      sample: ``(state, key, beta=0.4) -> PrioritizedSample``.
      update_priorities: ``(state, indices [B], priorities [B], stamps [B] | None) -> state``;
        priorities are raw (e.g. ``|TD| + eps``); duplicate indices: the last occurrence wins.
      check_priorities: ``(priorities [B]) -> None``: eagerly raises the ``ValueError``
        `update_priorities` would for these values (negative, NaN, infinite, or above the
        tree's largest leaf once raised to alpha); under ``jit`` does nothing. None: a buffer
        without priorities (uniform replay).
    """

    init: Any
    add: Any
    sample: Any
    update_priorities: Any
    check_priorities: Any = None


def refusals(err: int) -> list[str]:
    """What the error bits ``err`` (``state.error``, ``sample.error``) say was refused, in
    words, one item a bit set (an unknown bit named by its value)."""
    known = sum(bit for bit, _ in _MESSAGES)
    words = [m for bit, m in _MESSAGES if err & bit]
    return words + ([f"unknown error bits {err & ~known}"] if err & ~known else [])


def raise_on_error(state: PrioritizedReplayState | PrioritizedSample) -> None:
    """Raises ``ValueError`` if a jitted operation on ``state`` (or the sample) was refused
    (a host sync). A batch of states (``error`` ``[S]``: `vmap`, a run's seeds) names the
    first lane whose operation was refused and how many were."""
    errors = np.zeros((), np.int32) if state.error is None else np.asarray(state.error)
    bad = np.flatnonzero(errors.reshape(-1))
    if bad.size == 0:
        return
    err = int(errors.reshape(-1)[bad[0]])
    where = f" in lane {int(bad[0])} ({bad.size} of {errors.size} lanes)" if errors.ndim else ""
    raise ValueError(
        f"refused replay operation(s){where}: {', '.join(refusals(err))} (error={err})"
    )


class _Spec(NamedTuple):
    """The static configuration the buffer's functions close over."""

    capacity: int
    batch_size: int
    alpha: float
    branching: int
    stratified: bool
    ops: TreeOps
    dtype: Any


def make_prioritized_replay(
    capacity: int,
    batch_size: int,
    *,
    alpha: float = 0.6,
    branching: int = 16,
    stratified: bool = True,
    tree_ops: TreeOps = REFERENCE,
    dtype=jnp.float32,
) -> ReplayFns:
    """Builds a prioritized replay buffer.

    Args:
      capacity: N, slots in the ring buffer (any integer >= 1).
      batch_size: B, transitions per `sample` (static).
      alpha: priority exponent; 0 gives uniform replay over non-zero priorities.
      branching: K of the sum tree (16 fills a 64-byte cache line with float32).
      stratified: stratified (default) or i.i.d. sampling.
      tree_ops: the tree primitives (default: the pure-JAX reference; a backend's come from
        `drlhet.backends.tree_ops`).
      dtype: float dtype of the tree.

    Returns:
      A `ReplayFns` of pure, jittable functions.

    Raises:
      ValueError: a bad size, K, alpha or dtype.
    """
    if not _integer(capacity) or not 1 <= capacity <= checks.MAX_CAPACITY:
        raise ValueError(f"capacity must be an integer in [1, 2^31 - 1], got {capacity!r}")
    if not _integer(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if not _integer(branching) or branching < 2:
        raise ValueError(f"branching factor K must be an integer >= 2, got {branching!r}")
    if not _real(alpha) or not (np.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
    if not isinstance(stratified, bool | np.bool_):
        raise ValueError(f"stratified must be True or False, got {stratified!r}")
    if not isinstance(tree_ops, TreeOps):
        raise ValueError(
            f"tree_ops must be a TreeOps (drlhet.tree_ops(name) gives a backend's), "
            f"got {type(tree_ops).__name__} {tree_ops!r}"
        )
    checks.check_tree_dtype(dtype)
    if tree_ops.holds is not None and (why := tree_ops.holds(capacity, branching, dtype)):
        raise ValueError(why)
    spec = _Spec(int(capacity), int(batch_size), alpha, int(branching), stratified, tree_ops, dtype)
    return ReplayFns(
        functools.partial(_init, spec),
        functools.partial(_add, spec),
        functools.partial(_sample, spec),
        functools.partial(_update_priorities, spec),
        functools.partial(_check_priorities, spec),
    )


def _check_priorities(spec: _Spec, priorities: Any) -> None:
    """`ReplayFns.check_priorities`: the update's own check of the values (eager only)."""
    given = priorities if isinstance(priorities, jax.Array) else np.asarray(priorities)
    if checks.concrete(given):
        checks.leaf_values(given, spec.alpha, spec.dtype, given.shape)


def _integer(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def _real(x: Any) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


def _init(spec: _Spec, example_transition: Any) -> PrioritizedReplayState:
    """``(example_transition) -> state``: an empty buffer (see `ReplayFns.init`)."""
    storage = jax.tree.map(
        lambda x: jnp.zeros((spec.capacity,) + jnp.shape(x), jnp.asarray(x).dtype),
        example_transition,
    )
    return PrioritizedReplayState(
        storage=storage,
        tree=spec.ops.init(spec.capacity, spec.branching, spec.dtype),
        stamps=jnp.full((spec.capacity,), -1, jnp.int32),
        position=jnp.zeros((), jnp.int32),
        size=jnp.zeros((), jnp.int32),
        inserted=jnp.zeros((), jnp.int32),
        max_priority=jnp.ones((), spec.dtype),
        error=jnp.zeros((), jnp.int32),
    )


def _add(
    spec: _Spec,
    state: PrioritizedReplayState,
    transitions: Any,
    priorities: jax.Array | None = None,
) -> PrioritizedReplayState:
    """Writes ``transitions`` ``[A, ...]`` at the ring position with ``priorities`` ``[A]``
    (default: the running maximum); a batch with an invalid priority is refused whole, a batch
    of A = 0 is a no-op. Fields must match the storage's trailing shapes and dtypes."""
    n_add = checks.batch_size_of(state.storage, transitions)
    checks.check_add_size(n_add, spec.capacity)
    if priorities is None:
        raw = jnp.broadcast_to(state.max_priority, (n_add,))
        values, _ = checks.leaf_values(raw, spec.alpha, spec.dtype, (n_add,))
        ok = jnp.bool_(True)  # the running maximum was accepted before
    else:
        values, ok = checks.leaf_values(priorities, spec.alpha, spec.dtype, (n_add,))
        raw = jnp.asarray(priorities, spec.dtype)
    if n_add == 0:
        return state
    slots = (state.position + jnp.arange(n_add, dtype=jnp.int32)) % spec.capacity
    dest = jnp.where(ok, slots, spec.capacity)  # out of range -> dropped
    storage = jax.tree.map(
        lambda buf, x: buf.at[dest].set(jnp.asarray(x, buf.dtype), mode="drop"),
        state.storage,
        transitions,
    )
    new_stamps = (state.inserted + jnp.arange(n_add, dtype=jnp.int32)) & STAMP_MASK
    stamps = state.stamps.at[dest].set(new_stamps, mode="drop")
    tree = spec.ops.write(state.tree, slots, values, jnp.broadcast_to(ok, (n_add,)))
    n = jnp.where(ok, n_add, 0).astype(jnp.int32)
    return PrioritizedReplayState(
        storage=storage,
        tree=tree,
        stamps=stamps,
        position=(state.position + n) % spec.capacity,
        size=jnp.minimum(state.size + n, spec.capacity),
        inserted=(state.inserted + n) & STAMP_MASK,
        max_priority=jnp.where(
            ok, jnp.maximum(state.max_priority, jnp.max(raw)), state.max_priority
        ),
        error=state.error | jnp.where(ok, 0, ERR_PRIORITY),
    )


def _sample(
    spec: _Spec, state: PrioritizedReplayState, key: jax.Array, beta: float = 0.4
) -> PrioritizedSample:
    """Draws ``batch_size`` slots with ``P(i) = p_i^alpha / total`` and their IS weights
    (``beta`` in [0, 1]). Refused (eagerly ``ValueError``; under ``jit`` zero weights and a bit
    in ``error``): an empty buffer, all priorities 0, a bad ``beta``."""
    checks.check_beta(beta)  # eagerly raises on a bad beta (under jit: ERR_BETA)
    if checks.concrete(state.size) and int(state.size) == 0:
        raise ValueError("cannot sample from an empty replay buffer (size 0)")
    if spec.ops.draw is not None:  # a tree that draws on its own (fixed point)
        indices, probs = spec.ops.draw(state.tree, key, spec.batch_size, spec.stratified)
        probs = probs.astype(spec.dtype)
        weights, error = buffer_ops.is_weights(probs, state.size, beta)
    else:
        indices, probs, weights, error = _weigh(spec, state, key, beta)
    if checks.concrete(error) and int(error) & ERR_EMPTY:
        raise ValueError(
            f"cannot sample: every priority of the {int(state.size)} stored transitions is 0"
        )
    data = jax.tree.map(lambda buf: buf[indices], state.storage)
    return PrioritizedSample(indices, state.stamps[indices], data, probs, weights, error)


def sample_targets(
    key: jax.Array, total: jax.Array, batch_size: int, stratified: bool = True, dtype=jnp.float32
) -> jax.Array:
    """``[B]`` prefix-sum targets in ``[0, total)`` drawn from ``key``: stratified (target i in
    the i-th ``1/B`` of the total) or i.i.d. What a backend that draws the targets inside its own
    sample call (`TreeOps.weigh_key`) reproduces bit for bit."""
    uniform = jax.random.uniform(key, (batch_size,), dtype)
    if stratified:
        return (jnp.arange(batch_size, dtype=dtype) + uniform) * (total / batch_size)
    return uniform * total


def _weigh(spec: _Spec, state: PrioritizedReplayState, key, beta):
    """``(indices, probabilities, weights, error)`` of a float tree: the backend's whole sample
    with its targets drawn inside (``weigh_key``), else its sample after the buffer's targets
    (``weigh``), else `buffer_ops.weigh` over ``find``; each of the first two may decline (None
    at trace time: a key it cannot draw from, a batch it leaves to the next)."""
    beta_f = jnp.asarray(beta, spec.dtype)
    drawn = None
    if spec.ops.weigh_key is not None:
        b, strat = spec.batch_size, spec.stratified
        drawn = spec.ops.weigh_key(state.tree, key, state.size, beta_f, b, strat)
    if drawn is not None:
        return drawn
    if spec.ops.find is None and spec.ops.weigh is None:
        raise ValueError("the tree primitives have neither `find` nor `draw`")
    targets = _targets(spec, state.tree, key)
    if spec.ops.weigh is not None:
        drawn = spec.ops.weigh(state.tree, targets, state.size, beta_f)
    if drawn is not None:
        return drawn
    if spec.ops.find is None:
        raise ValueError(f"`weigh` declines a batch of {spec.batch_size} and there is no `find`")
    return buffer_ops.weigh(spec.ops.find, state.tree, targets, state.size, beta)


def _targets(spec: _Spec, tree: SumTreeState, key: jax.Array) -> jax.Array:
    """The sample's ``[B]`` targets (`sample_targets`) from the tree's total."""
    return sample_targets(key, sum_tree.total(tree), spec.batch_size, spec.stratified, spec.dtype)


def _update_priorities(
    spec: _Spec,
    state: PrioritizedReplayState,
    indices: jax.Array,
    priorities: jax.Array,
    stamps: jax.Array | None = None,
) -> PrioritizedReplayState:
    """Sets the raw priorities of ``indices`` ``[B]`` (integers; last duplicate wins); entries
    whose ``stamps`` ``[B]`` (integers) no longer match their slot are dropped. A batch with a
    bad index or priority is refused whole; B = 0 is a no-op."""
    idx, _ = checks.indices_in_range(indices, state.size)  # eager: raises on a bad index
    b = idx.shape[0]
    values, ok = checks.leaf_values(priorities, spec.alpha, spec.dtype, (b,))  # eager: raises
    raw = jnp.asarray(priorities, spec.dtype)
    if not checks.concrete(priorities) and priorities.dtype != raw.dtype:  # traced, say float64:
        raw = jnp.where(ok, raw, jnp.nan)  # a sign the cast loses (-1e-50 is -0 in float32)
    keep = jnp.ones((b,), bool)
    if stamps is not None:
        want, fits = checks.int32_or_never(stamps, (b,), "stamps")
        keep = fits & (state.stamps[jnp.clip(idx, 0, spec.capacity - 1)] == want)
    if b == 0:
        return state
    args = (state.tree, idx, raw, values, keep, state.size, state.max_priority, state.error)
    if spec.ops.update is not None:  # the backend's own, in one call
        tree, max_priority, error = spec.ops.update(*args)
    else:
        tree, max_priority, error = buffer_ops.update(spec.ops.write, *args)
    return state._replace(tree=tree, max_priority=max_priority, error=error)
