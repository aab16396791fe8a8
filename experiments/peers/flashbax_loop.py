"""flashbax_dqn.py's loop: the run as jittable pieces (init, warm-up, a chunk of iterations
then a greedy evaluation), drlhet's acting, env stepping, learner and key splits around
flashbax's buffer (`flashbax_replay`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import flashbax
import jax
import jax.numpy as jnp
from flashbax.buffers.prioritised_trajectory_buffer import SET_BATCH_FN  # internal: add_at_max
from flashbax_replay import _beta, _strong_max, add_at_max, is_weights, without_empty_draws

from drlhet.agents.dqn import DQNConfig, make_dqn
from drlhet.envs import EnvFns, make_env
from drlhet.replay.delayed import DelayedUpdates
from drlhet.replay.nstep import make_nstep
from drlhet.replay.prioritized import ReplayFns
from drlhet.runtime.parts import Batch, Parts, make_parts
from drlhet.runtime.trainer import example_transition

if TYPE_CHECKING:
    from spec import RunSpec

SYSTEM = "flashbax-per-dqn"


class FbxState(NamedTuple):
    """Everything that changes during training (a pytree; donated to each chunk).

    Attributes:
      agent: the DQN learner state (`drlhet.agents.dqn.DQNState`).
      buffer: flashbax's ``PrioritisedTrajectoryBufferState`` (items ``[1, capacity, ...]``).
      env_state: the ``[N]`` environments' state.
      obs: ``[N, obs...]`` observations to act on.
      key: the run's key.
      env_steps: ``[]`` int32 env steps so far (all environments, warm-up included).
      episode_return: ``[N]`` running return of the current training episodes.
      fifo: the n-step accumulator's last n one-step transitions, ``[n, N, ...]``.
    """

    agent: Any
    buffer: Any
    env_state: Any
    obs: jax.Array
    key: jax.Array
    env_steps: jax.Array
    episode_return: jax.Array
    fifo: Any


class Loop(NamedTuple):
    """The run's jittable pieces.

    Attributes:
      init: ``(key) -> FbxState``.
      warmup: ``(state) -> state``: fill the n-step window, then ``spec.warmup`` random steps.
      chunk: ``(state) -> (state, eval_return [])``: ``iterations`` iterations, then a greedy
        evaluation of ``spec.eval_episodes`` episodes.
      iterations: iterations (one vector step + ``sgd_steps`` SGD steps) per chunk.
      chunks: chunks in the run (drlhet's count: ``(steps - warmup) // eval_every``).
    """

    init: Any
    warmup: Any
    chunk: Any
    iterations: int
    chunks: int


class _Pieces(NamedTuple):
    """What the loop's functions close over."""

    spec: RunSpec
    env: EnvFns
    parts: Parts
    buffer: Any  # flashbax's PrioritisedTrajectoryBuffer (init, add, sample, set_priorities)
    n_step: int
    total_steps: int  # env steps over which beta goes from beta_start to 1
    set_leaves: Any  # flashbax's batched sum-tree set for the device: (tree, indices, values)


def dqn_config(spec: RunSpec) -> DQNConfig:
    """drlhet's DQN configuration for ``spec`` (double and dueling on, drlhet's defaults for
    the rest: epsilon from 1, gradient clipping at 10, Huber delta 1, priority eps 1e-6)."""
    return DQNConfig(
        hidden=tuple(spec.hidden),
        learning_rate=spec.lr,
        gamma=spec.gamma,
        tau=spec.tau,
        epsilon_end=spec.epsilon_end,
        epsilon_steps=spec.epsilon_steps,
    )


def make_loop(spec: RunSpec) -> Loop:
    """Builds the run's jittable pieces for ``spec`` (checked with `check_spec`).

    Raises:
      ValueError: an environment with continuous actions.
    """
    env, eval_env = make_env(spec.env, spec.num_envs), make_env(spec.env, spec.eval_episodes)
    if not env.discrete:
        raise ValueError(f"{SYSTEM}: DQN needs discrete actions; {spec.env} is continuous")
    cfg = dqn_config(spec)
    # flashbax's own choice: a scan of single-leaf sets on "cpu", bincount on "gpu" / "tpu"
    device = jax.default_backend() if jax.default_backend() in SET_BATCH_FN else "cpu"
    agent = make_dqn(cfg, env.obs_shape, env.num_actions)
    n_step = spec.n_step
    chunks = (spec.steps - spec.warmup) // spec.eval_every
    total_steps = spec.warmup + chunks * spec.eval_every  # drlhet's beta horizon
    # drlhet's acting, env stepping (n-step), learner step and evaluation; its replay and
    # priority-update slots stay empty (insert, sample and update are flashbax's below).
    no_replay = ReplayFns(None, None, None, None)
    no_delay = DelayedUpdates(None, None)
    nstep = make_nstep(n_step, cfg.gamma)
    parts = make_parts(
        env, eval_env, agent, no_replay, nstep, no_delay, spec.beta_start, total_steps
    )
    buffer = flashbax.make_prioritised_item_buffer(
        max_length=spec.buffer,
        min_length=spec.batch,
        sample_batch_size=spec.batch,
        add_batches=True,  # one [N, ...] batch of transitions per vector step
        priority_exponent=spec.alpha if spec.prioritized else 0.0,
        device=device,
    )
    pieces = _Pieces(spec, env, parts, buffer, n_step, total_steps, SET_BATCH_FN[device])
    iterations = spec.eval_every // spec.num_envs
    return Loop(
        functools.partial(_init, pieces, agent.init, nstep.init),
        functools.partial(_warmup, pieces),
        functools.partial(_chunk, pieces, iterations),
        iterations,
        chunks,
    )


def _init(p: _Pieces, agent_init, fifo_init, key: jax.Array) -> FbxState:
    """A fresh state, with drlhet's key splits (`drlhet.runtime.trainer`)."""
    k_agent, k_env, key = jax.random.split(key, 3)
    obs, env_state = p.env.reset(k_env)
    example = example_transition(p.env)
    return FbxState(
        agent_init(k_agent),
        _strong_max(p.buffer.init(example)),
        env_state,
        obs.astype(jnp.float32),
        key,
        jnp.zeros((), jnp.int32),
        jnp.zeros((p.spec.num_envs,), jnp.float32),
        fifo_init(example, p.spec.num_envs),
    )


def _warmup(p: _Pieces, s: FbxState) -> FbxState:
    """``n - 1`` random vector steps to fill the n-step window (nothing inserted), then
    ``ceil(warmup / N)`` random vector steps inserted: drlhet's warm-up."""

    def body(s: FbxState, _, insert=True):
        key, k_act, k_env = jax.random.split(s.key, 3)
        actions = jax.random.randint(k_act, (p.env.num_envs,), 0, p.env.num_actions, jnp.int32)
        env_state, obs, fifo, ret, transitions, _ = p.parts.env_step(
            s.env_state, s.obs, s.fifo, s.episode_return, actions, k_env
        )
        buffer = add_at_max(p, s.buffer, transitions) if insert else s.buffer
        steps = s.env_steps + p.spec.num_envs
        return FbxState(s.agent, buffer, env_state, obs, key, steps, ret, fifo), None

    s = jax.lax.scan(functools.partial(body, insert=False), s, None, length=p.n_step - 1)[0]
    return jax.lax.scan(body, s, None, length=-(-p.spec.warmup // p.spec.num_envs))[0]


def _learn(p: _Pieces, env_steps: jax.Array, carry, key: jax.Array):
    """One learner step: sample ``[B]`` from flashbax, SGD with IS weights, set priorities.

    ``carry`` is ``(agent_state, buffer_state)``; returns ``(carry, metrics)``.
    """
    agent_state, buffer = carry
    k_sample, k_update = jax.random.split(key)
    sample = without_empty_draws(p.buffer.sample(buffer, k_sample))
    items = buffer.experience["reward"].shape[1]  # capacity of the item buffer
    size = jnp.where(buffer.is_full, items, buffer.current_index)
    weights = is_weights(sample.probabilities, size, _beta(p, env_steps))
    agent_state, priorities, metrics = p.parts.train(
        agent_state, Batch(sample.experience, weights), k_update
    )
    # raw |TD| + eps: flashbax applies alpha itself (p ** priority_exponent)
    buffer = p.buffer.set_priorities(buffer, sample.indices, priorities)
    return (agent_state, buffer), metrics


def _iteration(p: _Pieces, s: FbxState, _):
    """One iteration, with drlhet's key splits: act, step the N envs, insert the n-step
    transitions ``[N, ...]``, then ``sgd_steps`` learner steps (a scan, as drlhet)."""
    key, k_act, k_env, k_learn = jax.random.split(s.key, 4)
    actions = p.parts.act(s.agent, s.obs, k_act, s.env_steps)
    env_state, obs, fifo, ret, transitions, _ = p.parts.env_step(
        s.env_state, s.obs, s.fifo, s.episode_return, actions, k_env
    )
    buffer = add_at_max(p, s.buffer, transitions)
    (agent_state, buffer), metrics = jax.lax.scan(
        functools.partial(_learn, p, s.env_steps),
        (s.agent, buffer),
        jax.random.split(k_learn, p.spec.sgd_steps),
    )
    steps = s.env_steps + p.spec.num_envs
    return FbxState(agent_state, buffer, env_state, obs, key, steps, ret, fifo), metrics


def _chunk(p: _Pieces, iterations: int, s: FbxState):
    """``iterations`` iterations, then a greedy evaluation on a split key:
    ``-> (state, mean eval return [])``."""
    s = jax.lax.scan(functools.partial(_iteration, p), s, None, length=iterations)[0]
    key, k_eval = jax.random.split(s.key)
    return s._replace(key=key), p.parts.evaluate(s.agent, k_eval)
