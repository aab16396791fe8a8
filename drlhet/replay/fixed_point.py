"""The fixed-point K-ary sum tree: the reference the FPGA replay module matches bit for bit.

docs/design.md section 2 (fixed point); Zhang, Meng, Prasanna, TPDS 2023, Sec. 4. Same level
layout as the float tree (`drlhet.replay.sum_tree.layout`), different numbers:

* **Leaves** are ``uint32``: ``q = round(v * 2^F)`` of ``v = p^alpha`` (float32), rounded half to
  even, ``F = frac_bits`` (default 20: steps of 2^-20 ~ 9.5e-7, largest ``(2^32 - 1) / 2^F`` ~
  4096). Out of range saturates and is counted in ``state.saturated``: a positive ``v`` below
  half a step becomes 1 (never 0, so a stored transition can always be drawn), a ``v`` at or
  above ``2^(32 - F)`` becomes ``2^32 - 1``. Zero stays zero and is never drawn, and so does a
  subnormal ``v`` (below 1.2e-38: XLA's CPU flushes them to zero, and the C++ side follows).
  Negative, NaN or infinite ``v`` are refused as by the float tree.
* **Inner nodes** are exact sums, 64-bit (`drlhet.replay.uint64`: ``uint32`` pairs, no x64): a
  node of level ``l`` sums at most ``K^(depth - l)`` leaves, i.e. needs ``32 + (depth - l) *
  log2 K`` bits (`level_bits`, the widths the HLS design declares), at most 64 for capacities
  up to 2^32. Integer sums are exact in any order, so no rounding, no drift, and the descent
  cannot step into a zero leaf.
* **Targets** are integers from the root ``T``: with 64 random bits ``r_j`` per draw,
  stratified ``t_j = floor((j * T + floor(T * r_j / 2^64)) / B)`` (in stratum j: ``[jT/B,
  (j+1)T/B)``), i.i.d. ``t_j = floor(T * r_j / 2^64)``. The random words come from the
  caller's JAX key; the hardware gets them with the command (no on-chip LFSR whose successive
  draws are correlated).
* **Batches**: duplicates in a write, last kept occurrence wins; dropped entries write nothing.

Precision (`precision_bound`): with every ``v`` in ``[v_min, 2^(32 - F))``, each leaf is off
by at most half a step, ``|q / 2^F - v| <= 2^-(F+1)``, so with ``eta = 2^-(F+1) / v_min``,
``|P_fixed(i) - P(i)| / P(i) <= 2 eta / (1 - eta)`` where ``P(i) = v_i / sum v`` in exact
arithmetic (tested against float64).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.replay import uint64 as u64
from drlhet.replay.sum_tree import TreeLayout, TreeOps, last_writes, layout
from drlhet.replay.uint64 import U64

__all__ = [
    "FixedTreeState",
    "FixedDraw",
    "init",
    "quantize",
    "level_bits",
    "precision_bound",
    "total",
    "write",
    "update",
    "descend",
    "targets",
    "sample",
    "draw",
    "probabilities",
    "sampler",
    "REFERENCE",
    "DEFAULT_FRAC_BITS",
    "SUPPORTED_BRANCHING",
    "MAX_CAPACITY",
]

DEFAULT_FRAC_BITS = 20
SUPPORTED_BRANCHING = (2, 4, 8, 16, 32, 64)
MAX_CAPACITY = 1 << 30
"""Most leaves: they are numbered in int32 inside ``jit``, where a write sends its dropped
entries to an index past the leaf row (rounded up to K), so the row must stay below int32's
largest index (at 2^31 leaves it could not, and ``write`` overflowed). The FPGA backend's
state is this tree's, so the module takes as many (sums of up to 2^32 leaves of 32 bits would
fit the 64-bit inner nodes)."""
_LEAF_MAX = np.uint32(0xFFFFFFFF)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["leaves", "hi", "lo", "saturated"],
    meta_fields=["capacity", "branching", "frac_bits"],
)
@dataclasses.dataclass(frozen=True)
class FixedTreeState:
    """A fixed-point K-ary sum tree.

    Attributes:
      leaves: ``[widths[-1]]`` uint32 quantized leaves (padding zero).
      hi, lo: ``[offsets[-1]]`` uint32 words of the 64-bit inner nodes in level order (the
        float tree's layout without its leaf level; the root is slot 0).
      saturated: ``[]`` int32 leaf writes clamped to the format's range so far (wraps; every
        kept in-range write counts, also one that a later duplicate of the batch overwrites:
        the hardware applies a batch's writes in order).
      capacity, branching, frac_bits: static N, K and F.
    """

    leaves: jax.Array
    hi: jax.Array
    lo: jax.Array
    saturated: jax.Array
    capacity: int
    branching: int
    frac_bits: int

    @property
    def layout(self) -> TreeLayout:
        return layout(self.capacity, self.branching)


class FixedDraw(NamedTuple):
    """One sampled batch, as the replay module returns it.

    Attributes:
      indices: ``[B]`` int32 leaves.
      values: ``[B]`` uint32 their quantized values.
      total: the root, a `U64` of shape ``[]``.
    """

    indices: jax.Array
    values: jax.Array
    total: U64


def init(capacity: int, branching: int = 16, frac_bits: int = DEFAULT_FRAC_BITS) -> FixedTreeState:
    """An all-zero tree.

    Raises:
      ValueError: K not in `SUPPORTED_BRANCHING`, capacity outside ``[1, MAX_CAPACITY]``, or
        ``frac_bits`` outside ``[0, 31]``.
    """
    if branching not in SUPPORTED_BRANCHING:
        raise ValueError(f"branching factor K {branching!r} not in {SUPPORTED_BRANCHING}")
    if not isinstance(capacity, int | np.integer) or not 1 <= capacity <= MAX_CAPACITY:
        raise ValueError(f"capacity {capacity!r} outside [1, {MAX_CAPACITY}]")
    if not isinstance(frac_bits, int | np.integer) or not 0 <= frac_bits <= 31:
        raise ValueError(f"frac_bits {frac_bits!r} outside [0, 31]")
    lay = layout(int(capacity), int(branching))
    inner = lay.offsets[-1]
    return FixedTreeState(
        leaves=jnp.zeros((lay.widths[-1],), jnp.uint32),
        hi=jnp.zeros((inner,), jnp.uint32),
        lo=jnp.zeros((inner,), jnp.uint32),
        saturated=jnp.zeros((), jnp.int32),
        capacity=int(capacity),
        branching=int(branching),
        frac_bits=int(frac_bits),
    )


def level_bits(capacity: int, branching: int) -> tuple[int, ...]:
    """Bits a node of each level needs, root level first, leaves last (32)."""
    lay = layout(capacity, branching)
    per_level = int(np.log2(branching))
    return tuple(min(64, 32 + (lay.depth - lvl) * per_level) for lvl in range(lay.depth + 1))


def precision_bound(v_min: float, frac_bits: int = DEFAULT_FRAC_BITS) -> float:
    """The bound on ``|P_fixed(i) - P(i)| / P(i)`` when every ``v`` is in ``[v_min,
    2^(32 - frac_bits))`` (module docstring)."""
    eta = 2.0 ** -(frac_bits + 1) / v_min
    if eta >= 1:
        raise ValueError(f"v_min {v_min} is below half a step 2^-{frac_bits + 1}: no bound")
    return 2 * eta / (1 - eta)


def quantize(values: jax.Array, frac_bits: int) -> tuple[jax.Array, jax.Array]:
    """``v [B]`` float -> ``(q [B] uint32, clamped [B] bool)`` (module docstring). Negative,
    NaN or infinite ``v`` must be refused before: they give 0."""
    v = jnp.asarray(values, jnp.float32)
    scaled = jnp.round(v * np.float32(2.0**frac_bits))  # exact scaling; half to even
    high = jnp.isfinite(v) & (scaled >= np.float32(2.0**32))  # +inf is refused: 0, not the top
    low = (v >= np.finfo(np.float32).tiny) & (scaled == 0)  # subnormals count as zero
    ok = jnp.isfinite(v) & (v >= 0)
    q = jnp.where(high, _LEAF_MAX, jnp.where(ok & ~high, scaled, 0).astype(jnp.uint32))
    q = jnp.where(low, np.uint32(1), q)
    return q, (high | low) & ok


def total(state: FixedTreeState) -> U64:
    """The root: the exact sum of all leaves, shape ``[]``."""
    return U64(state.hi[0], state.lo[0])


def _children(state: FixedTreeState, hi, lo, leaves, level: int, node: jax.Array):
    """The K children ``[B, K]`` (a `U64`) of nodes ``node`` ``[B]`` of ``level``."""
    lay, k = state.layout, state.branching
    cols = node[:, None] * k + jnp.arange(k, dtype=jnp.int32)[None, :]
    if level + 1 == lay.depth:  # the leaf level
        c = leaves[cols]
        return U64(jnp.zeros_like(c), c)
    cols = cols + lay.offsets[level + 1]
    return U64(hi[cols], lo[cols])


def _sum_children(children: U64) -> U64:
    """Exact sum over the last axis ``[B, K] -> [B]``."""
    acc = U64(children.hi[:, 0], children.lo[:, 0])
    for j in range(1, children.hi.shape[1]):
        acc = u64.add(acc, U64(children.hi[:, j], children.lo[:, j]))
    return acc


def write(
    state: FixedTreeState, indices: jax.Array, values: jax.Array, keep: jax.Array | None = None
) -> FixedTreeState:
    """Unchecked batched leaf write with exact ancestor sums.

    Args:
      state: the tree.
      indices: ``[B]`` int leaf indices (any value where ``keep`` is False).
      values: ``[B]`` float ``v = p^alpha``, quantized here (already validated).
      keep: optional ``[B]`` bool; dropped entries write nothing and are not counted.

    Returns:
      The new tree; duplicate kept indices: the last kept occurrence wins.
    """
    lay, k = state.layout, state.branching
    indices = jnp.asarray(indices, jnp.int32)
    if indices.shape[0] == 0:
        return state
    q, clamped = quantize(values, state.frac_bits)
    # a kept index outside the tree writes nothing, as in the module (not a padding leaf)
    written = (indices >= 0) & (indices < state.capacity)  # every write counts, duplicates too
    if keep is not None:
        written = written & jnp.asarray(keep)
    order, s_idx, last = last_writes(indices, written)
    dropped = np.int32(np.iinfo(np.int32).max)  # past the leaf row (`MAX_CAPACITY`)
    leaves = state.leaves.at[jnp.where(last, s_idx, dropped)].set(q[order], mode="drop")
    saturated = state.saturated + jnp.sum(written & clamped).astype(jnp.int32)
    hi, lo = state.hi, state.lo
    node = jnp.clip(s_idx, 0, state.capacity - 1)  # recomputing a node is idempotent
    for level in range(lay.depth - 1, -1, -1):
        node = node // k
        sums = _sum_children(_children(state, hi, lo, leaves, level, node))
        slot = lay.offsets[level] + node
        hi = hi.at[slot].set(sums.hi, mode="promise_in_bounds")
        lo = lo.at[slot].set(sums.lo, mode="promise_in_bounds")
    return dataclasses.replace(state, leaves=leaves, hi=hi, lo=lo, saturated=saturated)


def _concrete(*xs) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(xs))


def update(state: FixedTreeState, indices: jax.Array, values: jax.Array) -> FixedTreeState:
    """Sets leaves ``indices`` ``[B]`` to ``values`` ``[B]`` (float ``v``), checked as
    `drlhet.replay.sum_tree.update`: eagerly a bad index or value raises ``ValueError``; under
    ``jit`` such a batch is refused whole (the tree is unchanged)."""
    if _concrete(indices, values):  # before jnp.asarray, which would wrap NumPy's int64
        idx, v = np.asarray(indices), np.asarray(values)
        if not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"indices must have an integer dtype, got {idx.dtype}")
        out = (idx < 0) | (idx >= state.capacity)
        if out.any():
            raise ValueError(f"index {idx[out][0]} out of range [0, {state.capacity})")
        bad = ~np.isfinite(v) | (v < 0)
        if bad.any():
            raise ValueError(f"priorities must be finite and >= 0, got {v[bad][0]!r}")
    indices, values = jnp.asarray(indices), jnp.asarray(values)
    if indices.shape != values.shape or indices.ndim != 1:
        raise ValueError(f"indices {indices.shape} and values {values.shape} must both be [B]")
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise ValueError(f"indices must have an integer dtype, got {indices.dtype}")
    ok = jnp.all((indices >= 0) & (indices < state.capacity) & jnp.isfinite(values) & (values >= 0))
    return write(state, indices, values, jnp.broadcast_to(ok, indices.shape))


@jax.jit
def descend(state: FixedTreeState, t: U64) -> FixedDraw:
    """The leaves whose prefix intervals hold integer targets ``t`` ``[B]`` in ``[0, total)``.

    Exact: at each level the child with ``prefix[k-1] <= t < prefix[k]``, ``t`` minus
    ``prefix[k-1]``. A target at or past the total (an empty tree) takes the last non-zero
    child, else child 0.

    The inner levels run as one loop: unrolled, XLA's CPU compiler spent over ten minutes on
    the leaf level's kernel at 2^17 and 2^20 leaves with K 4 (on a 2-core host, 2026-11-29).
    Jitted, so that eager callers (the tests' reference) compile the loop once per tree shape,
    not on every call (about 1 s a call at K 64).
    """
    lay, k = state.layout, state.branching
    offsets = jnp.asarray(np.asarray(lay.offsets, np.int32))

    def inner(level, carry):
        node, t = carry
        cols = node[:, None] * k + jnp.arange(k, dtype=jnp.int32)[None, :] + offsets[level + 1]
        child, left = _choose(U64(state.hi[cols], state.lo[cols]), t, k)
        return node * k + child, u64.sub(t, left)

    start = (jnp.zeros(t.lo.shape, jnp.int32), t)
    node, t = jax.lax.fori_loop(0, lay.depth - 1, inner, start)
    ch = _children(state, state.hi, state.lo, state.leaves, lay.depth - 1, node)
    child, _ = _choose(ch, t, k)
    value = jnp.take_along_axis(ch.lo, child[:, None], axis=1)[:, 0]
    return FixedDraw(node * k + child, value, total(state))


def _choose(ch: U64, t: U64, k: int) -> tuple[jax.Array, U64]:
    """Among children ``ch`` ``[B, K]``, the one each target ``t`` ``[B]`` falls in and the sum
    of the children left of it (`descend`'s rule, the empty case included)."""
    acc, left = u64.zeros(t.lo.shape), u64.zeros(t.lo.shape)
    count = last_nz = jnp.zeros(t.lo.shape, jnp.int32)
    left_nz = u64.zeros(t.lo.shape)
    for j in range(k):
        c = U64(ch.hi[:, j], ch.lo[:, j])
        nz = (c.hi | c.lo) > 0
        left_nz = U64(*(jnp.where(nz, a, b) for a, b in zip(acc, left_nz, strict=True)))
        last_nz = jnp.where(nz, j, last_nz)
        acc = u64.add(acc, c)
        below = u64.le(acc, t)
        count = count + below.astype(jnp.int32)
        left = U64(*(jnp.where(below, a, b) for a, b in zip(acc, left, strict=True)))
    past = count >= k
    child = jnp.where(past, last_nz, count)
    left = U64(*(jnp.where(past, a, b) for a, b in zip(left_nz, left, strict=True)))
    return child, left


def targets(root: U64, bits: jax.Array, stratified: bool = True) -> U64:
    """Integer targets ``[B]`` from the root (shape ``[]``) and ``bits`` ``[B, 2]`` uint32
    (``r_j = bits[j, 0] * 2^32 + bits[j, 1]``), as in the module docstring.

    Raises:
      ValueError: stratified with B > `drlhet.replay.uint64.MAX_DIVISOR`.
    """
    b = bits.shape[0]
    r = U64(bits[:, 0], bits[:, 1])
    tot = U64(jnp.broadcast_to(root.hi, (b,)), jnp.broadcast_to(root.lo, (b,)))
    u = u64.mulhi(tot, r)  # floor(T r / 2^64), in [0, T)
    if not stratified:
        return u
    if b > u64.MAX_DIVISOR:
        raise ValueError(f"stratified sampling takes B <= {u64.MAX_DIVISOR}, got {b}")
    limbs = u64.muladd32(tot, jnp.arange(b, dtype=jnp.uint32), u)  # j T + u < B T
    _, q1, q0 = u64.div_small(limbs, b)
    return U64(q1, q0)


def draw(state: FixedTreeState, bits: jax.Array, stratified: bool = True) -> FixedDraw:
    """The replay module's sample command: targets from the root and ``bits`` ``[B, 2]``
    uint32, then the descent (`targets`, `descend`)."""
    return descend(state, targets(total(state), bits, stratified))


def probabilities(d: FixedDraw) -> jax.Array:
    """``[B]`` float32 ``float(q_i) / float(T)`` (0 for an empty tree): computed on the host
    side of the module."""
    tot = u64.to_float32(d.total)
    return jnp.where(tot > 0, d.values.astype(jnp.float32) / jnp.where(tot > 0, tot, 1), 0)


def sampler(draw_fn: Callable[..., FixedDraw]) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """The buffer's ``draw`` (`drlhet.replay.sum_tree.TreeOps`) over a module's sample command
    ``draw_fn(state, bits [B, 2], stratified) -> FixedDraw``: 64 random bits per draw from the
    caller's key."""

    def sample_draw(state: FixedTreeState, key: jax.Array, batch_size: int, stratified: bool):
        bits = jax.random.bits(key, (batch_size, 2), jnp.uint32)
        d = draw_fn(state, bits, stratified)
        return d.indices, probabilities(d)

    return sample_draw


def sample(state: FixedTreeState, key: jax.Array, batch_size: int, stratified: bool = True):
    """Draws ``batch_size`` leaves with probability ``q_i / T``.

    Returns:
      ``(FixedDraw, probabilities [B] float32)``; probabilities are ``float(q_i) / float(T)``
      (`drlhet.replay.uint64.to_float32`), computed on the host side of the module.

    Raises:
      ValueError: eagerly, an empty tree.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    root = total(state)
    if _concrete(root) and int(u64.to_int(root)) == 0:
        raise ValueError("cannot sample from an empty sum tree (total priority is 0)")
    bits = jax.random.bits(key, (batch_size, 2), jnp.uint32)
    d = draw(state, bits, stratified)
    return d, probabilities(d)


def _init_ops(capacity: int, branching: int, dtype=None) -> FixedTreeState:
    """`init` with the buffer's ``(capacity, branching, dtype)`` (the dtype is the host's)."""
    return init(capacity, branching)


REFERENCE = TreeOps(None, write, _init_ops, sampler(draw), "fixed")
"""The pure-JAX fixed-point primitives: the reference the FPGA module matches bit for bit."""
