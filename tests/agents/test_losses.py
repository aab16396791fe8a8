"""The per-example TD errors and the Huber loss against hand-computed values and optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from drlhet.agents.losses import double_q_td, huber, q_td


def test_double_q_td_bootstraps_the_target_nets_value_of_the_online_nets_action():
    # the online net picks action 2 at s_t; the target net's own maximum (action 0) is ignored
    q_tm1 = jnp.array([1.0, 2.0, 3.0])
    q_t_target = jnp.array([10.0, 4.0, 6.0])
    q_t_online = jnp.array([0.0, 1.0, 5.0])
    td = double_q_td(
        q_tm1, jnp.int32(1), jnp.float32(0.5), jnp.float32(0.9), q_t_target, q_t_online
    )
    np.testing.assert_allclose(td, 0.5 + 0.9 * 6.0 - 2.0, rtol=1e-6)
    # a terminal transition (discount 0) targets the reward alone
    td = double_q_td(
        q_tm1, jnp.int32(0), jnp.float32(0.5), jnp.float32(0.0), q_t_target, q_t_online
    )
    np.testing.assert_allclose(td, 0.5 - 1.0)


def test_q_learning_td_against_hand_computed_values():
    td = jax.vmap(q_td)(
        jnp.array([1.0, 2.0]),
        jnp.array([1.0, -1.0]),
        jnp.array([0.99**3, 0.0]),
        jnp.array([4.0, 7.0]),
    )
    np.testing.assert_allclose(td, [1.0 + 0.99**3 * 4.0 - 1.0, -1.0 - 2.0], rtol=1e-6)


def test_td_errors_carry_gradient_only_through_q_tm1():
    """The targets are constants (rlax's stop_gradient): d td / d q_tm1[a] = -1, else 0."""
    q_tm1, q_t_target, q_t_online = (
        jnp.array([1.0, 2.0]),
        jnp.array([3.0, 4.0]),
        jnp.array([0.0, 1.0]),
    )
    grads = jax.grad(double_q_td, argnums=(0, 4, 5))(
        q_tm1, jnp.int32(1), jnp.float32(1.0), jnp.float32(0.9), q_t_target, q_t_online
    )
    np.testing.assert_array_equal(grads[0], [0.0, -1.0])
    np.testing.assert_array_equal(grads[1], [0.0, 0.0])
    np.testing.assert_array_equal(grads[2], [0.0, 0.0])
    g_tm1, g_t = jax.grad(q_td, argnums=(0, 3))(2.0, 1.0, 0.9, 3.0)
    assert (float(g_tm1), float(g_t)) == (-1.0, 0.0)


@pytest.mark.parametrize("delta", [0.25, 1.0, 3.0])
def test_huber_matches_optax_and_its_gradient_is_the_clipped_error(delta):
    x = jnp.linspace(-10.0, 10.0, 401)
    np.testing.assert_allclose(huber(x, delta), optax.huber_loss(x, delta=delta), rtol=1e-6)
    # quadratic inside [-delta, delta], linear with slope delta outside (the clipped TD error)
    np.testing.assert_allclose(
        jax.vmap(jax.grad(huber), (0, None))(x, delta), jnp.clip(x, -delta, delta)
    )
