"""The sum tree's rules restated in NumPy float32: an oracle independent of the JAX reference.

The conformance suite checks every backend, the reference included, against it; the kernel
header's tests check the C++ per-element rules against `level_step` and `seq_sum`.
"""

from __future__ import annotations

import numpy as np

from drlhet.replay.sum_tree import layout

F32 = np.float32


def level_step(children, u):
    """One level of `drlhet.replay.sum_tree.descend` (its ``level_step``) for a batch of nodes.

    Args:
      children: ``[B, K]`` float32.
      u: ``[B]`` float32 targets, >= 0.

    Returns:
      ``(child, left, value, total, next_u)``, each ``[B]``.
    """
    children = np.asarray(children, F32)
    u = np.asarray(u, F32)
    zero = np.zeros(u.shape, F32)
    with np.errstate(over="ignore"):  # a sum of large priorities may overflow to inf
        return _level_step(children, u, zero)


def _level_step(children, u, zero):
    acc = left = left_nz = value = value_nz = zero
    count = last_nz = np.zeros(u.shape, np.int32)
    for j in range(children.shape[1]):
        c = children[:, j]
        nz = c > 0
        left_nz = np.where(nz, acc, left_nz)
        value_nz = np.where(nz, c, value_nz)
        last_nz = np.where(nz, np.int32(j), last_nz)
        acc = c if j == 0 else acc + c
        below = acc <= u
        value = np.where(count == j, c, value)
        count = count + below.astype(np.int32)
        left = np.where(below, acc, left)
    overflow = count > last_nz
    child = np.where(overflow, last_nz, count)
    left = np.where(overflow, left_nz, left)
    value = np.where(overflow, value_nz, value)
    return child, left, value, acc, np.maximum(u - left, F32(0))


def seq_sum(children):
    """``_seq_sum`` of the reference: ((c0 + c1) + c2) + ... in float32."""
    children = np.asarray(children, F32)
    acc = children[..., 0]
    with np.errstate(over="ignore"):
        for j in range(1, children.shape[-1]):
            acc = acc + children[..., j]
    return acc


def descend(nodes, capacity: int, k: int, targets):
    """`drlhet.replay.sum_tree.descend` in NumPy: ``-> (indices [B], values [B], total [])``."""
    lay = layout(capacity, k)
    nodes = np.asarray(nodes, F32)
    u = np.maximum(np.asarray(targets, F32), F32(0))
    node = np.zeros(u.shape, np.int64)
    value = root = np.zeros(u.shape, F32)
    for level in range(1, lay.depth + 1):
        rows = nodes[lay.offsets[level] + node[:, None] * k + np.arange(k)]
        child, _, value, total, u = level_step(rows, u)
        node = node * k + child
        if level == 1:
            root = total
    return node.astype(np.int32), value, root[0]


def write(nodes, capacity: int, k: int, indices, values, keep=None):
    """`drlhet.replay.sum_tree.write` in NumPy: kept leaves in batch order (the last duplicate
    wins), then every ancestor of a written leaf recomputed from its children, bottom up."""
    lay = layout(capacity, k)
    nodes = np.array(nodes, F32)
    keep = np.ones(len(indices), bool) if keep is None else np.asarray(keep, bool)
    touched = np.asarray(indices)[keep]
    for i, v in zip(touched, np.asarray(values, F32)[keep], strict=True):
        nodes[lay.offsets[-1] + i] = v
    parents = np.unique(touched)
    for level in range(lay.depth - 1, -1, -1):
        parents = np.unique(parents // k)
        rows = nodes[lay.offsets[level + 1] + parents[:, None] * k + np.arange(k)]
        nodes[lay.offsets[level] + parents] = seq_sum(rows)
    return nodes
