"""Prioritized replay buffer (Schaul et al., ICLR 2016) over a K-ary sum tree.

Storage is a ring buffer holding any pytree of transitions; the tree holds ``p_i ** alpha`` per
slot. This is the PRB of Zhang, Meng, Prasanna (TPDS 2023), with the semantics of
docs/design.md section 2:

* new transitions get the running maximum priority (or a caller-given one);
* ``sample`` is stratified by default and returns importance-sampling weights
  ``w_i = (size * P(i)) ** -beta`` normalised by the largest weight in the batch;
* every slot carries an insertion stamp; ``update_priorities`` drops entries whose stamp no
  longer matches (the slot was overwritten after it was sampled), which makes delayed updates
  safe;
* bad input (negative, NaN or infinite priorities, indices of unfilled slots, sampling an empty
  buffer) raises ``ValueError`` when called eagerly. Under ``jit`` the operation is refused whole,
  the buffer is left unchanged and a bit is set in ``state.error`` (see `raise_on_error`);
  sampling an empty buffer under ``jit`` returns zero IS weights.

The tree primitives are an argument (`drlhet.replay.sum_tree.TreeOps`; a backend provides
them, `drlhet.backends.tree_ops`), chosen statically: this package imports no backend.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.replay import sum_tree
from drlhet.replay.sum_tree import REFERENCE, SumTreeState, TreeOps

__all__ = [
    "PrioritizedReplayState",
    "PrioritizedSample",
    "ReplayFns",
    "make_prioritized_replay",
    "raise_on_error",
    "ERR_PRIORITY",
    "ERR_INDEX",
]

ERR_PRIORITY = 1  # a negative, NaN or infinite priority was refused
ERR_INDEX = 2  # an index outside the filled slots was refused


class PrioritizedReplayState(NamedTuple):
    """Buffer state (a pytree of arrays; donate it to jitted steps).

    Attributes:
      storage: pytree of ``[N, ...]`` arrays, the ring buffer.
      tree: sum tree over ``p ** alpha``, one leaf per slot (a `SumTreeState`, or the
        backend's own tree, e.g. `drlhet.replay.fixed_point.FixedTreeState`).
      stamps: ``[N]`` int32 insertion stamp of each slot; -1 when empty.
      position: ``[]`` int32 next slot to write.
      size: ``[]`` int32 filled slots.
      inserted: ``[]`` int32 transitions ever inserted (wraps); the next stamp.
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
      weights: ``[B]`` importance-sampling weights, max 1 (0 when the buffer was empty).
    """

    indices: jax.Array
    stamps: jax.Array
    data: Any
    probabilities: jax.Array
    weights: jax.Array


class ReplayFns(NamedTuple):
    """Pure functions of a prioritized replay buffer.

    Attributes:
      init: ``(example_transition) -> state``; the example is one unbatched transition.
      add: ``(state, transitions [A, ...], priorities [A] | None) -> state``.
      sample: ``(state, key, beta=0.4) -> PrioritizedSample``.
      update_priorities: ``(state, indices [B], priorities [B], stamps [B] | None) -> state``;
        priorities are raw (e.g. ``|TD| + eps``); duplicate indices: the last occurrence wins.
    """

    init: Any
    add: Any
    sample: Any
    update_priorities: Any


def _concrete(*xs) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(xs))


def _check_priorities(p) -> None:
    if _concrete(p):
        v = np.asarray(p)
        bad = ~np.isfinite(v) | (v < 0)
        if bad.any():
            raise ValueError(
                f"priorities must be finite and >= 0, got {v[bad][0]!r} at position "
                f"{int(np.flatnonzero(bad)[0])}; the buffer is unchanged"
            )


def raise_on_error(state: PrioritizedReplayState) -> None:
    """Raises ``ValueError`` if a jitted operation on ``state`` was refused (host sync)."""
    err = int(state.error)
    if err:
        what = [
            m
            for bit, m in (
                (ERR_PRIORITY, "a negative, NaN or infinite priority"),
                (ERR_INDEX, "an index outside the filled slots"),
            )
            if err & bit
        ]
        raise ValueError(f"refused replay operation(s): {', '.join(what)} (error={err})")


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
      ValueError: a bad size, K or alpha.
    """
    if not isinstance(capacity, int | np.integer) or capacity < 1:
        raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
    if not isinstance(batch_size, int | np.integer) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if not isinstance(branching, int | np.integer) or branching < 2:
        raise ValueError(f"branching factor K must be an integer >= 2, got {branching!r}")
    if not (np.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be finite and >= 0, got {alpha!r}")
    spec = _Spec(int(capacity), int(batch_size), alpha, int(branching), stratified, tree_ops, dtype)
    return ReplayFns(
        functools.partial(_init, spec),
        functools.partial(_add, spec),
        functools.partial(_sample, spec),
        functools.partial(_update_priorities, spec),
    )


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


def _power(spec: _Spec, p: jax.Array) -> jax.Array:
    return p if spec.alpha == 1.0 else jnp.power(p, spec.alpha)


def _add(
    spec: _Spec,
    state: PrioritizedReplayState,
    transitions: Any,
    priorities: jax.Array | None = None,
) -> PrioritizedReplayState:
    """Writes ``transitions`` ``[A, ...]`` at the ring position with ``priorities`` ``[A]``
    (default: the running maximum); a batch with an invalid priority is refused whole."""
    leaves = jax.tree.leaves(transitions)
    if not leaves:
        raise ValueError("transitions is an empty pytree")
    n_add = int(jnp.shape(leaves[0])[0])
    if any(jnp.shape(x)[0] != n_add for x in leaves):
        raise ValueError("every leaf of transitions must have the same leading size A")
    if n_add > spec.capacity:
        raise ValueError(f"cannot add {n_add} transitions to a buffer of capacity {spec.capacity}")
    if priorities is None:
        raw = jnp.broadcast_to(state.max_priority, (n_add,))
        ok = jnp.bool_(True)
    else:
        raw = jnp.asarray(priorities, spec.dtype)
        if raw.shape != (n_add,):
            raise ValueError(f"priorities must have shape ({n_add},), got {raw.shape}")
        _check_priorities(raw)
        ok = jnp.all(jnp.isfinite(raw) & (raw >= 0))
    slots = (state.position + jnp.arange(n_add, dtype=jnp.int32)) % spec.capacity
    dest = jnp.where(ok, slots, spec.capacity)  # out of range -> dropped
    storage = jax.tree.map(
        lambda buf, x: buf.at[dest].set(jnp.asarray(x, buf.dtype), mode="drop"),
        state.storage,
        transitions,
    )
    stamps = state.stamps.at[dest].set(
        state.inserted + jnp.arange(n_add, dtype=jnp.int32), mode="drop"
    )
    tree = spec.ops.write(state.tree, slots, _power(spec, raw), jnp.broadcast_to(ok, (n_add,)))
    n = jnp.where(ok, n_add, 0).astype(jnp.int32)
    return PrioritizedReplayState(
        storage=storage,
        tree=tree,
        stamps=stamps,
        position=(state.position + n) % spec.capacity,
        size=jnp.minimum(state.size + n, spec.capacity),
        inserted=state.inserted + n,
        max_priority=jnp.where(
            ok, jnp.maximum(state.max_priority, jnp.max(raw)), state.max_priority
        ),
        error=state.error | jnp.where(ok, 0, ERR_PRIORITY),
    )


def _sample(
    spec: _Spec, state: PrioritizedReplayState, key: jax.Array, beta: float = 0.4
) -> PrioritizedSample:
    """Draws ``batch_size`` slots with ``P(i) = p_i^alpha / total`` and their IS weights."""
    if _concrete(state.size) and int(state.size) == 0:
        raise ValueError("cannot sample from an empty replay buffer (size 0)")
    dtype = spec.dtype
    if spec.ops.draw is not None:  # a tree that draws on its own (fixed point)
        indices, probs = spec.ops.draw(state.tree, key, spec.batch_size, spec.stratified)
        probs = probs.astype(dtype)
    else:
        indices, probs = _float_draw(spec, state.tree, key)
    size = state.size.astype(dtype)
    raw_w = jnp.where(probs > 0, jnp.power(size * jnp.where(probs > 0, probs, 1), -beta), 0)
    weights = raw_w / jnp.maximum(jnp.max(raw_w), jnp.finfo(dtype).tiny)
    data = jax.tree.map(lambda buf: buf[indices], state.storage)
    return PrioritizedSample(indices, state.stamps[indices], data, probs, weights)


def _float_draw(spec: _Spec, tree: SumTreeState, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Float targets (stratified or i.i.d.) and the descent: ``(indices [B], P(i) [B])``."""
    dtype, b = spec.dtype, spec.batch_size
    tot = sum_tree.total(tree)
    uniform = jax.random.uniform(key, (b,), dtype)
    if spec.stratified:
        targets = (jnp.arange(b, dtype=dtype) + uniform) * (tot / b)
    else:
        targets = uniform * tot
    # Probabilities use the root read during the descent (see sum_tree.descend).
    if spec.ops.find is None:
        raise ValueError("the tree primitives have neither `find` nor `draw`")
    indices, values, tot = spec.ops.find(tree, targets)
    nonempty = tot > 0
    return indices, jnp.where(nonempty, values / jnp.where(nonempty, tot, 1), 0)


def _update_priorities(
    spec: _Spec,
    state: PrioritizedReplayState,
    indices: jax.Array,
    priorities: jax.Array,
    stamps: jax.Array | None = None,
) -> PrioritizedReplayState:
    """Sets the raw priorities of ``indices`` ``[B]`` (last duplicate wins); entries whose
    ``stamps`` ``[B]`` no longer match their slot are dropped."""
    indices = jnp.asarray(indices, jnp.int32)
    raw = jnp.asarray(priorities, spec.dtype)
    if indices.ndim != 1 or raw.shape != indices.shape:
        raise ValueError(f"indices {indices.shape} and priorities {raw.shape} must both be [B]")
    if _concrete(indices, state.size):
        idx, size = np.asarray(indices), int(state.size)
        out = (idx < 0) | (idx >= size)
        if out.any():
            raise ValueError(
                f"index {idx[out][0]} outside the filled slots [0, {size}); the buffer is unchanged"
            )
    _check_priorities(raw)
    in_range = jnp.all((indices >= 0) & (indices < state.size))
    finite = jnp.all(jnp.isfinite(raw) & (raw >= 0))
    keep = jnp.broadcast_to(in_range & finite, indices.shape)
    if stamps is not None:
        safe = jnp.clip(indices, 0, spec.capacity - 1)
        keep = keep & (state.stamps[safe] == jnp.asarray(stamps, jnp.int32))
    tree = spec.ops.write(state.tree, indices, _power(spec, raw), keep)
    new_max = jnp.max(jnp.where(keep, raw, 0))
    err = jnp.where(in_range, 0, ERR_INDEX) | jnp.where(finite, 0, ERR_PRIORITY)
    return state._replace(
        tree=tree,
        max_priority=jnp.maximum(state.max_priority, new_max),
        error=state.error | err,
    )
