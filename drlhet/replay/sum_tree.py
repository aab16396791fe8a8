"""K-ary sum tree: the pure-JAX reference every replay backend is tested against.

The tree is one flat array in level order (Zhang, Meng, Prasanna, TPDS 2023, Sec. 4.1). Level 0
holds the root in slot 0 (slots 1..K-1 are padding, so that every level starts on a multiple of
K); level ``l`` holds the nodes of depth ``l``; the last level holds the leaves, one per slot of
the buffer, padded with zeros up to a multiple of K. The K children of node ``j`` of level ``l``
are the contiguous slots ``offsets[l + 1] + j * K + [0, K)``: with K = 16 and float32 they are
64 bytes, one cache line.

Semantics fixed here (every backend must reproduce them bit for bit):

* An inner node is the **sequential** float sum of its K children, ``((c0 + c1) + c2) + ...``,
  recomputed from the children after every update (never adjusted by a delta), so rounding error
  does not accumulate with the number of updates.
* ``update`` with duplicate indices: the **last** occurrence in the batch wins.
* ``find`` descends with the same sequential prefix sums: at each level it steps into child
  ``k`` with ``prefix[k-1] <= u < prefix[k]`` and subtracts ``prefix[k-1]``. When rounding pushes
  ``u`` past the last non-zero child it takes that child, so a zero priority is never found.
* Priorities must be finite and non-negative. Eager calls raise ``ValueError``; inside ``jit``
  (where values are not known) an invalid batch is refused whole and the tree is unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.replay import descent_step
from drlhet.replay.descent_step import child_step

__all__ = [
    "SumTreeState",
    "TreeLayout",
    "layout",
    "MAX_NODES",
    "init",
    "total",
    "get",
    "check_indices",
    "update",
    "find",
    "descend",
    "write",
    "last_writes",
    "sample",
    "leaves",
    "TreeOps",
    "REFERENCE",
]


class TreeLayout(NamedTuple):
    """Static geometry of a K-ary sum tree over ``capacity`` leaves.

    Attributes:
      depth: number of levels below the root (>= 1).
      offsets: start slot of each level, root level first; ``len == depth + 1``.
      widths: slots of each level (multiples of K); ``widths[0] == K`` holds the root.
      size: total slots of the flat node array.
    """

    depth: int
    offsets: tuple[int, ...]
    widths: tuple[int, ...]
    size: int


MAX_NODES = 2**31 - 1
"""Most nodes of a tree (padding included): its slots are numbered in int32 inside ``jit``."""


@functools.cache
def layout(capacity: int, branching: int) -> TreeLayout:
    """Computes the level layout for ``capacity`` leaves and branching factor ``branching``."""
    if branching < 2:
        raise ValueError(f"branching factor K must be >= 2, got {branching}")
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    counts = [capacity]  # nodes used per level, leaves first
    while counts[-1] > 1 or len(counts) == 1:
        counts.append(-(-counts[-1] // branching))
    # counts[-1] == 1 is the root; a level of c nodes occupies ceil(c / K) * K slots.
    widths_bottom_up = [-(-c // branching) * branching for c in counts]
    widths = tuple(reversed(widths_bottom_up))
    offsets = tuple(int(x) for x in np.concatenate([[0], np.cumsum(widths)[:-1]]))
    return TreeLayout(len(widths) - 1, offsets, widths, int(sum(widths)))


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["nodes"], meta_fields=["capacity", "branching"]
)
@dataclasses.dataclass(frozen=True)
class SumTreeState:
    """A K-ary sum tree.

    Attributes:
      nodes: ``[layout(capacity, branching).size]`` flat node array in level order.
      capacity: number of leaves (static).
      branching: K, children per node (static).
    """

    nodes: jax.Array
    capacity: int
    branching: int

    @property
    def layout(self) -> TreeLayout:
        return layout(self.capacity, self.branching)


def _concrete(*xs) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(xs))


def init(capacity: int, branching: int = 16, dtype=jnp.float32) -> SumTreeState:
    """Returns an all-zero tree with ``capacity`` leaves and branching factor ``branching``."""
    if not isinstance(capacity, int | np.integer) or capacity < 1:
        raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
    if not isinstance(branching, int | np.integer) or branching < 2:
        raise ValueError(f"branching factor K must be an integer >= 2, got {branching!r}")
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"dtype must be a floating type, got {dtype}")
    lay = layout(int(capacity), int(branching))
    if lay.size > MAX_NODES:
        raise ValueError(
            f"a tree of {capacity} leaves at K {branching} has {lay.size} nodes, more than its "
            f"int32 slot numbers address ({MAX_NODES})"
        )
    return SumTreeState(jnp.zeros((lay.size,), dtype), int(capacity), int(branching))


def total(state: SumTreeState) -> jax.Array:
    """The root: the sum of all leaves. Shape ``[]``."""
    return state.nodes[0]


def leaves(state: SumTreeState) -> jax.Array:
    """All leaf values. Shape ``[capacity]``."""
    off = state.layout.offsets[-1]
    return state.nodes[off : off + state.capacity]


def check_indices(state: SumTreeState, indices, keep=None) -> None:
    """Integer dtype (always); eagerly, every index in ``[0, capacity)`` before any cast (only
    those ``keep`` keeps, where it is given: a dropped entry's index is never read)."""
    dtype = indices.dtype if isinstance(indices, jax.Array) else np.asarray(indices).dtype
    if not jnp.issubdtype(dtype, jnp.integer):
        raise ValueError(f"indices must have an integer dtype, got {dtype}")
    if _concrete(indices, keep):
        idx = np.asarray(indices)
        if keep is not None:
            idx = idx[np.broadcast_to(np.asarray(keep, bool), idx.shape)]
        if idx.size and (idx.min() < 0 or idx.max() >= state.capacity):
            bad = idx[(idx < 0) | (idx >= state.capacity)][0]
            raise ValueError(f"index {bad} out of range [0, {state.capacity})")


def get(state: SumTreeState, indices: jax.Array) -> jax.Array:
    """Leaf values at ``indices`` ``[B]`` -> ``[B]``."""
    check_indices(state, indices)
    return state.nodes[state.layout.offsets[-1] + jnp.asarray(indices)]


def _rows(nodes: jax.Array, starts: jax.Array, k: int) -> jax.Array:
    """Gathers ``[B, k]`` contiguous rows ``nodes[starts[b] : starts[b] + k]``."""
    return jax.vmap(lambda s: jax.lax.dynamic_slice(nodes, (s,), (k,)))(starts)


def _seq_sum(children: jax.Array) -> jax.Array:
    """Left-to-right sum over the last axis ``[B, K] -> [B]`` (the order every backend uses)."""
    acc = children[:, 0]
    for k in range(1, children.shape[1]):
        acc = acc + children[:, k]
    return acc


def last_writes(
    indices: jax.Array, keep: jax.Array | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The batch semantics of every tree write: sorts ``indices`` ``[B]`` (stable) and marks the
    last kept occurrence of each index.

    Returns:
      ``(order [B], sorted indices [B], last [B] bool)``: entry ``order[j]`` writes iff
      ``last[j]``; dropped entries (``keep`` False) sort last as ``int32`` max and never write.
    """
    dropped = jnp.iinfo(jnp.int32).max
    if keep is not None:  # dropped entries sort last and never shadow a kept duplicate
        indices = jnp.where(jnp.asarray(keep), indices, dropped)
    order = jnp.argsort(indices, stable=True)
    s_idx = indices[order]
    last = jnp.concatenate([s_idx[1:] != s_idx[:-1], jnp.ones((1,), bool)]) & (s_idx != dropped)
    return order, s_idx, last


def write(
    state: SumTreeState, indices: jax.Array, values: jax.Array, keep: jax.Array | None = None
) -> SumTreeState:
    """Unchecked batched leaf write with ancestor recomputation (the `update` primitive).

    Args:
      state: the tree.
      indices: ``[B]`` int leaf indices; entries with ``keep == False`` may hold any value.
      values: ``[B]`` new leaf values (already validated).
      keep: optional ``[B]`` bool; dropped entries write nothing.

    Returns:
      The new tree. Duplicate kept indices: the last kept occurrence wins.
    """
    lay = state.layout
    k = state.branching
    nodes = state.nodes
    indices = jnp.asarray(indices, jnp.int32)
    values = jnp.asarray(values, nodes.dtype)
    n = indices.shape[0]
    if n == 0:
        return state
    order, s_idx, last = last_writes(indices, keep)
    leaf_slot = jnp.where(last, lay.offsets[-1] + s_idx, lay.size)  # out of range -> dropped
    nodes = nodes.at[leaf_slot].set(values[order], mode="drop")
    # Recomputing a node from its children is idempotent, so dropped entries may walk any path.
    node = jnp.clip(s_idx, 0, state.capacity - 1)
    for level in range(lay.depth - 1, -1, -1):
        node = node // k
        sums = _seq_sum(_rows(nodes, lay.offsets[level + 1] + node * k, k))
        nodes = nodes.at[lay.offsets[level] + node].set(sums, mode="promise_in_bounds")
    return dataclasses.replace(state, nodes=nodes)


def _check_priorities(values) -> None:
    if _concrete(values):
        v = np.asarray(values)
        bad = ~np.isfinite(v) | (v < 0)
        if bad.any():
            raise ValueError(
                f"priorities must be finite and >= 0, got {v[bad][0]!r} at position "
                f"{int(np.flatnonzero(bad)[0])} (as the tree's {v.dtype})"
            )


def update(state: SumTreeState, indices: jax.Array, values: jax.Array) -> SumTreeState:
    """Sets leaves ``indices`` ``[B]`` to ``values`` ``[B]`` and recomputes their ancestors.

    Duplicate indices resolve to the last occurrence. Eagerly, an index outside
    ``[0, capacity)`` or a negative, NaN or infinite value raises ``ValueError``; under ``jit``
    such a batch is refused whole (the tree is returned unchanged).
    """
    check_indices(state, indices)  # before jnp.asarray, which would wrap NumPy's int64
    indices = jnp.asarray(indices)
    values = jnp.asarray(values)
    if indices.shape != values.shape or indices.ndim != 1:
        raise ValueError(f"indices {indices.shape} and values {values.shape} must both be [B]")
    # checked as the tree stores them: a value finite in its own dtype may not be in the tree's
    values = values.astype(state.nodes.dtype)
    _check_priorities(values)
    ok = jnp.all((indices >= 0) & (indices < state.capacity) & jnp.isfinite(values) & (values >= 0))
    return write(state, indices, values, jnp.broadcast_to(ok, indices.shape))


def descend(state: SumTreeState, targets: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Unchecked prefix-sum descent (the `find` primitive).

    Args:
      state: the tree.
      targets: ``[B]`` values in ``[0, total)``, B >= 1.

    Returns:
      ``(indices [B] int32, values [B], total [])``: the leaf whose prefix interval holds each
      target, that leaf's value and the root, all read during the descent. Probabilities must be
      computed from these, never by reading the tree again: a read of the tree that a later
      in-place update does not depend on makes XLA copy the whole tree (twice per step in a
      ``lax.scan``), which at 2^20 leaves costs more than the sample and update themselves.
    """
    lay = state.layout
    k = state.branching
    nodes = state.nodes
    u0 = jnp.maximum(jnp.asarray(targets, nodes.dtype), 0)
    offsets = jnp.asarray(lay.offsets, jnp.int32)
    zero = jnp.zeros(u0.shape, nodes.dtype)

    def level_step(level, carry):
        node, u, _, root = carry
        children = _rows(nodes, offsets[level] + node * k, k)  # [B, K]
        # one pass over the K children with running prefix sums (`child_step`)
        ints = jnp.zeros(u.shape, jnp.int32)
        scan = (zero, zero, zero, zero, zero, ints, ints)
        if k <= descent_step.UNROLLED_MAX_K:
            for j in range(k):
                scan = child_step(children, u, j, scan, j == 0)
        else:  # one loop over the children: an unrolled K of hundreds compiled for minutes
            scan = jax.lax.fori_loop(0, k, lambda j, s: child_step(children, u, j, s, j == 0), scan)
        acc, left, left_nz, value, value_nz, count, last_nz = scan
        overflow = count > last_nz
        child = jnp.where(overflow, last_nz, count)
        left = jnp.where(overflow, left_nz, left)
        value = jnp.where(overflow, value_nz, value)
        root = jnp.where(level == 1, acc, root)  # level 1 sums to the root, bit for bit
        return node * k + child, jnp.maximum(u - left, 0), value, root

    # A loop, not unrolled Python: XLA cannot fuse tree reads across its boundary, so every read
    # of the tree happens before anything that consumes the indices (see Returns).
    node, _, value, root = jax.lax.fori_loop(
        1, lay.depth + 1, level_step, (jnp.zeros(u0.shape, jnp.int32), u0, zero, zero)
    )
    return node, value, root[0]


def find(state: SumTreeState, targets: jax.Array) -> jax.Array:
    """Leaf indices ``[B]`` whose prefix-sum intervals hold ``targets`` ``[B]`` in [0, total)."""
    t = targets if isinstance(targets, jax.Array) else np.asarray(targets)
    if t.ndim != 1 or (_concrete(t) and not np.all(np.isfinite(np.asarray(t)))):
        raise ValueError(f"find targets must be finite, of shape [B]; got shape {t.shape}")
    return descend(state, targets)[0]


def sample(
    state: SumTreeState, key: jax.Array, batch_size: int, stratified: bool = True
) -> tuple[jax.Array, jax.Array]:
    """Draws ``batch_size`` leaves with probability proportional to their value.

    Args:
      state: the tree; its total must be > 0.
      key: a PRNG key.
      batch_size: B (static).
      stratified: if True, target ``j`` is uniform in ``[j, j + 1) * total / B`` (Schaul et al.,
        2016); otherwise targets are i.i.d. uniform in ``[0, total)``.

    Returns:
      ``(indices [B] int32, probabilities [B])`` with ``probabilities = leaf / total``.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    tot = total(state)
    if _concrete(tot) and not float(tot) > 0:
        raise ValueError("cannot sample from an empty sum tree (total priority is 0)")
    if _concrete(tot) and not np.isfinite(float(tot)):  # finite leaves whose sum overflowed
        raise ValueError(f"cannot sample from a sum tree whose total is {float(tot)}")
    uniform = jax.random.uniform(key, (batch_size,), state.nodes.dtype)
    if stratified:
        targets = (jnp.arange(batch_size, dtype=tot.dtype) + uniform) * (tot / batch_size)
    else:
        targets = uniform * tot
    indices, values, root = descend(state, targets)
    return indices, jnp.where(root > 0, values / root, 0)  # jitted on an empty tree: 0, not NaN


class TreeOps(NamedTuple):
    """The tree primitives a replay buffer is built on (a backend provides them).

    Attributes:
      find: ``(tree, targets [B]) -> (indices [B] int32, values [B], total [])``, as `descend`
        (None where ``draw`` replaces it: a tree whose targets are not floats).
      write: ``(tree, indices [B], values [B], keep [B] | None) -> tree``, as `write` (the last
        kept duplicate wins; dropped entries write nothing); ``values`` are ``p ** alpha``.
      init: ``(capacity, branching, dtype) -> tree``, an empty tree.
      draw: None (float trees: the buffer computes targets and calls ``find``), or ``(tree,
        key, batch_size, stratified) -> (indices [B] int32, probabilities [B] float32)``.
      numbers: ``"float"`` (matches `REFERENCE`) or ``"fixed"`` (matches
        `drlhet.replay.fixed_point.REFERENCE`), the reference it is tested against.
      weigh: None (the buffer runs `drlhet.replay.buffer_ops.weigh` over ``find``), or the
        backend's own: ``(tree, targets [B], size [] int32, beta [] float) -> (indices [B]
        int32, probabilities [B], weights [B], error [] int32)``, equal to it bit for bit; it
        returns None (at trace time) for a batch it leaves to that code.
      weigh_key: None, or the backend's own sample with its targets drawn inside the call:
        ``(tree, key, size [] int32, beta [] float, batch_size, stratified) -> (indices [B]
        int32, probabilities [B], weights [B], error [] int32)``, equal bit for bit to ``weigh``
        over `drlhet.replay.prioritized.sample_targets`; it returns None (at trace time) where
        it cannot draw those targets (another generator, a batch it cannot scale exactly), and
        the buffer then computes them.
      update: None (the buffer runs `drlhet.replay.buffer_ops.update` over ``write``), or the
        backend's own: ``(tree, indices [B] int32, raw [B], values [B], keep [B] bool, size [],
        max_priority [], error []) -> (tree, max_priority, error)``, equal to it bit for bit.
      holds: None (any tree the buffer allows), or ``(capacity, K, dtype) -> str``: why the
        backend cannot hold such a tree (empty: it can), asked when a buffer is built.
    """

    find: Callable[..., tuple[jax.Array, jax.Array, jax.Array]] | None
    write: Callable[..., Any]
    init: Callable[..., Any] = init
    draw: Callable[..., tuple[jax.Array, jax.Array]] | None = None
    numbers: str = "float"
    weigh: Callable[..., tuple[jax.Array, jax.Array, jax.Array, jax.Array] | None] | None = None
    update: Callable[..., tuple[Any, jax.Array, jax.Array]] | None = None
    weigh_key: Callable[..., tuple[jax.Array, jax.Array, jax.Array, jax.Array] | None] | None = None
    holds: Callable[[int, int, Any], str] | None = None


REFERENCE = TreeOps(descend, write)
"""The pure-JAX tree primitives, the reference every backend must match bit for bit."""
