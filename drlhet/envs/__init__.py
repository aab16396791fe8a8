"""Environments as pure functions, vectorised over a batch: a thin gymnax 1.0 adapter and probes.

`make_env(name, num_envs)` returns an `EnvFns` whose ``reset`` and ``step`` act on ``[N]``
environments at once and auto-reset finished ones. ``step`` returns the transition's true next
observation (before any reset) separately from the observation to act on, and distinguishes
termination (no bootstrap: discount 0) from truncation (time limit: bootstrap from next_obs).

Probe environments (names starting ``probe-``) have known values for tests:
  probe-constant   one step, reward 1                         Q = 1
  probe-two-step   obs 0 -> obs 1 -> end, reward 1 at the end  Q(0) = gamma, Q(1) = 1
  probe-action     one step, reward 1 iff action == obs        Q(s, a) = [a == s]
  probe-continuous one step, reward -(a - 0.5)^2 (1-d action)  best action 0.5, Q = 0
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["EnvFns", "EnvStep", "make_env", "GYMNAX_ENVS"]

GYMNAX_ENVS = (
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "Pendulum-v1",
    "MountainCarContinuous-v0",
)


class EnvStep(NamedTuple):
    """One vectorised step. All fields ``[N, ...]``.

    Attributes:
      obs: observation to act on next (the reset observation where an episode ended).
      next_obs: the transition's true next observation (before any reset).
      reward: ``[N]`` float32.
      terminated: ``[N]`` bool, a terminal state: do not bootstrap.
      truncated: ``[N]`` bool, cut by a time limit: bootstrap from ``next_obs``.
    """

    obs: jax.Array
    next_obs: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array


class EnvFns(NamedTuple):
    """A batch of environments.

    Attributes:
      reset: ``(key) -> (obs [N, ...], state)``.
      step: ``(state, action [N, ...], key) -> (state, EnvStep)``.
      obs_shape: shape of one observation, flattened: ``(D,)``.
      discrete: whether actions are integers in ``[0, num_actions)``.
      num_actions: number of discrete actions (0 if continuous).
      action_dim: size of a continuous action (0 if discrete).
      action_low, action_high: bounds of a continuous action (scalars).
      num_envs: N.
      max_steps: episode time limit (steps).
    """

    reset: Callable[..., Any]
    step: Callable[..., Any]
    obs_shape: tuple[int, ...]
    discrete: bool
    num_actions: int
    action_dim: int
    action_low: float
    action_high: float
    num_envs: int
    max_steps: int


class _Probe(NamedTuple):
    reset: Callable[[jax.Array], tuple[jax.Array, jax.Array]]
    step: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array, jax.Array, jax.Array]]
    obs_dim: int
    num_actions: int
    action_dim: int


def _probe(name: str) -> _Probe:
    one = jnp.ones((1,), jnp.float32)
    if name == "probe-constant":
        return _Probe(
            lambda key: (one, jnp.int32(0)),
            lambda s, a: (one, s, jnp.float32(1), jnp.bool_(True)),
            1,
            2,
            0,
        )
    if name == "probe-two-step":
        return _Probe(
            lambda key: (jnp.zeros((1,)), jnp.int32(0)),
            lambda s, a: (jnp.ones((1,)), s + 1, jnp.where(s == 1, 1.0, 0.0), s == 1),
            1,
            2,
            0,
        )
    if name == "probe-action":

        def reset(key):
            s = jax.random.bernoulli(key).astype(jnp.int32)
            return s.astype(jnp.float32)[None], s

        return _Probe(
            reset,
            lambda s, a: (
                s.astype(jnp.float32)[None],
                s,
                (a == s).astype(jnp.float32),
                jnp.bool_(True),
            ),
            1,
            2,
            0,
        )
    if name == "probe-continuous":
        return _Probe(
            lambda key: (one, jnp.int32(0)),
            lambda s, a: (one, s, -jnp.sum((a - 0.5) ** 2), jnp.bool_(True)),
            1,
            0,
            1,
        )
    raise ValueError(f"unknown probe environment {name!r}")


def make_env(name: str, num_envs: int = 1, seeds: int = 1) -> EnvFns:
    """Builds ``num_envs`` copies of environment ``name``: a gymnax id, a probe, or
    ``gymnasium:<id>`` (any gymnasium environment, stepped on the host: `drlhet.envs.host`).
    ``seeds``: how many seeds will `jax.vmap` over them (a host environment's ``seeds x
    num_envs`` simulators must fit in this machine's memory: `drlhet.envs.host_room`).

    Raises:
      ValueError: an unknown name, ``num_envs < 1``, or more host environments than fit here.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if name.startswith("gymnasium:"):
        from drlhet.envs.host import make_host_env

        return make_host_env(name, num_envs, seeds)
    if name.startswith("probe-"):
        p = _probe(name)

        def probe_reset(key):
            return jax.vmap(p.reset)(jax.random.split(key, num_envs))

        def probe_step(state, action, key):
            next_obs, s, r, term = jax.vmap(p.step)(state, action)
            obs, fresh = probe_reset(key)
            done = term
            state = jnp.where(done, fresh, s)
            obs = jnp.where(done[:, None], obs, next_obs)
            return state, EnvStep(obs, next_obs, r.astype(jnp.float32), done, jnp.zeros_like(done))

        return EnvFns(
            probe_reset,
            probe_step,
            (p.obs_dim,),
            p.num_actions > 0,
            p.num_actions,
            p.action_dim,
            -1.0,
            1.0,
            num_envs,
            2,
        )

    return _gymnax_env(name, num_envs)


def _gymnax_env(name: str, num_envs: int) -> EnvFns:
    """``num_envs`` copies of gymnax's ``name`` (`make_env`), their observations flattened."""
    from drlhet.envs.lazy_import import import_gymnax

    gymnax = import_gymnax()  # without the seaborn and pyplot its Pong imports to render
    if name not in gymnax.registered_envs:
        raise ValueError(f"unknown environment {name!r}; gymnax offers e.g. {GYMNAX_ENVS}")
    env, params = gymnax.make(name)
    space = env.action_space(params)
    discrete = hasattr(space, "n")
    shape = tuple(env.observation_space(params).shape)
    obs_shape = (math.prod(shape),)  # flat: the agents' networks are MLPs

    def flat(obs):  # [N, *shape] -> [N, prod(shape)] (MinAtar's [N, 10, 10, C], say)
        return obs if shape == obs_shape else obs.reshape(num_envs, *obs_shape)

    def reset(key):
        keys = jax.random.split(key, num_envs)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
        return flat(obs), state

    def step(state, action, key):
        keys = jax.random.split(key, num_envs)
        obs, state, reward, term, trunc, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            keys, state, action, params
        )
        return state, EnvStep(
            flat(obs),
            flat(info["final_observation"]),
            reward.astype(jnp.float32),
            term,
            trunc & ~term,
        )

    low, high = _uniform_bounds(space)
    return EnvFns(
        reset,
        step,
        obs_shape,
        discrete,
        int(space.n) if discrete else 0,
        0 if discrete else int(space.shape[0] if space.shape else 1),
        low,
        high,
        num_envs,
        int(params.max_steps_in_episode),
    )


def _uniform_bounds(space: Any) -> tuple[float, float]:
    """``(low, high)`` of a gymnax action space, the same for every dimension (the agents scale
    one range; a space whose dimensions differ is refused, not collapsed to its extremes)."""
    low = np.asarray(getattr(space, "low", -1.0), np.float64)
    high = np.asarray(getattr(space, "high", 1.0), np.float64)
    if low.size and (np.ptp(low) > 0 or np.ptp(high) > 0):
        raise ValueError(
            f"the action space's bounds differ per dimension (low {low.tolist()}, high "
            f"{high.tolist()}): the agents take one range for every dimension"
        )
    return float(low.min()) if low.size else -1.0, float(high.max()) if high.size else 1.0
