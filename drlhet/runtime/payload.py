"""A pytree as one flat ``uint32`` array, so that a stage hands it to another device in one put.

A ``jax.device_put`` between devices costs the host about 10 us per array leaf (measured on the
2-core development machine, docs/design.md section 6), and a stage's output is a pytree of 5 to
40 leaves. The pipelined host loop (`drlhet.runtime.pipeline`) therefore packs each payload
(transitions, sampled batches, priority updates, the agent for the actors) into one word array
inside the producing stage and unpacks it inside the consuming one: the bits move unchanged
(32-bit leaves are bitcast, booleans and small integers widened, PRNG keys sent as their data),
so packing never changes a number.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Payload", "payload_of"]

_WORD = jnp.uint32


@dataclasses.dataclass(frozen=True)
class _Leaf:
    shape: tuple[int, ...]
    dtype: Any  # the leaf's dtype (a PRNG key dtype for keys)
    words: int  # uint32 words it takes
    impl: Any = None  # the PRNG implementation (name) of a key leaf


@dataclasses.dataclass(frozen=True)
class Payload:
    """The layout of one pytree packed into ``[size]`` uint32 words (one example's shapes).

    Use `pack` and `unpack` inside jitted, vmapped stage functions: they work on one example,
    leading batch axes come from ``vmap``.
    """

    treedef: Any
    leaves: tuple[_Leaf, ...]

    @property
    def size(self) -> int:
        """Words of the packed array."""
        return sum(leaf.words for leaf in self.leaves)

    def pack(self, tree: Any) -> jax.Array:
        """``tree`` (this layout) -> ``[size]`` uint32; the bits of every leaf unchanged."""
        xs = jax.tree.leaves(tree)
        if len(xs) != len(self.leaves):
            raise ValueError(f"payload expects {len(self.leaves)} leaves, got {len(xs)}")
        parts = [_to_words(x, leaf).reshape(-1) for x, leaf in zip(xs, self.leaves, strict=True)]
        if not parts:
            return jnp.zeros((0,), _WORD)
        return jnp.concatenate(parts)

    def unpack(self, words: jax.Array) -> Any:
        """``[size]`` uint32 -> the pytree `pack` was given."""
        if words.shape != (self.size,):
            raise ValueError(f"payload expects [{self.size}] words, got {words.shape}")
        out, start = [], 0
        for leaf in self.leaves:
            out.append(_from_words(words[start : start + leaf.words], leaf))
            start += leaf.words
        return jax.tree.unflatten(self.treedef, out)


def payload_of(tree: Any) -> Payload:
    """The layout of ``tree`` (arrays or ``jax.ShapeDtypeStruct``; one example, no batch axis).

    Raises:
      ValueError: a leaf of a dtype that does not fit in 32-bit words (64-bit, 16-bit floats).
    """
    leaves, treedef = jax.tree.flatten(tree)
    return Payload(treedef, tuple(_leaf_of(x) for x in leaves))


def _leaf_of(x: Any) -> _Leaf:
    shape, dtype = tuple(x.shape), x.dtype
    n = math.prod(shape)
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        impl = jax.config.jax_default_prng_impl  # type: ignore[attr-defined]
        key_words = math.prod(jax.eval_shape(jax.random.key_data, x).shape[len(shape) :])
        return _Leaf(shape, dtype, n * key_words, impl)
    np_dtype = np.dtype(dtype)
    if np_dtype == np.bool_ or (np_dtype.kind in "iu" and np_dtype.itemsize < 4):
        return _Leaf(shape, dtype, n)
    if np_dtype.itemsize == 4 and np_dtype.kind in "iuf":
        return _Leaf(shape, dtype, n)
    raise ValueError(f"a payload leaf of dtype {np_dtype} does not fit in 32-bit words")


def _to_words(x: jax.Array, leaf: _Leaf) -> jax.Array:
    if leaf.impl is not None:
        return jax.random.key_data(x).astype(_WORD)
    if np.dtype(leaf.dtype).itemsize < 4:
        return x.astype(_WORD)
    return jax.lax.bitcast_convert_type(x, _WORD)


def _from_words(w: jax.Array, leaf: _Leaf) -> jax.Array:
    if leaf.impl is not None:
        data = w.reshape(leaf.shape + (-1,))
        return jax.random.wrap_key_data(data, impl=leaf.impl)
    if np.dtype(leaf.dtype).itemsize < 4:
        return w.reshape(leaf.shape).astype(leaf.dtype)
    return jax.lax.bitcast_convert_type(w, leaf.dtype).reshape(leaf.shape)
