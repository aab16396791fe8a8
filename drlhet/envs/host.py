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

Failures: an environment that raises (in ``gym.make``, ``reset`` or ``step``) or returns what
drlhet cannot train on (an observation of another shape than its space's, or not numbers; a
reward that is not one number; NaN or inf in either) raises `HostEnvError`, one line naming the
id and what it did; so does a continuous action that is not finite (a diverged policy). Inside
a jitted program XLA raises a `jax.errors.JaxRuntimeError` quoting it instead: `failure_in`
finds the `HostEnvError` behind it.

Size: from `MEASURE_FROM` environments (all seeds') on, what one costs in memory is measured on
a few (`drlhet.envs.host_room`) and a count past this machine's available memory is refused,
by `make_host_env` (as the configuration is checked) and by the pool before it makes the rest;
a bar shows while many are made (on a terminal).

Limits: the environments' simulator state is not part of the `TrainState`, so a run resumed
from a checkpoint starts fresh episodes (`drlhet.runtime.run` resets them and cuts the episodes
in the n-step FIFO where they stood, as truncations); host callbacks also keep the program out
of JAX's persistent compilation cache.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.envs.host_room import (
    MEASURE_FROM,
    PROBES,
    cost_each,
    making_bar,
    refuse_past_room,
    room,
)

__all__ = ["PREFIX", "HostEnvError", "HostPool", "failure_in", "make_host_env", "is_host_env"]

PREFIX = "gymnasium:"
"""Environment names with this prefix are gymnasium ids run on the host."""


def is_host_env(name: str) -> bool:
    return name.startswith(PREFIX)


class HostEnvError(RuntimeError):
    """A host environment failed, or broke the contract drlhet trains on; the message is one
    line naming the environment and what it did."""


_LATEST: list[HostEnvError] = []
"""The latest `HostEnvError` raised (in a callback, XLA raises another error quoting it)."""


def _failed(name: str, what: str) -> HostEnvError:
    error = HostEnvError(f"{name}: {what}")
    _LATEST[:] = [error]
    return error


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def failure_in(e: BaseException) -> HostEnvError | None:
    """The `HostEnvError` behind ``e``: ``e`` itself, or the latest one a host environment raised
    in a callback when ``e`` (the error XLA raises for it: a `jax.errors.JaxRuntimeError`, or
    another type) quotes it; else None."""
    if isinstance(e, HostEnvError):
        return e
    latest = _LATEST[0] if _LATEST else None
    return latest if latest is not None and str(latest) in str(e) else None


