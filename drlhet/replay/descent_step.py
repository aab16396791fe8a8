"""One child of the sum tree's descent (`drlhet.replay.sum_tree.descend`): the running
prefix sums over a node's K children, the same additions in the same order whether the K
children are stepped through unrolled or in a loop."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["UNROLLED_MAX_K", "child_step"]

UNROLLED_MAX_K = 64
"""The widest node whose children the descent steps through unrolled (what every backend's
tests cover, and the fastest); a wider one loops over them (same additions, same order: the
same bits), as an unrolled K = 300 compiled for 49 s and K = 1024 for minutes (2-core VM)."""


def child_step(children: jax.Array, u: jax.Array, j: Any, carry: tuple, first: Any) -> tuple:
    """One child ``j`` of the descent's pass over a node's ``children`` ``[B, K]`` with running
    prefix sums, kept in registers (``carry``):
      acc: the prefix through child j; count: how many prefixes are <= u (the child taken
      unless rounding overflows); left: the largest prefix <= u, i.e. prefix[count - 1] (0 if
      none); last_nz / left_nz / value_nz: the last non-zero child, the prefix before it and
      its value (the fallback when rounding pushes u past every non-zero child); value: the
      value of child ``count``. ``first``: j is 0 (a Python bool unrolled, traced in a loop)."""
    acc, left, left_nz, value, value_nz, count, last_nz = carry
    c = children[:, j]
    nz = c > 0
    left_nz = jnp.where(nz, acc, left_nz)
    value_nz = jnp.where(nz, c, value_nz)
    last_nz = jnp.where(nz, j, last_nz)
    if isinstance(first, bool):
        acc = c if first else acc + c
    else:
        acc = jnp.where(first, c, acc + c)
    below = acc <= u
    value = jnp.where(count == j, c, value)  # c of child `count` (before increment)
    count = count + below.astype(jnp.int32)
    left = jnp.where(below, acc, left)
    return acc, left, left_nz, value, value_nz, count, last_nz
