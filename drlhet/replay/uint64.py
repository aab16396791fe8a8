"""Unsigned 64-bit integers as pairs of ``uint32`` words, for JAX without x64.

The fixed-point sum tree (`drlhet.replay.fixed_point`) sums up to 2^31 leaves of 32 bits
exactly, which needs 64 bits above the leaves; JAX keeps 64-bit types off unless x64 is turned
on for the whole process. A `U64` is ``(hi, lo)``, two ``uint32`` arrays of one shape, the value
``hi * 2^32 + lo``. Every function is elementwise, jittable and exact (the HLS design computes
the same integers with ``ap_uint``, the C-simulation with ``unsigned __int128``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "U64",
    "of",
    "zeros",
    "add",
    "sub",
    "le",
    "lt",
    "mul32",
    "mulhi",
    "muladd32",
    "div_small",
    "to_float32",
    "to_int",
    "MAX_DIVISOR",
]

MAX_DIVISOR = 1 << 16
"""The largest divisor `div_small` takes (its long division runs on 16-bit digits)."""
_U32 = jnp.uint32


class U64(NamedTuple):
    """``hi * 2^32 + lo``; ``hi`` and ``lo`` are ``uint32`` arrays of one shape."""

    hi: jax.Array
    lo: jax.Array


def of(lo: jax.Array, hi: jax.Array | None = None) -> U64:
    """A `U64` from ``uint32`` words (``hi`` 0 when not given)."""
    lo = jnp.asarray(lo, _U32)
    return U64(jnp.zeros_like(lo) if hi is None else jnp.asarray(hi, _U32), lo)


def zeros(shape: tuple[int, ...]) -> U64:
    return U64(jnp.zeros(shape, _U32), jnp.zeros(shape, _U32))


def _addc(x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``x + y`` of ``uint32`` words: (low word, carry 0/1)."""
    s = x + y
    return s, (s < x).astype(_U32)


def add(a: U64, b: U64) -> U64:
    """``a + b`` mod 2^64."""
    lo, c = _addc(a.lo, b.lo)
    return U64(a.hi + b.hi + c, lo)


def sub(a: U64, b: U64) -> U64:
    """``a - b`` mod 2^64."""
    borrow = (a.lo < b.lo).astype(_U32)
    return U64(a.hi - b.hi - borrow, a.lo - b.lo)


def le(a: U64, b: U64) -> jax.Array:
    """``a <= b`` (bool)."""
    return (a.hi < b.hi) | ((a.hi == b.hi) & (a.lo <= b.lo))


def lt(a: U64, b: U64) -> jax.Array:
    """``a < b`` (bool)."""
    return (a.hi < b.hi) | ((a.hi == b.hi) & (a.lo < b.lo))


def mul32(x: jax.Array, y: jax.Array) -> U64:
    """The full product of two ``uint32`` words (16-bit halves: no product overflows)."""
    x, y = jnp.asarray(x, _U32), jnp.asarray(y, _U32)
    m = _U32(0xFFFF)
    x0, x1, y0, y1 = x & m, x >> 16, y & m, y >> 16
    mid, c_mid = _addc(x0 * y1, x1 * y0)
    lo, c_lo = _addc(x0 * y0, mid << 16)
    return U64(x1 * y1 + (mid >> 16) + (c_mid << 16) + c_lo, lo)


def mulhi(a: U64, b: U64) -> U64:
    """``floor(a * b / 2^64)``: the high half of the 128-bit product."""
    t0, t1, t2, t3 = mul32(a.lo, b.lo), mul32(a.lo, b.hi), mul32(a.hi, b.lo), mul32(a.hi, b.hi)
    s1, c1 = _addc(t0.hi, t1.lo)  # bits 32..63: only their carries reach the high half
    _, c2 = _addc(s1, t2.lo)
    s2, c3 = _addc(t1.hi, t2.hi)
    s2, c4 = _addc(s2, t3.lo)
    s2, c5 = _addc(s2, c1 + c2)
    return U64(t3.hi + c3 + c4 + c5, s2)


def muladd32(a: U64, m: jax.Array, c: U64) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``a * m + c`` for a ``uint32`` ``m``: three limbs, most significant first (< 2^96)."""
    lo, hi = mul32(a.lo, m), mul32(a.hi, m)
    l1, carry = _addc(lo.hi, hi.lo)
    l2 = hi.hi + carry
    l0, c0 = _addc(lo.lo, c.lo)
    l1, c1 = _addc(l1, c.hi)
    l1, c2 = _addc(l1, c0)
    return l2 + c1 + c2, l1, l0


def div_small(limbs: tuple[jax.Array, ...], d: int | jax.Array) -> tuple[jax.Array, ...]:
    """``floor(n / d)`` of ``n`` given as ``uint32`` limbs, most significant first, for
    ``1 <= d <= MAX_DIVISOR``: long division on 16-bit digits (``rem * 2^16 + digit < 2^32``).
    Returns the quotient's limbs, most significant first."""
    if isinstance(d, int | np.integer) and not 1 <= d <= MAX_DIVISOR:
        raise ValueError(f"divisor {d} outside [1, {MAX_DIVISOR}]")
    d = jnp.asarray(d, _U32)
    rem = jnp.zeros_like(limbs[0])
    out = []
    for limb in limbs:
        digits = []
        for digit in (limb >> 16, limb & _U32(0xFFFF)):
            cur = (rem << 16) | digit
            digits.append(cur // d)
            rem = cur % d
        out.append((digits[0] << 16) | digits[1])
    return tuple(out)


def to_float32(a: U64) -> jax.Array:
    """``float32(hi) * 2^32 + float32(lo)``, rounded (the same expression everywhere)."""
    return a.hi.astype(jnp.float32) * np.float32(2.0**32) + a.lo.astype(jnp.float32)


def to_int(a: U64) -> np.ndarray:
    """The exact values on the host, as a NumPy ``uint64`` array (tests, reports)."""
    hi, lo = (np.asarray(x).astype(np.uint64) for x in (a.hi, a.lo))
    return (hi << np.uint64(32)) | lo
