"""The off-policy training loop: actors, prioritized replay and learner as one jitted program.

One *iteration* steps ``num_envs`` environments once (actor inference + env step), inserts the
transitions, and runs ``sgd_steps`` learner steps (sample -> SGD -> priority update); the replay
ratio is ``sgd_steps / num_envs`` SGD steps per env step. A *chunk* is a ``lax.scan`` over
iterations followed by a greedy evaluation on a separate key; seeds are batched with ``vmap``
and each chunk is compiled once. The host loop between chunks only reports progress.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.agents.ddpg import DDPGConfig, make_ddpg
from drlhet.agents.dqn import AgentFns, DQNConfig, make_dqn
from drlhet.envs import EnvFns, make_env
from drlhet.replay.delayed import make_delayed_updates
from drlhet.replay.prioritized import ReplayFns, make_prioritized_replay
from drlhet.replay.uniform import make_uniform_replay

__all__ = [
    "TrainConfig",
    "TrainState",
    "Trainer",
    "Parts",
    "make_trainer",
    "train",
    "chunk_row",
]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (static)."""

    algo: Literal["dqn", "ddpg"] = "dqn"
    env: str = "CartPole-v1"
    seeds: int = 1
    """Independent seeds trained together (vmap)."""
    seed: int = 0
    steps: int = 100_000
    """Env steps per seed (all environments together)."""
    num_envs: int = 4
    sgd_steps: int = 2
    """SGD steps per iteration; replay ratio = sgd_steps / num_envs SGD steps per env step."""
    warmup: int = 1_000
    """Env steps with random actions before learning starts."""
    buffer_size: int = 50_000
    batch_size: int = 128
    n_step: int | None = None
    """n-step returns (sum_i gamma^i r_i over up to n steps of one episode); None: 3 for DQN
    (Rainbow's choice; it made CartPole reliable here), 1 for DDPG."""
    alpha: float = 0.6
    beta_start: float = 0.4
    """IS exponent at the start, annealed linearly to 1 at the end of training."""
    branching: int = 16
    backend: str = "jax"
    """Replay backend: jax or native."""
    uniform: bool = False
    """Uniform replay instead of PER (the baseline)."""
    delay: int = 0
    """Learner steps by which priority updates are delayed (0: strict PER; see replay.delayed).
    With delay >= 1 the actors also act with the parameters of one iteration earlier, so that
    they need not wait for the learner (the pipelined schedule of drlhet.schedule)."""
    eval_every: int = 5_000
    eval_envs: int = 10
    dqn: DQNConfig = DQNConfig()
    ddpg: DDPGConfig = DDPGConfig()


class TrainState(NamedTuple):
    """Everything that changes during training (a pytree; one per seed)."""

    agent: Any
    replay: Any
    env_state: Any
    obs: jax.Array
    key: jax.Array
    env_steps: jax.Array
    episode_return: jax.Array  # [N] running return of the current training episodes
    fifo: Any  # the last n_step one-step transitions per env, [n, N, ...] (oldest first)
    pending: Any  # priority updates not applied yet (replay.delayed.PendingUpdates)
    actor_agent: Any  # delay >= 1: the agent the actors use, one learner iteration behind


class Parts(NamedTuple):
    """The primitives of one iteration, as the fused loop composes them (DESIGN section 1).

    Attributes:
      act: ``(agent_state, obs [N, ...], key, env_steps) -> actions``.
      env_step: ``(env_state, obs, fifo, episode_return, actions, key)
        -> (env_state, obs, fifo, episode_return, transitions [N, ...], finished)``.
      insert: ``(replay_state, transitions) -> replay_state``.
      sample: ``(replay_state, key, env_steps) -> PrioritizedSample``.
      train: ``(agent_state, batch, key) -> (agent_state, priorities [B], metrics)``.
      update: ``(replay_state, pending, batch, priorities) -> (replay_state, pending)``.
      evaluate: ``(agent_state, key) -> mean greedy return``.
    """

    act: Callable[..., Any]
    env_step: Callable[..., Any]
    insert: Callable[..., Any]
    sample: Callable[..., Any]
    train: Callable[..., Any]
    update: Callable[..., Any]
    evaluate: Callable[..., Any]


