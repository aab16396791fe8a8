"""The prioritized buffer's sample and priority update around the tree, one function each.

`drlhet.replay.prioritized` draws a batch as: targets from a key (XLA), the tree's descent
(`TreeOps.find`), then the sampling probabilities, the IS weights and the refusal bits; it
updates priorities as: leaf values ``p ** alpha`` and the stamp check (XLA), then the batch's
index and priority checks, the tree's write (`TreeOps.write`), the running maximum and the
refusal bits. The two functions here are what comes after the XLA part of each, written in
JAX over ``find`` and ``write``: they are the buffer's own code and the reference for a backend
that does the same in one custom call (`TreeOps.weigh`, `TreeOps.update`), where the steps
between the tree primitives would otherwise be a dozen small kernels of their own on a GPU
(Zhang, Meng, Prasanna, TPDS 2023, Sec. 5.2: the replay's sampling and update on the GPU).

A backend's ``weigh`` and ``update`` must return what these return, bit for bit, given the same
arguments (the conformance suite checks it through the buffer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from drlhet.replay import checks
from drlhet.replay.checks import ERR_BETA, ERR_EMPTY, ERR_INDEX, ERR_PRIORITY

__all__ = ["weigh", "update", "probabilities", "is_weights"]


def probabilities(values: jax.Array, total: jax.Array) -> jax.Array:
    """``P(i) = v_i * (1 / total)`` of drawn leaves ``values`` ``[B]``; 0 where the total is
    not > 0. The reciprocal is written out: XLA turns a division by a broadcast scalar into
    this product on the CPU, and a kernel must know which one it is matching."""
    nonempty = total > 0
    return jnp.where(nonempty, values * (1 / jnp.where(nonempty, total, 1)), 0)


def is_weights(probs: jax.Array, size: jax.Array, beta: Any) -> tuple[jax.Array, jax.Array]:
    """Importance-sampling weights of a drawn batch (Schaul et al. 2016; paper Sec. 2.2).

    Args:
      probs: ``[B]`` sampling probabilities (0: not drawable).
      size: ``[]`` int32, transitions stored.
      beta: ``[]`` the exponent (a float or an array); outside ``[0, 1]`` (or NaN) the sample
        is refused. Compared as given, used in the probabilities' dtype.

    Returns:
      ``(weights [B], error [] int32)``: ``w_i = (size * P(i)) ** -beta`` times the
      reciprocal of its batch maximum (all 0 when refused); ``error`` holds ``ERR_EMPTY``
      (no probability > 0) and ``ERR_BETA``.
    """
    dtype = probs.dtype
    given = jnp.asarray(beta)
    beta_ok = (given >= 0) & (given <= 1)
    # A drawn leaf has P(i) > 0 whenever the total is (checks: P(i) >= 2^-123), so this is
    # "total > 0" without reading the root again (which would make XLA copy the tree).
    nonzero = jnp.max(probs) > 0
    b = jnp.where(beta_ok, jnp.asarray(beta, dtype), 0)
    drawable = probs > 0
    raw_w = jnp.where(
        drawable, jnp.power(size.astype(dtype) * jnp.where(drawable, probs, 1), -b), 0
    )
    weights = raw_w * (1 / jnp.maximum(jnp.max(raw_w), jnp.finfo(dtype).tiny))  # see above
    weights = jnp.where(beta_ok, weights, 0)
    error = jnp.where(nonzero, 0, ERR_EMPTY) | jnp.where(beta_ok, 0, ERR_BETA)
    return weights, jnp.asarray(error, jnp.int32)


def weigh(
    find: Callable[..., tuple[jax.Array, jax.Array, jax.Array]],
    tree: Any,
    targets: jax.Array,
    size: jax.Array,
    beta: Any,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The descent of a batch of targets, then its probabilities and IS weights.

    Args:
      find: the tree's descent (`TreeOps.find`).
      tree: the sum tree.
      targets: ``[B]`` prefix-sum targets in ``[0, total]``.
      size: ``[]`` int32, transitions stored.
      beta: ``[]`` the IS exponent (`is_weights`).

    Returns:
      ``(indices [B] int32, probabilities [B], weights [B], error [] int32)``; the
      probabilities use the total read during the descent (`drlhet.replay.sum_tree.descend`).
    """
    indices, values, total = find(tree, targets)
    probs = probabilities(values, total)
    weights, error = is_weights(probs, size, beta)
    return indices, probs, weights, error


def update(
    write: Callable[..., Any],
    tree: Any,
    indices: jax.Array,
    raw: jax.Array,
    values: jax.Array,
    keep: jax.Array,
    size: jax.Array,
    max_priority: jax.Array,
    error: jax.Array,
) -> tuple[Any, jax.Array, jax.Array]:
    """A checked priority update of ``B >= 1`` entries (the last kept duplicate wins).

    Args:
      write: the tree's write (`TreeOps.write`).
      tree: the sum tree.
      indices: ``[B]`` int32 slots (-1 for an index int32 cannot hold).
      raw: ``[B]`` raw priorities, in the tree's dtype.
      values: ``[B]`` their leaf values (`drlhet.replay.checks.leaf_values`).
      keep: ``[B]`` bool, entries still wanted (their stamps match).
      size: ``[]`` int32, filled slots.
      max_priority: ``[]`` the running maximum of raw priorities.
      error: ``[]`` int32, the buffer's error bits.

    Returns:
      ``(tree, max_priority, error)``. The batch is refused whole (tree and maximum
      unchanged, ``ERR_INDEX`` / ``ERR_PRIORITY`` set) if an index is outside ``[0, size)``
      or a raw priority is negative (on its sign bit: -1e-45 too), NaN or infinite, or a
      leaf value exceeds `drlhet.replay.checks.PRIORITY_MAX`; kept or not, every entry is
      checked.
    """
    in_range = jnp.all((indices >= 0) & (indices < size))
    ok = jnp.all(jnp.isfinite(raw) & ~checks.negative(raw) & ~(values > checks.PRIORITY_MAX))
    keep = in_range & ok & keep
    tree = write(tree, indices, values, keep)
    new_max = jnp.maximum(max_priority, jnp.max(jnp.where(keep, raw, 0)))
    bits = jnp.where(in_range, 0, ERR_INDEX) | jnp.where(ok, 0, ERR_PRIORITY)
    return tree, new_max, error | bits
