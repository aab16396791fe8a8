"""One remote actor of a Ray run (`drlhet.runtime.ray_learner`): a batch of environments and
the policy's forward pass, jitted on the actor process's CPU.

The actor builds the run's `drlhet.runtime.trainer.Trainer` from the same `TrainConfig` and
runs the same act + env_step body as the fused loop (vmapped over the run's seeds): each call
of `RolloutActor.rollout` steps ``iterations`` times its ``num_envs`` environments of every seed
and returns the n-step transitions, numbered by a per-actor sequence number so the learner
inserts each batch once. Parameters arrive as a reference to one ``ray.put`` of the learner's
agent state (Ray resolves it on the actor); the actor keeps the newest it was given.

Random actions are taken while the learner has fewer than ``warmup`` env steps per seed (as
the fused loop's warm-up). A new or restarted actor first fills its n-step windows with
``n - 1`` random iterations that return nothing (their transitions come out with the next
steps), so every env step an actor reports has exactly one transition inserted.

This module imports no Ray: `drlhet.runtime.ray_learner` wraps the class with ``ray.remote``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any

import jax
import numpy as np

from drlhet.runtime.compiling import jit
from drlhet.runtime.config import TrainConfig, n_step_of
from drlhet.runtime.trainer import _random_actions, make_trainer

__all__ = ["RolloutActor", "params_digest"]


def params_digest(params: Any) -> str:
    """A short SHA-256 of a pytree's leaves (what the learner checks a rejoined actor holds)."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        h.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return h.hexdigest()[:16]


def _rollout_fn(cfg: TrainConfig, tr, iterations: int, random: bool):
    """``(agent, env_state, obs, fifo, ret, key, env_steps) -> (env_state, obs, fifo, ret,
    key, transitions [S, T, N, ...], (return sum [S], episodes [S]))``, jitted, vmapped over
    the seeds ``S``; T = ``iterations``."""
    p = tr.parts

    def one(agent, env_state, obs, fifo, ret, key, env_steps):
        def body(carry, _):
            env_state, obs, fifo, ret, key, steps = carry
            key, k_act, k_env = jax.random.split(key, 3)
            actions = _random_actions(tr.env, k_act) if random else p.act(agent, obs, k_act, steps)
            env_state, obs, fifo, ret, trans, done = p.env_step(
                env_state, obs, fifo, ret, actions, k_env
            )
            return (env_state, obs, fifo, ret, key, steps + cfg.num_envs), (trans, done)

        init = (env_state, obs, fifo, ret, key, env_steps)
        (env_state, obs, fifo, ret, key, _), (trans, done) = jax.lax.scan(
            body, init, None, length=iterations
        )
        finished = (done[0].sum(), done[1].sum())
        return env_state, obs, fifo, ret, key, trans, finished

    return jit(jax.vmap(one, in_axes=(0, 0, 0, 0, 0, 0, None)))


class RolloutActor:
    """Environments + policy of one actor (a Ray actor once wrapped with ``ray.remote``).

    Args:
      cfg: the run (its ``seeds``, ``num_envs``, environment and agent).
      index: this actor's number (0..A-1): its environments' seeds differ by it.
      iterations: iterations (of ``num_envs`` env steps per seed) per `rollout` call.
    """

    def __init__(self, cfg: TrainConfig, index: int, iterations: int):
        self.cfg, self.index, self.iterations = cfg, index, iterations
        # the actor never touches the replay: the smallest buffer the config allows, not the
        # run's (which lives on the learner)
        self.tr = make_trainer(dataclasses.replace(cfg, buffer_size=cfg.batch_size))
        self.seq, self.version, self.digest = 0, -1, ""
        self.agent: Any = None
        self.joined = not _restarted()  # a restarted actor waits for `rejoin`
        salt = index + 1 + (0 if self.joined else os.getpid() << 8)  # a restart: new episodes
        keys = jax.random.split(jax.random.fold_in(jax.random.key(cfg.seed), salt), cfg.seeds)
        state = jit(jax.vmap(self.tr.init))(keys)
        self.env = (state.env_state, state.obs, state.fifo, state.episode_return, state.key)
        self.agent = state.agent
        self.fill_steps = (n_step_of(cfg) - 1) * cfg.num_envs
        if self.fill_steps:
            fill = _rollout_fn(cfg, self.tr, n_step_of(cfg) - 1, True)
            *self.env, _, _ = fill(self.agent, *self.env, 0)
        # both programs compiled now (ahead of time: nothing runs), so that no call of the run
        # waits for a compilation
        self._jitted = {
            r: _rollout_fn(cfg, self.tr, iterations, r).lower(self.agent, *self.env, 0).compile()
            for r in (False, True)
        }

    def where(self) -> tuple[int, str]:
        """``(pid, Ray node id)`` of this actor's process."""
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def set_params(self, params: Any, version: int) -> tuple[int, str]:
        """Takes the learner's agent state (host arrays ``[S, ...]``) of ``version``; returns
        ``(version, digest)`` of what it now holds."""
        self.agent = jax.device_put(params)
        self.version, self.digest = version, params_digest(params)
        return self.version, self.digest

    def rejoin(self, params: Any, version: int, next_seq: int) -> tuple[int, str]:
        """After a restart: the learner's newest parameters and the next sequence number."""
        self.seq, self.joined = next_seq, True
        return self.set_params(params, version)

    def rollout(self, params: Any, version: int, env_steps: int) -> dict:
        """Steps ``iterations`` times with parameters ``version`` (taken first if newer) at the
        learner's ``env_steps`` per seed (random actions below the warm-up).

        Returns:
          ``{"actor", "seq", "version", "transitions": {field: [S, T, N, ...]}, "env_steps":
          T x N, "finished": (return sum [S], episodes [S]), "fill_steps"}`` (host arrays);
          ``{"actor", "rejoin": True}`` from a restarted actor that has not rejoined yet.
        """
        if not self.joined:
            return {"actor": self.index, "rejoin": True}
        if version > self.version:
            self.set_params(params, version)
        random = env_steps < self.cfg.warmup
        *env, trans, finished = self._jitted[random](self.agent, *self.env, env_steps)
        self.env = tuple(env)
        out = {
            "actor": self.index,
            "seq": self.seq,
            "version": self.version,
            "transitions": jax.device_get(trans),
            "env_steps": self.iterations * self.cfg.num_envs,
            "finished": jax.device_get(finished),
            "fill_steps": self.fill_steps,
        }
        self.seq += 1
        return out


def _restarted() -> bool:
    """Whether this process is a Ray actor restarted after a failure."""
    try:
        import ray

        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # not in a Ray actor
        return False