class Trainer(NamedTuple):
    """Jittable pieces of a run (all per seed; the caller vmaps over seeds).

    Attributes:
      init: ``(key) -> TrainState``.
      warmup: ``(state) -> state``: ``config.warmup`` env steps of random actions.
      chunk: ``(state) -> (state, metrics)``: ``iterations`` iterations, then an evaluation.
      iterate: ``(state) -> (state, (metrics, finished))``: the iterations of a chunk alone.
      parts: the primitives one iteration is made of (`Parts`), for the scheduler.
      iterations: iterations per chunk.
      chunks: chunks in the run.
      env: the training environments.
      agent: the agent's functions.
      replay: the buffer's functions.
    """

    init: Callable[..., Any]
    warmup: Callable[..., Any]
    chunk: Callable[..., Any]
    iterate: Callable[..., Any]
    parts: Any
    iterations: int
    chunks: int
    env: EnvFns
    agent: AgentFns
    replay: ReplayFns


def _check(cfg: TrainConfig) -> None:
    if cfg.n_step is not None and cfg.n_step < 1:
        raise ValueError(f"n_step must be >= 1, got {cfg.n_step}")
    for name in (
        "steps",
        "num_envs",
        "sgd_steps",
        "batch_size",
        "buffer_size",
        "eval_every",
        "eval_envs",
        "seeds",
    ):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.eval_every % cfg.num_envs:
        raise ValueError(f"eval_every ({cfg.eval_every}) must be a multiple of num_envs")
    if cfg.warmup < cfg.batch_size:
        raise ValueError(f"warmup ({cfg.warmup}) must be >= batch_size ({cfg.batch_size})")
    if cfg.delay < 0:
        raise ValueError(f"delay must be >= 0, got {cfg.delay}")
    if cfg.algo not in ("dqn", "ddpg"):
        raise ValueError(f"algo must be 'dqn' or 'ddpg', got {cfg.algo!r}")


