"""Host environments: any gymnasium id, stepped on the host CPU outside XLA, as an `EnvFns`.

``make_env("gymnasium:Hopper-v5", N)`` returns the same `EnvFns` as a gymnax environment, so
every path of the loop (fused, per-iteration, pipelined) trains it unchanged; ``reset`` and
``step`` are `jax.pure_callback` calls into a pool of ``S x N`` gymnasium environments (S: the
seeds the callers vmap over, N: ``num_envs``) that lives in this process. The callback is
vectorised over the seeds (``vmap_method="expand_dims"``): one call steps every environment of
every seed. The step is impure, so each call takes the environments' step counters (the
``env_state``, ``[N]`` int32) and returns them incremented: consecutive steps depend on each
other and XLA can neither merge nor reorder them.

Semantics follow `drlhet.envs` (gymnax): an environment that ends is reset at once and ``obs``
is the reset observation, ``next_obs`` the true final one; ``terminated`` (no bootstrap) and
``truncated`` (the time limit, ``spec.max_episode_steps``) are kept apart, termination winning
when both hold. Each environment is seeded once per ``reset`` from the JAX key; its later
episodes continue its own generator.

Spaces: observations a `gymnasium.spaces.Box` (any shape, cast to float32); actions
``Discrete(n)`` starting at 0, or a 1-d ``Box`` with finite bounds. Bounds that differ between
dimensions are exposed to the agent as [-1, 1] and rescaled on the host. Anything else raises a
`ValueError` naming the space.

Limits: the environments' simulator state is not part of the `TrainState`, so a run resumed
from a checkpoint starts fresh episodes (`drlhet.runtime.run` resets them and cuts the episodes
in the n-step FIFO where they stood, as truncations); host callbacks also keep the program out
of JAX's persistent compilation cache.
"""

from __future__ import annotations

import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["PREFIX", "HostPool", "make_host_env", "is_host_env"]

PREFIX = "gymnasium:"
"""Environment names with this prefix are gymnasium ids run on the host."""


def is_host_env(name: str) -> bool:
    return name.startswith(PREFIX)


def _gymnasium():
    try:
        import gymnasium
    except ImportError as e:
        raise ValueError(
            "missing library: gymnasium (install the extra: pip install 'drlhet[gymnasium]')"
        ) from e
    return gymnasium