class _QuietHostFailures(logging.Filter):
    """Drops JAX's log of a failed callback (a traceback on stderr) when the failure is a
    `HostEnvError`: the error XLA raises quotes it, and a caller reports it as it sees fit."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], HostEnvError))


logging.getLogger("jax._src.callback").addFilter(_QuietHostFailures())


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


def _made(env_id: str):
    """``gym.make(env_id)``; what it raises, as `HostEnvError` naming the id."""
    try:
        return _gymnasium().make(env_id)
    except Exception as e:  # noqa: BLE001 - the environment's own code: named
        raise _failed(PREFIX + env_id, f"gym.make raised {_first_line(e)}") from e


class HostPool:
    """``S x N`` gymnasium environments of one id on the host (mutable; host side only).

    Created empty; the first ``reset`` makes the environments for the number of seeds it is
    called with (a ``step`` before any makes them too, see `step`). Thread-safe: XLA may call
    from any thread. What an environment raises or returns that drlhet cannot train on raises
    `HostEnvError` (see the module's docstring).
    """

    def __init__(self, env_id: str, num_envs: int, low: np.ndarray, high: np.ndarray, scale: bool):
        self.env_id, self.num_envs = env_id, num_envs
        self.low, self.high, self.scale = low, high, scale
        self.name = PREFIX + env_id
        self.envs: list[Any] = []
        self.obs_shape: tuple[int, ...] = ()
        self.act_dtype = np.dtype(np.float32)
        self.lock = threading.RLock()

    def _make(self, seeds: int) -> None:
        """Makes the ``seeds x num_envs`` environments (unless made); from `MEASURE_FROM` on,
        refuses (`HostEnvError`, none kept) as many as this machine lacks the memory for,
        measured on the first ones, and shows a bar while they are made."""
        count = seeds * self.num_envs
        if len(self.envs) == count:
            return
        self.close()
        self.envs.append(_made(self.env_id))
        if count >= MEASURE_FROM:
            why = room(count, 1 + PROBES, cost_each(lambda: _made(self.env_id), self.envs))
            if why:
                self.close()
                raise _failed(self.name, why)
        with making_bar(self.name, count, len(self.envs)) as bar:
            while len(self.envs) < count:
                self.envs.append(_made(self.env_id))
                bar.update()
        self.obs_shape = tuple(self.envs[0].observation_space.shape)
        self.act_dtype = np.dtype(self.envs[0].action_space.dtype)

    def close(self) -> None:
        for e in self.envs:
            e.close()
        self.envs = []

    def _obs(self, obs, what: str) -> np.ndarray:
        """``obs`` as float32, refused (named) unless numbers of the space's shape, finite."""
        x = np.asarray(obs)
        if x.dtype.kind not in "biuf":
            raise _failed(
                self.name, f"{what} returned an observation of dtype {x.dtype}, expected numbers"
            )
        if x.shape != self.obs_shape:
            raise _failed(
                self.name,
                f"{what} returned an observation of shape {x.shape}, expected {self.obs_shape}",
            )
        with np.errstate(over="ignore"):  # beyond float32: inf, refused below
            x = x.astype(np.float32)
        if not np.all(np.isfinite(x)):
            i = int(np.flatnonzero(~np.isfinite(x))[0])
            bad = np.asarray(obs).reshape(-1)[i]
            raise _failed(self.name, f"{what} returned an observation holding {bad} (at {i})")
        return x

    def _reward(self, reward) -> np.float32:
        r = np.asarray(reward)
        if r.dtype.kind not in "biuf" or r.size != 1:
            said = f"{reward!r}"[:60]
            raise _failed(
                self.name,
                f"step returned a reward {said} ({type(reward).__name__}), expected one number",
            )
        with np.errstate(over="ignore"):
            finite = np.isfinite(r.astype(np.float32)).all()
        if not finite:
            raise _failed(self.name, f"step returned a reward of {r.reshape(()).item()}")
        return np.float32(r.reshape(()))

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except HostEnvError:
            raise
        except Exception as e:  # noqa: BLE001 - the environment's own code: named
            raise _failed(self.name, f"{what} raised {_first_line(e)}") from e

    def _reset_one(self, env, **kwargs) -> np.ndarray:
        out = self._call("reset", env.reset, **kwargs)
        if not (isinstance(out, tuple) and len(out) == 2):
            said = type(out).__name__
            raise _failed(self.name, f"reset returned a {said}, expected (observation, info)")
        return self._obs(out[0], "reset")

    def reset(self, seeds: np.ndarray) -> np.ndarray:
        """Seeds ``[S]`` (one per seed of the run) -> observations ``[S, N, ...]``."""
        with self.lock:
            self._make(len(seeds))
            rng = [np.random.SeedSequence(int(s)).generate_state(self.num_envs) for s in seeds]
            words = np.concatenate(rng)
            return np.stack(
                [self._reset_one(e, seed=int(w)) for e, w in zip(self.envs, words, strict=True)]
            ).reshape(len(seeds), self.num_envs, -1)

    def _action(self, a: np.ndarray):
        if self.low.ndim == 0:
            return int(a)
        a = np.asarray(a, np.float64)
        if not np.all(np.isfinite(a)):  # clipping would hide a diverged policy's NaN
            raise _failed(self.name, f"the agent's action {a} is not finite")
        if self.scale:
            a = self.low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (self.high - self.low)
        # in the space's dtype: a float64 bound is not a float32, its rounding may lie outside
        return np.clip(a, self.low, self.high).astype(self.act_dtype)

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

    def _flag(self, value, field: str) -> bool:
        if np.asarray(value).dtype.kind not in "biu" or np.size(value) != 1:
            raise _failed(self.name, f"step returned {field}={value!r:.60}, expected a bool")
        return bool(np.asarray(value).reshape(()))

    def _one(self, env, action):
        obs, reward, term, trunc, _ = self._call("step", env.step, self._action(action))
        nxt, reward = self._obs(obs, "step"), self._reward(reward)
        term, trunc = self._flag(term, "terminated"), self._flag(trunc, "truncated")
        if term or trunc:
            return self._reset_one(env), nxt, reward, term, trunc
        return nxt, nxt, reward, term, trunc


def _batched(x: np.ndarray, ndim: int) -> np.ndarray:
    """``x`` with a leading seeds axis (added as size 1 when the caller did not vmap)."""
    x = np.asarray(x)
    return x if x.ndim == ndim + 1 else x[None]


def make_host_env(name: str, num_envs: int, seeds: int = 1):
    """The `drlhet.envs.EnvFns` of gymnasium id ``name`` (``"gymnasium:<id>"``), ``num_envs``
    environments for each of the ``seeds`` that will vmap over it.

    Raises:
      ValueError: gymnasium missing, an unknown id, spaces drlhet cannot train on, or (from
        `MEASURE_FROM` environments on) more than this machine has the memory for.
      HostEnvError: ``gym.make`` raised anything else (the environment's own code).
    """
    from drlhet.envs import EnvFns, EnvStep

    gym, env_id = _gymnasium(), name[len(PREFIX) :]
    try:
        probe = gym.make(env_id)
    except gym.error.Error as e:
        raise ValueError(f"unknown environment {name!r}: {e}") from e
    except ImportError as e:  # "module:Id-v0" naming no module, a library the env lacks
        raise ValueError(f"{name}: gym.make raised {_first_line(e)}") from e
    except Exception as e:  # noqa: BLE001 - the environment's own code: named
        raise _failed(name, f"gym.make raised {_first_line(e)}") from e
    try:
        obs_shape, discrete, n, low, high = _check_spaces(name, probe)
        max_steps = probe.spec.max_episode_steps if probe.spec else None
    finally:
        probe.close()
    if not max_steps:
        raise ValueError(f"{name}: no time limit (spec.max_episode_steps); register one")
    refuse_past_room(name, seeds * num_envs, lambda: _made(env_id))  # before a run
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
