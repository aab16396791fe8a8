"""The off-policy training loop: actors, prioritized replay and learner as one jitted program.

One *iteration* steps ``num_envs`` environments once (actor inference + env step), inserts the
transitions, and runs ``sgd_steps`` learner steps (sample -> SGD -> priority update); the replay
ratio is ``sgd_steps / num_envs`` SGD steps per env step. A *chunk* is a ``lax.scan`` over
iterations followed by a greedy evaluation on a separate key; seeds are batched with ``vmap``
by the caller (`drlhet.runtime.run`), and each chunk is compiled once.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from drlhet.agents.base import AgentFns
from drlhet.agents.ddpg import make_ddpg
from drlhet.agents.dqn import make_dqn
from drlhet.backends import board_tree_ops, get, learner_step, names, tree_ops
from drlhet.envs import EnvFns, make_env
from drlhet.envs.host_room import TooManyEnvs
from drlhet.replay.delayed import DelayedUpdates, make_delayed_updates
from drlhet.replay.nstep import NStepFns, make_nstep
from drlhet.replay.prioritized import ReplayFns, make_prioritized_replay
from drlhet.replay.uniform import make_uniform_replay
from drlhet.runtime.config import (
    ConfigError,
    TrainConfig,
    check,
    chunks_of,
    n_step_of,
    with_backend,
)
from drlhet.runtime.parts import Parts, episode_returns, make_parts

__all__ = ["TrainState", "Trainer", "make_trainer", "make_evaluation"]


class TrainState(NamedTuple):
    """Everything that changes during training (a pytree; one per seed). Every run path
    (`drlhet.runtime.run`) returns it, with each field on the device of its group."""

    agent: Any
    replay: Any
    env_state: Any
    obs: jax.Array
    key: jax.Array
    env_steps: jax.Array
    episode_return: jax.Array  # [N] running return of the current training episodes
    fifo: Any  # the last n_step one-step transitions per env, [n, N, ...] (oldest first)
    pending: Any  # priority updates not applied yet (replay.delayed.PendingUpdates, [k, B])
    actor_agent: Any  # delay >= 1: the agent the actors use, one learner iteration behind


class Trainer(NamedTuple):
    """Jittable pieces of a run (all per seed; the caller vmaps over seeds).

    Attributes:
      init: ``(key) -> TrainState``.
      warmup: ``(state) -> state``: ``config.warmup`` env steps of random actions.
      chunk: ``(state) -> (state, summary)``: ``iterations`` iterations, then an evaluation.
      iterate: ``(state) -> (state, (metrics, finished))``: the iterations of a chunk alone.
      parts: the primitives one iteration is made of (`Parts`), for the host loops' stages.
      iterations: iterations per chunk.
      chunks: chunks in the run.
      env: the training environments.
      agent: the agent's functions.
      replay: the buffer's functions.
      config: the configuration, its replay backend resolved.
    """

    init: Callable[..., Any]
    warmup: Callable[..., Any]
    chunk: Callable[..., Any]
    iterate: Callable[..., Any]
    parts: Parts
    iterations: int
    chunks: int
    env: EnvFns
    agent: AgentFns
    replay: ReplayFns
    config: TrainConfig


def make_trainer(cfg: TrainConfig, platform: str | None = None) -> Trainer:
    """Builds the jittable pieces of a training run for ``cfg``.

    Args:
      cfg: the run.
      platform: where the replay runs, for the default backend (default: JAX's default).

    Raises:
      ValueError: a bad field of ``cfg`` or an environment the algorithm cannot act in.
      BackendUnavailable: the replay backend cannot run here.
    """
    # a uniform run's backend is where its mapping placed the replay (`drlhet.runtime.run`
    # names one for every run), not a tree's choice: `check` refuses one named by the user
    check(dataclasses.replace(cfg, backend=None) if cfg.uniform else cfg)
    cfg = with_backend(cfg, platform or jax.default_backend())
    env = _env(cfg, cfg.num_envs, "num_envs")
    eval_env = _env(cfg, cfg.eval_envs, "eval_envs")
    agent, gamma = _make_agent(cfg, env)
    replay = _make_replay(cfg)
    nstep = make_nstep(n_step_of(cfg), gamma)
    delayed = make_delayed_updates(replay, cfg.delay, cfg.batch_size)
    iterations = cfg.eval_every // cfg.num_envs
    chunks = chunks_of(cfg)  # rounded down: never past cfg.steps; ConfigError when 0
    total_steps = cfg.warmup + chunks * cfg.eval_every
    parts = make_parts(env, eval_env, agent, replay, nstep, delayed, cfg.beta_start, total_steps)
    init = functools.partial(_init, cfg, env, agent, replay, nstep, delayed)
    iterate = functools.partial(_iterate, cfg, parts, iterations)
    return Trainer(
        init,
        functools.partial(_warmup, cfg, env, parts, n_step_of(cfg)),
        functools.partial(_chunk, iterate, parts.evaluate),
        iterate,
        parts,
        iterations,
        chunks,
        env,
        agent,
        replay,
        cfg,
    )


def _env(cfg: TrainConfig, count: int, field: str) -> EnvFns:
    """``count`` environments of ``cfg.env`` for each of ``cfg.seeds``; a `ConfigError` naming
    ``env`` (an unknown name) or ``field`` (more host environments than fit here)."""
    try:
        return make_env(cfg.env, count, cfg.seeds)
    except TooManyEnvs as e:
        raise ConfigError(field, field, reason=str(e)) from e
    except ValueError as e:  # the field named, the environments' words after
        raise ConfigError("env", "env", reason=str(e)) from e


def _make_agent(cfg: TrainConfig, env: EnvFns) -> tuple[AgentFns, float]:
    """The agent of ``cfg.algo``, its step run by the learner backend ``cfg.learner``."""
    if cfg.algo == "dqn":
        if not env.discrete:
            raise ValueError(f"DQN needs discrete actions; {cfg.env} is continuous (use ddpg)")
        agent = make_dqn(cfg.dqn, env.obs_shape, env.num_actions)
        config: Any = cfg.dqn
        outputs = env.num_actions
    else:
        if env.discrete:
            raise ValueError(f"DDPG needs continuous actions; {cfg.env} is discrete (use dqn)")
        agent = make_ddpg(cfg.ddpg, env.obs_shape, env.action_dim, env.action_low, env.action_high)
        config, outputs = cfg.ddpg, env.action_dim
    wrap = _learner_wrap(cfg)
    if wrap is not None:
        bounds = (env.action_low, env.action_high)
        try:
            agent = wrap(
                cfg.algo, config, agent, env.obs_shape, outputs, cfg.batch_size, bounds=bounds
            )
        except ValueError as e:  # the fields it names as the configuration spells them
            named = [f"{cfg.algo}.{f.name}" for f in dataclasses.fields(config)]
            raise ConfigError(str(e), *[n for n in named if n in str(e)]) from None
    return agent, config.gamma


def _learner_wrap(cfg: TrainConfig):
    """The learner backend's ``wrap`` (`drlhet.backends.learner_step`), on its board when
    ``cfg.learner_board`` names one; None: the agent's own JAX step."""
    board = cfg.learner_board
    if board is not None:
        if not board.strip():
            raise ConfigError("learner_board is empty: a bitstream's path, or sim", "learner_board")
        has = [n for n in names() if get(n).board_learner is not None]
        if cfg.learner not in has:
            raise ConfigError(
                f"learner_board {board!r} puts the training step on a board, and learner "
                f"{cfg.learner!r} has none ({', '.join(has)} has one)",
                "learner_board",
                "learner",
            )
    return learner_step(cfg.learner, board) if cfg.learner is not None else None


def make_evaluation(
    cfg: TrainConfig, episodes: int, on_step: Callable[[int, int], Any] | None = None
) -> Callable[..., Any]:
    """``(agent_state, key) -> returns [episodes]``: the undiscounted returns of ``episodes``
    greedy episodes of ``cfg``'s agent (one seed's `TrainState.agent`), run side by side in
    ``episodes`` environments of ``cfg.env`` (the evaluation `run` makes after each chunk,
    with more environments; `jax.vmap` it over ``cfg.seeds`` agents, whose ``seeds x
    episodes`` host environments must fit in memory). The learner backend plays no part:
    acting is the agent's own. ``on_step(t, max_steps)`` is called on the host as each step
    is played (`drlhet.runtime.parts.episode_returns`; None: never).

    Raises:
      ValueError: ``episodes`` below 1, an environment the algorithm cannot act in, or more
        host environments than fit here (a `ConfigError` naming ``episodes``).
    """
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1:
        raise ValueError(f"episodes must be an integer >= 1, got {episodes!r}")
    env = _env(cfg, episodes, "episodes")
    agent, _ = _make_agent(dataclasses.replace(cfg, learner=None, learner_board=None), env)
    return episode_returns(env, agent, on_step)


def _make_replay(cfg: TrainConfig) -> ReplayFns:
    if cfg.uniform and cfg.replay_board is not None:
        raise ConfigError(
            f"replay_board {cfg.replay_board!r} keeps a sum tree on a board, and uniform replay "
            "has none: drop replay_board",
            "replay_board",
            "uniform",
        )
    if cfg.uniform:
        return make_uniform_replay(cfg.buffer_size, cfg.batch_size)
    assert cfg.backend is not None  # resolved by with_backend
    return make_prioritized_replay(
        cfg.buffer_size,
        cfg.batch_size,
        alpha=cfg.alpha,
        branching=cfg.branching,
        tree_ops=_replay_board_ops(cfg) if cfg.replay_board is not None else tree_ops(cfg.backend),
    )


def _replay_board_ops(cfg: TrainConfig):
    """The replay backend's tree primitives on the board ``cfg.replay_board`` names, opened now;
    a `ConfigError` for a board it cannot have (no tree, no backend with one, several seeds)."""
    board = cfg.replay_board
    assert board is not None and cfg.backend is not None
    if not board.strip():
        raise ConfigError("replay_board is empty: a bitstream's path, or sim", "replay_board")
    has = [n for n in names() if get(n).board_replay is not None]
    if cfg.backend not in has:
        raise ConfigError(
            f"replay_board {board!r} keeps the sum tree on a board, and backend "
            f"{cfg.backend!r} has none ({', '.join(has)} has one)",
            "replay_board",
            "backend",
        )
    if cfg.seeds != 1:
        raise ConfigError(
            f"replay_board {board!r} holds one tree, so one seed: seeds must be 1, got {cfg.seeds}",
            "replay_board",
            "seeds",
        )
    try:
        return board_tree_ops(cfg.backend, board, cfg.buffer_size, cfg.branching, cfg.batch_size)
    except ValueError as e:
        raise ConfigError(f"replay_board {board!r}", "replay_board", reason=str(e)) from None


def example_transition(env: EnvFns) -> dict[str, jax.Array]:
    """One unbatched transition of ``env`` (zeros): the buffer's storage layout."""
    act_shape = () if env.discrete else (env.action_dim,)
    return {
        "obs": jnp.zeros(env.obs_shape, jnp.float32),
        "action": jnp.zeros(act_shape, jnp.int32 if env.discrete else jnp.float32),
        "reward": jnp.float32(0),
        "discount": jnp.float32(0),
        "next_obs": jnp.zeros(env.obs_shape, jnp.float32),
    }


def _init(
    cfg: TrainConfig,
    env: EnvFns,
    agent: AgentFns,
    replay: ReplayFns,
    nstep: NStepFns,
    delayed: DelayedUpdates,
    key: jax.Array,
) -> TrainState:
    k_agent, k_env, key = jax.random.split(key, 3)
    obs, env_state = env.reset(k_env)
    agent_state = agent.init(k_agent)
    example = example_transition(env)
    return TrainState(
        agent_state,
        replay.init(example),
        env_state,
        obs.astype(jnp.float32),
        key,
        jnp.zeros((), jnp.int32),
        jnp.zeros((cfg.num_envs,), jnp.float32),
        nstep.init(example, cfg.num_envs),
        delayed.init(),
        jax.tree.map(jnp.copy, agent_state) if cfg.delay > 0 else None,
    )


def _random_actions(env: EnvFns, key: jax.Array) -> jax.Array:
    if env.discrete:
        return jax.random.randint(key, (env.num_envs,), 0, env.num_actions, jnp.int32)
    return jax.random.uniform(
        key, (env.num_envs, env.action_dim), minval=env.action_low, maxval=env.action_high
    )


def _warmup(cfg: TrainConfig, env: EnvFns, parts: Parts, n_step: int, ts: TrainState):
    """``cfg.warmup`` env steps of random actions, inserted (after filling the n-step FIFO)."""

    def body(ts: TrainState, _, insert=True):
        key, k_act, k_env = jax.random.split(ts.key, 3)
        env_state, obs, fifo, ret, transitions, _ = parts.env_step(
            ts.env_state, ts.obs, ts.fifo, ts.episode_return, _random_actions(env, k_act), k_env
        )
        rep = parts.insert(ts.replay, transitions) if insert else ts.replay
        return ts._replace(
            replay=rep,
            env_state=env_state,
            obs=obs,
            key=key,
            fifo=fifo,
            env_steps=ts.env_steps + cfg.num_envs,
            episode_return=ret,
        ), None

    # fill the n-step FIFO first (nothing complete to insert yet), then collect
    fill = functools.partial(body, insert=False)
    ts = jax.lax.scan(fill, ts, None, length=n_step - 1)[0]
    return jax.lax.scan(body, ts, None, length=-(-cfg.warmup // cfg.num_envs))[0]


def _iteration(cfg: TrainConfig, parts: Parts, ts: TrainState, _):
    """One iteration: act, step the envs, insert, then ``sgd_steps`` learner steps."""
    key, k_act, k_env, k_learn = jax.random.split(ts.key, 4)
    actor = ts.agent if cfg.delay == 0 else ts.actor_agent
    actions = parts.act(actor, ts.obs, k_act, ts.env_steps)
    env_state, obs, fifo, ret, transitions, finished = parts.env_step(
        ts.env_state, ts.obs, ts.fifo, ts.episode_return, actions, k_env
    )
    rep = parts.insert(ts.replay, transitions)

    # SGD steps as a loop (not unrolled): each step compiles alone, as in the host loops'
    # stages (drlhet.runtime.stages), so that every path gives bit-identical numbers.
    def sgd(carry, k):
        agent_state, rep, pending = carry
        k_sample, k_update = jax.random.split(k)
        batch = parts.sample(rep, k_sample, ts.env_steps)
        agent_state, priorities, metrics = parts.train(agent_state, batch, k_update)
        rep, pending = parts.update(rep, pending, batch, priorities)
        return (agent_state, rep, pending), metrics

    (agent_state, rep, pending), metrics = jax.lax.scan(
        sgd, (ts.agent, rep, ts.pending), jax.random.split(k_learn, cfg.sgd_steps)
    )
    # the iteration's mean over its SGD steps, as the host loops and the pipeline average
    # every learner step of a chunk
    metrics = jax.tree.map(lambda x: jnp.mean(x, axis=0), metrics)
    ts = TrainState(
        agent_state,
        rep,
        env_state,
        obs,
        key,
        ts.env_steps + cfg.num_envs,
        ret,
        fifo,
        pending,
        None if cfg.delay == 0 else ts.agent,
    )
    return ts, (metrics, finished)


def _iterate(cfg: TrainConfig, parts: Parts, iterations: int, ts: TrainState):
    return jax.lax.scan(functools.partial(_iteration, cfg, parts), ts, None, length=iterations)


def _chunk(iterate: Callable[..., Any], evaluate: Callable[..., Any], ts: TrainState):
    """A chunk of iterations, then a greedy evaluation: ``-> (state, summary)``."""
    ts, (metrics, (ret_sum, n_done)) = iterate(ts)
    key, k_eval = jax.random.split(ts.key)
    ts = ts._replace(key=key)
    summary = {name: jnp.mean(v) for name, v in metrics.items()}
    summary["eval_return"] = evaluate(ts.agent, k_eval)
    summary["train_return"] = jnp.sum(ret_sum) / jnp.maximum(jnp.sum(n_done), 1)
    summary["env_steps"] = ts.env_steps
    summary["replay_error"] = ts.replay.error
    return ts, summary