def _check_spaces(name: str, env) -> tuple[tuple[int, ...], bool, int, np.ndarray, np.ndarray]:
    """``(obs_shape, discrete, num_actions or action_dim, low, high)`` of ``env``'s spaces
    (``obs_shape`` flattened, ``(D,)``).

    Raises:
      ValueError: a space drlhet cannot train on, named.
    """
    spaces = _gymnasium().spaces
    obs, act = env.observation_space, env.action_space
    if not isinstance(obs, spaces.Box):
        raise ValueError(
            f"{name}: observation space {obs} is not supported (drlhet needs a Box; flatten or "
            "one-hot it with a gymnasium wrapper)"
        )
    flat = (int(np.prod(obs.shape)),)  # the observations flattened (the agents are MLPs)
    if isinstance(act, spaces.Discrete):
        if int(act.start) != 0:
            raise ValueError(f"{name}: action space {act} must start at 0")
        return flat, True, int(act.n), np.zeros(()), np.zeros(())
    if isinstance(act, spaces.Box) and len(act.shape) == 1:
        low, high = act.low.astype(np.float64), act.high.astype(np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
            raise ValueError(f"{name}: action space {act} needs finite bounds, low < high")
        return flat, False, int(act.shape[0]), low, high
    raise ValueError(
        f"{name}: action space {act} is not supported (drlhet needs Discrete(n) or a 1-d Box)"
    )


class HostPool:
    """``S x N`` gymnasium environments of one id on the host (mutable; host side only).

    Created empty; the first ``reset`` makes the environments for the number of seeds it is
    called with (a ``step`` before any makes them too, see `step`). Thread-safe: XLA may call
    from any thread.
    """

    def __init__(self, env_id: str, num_envs: int, low: np.ndarray, high: np.ndarray, scale: bool):
        self.env_id, self.num_envs = env_id, num_envs
        self.low, self.high, self.scale = low, high, scale
        self.envs: list[Any] = []
        self.lock = threading.RLock()

    def _make(self, seeds: int) -> None:
        if len(self.envs) != seeds * self.num_envs:
            self.close()
            gym = _gymnasium()
            self.envs = [gym.make(self.env_id) for _ in range(seeds * self.num_envs)]

    def close(self) -> None:
        for e in self.envs:
            e.close()
        self.envs = []

    def _obs(self, obs) -> np.ndarray:
        return np.asarray(obs, np.float32)

    def reset(self, seeds: np.ndarray) -> np.ndarray:
        """Seeds ``[S]`` (one per seed of the run) -> observations ``[S, N, ...]``."""
        with self.lock:
            self._make(len(seeds))
            rng = [np.random.SeedSequence(int(s)).generate_state(self.num_envs) for s in seeds]
            words = np.concatenate(rng)
            return np.stack(
                [self._obs(e.reset(seed=int(w))[0]) for e, w in zip(self.envs, words, strict=True)]
            ).reshape(len(seeds), self.num_envs, -1)

    def _action(self, a: np.ndarray):
        if self.low.ndim == 0:
            return int(a)
        a = np.asarray(a, np.float64)
        if self.scale:
            a = self.low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (self.high - self.low)
        return np.clip(a, self.low, self.high).astype(np.float32)

    def step(self, counters: np.ndarray, actions: np.ndarray):
        """Counters ``[S, N]``, actions ``[S, N, ...]`` -> ``(obs, next_obs, reward,
        terminated, truncated)``, each ``[S, N, ...]``; finished environments are reset. A step
        before any reset for these seeds (a saved state stepped without `drlhet.runtime.run`'s
        fresh episodes) takes no action: it starts fresh episodes and returns a cut step
        (reward 0, truncated, from the reset observations)."""
        seeds = actions.shape[0]
        with self.lock:
            if len(self.envs) != seeds * self.num_envs:  # no reset yet: fresh episodes
                obs = self.reset(np.asarray(counters).reshape(seeds, -1)[:, 0] + 1)
                zero = np.zeros((seeds, self.num_envs), np.float32)
                cut = np.ones((seeds, self.num_envs), bool)
                return obs, obs, zero, ~cut, cut
            flat = actions.reshape(-1, *actions.shape[2:])
            out = [self._one(e, a) for e, a in zip(self.envs, flat, strict=True)]
        obs, nxt, rew, term, trunc = (np.stack(x) for x in zip(*out, strict=True))
        shape = (seeds, self.num_envs)
        return (
            obs.reshape(*shape, -1),
            nxt.reshape(*shape, -1),
            rew.reshape(shape).astype(np.float32),
            term.reshape(shape),
            (trunc & ~term).reshape(shape),
        )

    def _one(self, env, action):
        obs, reward, term, trunc, _ = env.step(self._action(action))
        nxt = self._obs(obs)
        if term or trunc:
            obs = env.reset()[0]
        return self._obs(obs), nxt, np.float32(reward), bool(term), bool(trunc)


def _batched(x: np.ndarray, ndim: int) -> np.ndarray:
    """``x`` with a leading seeds axis (added as size 1 when the caller did not vmap)."""
    x = np.asarray(x)
    return x if x.ndim == ndim + 1 else x[None]


def make_host_env(name: str, num_envs: int):
    """The `drlhet.envs.EnvFns` of gymnasium id ``name`` (``"gymnasium:<id>"``).

    Raises:
      ValueError: gymnasium missing, an unknown id, or spaces drlhet cannot train on.
    """
    from drlhet.envs import EnvFns, EnvStep

    gym, env_id = _gymnasium(), name[len(PREFIX) :]
    try:
        probe = gym.make(env_id)
    except gym.error.Error as e:
        raise ValueError(f"unknown environment {name!r}: {e}") from e
    try:
        obs_shape, discrete, n, low, high = _check_spaces(name, probe)
        max_steps = probe.spec.max_episode_steps if probe.spec else None
    finally:
        probe.close()
    if not max_steps:
        raise ValueError(f"{name}: no time limit (spec.max_episode_steps); register one")
    scale = not discrete and not (np.all(low == low[0]) and np.all(high == high[0]))
    pool = HostPool(env_id, num_envs, low, high, scale)
    obs_t = jax.ShapeDtypeStruct((num_envs, *obs_shape), jnp.float32)

    def host_reset(seed):
        seeds = np.asarray(seed).reshape(-1)
        obs = pool.reset(seeds).reshape(len(seeds), num_envs, *obs_shape)
        return obs if np.ndim(seed) else obs[0]

    def reset(key):
        seed = jax.random.randint(key, (), 0, np.iinfo(np.int32).max)
        obs = jax.pure_callback(host_reset, obs_t, seed, vmap_method="expand_dims")
        return obs, jnp.zeros((num_envs,), jnp.int32)

    act_ndim = 1 if discrete else 2

    def host_step(counters, actions):
        batched = np.ndim(actions) == act_ndim + 1
        acts = _batched(actions, act_ndim)
        counts = np.broadcast_to(_batched(counters, 1), acts.shape[:2])
        out = pool.step(counts, acts)
        shaped = [x.reshape(acts.shape[0], num_envs, *obs_shape) for x in out[:2]] + list(out[2:])
        return tuple(x if batched else x[0] for x in shaped)

    n_t = jax.ShapeDtypeStruct((num_envs,), jnp.float32)
    b_t = jax.ShapeDtypeStruct((num_envs,), jnp.bool_)

    def step(state, action, key):
        del key  # the host environments own their randomness
        shapes = (obs_t, obs_t, n_t, b_t, b_t)
        obs, nxt, rew, term, trunc = jax.pure_callback(
            host_step, shapes, state, action, vmap_method="expand_dims"
        )
        return state + 1, EnvStep(obs, nxt, rew, term, trunc)

    bounded = scale or discrete
    return EnvFns(
        reset,
        step,
        obs_shape,
        discrete,
        n if discrete else 0,
        0 if discrete else n,
        -1.0 if bounded else float(low[0]),
        1.0 if bounded else float(high[0]),
        num_envs,
        int(max_steps),
    )