def make_trainer(cfg: TrainConfig) -> Trainer:
    """Builds the jittable pieces of a training run for ``cfg``."""
    _check(cfg)
    n_step = 3 if cfg.n_step is None and cfg.algo == "dqn" else (cfg.n_step or 1)
    env = make_env(cfg.env, cfg.num_envs)
    eval_env = make_env(cfg.env, cfg.eval_envs)
    if cfg.algo == "dqn":
        if not env.discrete:
            raise ValueError(f"DQN needs discrete actions; {cfg.env} is continuous (use ddpg)")
        agent = make_dqn(cfg.dqn, env.obs_shape, env.num_actions)
        gamma = cfg.dqn.gamma
    else:
        if env.discrete:
            raise ValueError(f"DDPG needs continuous actions; {cfg.env} is discrete (use dqn)")
        agent = make_ddpg(cfg.ddpg, env.obs_shape, env.action_dim, env.action_low, env.action_high)
        gamma = cfg.ddpg.gamma
    if cfg.uniform:
        replay = make_uniform_replay(cfg.buffer_size, cfg.batch_size)
    else:
        replay = make_prioritized_replay(
            cfg.buffer_size,
            cfg.batch_size,
            alpha=cfg.alpha,
            branching=cfg.branching,
            backend=cfg.backend,
        )
    delayed = make_delayed_updates(replay, cfg.delay, cfg.batch_size)
    iterations = cfg.eval_every // cfg.num_envs
    chunks = max(1, -(-(cfg.steps - cfg.warmup) // cfg.eval_every))
    total_steps = cfg.warmup + chunks * cfg.eval_every
    act_shape = () if env.discrete else (env.action_dim,)
    example = {
        "obs": jnp.zeros(env.obs_shape, jnp.float32),
        "action": jnp.zeros(act_shape, jnp.int32 if env.discrete else jnp.float32),
        "reward": jnp.float32(0),
        "discount": jnp.float32(0),
        "next_obs": jnp.zeros(env.obs_shape, jnp.float32),
    }

    def init(key):
        k_agent, k_env, key = jax.random.split(key, 3)
        obs, env_state = env.reset(k_env)
        agent_state = agent.init(k_agent)
        return TrainState(
            agent_state,
            replay.init(example),
            env_state,
            obs.astype(jnp.float32),
            key,
            jnp.zeros((), jnp.int32),
            jnp.zeros((cfg.num_envs,), jnp.float32),
            jax.tree.map(
                lambda x: jnp.zeros((n_step, cfg.num_envs) + x.shape, x.dtype),
                {**example, "done": jnp.bool_(False), "terminated": jnp.bool_(False)},
            ),
            delayed.init(),
            jax.tree.map(jnp.copy, agent_state) if cfg.delay > 0 else None,
        )

    powers = jnp.asarray(gamma ** np.arange(n_step + 1), jnp.float32)

    def n_step_transition(fifo):
        """The oldest one-step transition of each env, extended to n steps within its episode."""
        done = fifo["done"].astype(jnp.float32)  # [n, N]
        alive = jnp.cumprod(jnp.concatenate([jnp.ones_like(done[:1]), 1.0 - done[:-1]]), axis=0)
        ret = jnp.sum(alive * powers[:n_step, None] * fifo["reward"], axis=0)
        m = jnp.sum(alive, axis=0).astype(jnp.int32)  # steps included, 1..n
        last = m - 1
        pick = jax.vmap(lambda x, i: x[i], in_axes=(1, 0))  # [n, N, ...] -> [N, ...]
        term = pick(fifo["terminated"], last).astype(jnp.float32)
        return {
            "obs": fifo["obs"][0],
            "action": fifo["action"][0],
            "reward": ret,
            "discount": powers[m] * (1.0 - term),
            "next_obs": pick(fifo["next_obs"], last),
        }

    def env_part(env_state, obs, fifo, episode_return, actions, key):
        """The env_step primitive (+ n-step bookkeeping): -> (env fields, transitions, stats)."""
        env_state, st = env.step(env_state, actions, key)
        done = st.terminated | st.truncated
        one_step = {
            "obs": obs,
            "action": actions,
            "reward": st.reward,
            "discount": jnp.zeros_like(st.reward),
            "next_obs": st.next_obs.astype(jnp.float32),
            "done": done,
            "terminated": st.terminated,
        }
        fifo = jax.tree.map(lambda q, x: jnp.concatenate([q[1:], x[None]], axis=0), fifo, one_step)
        ret = episode_return + st.reward
        finished = (jnp.sum(jnp.where(done, ret, 0.0)), jnp.sum(done))
        return (
            env_state,
            st.obs.astype(jnp.float32),
            fifo,
            jnp.where(done, 0.0, ret),
            n_step_transition(fifo),
            finished,
        )

    def env_iteration(ts: TrainState, actions, key, insert=True):
        env_state, obs, fifo, ret, transitions, finished = env_part(
            ts.env_state, ts.obs, ts.fifo, ts.episode_return, actions, key
        )
        rep = replay.add(ts.replay, transitions) if insert else ts.replay
        return rep, env_state, obs, ret, finished, fifo

    def random_actions(key):
        if env.discrete:
            return jax.random.randint(key, (cfg.num_envs,), 0, env.num_actions, jnp.int32)
        return jax.random.uniform(
            key, (cfg.num_envs, env.action_dim), minval=env.action_low, maxval=env.action_high
        )

    def warmup(ts: TrainState) -> TrainState:
        def body(ts, _, insert=True):
            key, k_act, k_env = jax.random.split(ts.key, 3)
            rep, env_state, obs, ret, _, fifo = env_iteration(
                ts, random_actions(k_act), k_env, insert
            )
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

    def sample_part(rep, key, env_steps):
        """The sample primitive, with beta annealed over the run."""
        beta = cfg.beta_start + (1.0 - cfg.beta_start) * jnp.minimum(
            env_steps.astype(jnp.float32) / total_steps, 1.0
        )
        return replay.sample(rep, key, beta)

    def train_part(agent_state, batch, key):
        """The train primitive: one SGD step -> (agent_state, priorities, metrics)."""
        return agent.update(agent_state, batch.data, batch.weights, key)

    def update_part(rep, pending, batch, priorities):
        """The update primitive (applies the update of ``delay`` learner steps ago)."""
        return delayed.push(rep, pending, batch.indices, batch.stamps, priorities)

    def learn(agent_state, rep, pending, key, env_steps):
        k_sample, k_update = jax.random.split(key)
        batch = sample_part(rep, k_sample, env_steps)
        agent_state, priorities, metrics = train_part(agent_state, batch, k_update)
        rep, pending = update_part(rep, pending, batch, priorities)
        return agent_state, rep, pending, metrics

    def iteration(ts: TrainState, _):
        key, k_act, k_env, k_learn = jax.random.split(ts.key, 4)
        actor = ts.agent if cfg.delay == 0 else ts.actor_agent
        actions = agent.act(actor, ts.obs, k_act, ts.env_steps)
        rep, env_state, obs, ret, finished, fifo = env_iteration(ts, actions, k_env)

        # SGD steps as a loop (not unrolled): each step compiles alone, as in the host loop of
        # drlhet.schedule, so that both paths give bit-identical numbers.
        def sgd(carry, k):
            agent_state, rep, pending = carry
            agent_state, rep, pending, metrics = learn(agent_state, rep, pending, k, ts.env_steps)
            return (agent_state, rep, pending), metrics

        (agent_state, rep, pending), metrics = jax.lax.scan(
            sgd, (ts.agent, rep, ts.pending), jax.random.split(k_learn, cfg.sgd_steps)
        )
        metrics = jax.tree.map(lambda x: x[-1], metrics)
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

    def evaluate(agent_state, key):
        k_reset, key = jax.random.split(key)
        obs, state = eval_env.reset(k_reset)

        def body(carry, k):
            state, obs, ret, done = carry
            a = agent.act(agent_state, obs.astype(jnp.float32), k, 0, explore=False)
            state, st = eval_env.step(state, a, k)
            ret = ret + jnp.where(done, 0.0, st.reward)
            return (state, st.obs, ret, done | st.terminated | st.truncated), None

        init = (state, obs, jnp.zeros((cfg.eval_envs,)), jnp.zeros((cfg.eval_envs,), bool))
        (_, _, ret, _), _ = jax.lax.scan(body, init, jax.random.split(key, eval_env.max_steps))
        return jnp.mean(ret)

    def iterate(ts: TrainState):
        return jax.lax.scan(iteration, ts, None, length=iterations)

    def chunk(ts: TrainState):
        ts, (metrics, (ret_sum, n_done)) = iterate(ts)
        key, k_eval = jax.random.split(ts.key)
        ts = ts._replace(key=key)
        summary = {name: jnp.mean(v) for name, v in metrics.items()}
        summary["eval_return"] = evaluate(ts.agent, k_eval)
        summary["train_return"] = jnp.sum(ret_sum) / jnp.maximum(jnp.sum(n_done), 1)
        summary["env_steps"] = ts.env_steps
        summary["replay_error"] = ts.replay.error
        return ts, summary

    parts = Parts(agent.act, env_part, replay.add, sample_part, train_part, update_part, evaluate)
    return Trainer(init, warmup, chunk, iterate, parts, iterations, chunks, env, agent, replay)


def chunk_row(cfg: TrainConfig, tr: Trainer, summary: dict, chunk: int, t0: float, last: float):
    """One chunk's row: the per-seed summary as lists, plus ``env_steps`` (seed 0), ``chunk``,
    ``wall_s`` (since ``t0``), ``chunk_s`` (since ``last``) and the chunk's measured
    throughput, ``env_steps_per_s`` and ``trained_samples_per_s`` (all seeds together)."""
    now = time.perf_counter()
    dt = now - last
    row = {k: np.asarray(v).tolist() for k, v in summary.items() if k != "replay_error"}
    row.update(
        env_steps=int(np.asarray(summary["env_steps"])[0]),
        chunk=chunk,
        wall_s=now - t0,
        chunk_s=dt,
        env_steps_per_s=cfg.seeds * cfg.eval_every / dt,
        trained_samples_per_s=cfg.seeds * tr.iterations * cfg.sgd_steps * cfg.batch_size / dt,
    )
    return row


def train(
    cfg: TrainConfig,
    on_chunk: Callable[[dict], None] | None = None,
) -> tuple[TrainState, list[dict]]:
    """Trains ``cfg.seeds`` seeds together; returns the final states and one row per chunk.

    Each row holds per-seed lists (``eval_return``, ``train_return``, ``loss``, ...) plus
    ``env_steps`` (per seed), ``wall_s`` since the start, and throughput over the chunk:
    ``env_steps_per_s`` and ``trained_samples_per_s`` (all seeds together, measured).
    """
    tr = make_trainer(cfg)
    keys = jax.random.split(jax.random.key(cfg.seed), cfg.seeds)
    t0 = time.perf_counter()
    states = jax.jit(jax.vmap(tr.init))(keys)
    states = jax.jit(jax.vmap(tr.warmup), donate_argnums=0)(states)
    chunk = jax.jit(jax.vmap(tr.chunk), donate_argnums=0)
    rows = []
    last = time.perf_counter()
    for i in range(tr.chunks):
        states, summary = chunk(states)
        summary = jax.device_get(summary)
        if np.any(summary["replay_error"]):
            raise ValueError(f"replay refused an operation (error flags {summary['replay_error']})")
        row = chunk_row(cfg, tr, summary, i, t0, last)
        last = t0 + row["wall_s"]
        rows.append(row)
        if on_chunk is not None:
            on_chunk(row)
    return states, rows
