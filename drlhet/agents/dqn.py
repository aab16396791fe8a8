"""DQN (Mnih et al., 2015) with double Q-learning, dueling head and importance-weighted Huber loss.

`make_dqn(config, obs_shape, num_actions)` returns `drlhet.agents.base.AgentFns(init, act,
update)`; ``update`` returns the new
priorities ``|TD| + eps`` of the trained batch for the prioritized buffer (Schaul et al., 2016).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import optax

from drlhet.agents.base import AgentFns
from drlhet.agents.losses import double_q_td, huber, q_td
from drlhet.agents.networks import QNetwork
from drlhet.agents.ranges import (
    CLIP_NORM,
    FRACTION,
    NATURAL,
    POSITIVE,
    UNIT,
    WIDTHS,
    check_ranges,
)

__all__ = ["DQNConfig", "DQNState", "make_dqn", "linear_schedule", "RANGES"]


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN hyper-parameters.

    With `drlhet.runtime.config.TrainConfig`'s defaults (4 envs, 2 SGD steps of 128 per
    iteration, 3-step returns, PER) these reached a greedy evaluation return >= 475 on
    CartPole-v1 for 5 of 5 seeds within 31k-46k env steps in tuning (measured; see
    docs/results.md for the recorded run).
    """

    hidden: tuple[int, ...] = (64, 64)
    """Hidden layers' widths, each >= 1 (ReLU); empty (the option with no width): a linear
    Q-network, the observation straight to the heads."""
    learning_rate: float = 5e-4
    gamma: float = 0.99
    double: bool = True
    dueling: bool = True
    target_period: int = 0
    """SGD steps between hard target updates (0: Polyak averaging with ``tau`` every step)."""
    tau: float = 0.01
    huber_delta: float = 1.0
    max_grad_norm: float = 10.0
    epsilon_start: float = 1.0
    epsilon_end: float = 0.02
    epsilon_steps: int = 10_000
    """Env steps (all environments together) over which epsilon decays linearly, counted from
    the run's first env step: the random warm-up's steps included (as Stable-Baselines3
    counts; Dopamine starts after the warm-up)."""
    priority_eps: float = 1e-6
    """Added to |TD| for the new priorities; > 0, so that a transition whose TD error is zero
    is still drawn (PER's epsilon, Schaul et al., 2016)."""


RANGES = {
    "hidden": WIDTHS,
    "learning_rate": POSITIVE,
    "gamma": UNIT,
    "target_period": NATURAL,
    "tau": FRACTION,
    "huber_delta": POSITIVE,
    "max_grad_norm": CLIP_NORM,
    "epsilon_start": UNIT,
    "epsilon_end": UNIT,
    "epsilon_steps": NATURAL,
    "priority_eps": POSITIVE,
}
"""`DQNConfig`'s field -> `drlhet.agents.ranges.Rule` (`check_ranges`)."""


class DQNState(NamedTuple):
    """Learner state (a pytree; donate it)."""

    params: Any
    target_params: Any
    opt_state: Any
    steps: jax.Array  # [] int32 SGD steps taken


def linear_schedule(start: float, end: float, steps: int):
    """``t -> start + (end - start) * min(t / steps, 1)``; over ``steps = 0``, ``end`` from
    ``t = 0`` (no decay)."""

    def fn(t):
        if steps <= 0:
            return jnp.full((), end, jnp.float32)
        frac = jnp.clip(jnp.asarray(t, jnp.float32) / steps, 0.0, 1.0)
        return start + (end - start) * frac

    return fn


def make_dqn(config: DQNConfig, obs_shape: tuple[int, ...], num_actions: int) -> AgentFns:
    """Builds a DQN agent for ``num_actions`` discrete actions and observations ``obs_shape``;
    ``ValueError`` for no discrete actions or a hyper-parameter out of `RANGES`."""
    check_ranges(config, RANGES)
    if num_actions < 1:
        raise ValueError(f"DQN needs discrete actions, got num_actions={num_actions}")
    net = QNetwork(config.hidden, num_actions, config.dueling)
    opt = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate)
    )
    epsilon = linear_schedule(config.epsilon_start, config.epsilon_end, config.epsilon_steps)

    def q_values(params, obs) -> jax.Array:  # [..., num_actions]
        return cast(jax.Array, net.apply(params, obs))

    def init(key):
        params = net.init(key, jnp.zeros(obs_shape, jnp.float32))
        target = jax.tree.map(jnp.copy, params)  # distinct buffers: both are donated
        return DQNState(params, target, opt.init(params), jnp.zeros((), jnp.int32))

    def act(state, obs, key, env_steps, explore=True):
        q = q_values(state.params, obs)
        greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
        if not explore:
            return greedy
        k1, k2 = jax.random.split(key)
        random = jax.random.randint(k1, greedy.shape, 0, num_actions, jnp.int32)
        take_random = jax.random.uniform(k2, greedy.shape) < epsilon(env_steps)
        return jnp.where(take_random, random, greedy)

    def loss_fn(params, target_params, batch, weights):
        q_tm1 = q_values(params, batch["obs"])
        q_t_target = q_values(target_params, batch["next_obs"])
        if config.double:
            q_t_online = q_values(params, batch["next_obs"])
            td = jax.vmap(double_q_td)(
                q_tm1, batch["action"], batch["reward"], batch["discount"], q_t_target, q_t_online
            )
        else:
            q_sel = jnp.take_along_axis(q_tm1, batch["action"][:, None], axis=1)[:, 0]
            td = jax.vmap(q_td)(
                q_sel, batch["reward"], batch["discount"], jnp.max(q_t_target, axis=-1)
            )
        loss = jnp.mean(weights * huber(td, config.huber_delta))
        return loss, td

    def update(state, batch, weights, key):
        del key  # DQN's update draws no noise
        (loss, td), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.target_params, batch, weights
        )
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        steps = state.steps + 1
        if config.target_period > 0:
            target = optax.periodic_update(params, state.target_params, steps, config.target_period)
        else:
            target = optax.incremental_update(params, state.target_params, config.tau)
        priorities = jnp.abs(td) + config.priority_eps
        metrics = {"loss": loss, "abs_td": jnp.mean(jnp.abs(td))}
        return DQNState(params, target, opt_state, steps), priorities, metrics

    return AgentFns(init, act, update)
