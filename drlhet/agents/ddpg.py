"""DDPG (Lillicrap et al., 2016) with optional TD3 refinements (Fujimoto et al., 2018).

The DDPG is the TD3 authors' variant of it (their paper's "our DDPG"): Gaussian exploration
noise instead of Ornstein-Uhlenbeck, no weight decay on the critic, the action fed to the
critic's input layer, Polyak tau 0.005. With ``td3`` the critics' loss is the mean of the two
critics' squared TD errors (Fujimoto's code sums them: Adam's steps are the same, the logged
``loss`` is half of theirs).

`make_ddpg(config, ...)` returns `drlhet.agents.base.AgentFns(init, act, update)`;
``update`` returns ``|TD| + eps`` as the new priorities [B], the larger of the critics' |TD| for
TD3's twins (as the PER / LAP reference for TD3 does, Fujimoto et al., 2020).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import optax

from drlhet.agents.base import AgentFns
from drlhet.agents.losses import q_td
from drlhet.agents.networks import Actor, Critic
from drlhet.agents.ranges import (
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    UNIT,
    WIDTHS,
    check_ranges,
)

__all__ = ["DDPGConfig", "DDPGState", "make_ddpg", "RANGES"]


@dataclasses.dataclass(frozen=True)
class DDPGConfig:
    """DDPG / TD3 hyper-parameters."""

    hidden: tuple[int, ...] = (256, 256)
    """Hidden layers' widths, each >= 1 (ReLU); empty (the option with no width): a linear
    actor and critics."""
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    exploration_noise: float = 0.1
    """Gaussian noise std as a fraction of the half action range."""
    td3: bool = False
    """Twin critics (min), target policy smoothing and delayed actor updates."""
    target_noise: float = 0.2
    """TD3's target policy smoothing: Gaussian noise std as a fraction of the half action range
    (0.2 of Pendulum's 2: 0.4, as Fujimoto's 0.2 x max_action)."""
    target_noise_clip: float = 0.5
    """The smoothing noise clipped to +- this fraction of the half action range."""
    policy_delay: int = 2
    """TD3: critic steps per actor (and target) update."""
    priority_eps: float = 1e-6
    """Added to |TD| for the new priorities; > 0, so that a transition whose TD error is zero
    is still drawn (PER's epsilon, Schaul et al., 2016)."""
    actor_is_weights: bool = False
    """Weight the actor's loss by the batch's importance-sampling weights too: PER's bias
    correction (Schaul et al., 2016) applied to the policy objective, which otherwise follows
    the TD-error-skewed sampling distribution. Off by default (as the FPGA learner computes)."""


RANGES = {
    "hidden": WIDTHS,
    "actor_lr": POSITIVE,
    "critic_lr": POSITIVE,
    "gamma": UNIT,
    "tau": FRACTION,
    "exploration_noise": NON_NEGATIVE,
    "target_noise": NON_NEGATIVE,
    "target_noise_clip": NON_NEGATIVE,
    "policy_delay": COUNT,
    "priority_eps": POSITIVE,
}
"""`DDPGConfig`'s field -> `drlhet.agents.ranges.Rule` (`check_ranges`)."""


class DDPGState(NamedTuple):
    """Learner state (a pytree; donate it)."""

    actor: Any
    critic: Any
    target_actor: Any
    target_critic: Any
    actor_opt: Any
    critic_opt: Any
    steps: jax.Array


def _check(config: DDPGConfig, action_dim: int) -> None:
    check_ranges(config, RANGES)
    if action_dim < 1:
        raise ValueError(f"DDPG needs continuous actions, got action_dim={action_dim}")


def make_ddpg(
    config: DDPGConfig, obs_shape: tuple[int, ...], action_dim: int, low: float, high: float
) -> AgentFns:
    """Builds a DDPG (or TD3) agent for continuous actions in ``[low, high]^action_dim``;
    ``ValueError`` for no continuous actions or a hyper-parameter out of `RANGES`."""
    _check(config, action_dim)
    actor = Actor(config.hidden, action_dim, low, high)
    critic = Critic(config.hidden)
    n_critics = 2 if config.td3 else 1
    actor_opt = optax.adam(config.actor_lr)
    critic_opt = optax.adam(config.critic_lr)
    half_range = 0.5 * (high - low)

    def policy(params, obs) -> jax.Array:  # [..., action_dim]
        return cast(jax.Array, actor.apply(params, obs))

    def critic_apply(params, obs, action):  # [n_critics, B]
        return jax.vmap(lambda p: critic.apply(p, obs, action))(params)

    def init(key):
        ka, kc = jax.random.split(key)
        obs = jnp.zeros(obs_shape, jnp.float32)
        a_params = actor.init(ka, obs)
        c_params = jax.vmap(lambda k: critic.init(k, obs, jnp.zeros((action_dim,))))(
            jax.random.split(kc, n_critics)
        )
        return DDPGState(  # targets are copies: distinct buffers, since both are donated
            a_params,
            c_params,
            jax.tree.map(jnp.copy, a_params),
            jax.tree.map(jnp.copy, c_params),
            actor_opt.init(a_params),
            critic_opt.init(c_params),
            jnp.zeros((), jnp.int32),
        )

    def act(state, obs, key, env_steps, explore=True):
        a = policy(state.actor, obs)
        if not explore:
            return a
        noise = config.exploration_noise * half_range * jax.random.normal(key, a.shape)
        return jnp.clip(a + noise, low, high)

    def critic_loss(c_params, state, batch, weights, key):
        a_t = policy(state.target_actor, batch["next_obs"])
        if config.td3:
            eps = jnp.clip(
                config.target_noise * half_range * jax.random.normal(key, a_t.shape),
                -config.target_noise_clip * half_range,
                config.target_noise_clip * half_range,
            )
            a_t = jnp.clip(a_t + eps, low, high)
        q_t = jnp.min(critic_apply(state.target_critic, batch["next_obs"], a_t), axis=0)
        q_tm1 = critic_apply(c_params, batch["obs"], batch["action"])  # [n, B]
        td = jax.vmap(lambda q: jax.vmap(q_td)(q, batch["reward"], batch["discount"], q_t))(q_tm1)
        loss = jnp.mean(weights[None] * td**2)
        return loss, jnp.max(jnp.abs(td), axis=0)  # [B]: the larger of the critics' |td|

    def actor_loss(a_params, c_params, batch, weights):
        a = policy(a_params, batch["obs"])
        q = critic_apply(c_params, batch["obs"], a)[0]  # [B]
        return -jnp.mean(weights * q if config.actor_is_weights else q)

    def update(state, batch, weights, key):
        (c_loss, abs_td), c_grads = jax.value_and_grad(critic_loss, has_aux=True)(
            state.critic, state, batch, weights, key
        )
        c_updates, c_opt = critic_opt.update(c_grads, state.critic_opt, state.critic)
        c_params = optax.apply_updates(state.critic, c_updates)
        a_loss, a_grads = jax.value_and_grad(actor_loss)(state.actor, c_params, batch, weights)
        a_updates, a_opt = actor_opt.update(a_grads, state.actor_opt, state.actor)
        new = _step(config, state, c_params, c_opt, a_updates, a_opt)
        priorities = abs_td + config.priority_eps
        return (
            new,
            priorities,
            {"loss": c_loss, "actor_loss": a_loss, "abs_td": jnp.mean(abs_td)},
        )

    return AgentFns(init, act, update)


def _step(config: DDPGConfig, state: DDPGState, c_params, c_opt, a_updates, a_opt) -> DDPGState:
    """The new learner state: the critic always, the actor and the targets every step (DDPG)
    or every ``policy_delay`` steps (TD3's delayed policy updates)."""
    steps = state.steps + 1
    do_actor = (steps % config.policy_delay == 0) if config.td3 else jnp.bool_(True)
    a_params = jax.tree.map(
        lambda new, old: jnp.where(do_actor, new, old),
        optax.apply_updates(state.actor, a_updates),
        state.actor,
    )
    a_opt = jax.tree.map(lambda new, old: jnp.where(do_actor, new, old), a_opt, state.actor_opt)
    tau = jnp.where(do_actor, config.tau, 0.0)
    return DDPGState(
        a_params,
        c_params,
        optax.incremental_update(a_params, state.target_actor, tau),
        optax.incremental_update(c_params, state.target_critic, tau),
        a_opt,
        c_opt,
        steps,
    )
