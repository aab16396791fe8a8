"""The primitives of one training iteration as pure functions (docs/design.md section 1).

`make_parts` builds them from the environment, the agent, the buffer and the delayed-update
queue; the fused loop (`drlhet.runtime.trainer`) and the host loops' stages
(`drlhet.runtime.stages`) compose the same functions, so every path computes the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from drlhet.agents.base import AgentFns
from drlhet.envs import EnvFns
from drlhet.replay.delayed import DelayedUpdates
from drlhet.replay.nstep import NStepFns
from drlhet.replay.prioritized import ReplayFns

__all__ = ["Parts", "Batch", "make_parts", "episode_returns"]


class Parts(NamedTuple):
    """The primitives of one iteration, per seed (the caller vmaps over seeds).

    Attributes:
      act: ``(agent_state, obs [N, ...], key, env_steps) -> actions [N, ...]``.
      env_step: ``(env_state, obs, fifo, episode_return [N], actions, key)
        -> (env_state, obs, fifo, episode_return, transitions [N, ...], finished)``, with
        ``finished = (sum of the returns of the episodes that ended, how many ended)``.
      insert: ``(replay_state, transitions) -> replay_state``.
      sample: ``(replay_state, key, env_steps) -> PrioritizedSample`` (beta annealed).
      train: ``(agent_state, batch, key) -> (agent_state, priorities [B], metrics)``.
      update: ``(replay_state, pending, batch, priorities) -> (replay_state, pending)``.
      evaluate: ``(agent_state, key) -> mean greedy return []``.
    """

    act: Callable[..., Any]
    env_step: Callable[..., Any]
    insert: Callable[..., Any]
    sample: Callable[..., Any]
    train: Callable[..., Any]
    update: Callable[..., Any]
    evaluate: Callable[..., Any]


class Batch(NamedTuple):
    """The fields of a sampled batch the learner needs: ``data`` (dict of ``[B, ...]``) and
    ``weights`` ``[B]`` (IS weights)."""

    data: Any
    weights: jax.Array


def make_parts(
    env: EnvFns,
    eval_env: EnvFns,
    agent: AgentFns,
    replay: ReplayFns,
    nstep: NStepFns,
    delayed: DelayedUpdates,
    beta_start: float,
    total_steps: int,
) -> Parts:
    """The primitives of one iteration; beta goes from ``beta_start`` to 1 over
    ``total_steps`` env steps."""

    def sample(rep, key, env_steps):
        frac = jnp.minimum(env_steps.astype(jnp.float32) / total_steps, 1.0)
        return replay.sample(rep, key, beta_start + (1.0 - beta_start) * frac)

    def train(agent_state, batch, key):
        return agent.update(agent_state, batch.data, batch.weights, key)

    def update(rep, pending, batch, priorities):
        """Applies the update of ``delay`` learner steps ago (this one with delay 0)."""
        return delayed.push(rep, pending, batch.indices, batch.stamps, priorities)

    return Parts(
        agent.act,
        _env_step(env, nstep),
        replay.add,
        sample,
        train,
        update,
        _evaluate(eval_env, agent),
    )


def _env_step(env: EnvFns, nstep: NStepFns) -> Callable[..., Any]:
    def env_step(env_state, obs, fifo, episode_return, actions, key):
        env_state, st = env.step(env_state, actions, key)
        next_obs = st.next_obs.astype(jnp.float32)
        fifo = nstep.push(fifo, obs, actions, st.reward, next_obs, st.terminated, st.truncated)
        done = st.terminated | st.truncated
        ret = episode_return + st.reward
        finished = (jnp.sum(jnp.where(done, ret, 0.0)), jnp.sum(done))
        return (
            env_state,
            st.obs.astype(jnp.float32),
            fifo,
            jnp.where(done, 0.0, ret),
            nstep.transition(fifo),
            finished,
        )

    return env_step


def _evaluate(eval_env: EnvFns, agent: AgentFns) -> Callable[..., Any]:
    returns = episode_returns(eval_env, agent)

    def evaluate(agent_state, key):
        """Mean undiscounted return of one greedy episode in each evaluation environment."""
        return jnp.mean(returns(agent_state, key))

    return evaluate


def episode_returns(
    eval_env: EnvFns, agent: AgentFns, on_step: Callable[[int, int], Any] | None = None
) -> Callable[..., Any]:
    """``(agent_state, key) -> returns [N]``: the undiscounted return of one greedy episode in
    each of ``eval_env``'s N environments (each run to its end or ``max_steps``). The steps
    stop once every episode has ended (under `jax.vmap`, every seed's): the returns are those
    of all ``max_steps`` steps, whose later ones would add nothing, without stepping the
    environments through them (a host environment's simulator is the cost).

    ``on_step``: a host function called as step t (from 0) is played, with ``(t, max_steps)``
    (``jax.debug.callback``; under `jax.vmap` once per seed, each seed's own t, as the loop's
    condition is per seed: a seed whose episodes are over repeats its last), for a progress
    bar; the returns are the same with it or without. None: no call."""
    limit = eval_env.max_steps

    def returns(agent_state, key):
        k_reset, key = jax.random.split(key)
        obs, state = eval_env.reset(k_reset)
        keys = jax.random.split(key, limit)  # step t's key: as a scan over them would take

        def playing(carry):
            t, *_, done = carry
            return (t < limit) & ~jnp.all(done)

        def body(carry):
            t, state, obs, ret, done = carry
            if on_step is not None:
                jax.debug.callback(lambda t: on_step(int(t), limit), t)
            k_act, k_env = jax.random.split(keys[t])  # the actor's and the env's own
            a = agent.act(agent_state, obs.astype(jnp.float32), k_act, 0, explore=False)
            state, st = eval_env.step(state, a, k_env)
            ret = ret + jnp.where(done, 0.0, st.reward)
            return t + 1, state, st.obs, ret, done | st.terminated | st.truncated

        n = eval_env.num_envs
        init = (jnp.int32(0), state, obs, jnp.zeros((n,)), jnp.zeros((n,), bool))
        return jax.lax.while_loop(playing, body, init)[3]

    return returns
