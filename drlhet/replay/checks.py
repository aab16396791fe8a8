"""Input checks of the replay buffers, and the range of numbers a buffer represents.

docs/design.md section 2 (bad input). What a buffer refuses, and how:

* **Static mistakes** (a shape, a dtype, a pytree structure: known while tracing) raise
  ``ValueError`` naming the field, eagerly and under ``jit`` alike.
* **Bad values** raise ``ValueError`` naming the value when called eagerly (the buffer is left
  unchanged); under ``jit`` the values are unknown while tracing, so the operation is refused
  whole and a bit is set in the ``error`` field of what it returns.

The representable range (float trees of float32's exponent range: float32, bfloat16, float64;
the fixed-point tree holds less, see `drlhet.replay.fixed_point`): a leaf holds ``v = p ** alpha``
of a raw priority ``p >= 0``. ``p = 0`` stores 0 (never drawn). A positive ``p`` (subnormal ones
included) stores ``max(v, PRIORITY_MIN)``: a transition given a positive priority stays
drawable even when ``v`` underflows. ``v > PRIORITY_MAX`` is refused, and so are negative, NaN
and infinite ``p``. With at most 2^31 - 1 leaves the total is then at most ``TOTAL_MAX``, so it
is always finite, ``1 / total`` is a normal float32, and every drawn leaf's probability ``v /
total >= 2^-123`` and its IS weight are normal float32 numbers (XLA flushes subnormals to 0).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "PRIORITY_MIN",
    "PRIORITY_MAX",
    "TOTAL_MAX",
    "MAX_CAPACITY",
    "check_add_size",
    "concrete",
    "check_tree_dtype",
    "batch_size_of",
    "indices_in_range",
    "int32_or_never",
    "leaf_values",
    "negative",
    "cast_keeping_sign",
    "check_beta",
    "ERR_PRIORITY",
    "ERR_INDEX",
    "ERR_EMPTY",
    "ERR_BETA",
]

ERR_PRIORITY = 1
"""Error bit: a negative, NaN, infinite or too large priority was refused."""
ERR_INDEX = 2
"""Error bit: an index outside the filled slots was refused."""
ERR_EMPTY = 4
"""Error bit: a sample of an empty buffer, or of one whose priorities are all 0."""
ERR_BETA = 8
"""Error bit: a sample with beta outside [0, 1]."""

PRIORITY_MIN = 2.0**-60
"""Smallest stored ``p ** alpha`` of a positive priority (~8.7e-19): smaller ones are raised."""
PRIORITY_MAX = 2.0**32
"""Largest accepted ``p ** alpha`` (~4.3e9)."""
MAX_CAPACITY = 2**31 - 1
"""Most slots of a buffer (slots, indices and stamps are int32)."""
TOTAL_MAX = PRIORITY_MAX * 2.0**31
"""Bound on the total (2^63): ``MAX_CAPACITY`` leaves of at most ``PRIORITY_MAX``."""
_INT32_MAX = int(np.iinfo(np.int32).max)


def check_add_size(n: int, capacity: int) -> None:
    """Refuses an add of ``n`` transitions (static) that a buffer of ``capacity`` slots cannot
    take: more than its slots, or so many that its int32 position and size would overflow."""
    if n > capacity:
        raise ValueError(f"cannot add {n} transitions to a buffer of capacity {capacity}")
    if n > _INT32_MAX - capacity:
        raise ValueError(
            f"cannot add {n} transitions at once to a buffer of capacity {capacity}: its int32 "
            f"position would pass {_INT32_MAX} (add at most {_INT32_MAX - capacity})"
        )


def concrete(*xs) -> bool:
    """True when no leaf of ``xs`` is a tracer (the values are known: eager call)."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(xs))


def check_tree_dtype(dtype) -> None:
    """Raises ``ValueError`` for a tree dtype without float32's exponent range (the range
    above needs it: float16's total would overflow at 65,504)."""
    dt = jnp.dtype(dtype)
    if not jnp.issubdtype(dt, jnp.floating) or jnp.finfo(dt).maxexp < 128:
        raise ValueError(f"tree dtype must be float32, bfloat16 or float64, got {dt}")


def _path_name(path) -> str:
    return jax.tree_util.keystr(path) or "transitions"


