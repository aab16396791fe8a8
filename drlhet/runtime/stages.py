"""The jitted stages the host loops dispatch, one per device group (docs/design.md section 6).

Both host loops and the DSE's profiles (`drlhet.dse.profile`) use these stages, and every stage
is built from the same per-iteration bodies as the fused loop (`drlhet.runtime.trainer`), so
all paths compute the same numbers for the same seed:

* `iteration_stages`: one call per iteration and learner step (the strict chain and small
  delays): actors, insert + sample, train, update + sample, update;
* `pipeline_stages`: with delay ``k >= 2 S`` each stage runs ``U = k // (2 S)`` iterations per
  call, lowered until it divides a chunk's iterations (`unroll_of`; Zhang, Meng, Prasanna, TPDS
  2023, Sec. 5), so the replay stage of call ``c + 1`` needs only the priorities of learner call
  ``c - 1``.

All stages are vmapped over seeds; the learner is not donated when ``delay >= 1`` (the actors
keep the previous parameters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from drlhet.replay.delayed import after_sample
from drlhet.runtime.compiling import jit
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.parts import Batch, Parts
from drlhet.runtime.payload import Payload, payload_of
from drlhet.runtime.trainer import Trainer

__all__ = ["IterationStages", "PipelineStages", "iteration_stages", "pipeline_stages", "unroll_of"]


class IterationStages(NamedTuple):
    """The per-iteration host loop's stages (all vmapped over seeds ``S``).

    Attributes:
      actor_step: ``(actor_agent, env_state, obs, fifo, ret, key, env_steps) -> (env_state, obs,
        fifo, ret, key, transitions [S, N, ...], finished, learn_keys)``; ``learn_keys`` is a
        tuple of ``sgd_steps`` keys ``[S]`` (act + env_step).
      replay_in: ``(replay, transitions, key [S], env_steps) -> (replay, batch, update_key)``
        (insert + the first sample).
      replay_next: ``(replay, indices [S, B], stamps [S, B], priorities [S, B], key, env_steps)
        -> (replay, batch, update_key)`` (update + the next sample).
      replay_apply: ``(replay, indices, stamps, priorities) -> replay`` (update).
      learner: ``(agent, data, weights [S, B], key [S]) -> (agent, priorities [S, B], metrics)``.
      evaluate: ``(agent, key [S]) -> mean greedy return [S]``.
    """

    actor_step: Callable[..., Any]
    replay_in: Callable[..., Any]
    replay_next: Callable[..., Any]
    replay_apply: Callable[..., Any]
    learner: Callable[..., Any]
    evaluate: Callable[..., Any]


class PipelineStages(NamedTuple):
    """The pipelined host loop's stages, each running ``unroll`` iterations per call, with
    every payload that crosses devices packed into one uint32 array ``[S, W]`` per call
    (`drlhet.runtime.payload`; W words per seed).

    Attributes:
      actor: ``(agent_words [S, Wa], env_state, obs, fifo, ret, key, env_steps) -> (env_state,
        obs, fifo, ret, key, transition_words [S, Wt], finished)``; ``finished`` is the pair
        (return sum, episodes) ``[S]`` over the call's U iterations.
      replay: ``(replay, transition_words, update_words [S, P, We], env_steps) -> (replay,
        batch_words [S, Wb])``: U inserts and ``P = U * sgd`` samples, each followed by the
        update (`entry`) of row p of ``update_words``.
      learner: ``(agent_words, batch_words) -> (agent_words, update_words [S, P, We],
        metrics)``: P SGD steps; the agent's state travels packed (one array in and out of
        each call instead of ~35 leaves; the same array goes to the actors).
      actor_replay: ``actor`` then ``replay`` in one program (actors and replay on one device):
        ``(agent_words, env_state, obs, fifo, ret, key, env_steps, replay, update_words) ->
        (env_state, obs, fifo, ret, key, finished, replay, batch_words)``.
      evaluate: ``(agent_words, key [S]) -> mean greedy return [S]``.
      unroll: U, iterations per call.
      agent: the layout of ``agent_words`` (one seed's agent state).
      entry: the layout of one priority update, ``(indices [B], stamps [B], priorities [B])``.
    """

    actor: Callable[..., Any]
    replay: Callable[..., Any]
    learner: Callable[..., Any]
    actor_replay: Callable[..., Any]
    evaluate: Callable[..., Any]
    unroll: int
    agent: Payload
    entry: Payload


def _act_and_step(cfg: TrainConfig, p: Parts, actor_agent, env_state, obs, fifo, ret, key, steps):
    """One iteration of the actors, as the fused loop runs it (same key splits)."""
    key, k_act, k_env, k_learn = jax.random.split(key, 4)
    actions = p.act(actor_agent, obs, k_act, steps)
    env_state, obs, fifo, ret, transitions, finished = p.env_step(
        env_state, obs, fifo, ret, actions, k_env
    )
    learn_keys = jax.random.split(k_learn, cfg.sgd_steps)
    return env_state, obs, fifo, ret, key, transitions, finished, learn_keys


def _sample(p: Parts, rep, key, env_steps):
    """The sample of one learner step and the key of its train step."""
    k_sample, k_update = jax.random.split(key)
    return p.sample(rep, k_sample, env_steps), k_update


def iteration_stages(cfg: TrainConfig, tr: Trainer) -> IterationStages:
    """Builds the per-iteration host loop's jitted stages for ``cfg``."""
    p, vm = tr.parts, jax.vmap

    def actor_fn(actor_agent, env_state, obs, fifo, ret, key, env_steps):
        out = _act_and_step(cfg, p, actor_agent, env_state, obs, fifo, ret, key, env_steps)
        # one key per SGD step as separate outputs: slicing on the host costs a dispatch each
        return (*out[:7], tuple(out[7]))

    def apply_fn(rep, indices, stamps, priorities):
        return tr.replay.update_priorities(rep, indices, priorities, stamps)

    def replay_in_fn(rep, transitions, k, env_steps):
        rep = p.insert(rep, transitions)
        return (rep, *_sample(p, rep, k, env_steps))

    def replay_next_fn(rep, indices, stamps, priorities, k, env_steps):
        rep = apply_fn(rep, indices, stamps, priorities)
        return (rep, *_sample(p, rep, k, env_steps))

    def learner_fn(agent_state, data, weights, k):
        return p.train(agent_state, Batch(data, weights), k)

    return IterationStages(
        actor_step=jit(vm(actor_fn, in_axes=(0, 0, 0, 0, 0, 0, None)), donate_argnums=(1, 3)),
        replay_in=jit(vm(replay_in_fn, in_axes=(0, 0, 0, None)), donate_argnums=0),
        replay_next=jit(vm(replay_next_fn, in_axes=(0, 0, 0, 0, 0, None)), donate_argnums=0),
        replay_apply=jit(vm(apply_fn), donate_argnums=0),
        learner=jit(vm(learner_fn), donate_argnums=() if cfg.delay else 0),
        evaluate=jit(vm(p.evaluate)),
    )


def unroll_of(cfg: TrainConfig, iterations: int) -> int:
    """U: iterations per pipelined stage call, ``max(1, delay // (2 sgd_steps))`` lowered until
    it divides the iterations of a chunk. Replay call c then needs the updates of learner call
    ``c - 2`` or earlier (``delay >= 2 U sgd_steps``) and runs while learner call ``c - 1``
    trains; with ``U = 1`` and ``sgd_steps <= delay < 2 sgd_steps`` only the actors overlap."""
    unroll = min(max(1, cfg.delay // (2 * cfg.sgd_steps)), iterations)  # a huge delay: at once
    while iterations % unroll:
        unroll -= 1
    return unroll


def pipeline_stages(cfg: TrainConfig, tr: Trainer, unroll: int, example: Any) -> PipelineStages:
    """Builds the pipelined host loop's stages, ``unroll`` iterations per call; ``example`` is
    one seed's `TrainState` (arrays or ``jax.ShapeDtypeStruct``) for the payloads' layouts.

    Raises:
      ValueError: ``delay < unroll * sgd_steps`` (a replay call would need the updates of the
        learner call that waits for it).
    """
    p, vm, n_sgd = tr.parts, jax.vmap, cfg.sgd_steps
    per_call = unroll * n_sgd  # learner steps per stage call
    if cfg.delay < per_call:
        raise ValueError(f"delay {cfg.delay} < {per_call} learner steps per pipelined call")
    ex = example
    agent = payload_of(ex.agent)
    b = jax.ShapeDtypeStruct((cfg.batch_size,), jnp.int32)
    entry = payload_of((b, b, jax.ShapeDtypeStruct((cfg.batch_size,), jnp.float32)))
    actor_body, replay_body, learner_body = _pipeline_bodies(cfg, tr, unroll, entry)
    env_args = (ex.env_state, ex.obs, ex.fifo, ex.episode_return, ex.key, ex.env_steps)
    trans_shape = jax.eval_shape(actor_body, ex.agent, *env_args)[5]
    trans = payload_of(trans_shape)
    updates = jax.ShapeDtypeStruct((per_call, entry.size), jnp.uint32)
    batch = payload_of(
        jax.eval_shape(replay_body, ex.replay, trans_shape, updates, ex.env_steps)[1]
    )

    def actor_fn(agent_words, env_state, obs, fifo, ret, key, env_steps):
        out = actor_body(agent.unpack(agent_words), env_state, obs, fifo, ret, key, env_steps)
        return *out[:5], trans.pack(out[5]), jax.tree.map(jnp.sum, out[6])

    def replay_fn(rep, trans_words, update_words, env_steps):
        rep, out = replay_body(rep, trans.unpack(trans_words), update_words, env_steps)
        return rep, batch.pack(out)

    def learner_fn(agent_words, batch_words):
        agent_state = agent.unpack(agent_words)
        agent_state, entries, metrics = learner_body(agent_state, batch.unpack(batch_words))
        return agent.pack(agent_state), jax.vmap(entry.pack)(entries), metrics

    def actor_replay_fn(agent_words, env_state, obs, fifo, ret, key, env_steps, rep, updates):
        *env, words, finished = actor_fn(agent_words, env_state, obs, fifo, ret, key, env_steps)
        return *env, finished, *replay_fn(rep, words, updates, env_steps)

    def evaluate_fn(agent_words, key):
        return p.evaluate(agent.unpack(agent_words), key)

    ar_axes = (0, 0, 0, 0, 0, 0, None, 0, 0)  # every argument per seed but the env steps
    return PipelineStages(
        actor=jit(vm(actor_fn, in_axes=(0, 0, 0, 0, 0, 0, None)), donate_argnums=(1, 3)),
        replay=jit(vm(replay_fn, in_axes=(0, 0, 0, None)), donate_argnums=0),
        learner=jit(vm(learner_fn)),  # not donated: the actors keep the previous params
        actor_replay=jit(vm(actor_replay_fn, in_axes=ar_axes), donate_argnums=(1, 3, 7)),
        evaluate=jit(vm(evaluate_fn)),
        unroll=unroll,
        agent=agent,
        entry=entry,
    )


def _pipeline_bodies(cfg: TrainConfig, tr: Trainer, unroll: int, entry: Payload):
    """The per-seed bodies of the pipelined stages (the updates to apply arrive packed, one
    ``entry`` row per learner step; everything else unpacked)."""
    p, n_sgd = tr.parts, cfg.sgd_steps
    per_call = unroll * n_sgd

    def actor_body(actor_agent, env_state, obs, fifo, ret, key, env_steps):
        def body(carry, i):
            env_state, obs, fifo, ret, key = carry
            steps = env_steps + i * cfg.num_envs
            out = _act_and_step(cfg, p, actor_agent, env_state, obs, fifo, ret, key, steps)
            return out[:5], out[5:]

        carry, (transitions, finished, learn_keys) = jax.lax.scan(
            body, (env_state, obs, fifo, ret, key), jnp.arange(unroll)
        )
        return *carry, (transitions, learn_keys), finished

    def replay_body(rep, payload, update_words, env_steps):
        transitions, learn_keys = payload
        to_apply = jax.vmap(entry.unpack)(update_words)

        def body(rep, u):
            rep = p.insert(rep, jax.tree.map(lambda x: x[u], transitions))
            outs = []
            for j in range(n_sgd):
                batch, k_update = _sample(p, rep, learn_keys[u, j], env_steps + u * cfg.num_envs)
                idx, stamps, prio = (x[u * n_sgd + j] for x in to_apply)
                stamps = after_sample(stamps, batch.indices)  # else XLA copies the tree
                rep = tr.replay.update_priorities(rep, idx, prio, stamps)
                outs.append((batch, k_update))
            return rep, jax.tree.map(lambda *x: jnp.stack(x), *outs)

        rep, (batches, k_updates) = jax.lax.scan(body, rep, jnp.arange(unroll))
        flat = jax.tree.map(lambda x: x.reshape((per_call,) + x.shape[2:]), batches)
        return rep, (flat, k_updates.reshape((per_call,)))

    def learner_body(agent_state, payload):
        def body(agent_state, xs):
            batch, k = xs
            agent_state, prio, metrics = p.train(agent_state, batch, k)
            return agent_state, ((batch.indices, batch.stamps, prio), metrics)

        agent_state, (entries, metrics) = jax.lax.scan(body, agent_state, payload)
        return agent_state, entries, jax.tree.map(jnp.mean, metrics)

    return actor_body, replay_body, learner_body
