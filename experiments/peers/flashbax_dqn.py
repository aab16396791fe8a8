"""The "JAX user's alternative" peer: drlhet's fused DQN loop with flashbax's prioritised buffer.

A JAX user who wants PER without drlhet would write the whole run as one jitted program (a
``lax.scan`` over iterations, gymnax environments vmapped) around flashbax's prioritised item
buffer. This runner is that program, built from drlhet's own pieces so that only the replay
differs: the agent (`drlhet.agents.dqn`: double, dueling, Huber, Adam, Polyak), the acting, env
stepping, n-step accumulator and greedy evaluation (`drlhet.runtime.parts.make_parts`), the key
splits, the warm-up and the beta schedule of `drlhet.runtime.trainer`.

The replay is ``flashbax.make_prioritised_item_buffer`` (flashbax 0.1.3): the n-step transitions
are whole items (obs, action, reward, discount, next_obs), as drlhet stores them; its trajectory
or flat buffers would rebuild transitions from consecutive time steps instead, which the n-step
accumulator already does. Semantics checked in flashbax's source
(``flashbax/buffers/prioritised_trajectory_buffer.py`` and ``sum_tree.py``):

* ``set_priorities`` takes raw priorities (here drlhet's ``|TD| + eps``) and raises them to
  ``priority_exponent`` (alpha) itself (``p ** alpha``; 0 stays 0); duplicate indices: the last
  occurrence wins, as in drlhet;
* new items should get ``max_recorded_priority``, the running maximum of the stored
  ``p ** alpha`` (1 at first), i.e. drlhet's ``(max raw p) ** alpha``; flashbax 0.1.3 rounds
  it down to an integer (its PR #58, unreleased, fixes that), so `add_at_max` sets the new
  leaves again (N leaves per vector step, counted in this runner's time);
* ``sample`` is stratified and returns ``probabilities`` ``P(i) = p_i^alpha / total``, no
  importance weights: they are computed here as drlhet does (`is_weights`);
* its float32 tree sometimes returns an item of probability 0 (an unfilled or padding slot;
  flashbax issue #52): such draws are replaced by the batch's most probable one, the
  maintainer's suggested workaround (`without_empty_draws`); drlhet's tree needs none.

Usage: ``python experiments/peers/flashbax_dqn.py --spec '<RunSpec json>' --launched-at EPOCH``
(see ``experiments/peers/spec.py``). Only ``algo = "dqn"`` (discrete environments) is run.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

import flashbax
import jax
import jax.numpy as jnp
from flashbax.buffers.prioritised_trajectory_buffer import SET_BATCH_FN  # internal: add_at_max

sys.path.insert(0, str(Path(__file__).parent))
from spec import Reporter, RunSpec, parse_argv  # noqa: E402

from drlhet.agents.dqn import DQNConfig, make_dqn
from drlhet.envs import EnvFns, make_env
from drlhet.replay.nstep import make_nstep
from drlhet.replay.prioritized import ReplayFns
from drlhet.runtime import compiling
from drlhet.runtime.parts import Batch, Parts, make_parts
from drlhet.runtime.trainer import example_transition

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


def check_spec(spec: RunSpec) -> str:
    """Why this runner cannot run ``spec`` ("" when it can)."""
    if spec.algo != "dqn":
        return f"{SYSTEM}: only algo 'dqn' is supported, got {spec.algo!r}"
    if spec.eval_every % spec.num_envs:
        return f"{SYSTEM}: eval_every ({spec.eval_every}) must be a multiple of num_envs"
    if spec.warmup < spec.batch or spec.batch > spec.buffer:
        return f"{SYSTEM}: need batch ({spec.batch}) <= warmup and <= buffer"
    if spec.steps < spec.warmup + spec.eval_every:
        return f"{SYSTEM}: steps ({spec.steps}) < warmup + eval_every"
    if spec.n_step < 1:
        return f"{SYSTEM}: n_step must be >= 1, got {spec.n_step}"
    if not 0.0 <= spec.alpha <= 1.0:
        return f"{SYSTEM}: flashbax takes alpha in [0, 1], got {spec.alpha}"
    return ""


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
    # drlhet's acting, env stepping (n-step), learner step and evaluation; its replay slots
    # stay empty (insert, sample and update are flashbax's below).
    no_replay = ReplayFns(None, None, None, None)
    nstep = make_nstep(n_step, cfg.gamma)
    parts = make_parts(env, eval_env, agent, no_replay, nstep, None, spec.beta_start, total_steps)
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


def _strong_max(buffer: Any) -> Any:
    """``buffer`` with its ``max_recorded_priority`` a float32 array: flashbax makes it weakly
    typed (``jnp.array(1.0)``), the first ``set_priorities`` makes it strong, and the chunk
    would compile a second time for its second call."""
    tree = buffer.sum_tree_state
    tree = tree.replace(max_recorded_priority=jnp.asarray(tree.max_recorded_priority, jnp.float32))
    return buffer.replace(sum_tree_state=tree)


def add_at_max(p: _Pieces, buffer: Any, transitions: Any) -> Any:
    """flashbax's ``add`` of ``transitions`` ``[N, ...]``, then their leaves set to
    ``max_recorded_priority`` (PER: new items at the largest priority so far).

    flashbax 0.1.3 fills the new leaves with ``jnp.full_like(item_indices, max)``: int32, so they
    get ``floor(max p^alpha)`` (1 until the largest ``p^alpha`` reaches 2, 2 until 3, ...);
    fixed in its PR #58, not released. The item buffer writes item ``i`` to slot ``i``: the
    ``N`` new items are the ``N`` slots from ``current_index`` on.

    Returns:
      The buffer state.
    """
    n = p.spec.num_envs
    capacity = buffer.experience["reward"].shape[1]
    slots = (buffer.current_index + jnp.arange(n, dtype=jnp.int32)) % capacity
    buffer = p.buffer.add(buffer, transitions)
    tree = buffer.sum_tree_state
    top = jnp.broadcast_to(tree.max_recorded_priority, (n,))
    return buffer.replace(sum_tree_state=p.set_leaves(tree, slots, top))


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


def is_weights(probabilities: jax.Array, size: jax.Array, beta: jax.Array) -> jax.Array:
    """Importance-sampling weights ``(N P(i))^-beta`` normalised by the batch's largest, as
    drlhet computes them (Schaul et al., ICLR 2016, Sec. 3.4); N cancels in the normalisation
    but is kept for the formula's sake.

    Args:
      probabilities: ``[B]`` flashbax's ``P(i)`` of the sampled items, > 0 (`without_empty_draws`).
      size: ``[]`` N, items in the buffer.
      beta: ``[]`` the IS exponent.

    Returns:
      ``[B]`` weights, max 1.
    """
    raw = jnp.power(size.astype(jnp.float32) * probabilities, -beta)
    return raw / jnp.max(raw)


def without_empty_draws(sample: Any) -> Any:
    """flashbax's sample with every draw of a zero-probability item replaced by the batch's most
    probable draw (index, data and probability).

    flashbax 0.1.3's float32 sum tree keeps its inner sums by adding deltas, which drift from
    the leaves; a stratified target near a boundary then descends into a subtree of zero leaves
    and returns an item of ``P(i) = 0``: an unfilled slot (all-zero data) or, once the buffer
    is full, a padding leaf past the capacity (its data gathered from a clamped index). Its IS
    weight is infinite and the parameters turn NaN: in the default CartPole run, seed 0, the
    first such draw came after ~5.9k env steps, then up to 44 of the 320,000 draws per 5k env
    steps once the buffer was full. This is
    flashbax issue #52 (open); its fix (PR #58, a float64 tree) is not released, and the
    maintainer's suggested workaround is this replacement. It also keeps ``set_priorities``
    off those slots (a priority written to a padding leaf would be sampled from then on).

    Args:
      sample: ``PrioritisedTrajectoryBufferSample``: ``experience`` leaves ``[B, ...]``,
        ``indices`` ``[B]``, ``probabilities`` ``[B]``.

    Returns:
      The same structure with ``probabilities > 0`` everywhere (when the tree holds any mass).
    """
    probs = sample.probabilities
    pick = jnp.where(probs > 0, jnp.arange(probs.shape[0]), jnp.argmax(probs))
    return sample.replace(
        experience=jax.tree.map(lambda x: x[pick], sample.experience),
        indices=sample.indices[pick],
        probabilities=probs[pick],
    )


def _beta(p: _Pieces, env_steps: jax.Array) -> jax.Array:
    """beta_start -> 1 linearly over ``total_steps`` env steps (drlhet's `make_parts`); 0
    (weights 1) without PER."""
    if not p.spec.prioritized:
        return jnp.float32(0)
    frac = jnp.minimum(env_steps.astype(jnp.float32) / p.total_steps, 1.0)
    return p.spec.beta_start + (1.0 - p.spec.beta_start) * frac


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


def _notes(spec: RunSpec) -> str:
    per = (
        f"PER alpha {spec.alpha}, beta {spec.beta_start}->1, IS weights from flashbax's P(i)"
        if spec.prioritized
        else "uniform (priority_exponent 0, weights 1)"
    )
    return (
        "drlhet's fused loop and DQN (double, dueling, Huber, Adam, Polyak) with "
        f"flashbax.make_prioritised_item_buffer ({per}; new items re-set to the max priority "
        "and zero-probability draws replaced, two flashbax 0.1.3 bugs, see the runner); "
        f"{spec.n_step}-step returns from drlhet's accumulator; gymnax envs vmapped; one "
        "jitted lax.scan per chunk, evaluation inside it"
    )


def main(argv: list[str] | None = None) -> int:
    """Runs one `RunSpec` and prints its events; 2 for a spec this runner cannot run."""
    spec, launched = parse_argv(argv)
    reporter = Reporter(launched)
    why = check_spec(spec)
    if why:
        print(why, file=sys.stderr)
        return 2
    try:
        loop = make_loop(spec)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    version = f"flashbax {importlib.metadata.version('flashbax')} / jax {jax.__version__}"
    threads = f"XLA default ({os.cpu_count()} cores)"
    reporter.header(SYSTEM, version, threads, _notes(spec))
    # one seed: the key a one-seed drlhet run of spec.seed gives it (`drlhet.runtime.run`)
    key = jax.random.split(jax.random.key(spec.seed), 1)[0]
    # compiled as drlhet's run compiles its chunks (`drlhet.runtime.compiling`): only the
    # replay differs (plain `jax.jit` compiled at LLVM level 3, slower to compile)
    state = compiling.jit(loop.init)(key)
    state = compiling.jit(loop.warmup, donate_argnums=0)(state)
    chunk = compiling.jit(loop.chunk, donate_argnums=0)
    for _ in range(loop.chunks):
        state, eval_return = chunk(state)
        env_steps, updates, eval_return = jax.device_get(
            (state.env_steps, state.agent.steps, eval_return)
        )
        reporter.row(env_steps, updates, eval_return)
        if spec.stop_at_return is not None and eval_return >= spec.stop_at_return:
            break
    reporter.end()
    return 0


if __name__ == "__main__":
    sys.exit(main())