def batch_size_of(storage: Any, transitions: Any) -> int:
    """Checks ``transitions`` against the buffer's ``storage`` (pytree of ``[N, ...]``) and
    returns A, their leading size.

    Every leaf must be ``[A, ...]`` with the trailing shape of its storage leaf (no broadcasting)
    and a dtype that casts to the storage's within its kind (bool -> int -> float; a float into
    an int field is refused; host integers the storage's dtype cannot hold are refused, not
    wrapped); the pytree structures must be equal.

    Raises:
      ValueError: naming the first field that does not match.
    """
    stored: Any = jax.tree.structure(storage)
    given: Any = jax.tree.structure(transitions)
    if given != stored:
        raise ValueError(f"transitions have structure {given}, the buffer stores {stored}")
    bufs = jax.tree_util.tree_flatten_with_path(storage)[0]
    sizes = set()
    for (path, buf), x in zip(bufs, jax.tree.leaves(transitions), strict=True):
        shape, dtype = jnp.shape(x), jnp.result_type(x)
        if len(shape) != buf.ndim or shape[1:] != buf.shape[1:]:
            dims = "".join(f", {d}" for d in buf.shape[1:])
            raise ValueError(f"field {_path_name(path)} has shape {shape}, expected [A{dims}]")
        if not np.can_cast(dtype, buf.dtype, casting="same_kind"):
            raise ValueError(f"field {_path_name(path)} is {dtype}, the buffer stores {buf.dtype}")
        _check_integers_fit(x, buf.dtype, path)
        sizes.add(shape[0])
    if len(sizes) != 1:
        raise ValueError(f"every field of transitions must have the same leading size, got {sizes}")
    return int(sizes.pop())


def _check_integers_fit(x: Any, stored, path) -> None:
    """Refuses concrete integers that ``stored`` (an integer dtype) cannot hold: the cast would
    wrap them (an int64 action of 2**40 into int32 storage). Host values only: a JAX array
    (traced or not) already holds its values in its own dtype, and is not fetched."""
    if isinstance(x, jax.Array) or not jnp.issubdtype(stored, jnp.integer):
        return
    a = np.asarray(x)
    if a.size == 0 or not np.issubdtype(a.dtype, np.integer):
        return
    if np.can_cast(a.dtype, stored, casting="safe"):  # every value fits
        return
    info = np.iinfo(stored)
    lo, hi = int(a.min()), int(a.max())
    if lo < info.min or hi > info.max:
        bad = lo if lo < info.min else hi
        raise ValueError(
            f"field {_path_name(path)} holds {bad}, outside the {np.dtype(stored).name} the "
            f"buffer stores ([{info.min}, {info.max}])"
        )


def _integer_vector(x: Any, name: str, shape: tuple[int, ...] | None = None) -> Any:
    """``x`` as an integer array of its own dtype (no cast), checked: one dimension, or
    ``shape``. A concrete input keeps its values (NumPy's int64 too)."""
    a = x if isinstance(x, jax.Array | np.ndarray) else np.asarray(x)
    if not jnp.issubdtype(a.dtype, jnp.integer):
        raise ValueError(f"{name} must have an integer dtype, got {a.dtype}")
    if a.ndim != 1 or (shape is not None and a.shape != shape):
        raise ValueError(f"{name} must have shape {shape or '[B]'}, got {a.shape}")
    return a


def _to_int32(a) -> tuple[jax.Array, jax.Array]:
    """``(int32 [B], fits [B] bool)`` of an integer array: ``fits`` marks the entries int32
    holds; the others become -1. NumPy input is compared in NumPy (JAX would wrap int64)."""
    lo, hi = -_INT32_MAX - 1, _INT32_MAX
    if isinstance(a, np.ndarray):
        host = (a >= lo) & (a <= hi)
        return jnp.asarray(np.where(host, a, -1).astype(np.int32)), jnp.asarray(host)
    info = jnp.iinfo(a.dtype)
    fits = jnp.ones(a.shape, bool)
    if info.min < lo:
        fits = fits & (a >= lo)
    if info.max > hi:
        fits = fits & (a <= hi)
    return jnp.where(fits, a, -1).astype(jnp.int32), fits


def indices_in_range(x: Any, size: jax.Array, name: str = "index") -> tuple[jax.Array, jax.Array]:
    """Checked slot indices: ``(int32 [B], all in [0, size) [] bool)``.

    Raises:
      ValueError: a dtype that is not integer or a shape that is not ``[B]`` (always); eagerly,
        an index outside ``[0, size)``, checked before any cast (2^32 + 3 is not slot 3).
    """
    a = _integer_vector(x, name + " array")
    if concrete(a, size):
        v, n = np.asarray(a), int(size)
        out = (v < 0) | (v >= n)
        if out.any():
            raise ValueError(
                f"{name} {v[out][0]} outside the filled slots [0, {n}); the buffer is unchanged"
            )
    idx, fits = _to_int32(a)
    return idx, jnp.all(fits & (idx >= 0) & (idx < size))


def int32_or_never(x: Any, shape: tuple[int, ...], name: str) -> tuple[jax.Array, jax.Array]:
    """``x`` (integer, ``shape``) as ``(int32 array, fits [B] bool)``; an entry int32 cannot
    hold is marked (it must match nothing, never its wrapped value)."""
    return _to_int32(_integer_vector(x, name, shape))


