"""The payload a pipeline channel carries (`drlhet.runtime.payload`): every leaf packed into
words and back, bit for bit."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.runtime.payload import payload_of


def test_payload_packs_every_leaf_bit_for_bit():
    import jax

    tree = {
        "f": jnp.array([[np.nan, -0.0, 1e-45]], jnp.float32),
        "i": jnp.array([-1, 2**31 - 1], jnp.int32),
        "b": jnp.array([True, False]),
        "k": jax.random.split(jax.random.key(3), 2),
    }
    layout = payload_of(tree)
    words = jax.jit(layout.pack)(tree)
    assert words.dtype == jnp.uint32 and words.shape == (layout.size,) == (11,)
    back = jax.jit(layout.unpack)(words)
    np.testing.assert_array_equal(
        np.asarray(back["f"]).view(np.uint32), np.asarray(tree["f"]).view(np.uint32)
    )
    np.testing.assert_array_equal(np.asarray(back["i"]), np.asarray(tree["i"]))
    assert back["b"].dtype == jnp.bool_ and np.asarray(back["b"]).tolist() == [True, False]
    np.testing.assert_array_equal(jax.random.key_data(back["k"]), jax.random.key_data(tree["k"]))
    with pytest.raises(ValueError, match="float16"):
        payload_of(jnp.zeros(2, jnp.float16))
