"""64-bit unsigned arithmetic on uint32 pairs against Python's integers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from drlhet.replay import uint64 as u64

M64 = (1 << 64) - 1
ints64 = st.lists(st.integers(0, M64), min_size=1, max_size=16)


def pack(values: list[int]) -> u64.U64:
    return u64.U64(
        jnp.asarray([v >> 32 for v in values], jnp.uint32),
        jnp.asarray([v & 0xFFFFFFFF for v in values], jnp.uint32),
    )


def ints(a: u64.U64) -> list[int]:
    return [int(v) for v in u64.to_int(a)]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_add_sub_compare_mul_against_python_integers(data):
    a = data.draw(ints64)
    b = data.draw(st.lists(st.integers(0, M64), min_size=len(a), max_size=len(a)))
    x, y = pack(a), pack(b)
    assert ints(u64.add(x, y)) == [(p + q) & M64 for p, q in zip(a, b, strict=True)]
    assert ints(u64.sub(x, y)) == [(p - q) & M64 for p, q in zip(a, b, strict=True)]
    assert list(np.asarray(u64.le(x, y))) == [p <= q for p, q in zip(a, b, strict=True)]
    assert list(np.asarray(u64.lt(x, y))) == [p < q for p, q in zip(a, b, strict=True)]
    assert ints(u64.mulhi(x, y)) == [(p * q) >> 64 for p, q in zip(a, b, strict=True)]
    lo32 = [p & 0xFFFFFFFF for p in a]
    m32 = [q >> 32 for q in b]
    assert ints(u64.mul32(jnp.asarray(lo32, jnp.uint32), jnp.asarray(m32, jnp.uint32))) == [
        p * q for p, q in zip(lo32, m32, strict=True)
    ]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_muladd_and_small_division_against_python_integers(data):
    a = data.draw(ints64)
    n = len(a)
    c = data.draw(st.lists(st.integers(0, M64), min_size=n, max_size=n))
    m = data.draw(st.lists(st.integers(0, (1 << 16) - 1), min_size=n, max_size=n))
    d = data.draw(st.integers(1, u64.MAX_DIVISOR))
    limbs = u64.muladd32(pack(a), jnp.asarray(m, jnp.uint32), pack(c))
    values = [
        (int(l2) << 64) | (int(l1) << 32) | int(l0)
        for l2, l1, l0 in zip(*(np.asarray(x) for x in limbs), strict=True)
    ]
    assert values == [p * q + r for p, q, r in zip(a, m, c, strict=True)]
    q2, q1, q0 = (np.asarray(x) for x in u64.div_small(limbs, d))
    got = [(int(x) << 64) | (int(y) << 32) | int(z) for x, y, z in zip(q2, q1, q0, strict=True)]
    assert got == [v // d for v in values]


def test_jitted_equals_eager_and_divisor_range():
    x, y = pack([M64, 1 << 63, 12345]), pack([M64, 3, 1 << 40])
    eager = u64.mulhi(x, y)
    jitted = jax.jit(u64.mulhi)(x, y)
    assert ints(eager) == ints(jitted)
    try:
        u64.div_small((jnp.zeros(1, jnp.uint32),), u64.MAX_DIVISOR + 1)
    except ValueError as e:
        assert str(u64.MAX_DIVISOR + 1) in str(e)
    else:
        raise AssertionError("a divisor over MAX_DIVISOR was taken")