def _signs(given: Any, raw: jax.Array) -> tuple[Any, Any]:
    """``(p > 0, p < 0)`` of the priorities as given (``raw``: cast to the tree's dtype), so
    that a float64 1e-50, 0 in float32, is still positive (and -1e-50 negative). Host input is
    compared on the host (NumPy keeps subnormals and float64), float arrays on their bits (XLA's
    CPU compares subnormals as 0: denormals-are-zero)."""
    if isinstance(given, np.ndarray):
        return jnp.asarray(given > 0), jnp.asarray(given < 0)
    x = given if jnp.issubdtype(given.dtype, jnp.floating) else raw
    return _bits(x) > 0, negative(x)


def _bits(x: jax.Array) -> jax.Array:
    """The float array ``x`` as signed integers of its width (the sign bit their sign)."""
    return jax.lax.bitcast_convert_type(x, jnp.dtype(f"int{8 * x.dtype.itemsize}"))


def cast_keeping_sign(p: Any, dtype) -> jax.Array:
    """``p`` cast to ``dtype``, where a positive value the cast makes 0 (a float64 1e-50 in
    float32) becomes ``dtype``'s smallest positive value instead, so that it is still positive,
    hence drawable, when `leaf_values` reads it later (the delayed queue stores float32)."""
    given = p if isinstance(p, jax.Array) else np.asarray(p)
    raw = jnp.asarray(given, dtype)
    if not jnp.issubdtype(raw.dtype, jnp.floating):
        return raw
    positive, _ = _signs(given, raw)
    tiny = np.nextafter(np.zeros((), raw.dtype), np.ones((), raw.dtype))  # (a subnormal)
    return jnp.where(positive & (_bits(raw) == 0), tiny, raw)


def negative(x: jax.Array) -> jax.Array:
    """``x < 0`` for a float array, on its bits: XLA's CPU compares a negative subnormal as 0
    (denormals-are-zero), so ``x >= 0`` let -1e-45 through where the native and CUDA kernels
    refuse it. -0.0 is not negative; a NaN may be either (refused as not finite anyway)."""
    bits = _bits(x)
    return (bits < 0) & (bits != jnp.iinfo(bits.dtype).min)


def leaf_values(p: Any, alpha: float, dtype, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """Leaf values of raw priorities ``p`` ``shape`` (module docstring).

    Returns:
      ``(v [B], ok [])``: ``v`` is 0 for ``p = 0`` and ``max(p ** alpha, PRIORITY_MIN)`` for a
      positive ``p``; ``ok`` is False when some ``p`` is negative, NaN or infinite (in the
      tree's dtype) or some ``p ** alpha`` exceeds ``PRIORITY_MAX`` (the caller refuses the
      whole batch). Signs are those of ``p`` as given, before the cast to ``dtype``.

    Raises:
      ValueError: a shape other than ``shape`` or a dtype that is not a real number; eagerly, a
        value that makes ``ok`` False.
    """
    given = p if isinstance(p, jax.Array) else np.asarray(p)
    real = (jnp.bool_, jnp.integer, jnp.floating)
    if not any(jnp.issubdtype(given.dtype, kind) for kind in real):
        raise ValueError(f"priorities must be real numbers, got dtype {given.dtype}")
    raw = jnp.asarray(given, dtype)
    if raw.shape != shape:
        raise ValueError(f"priorities must have shape {shape}, got {raw.shape}")
    power = raw if alpha == 1.0 else jnp.power(raw, alpha)
    positive, negative = _signs(given, raw)
    finite = jnp.isfinite(raw) & ~negative
    ok = jnp.all(finite & ~(power > PRIORITY_MAX))
    v = jnp.where(positive & finite, jnp.maximum(power, PRIORITY_MIN), 0).astype(dtype)
    if concrete(raw, power):  # (a constant inside jit is concrete, its power is not)
        _raise_if_refused(np.asarray(given), np.asarray(raw), np.asarray(power))
    return v, ok


def _raise_if_refused(given: np.ndarray, raw: np.ndarray, power: np.ndarray) -> None:
    """Eagerly: the ``ValueError`` of the first refused priority, naming it as given."""
    bad = ~np.isfinite(raw) | (given < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"priorities must be finite and >= 0 as the tree's {raw.dtype}, got "
            f"{float(given[i]):.9g} at position {i}; the buffer is unchanged"
        )
    big = power > PRIORITY_MAX
    if big.any():
        i = int(np.flatnonzero(big)[0])
        raise ValueError(
            f"priority {float(given[i]):.9g} at position {i}: p ** alpha = {float(power[i]):.9g} "
            f"is above the largest representable {PRIORITY_MAX:.3g} (2^32); buffer unchanged"
        )


def check_beta(beta: Any) -> jax.Array:
    """``[]`` bool: ``beta`` in ``[0, 1]``.

    Raises:
      ValueError: eagerly, a ``beta`` outside ``[0, 1]`` (NaN included); not a scalar.
    """
    b = jnp.asarray(beta)
    if b.shape != ():
        raise ValueError(f"beta must be a scalar, got shape {b.shape}")
    if concrete(b) and not 0.0 <= float(b) <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {float(b)!r}")
    return (b >= 0) & (b <= 1)
