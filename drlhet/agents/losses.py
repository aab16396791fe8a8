"""Per-example TD errors and losses (vmapped by the caller), rlax-style ``_tm1`` / ``_t`` names."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["double_q_td", "q_td", "huber"]


def double_q_td(
    q_tm1: jax.Array,
    a_tm1: jax.Array,
    r_t: jax.Array,
    discount_t: jax.Array,
    q_t_target: jax.Array,
    q_t_online: jax.Array,
) -> jax.Array:
    """Double Q-learning TD error for one transition (van Hasselt et al., 2016).

    Args:
      q_tm1: ``[A]`` online Q-values at s_{t-1}.
      a_tm1: ``[]`` action taken.
      r_t: ``[]`` reward.
      discount_t: ``[]`` discount (0 at a terminal state; gamma^n for n-step).
      q_t_target: ``[A]`` target-network Q-values at s_t.
      q_t_online: ``[A]`` online Q-values at s_t (select the bootstrap action).

    Returns:
      ``[]`` TD error ``target - q_tm1[a_tm1]`` (the target carries no gradient).
    """
    a_t = jnp.argmax(q_t_online)
    target = jax.lax.stop_gradient(r_t + discount_t * q_t_target[a_t])
    return target - q_tm1[a_tm1]


def q_td(q_tm1: jax.Array, r_t: jax.Array, discount_t: jax.Array, q_t: jax.Array) -> jax.Array:
    """TD error ``r + discount * q_t - q_tm1`` for one transition (no gradient through q_t)."""
    return jax.lax.stop_gradient(r_t + discount_t * q_t) - q_tm1


def huber(x: jax.Array, delta: float = 1.0) -> jax.Array:
    """Huber loss of a TD error, elementwise."""
    ax = jnp.abs(x)
    return jnp.where(ax <= delta, 0.5 * x**2, delta * (ax - 0.5 * delta))
