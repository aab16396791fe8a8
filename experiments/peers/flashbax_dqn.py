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

The run's jittable pieces are built by ``flashbax_loop.py``, the buffer's fixes and IS weights
are in ``flashbax_replay.py``.

Usage: ``python experiments/peers/flashbax_dqn.py --spec '<RunSpec json>' --launched-at EPOCH``
(see ``experiments/peers/spec.py``). Only ``algo = "dqn"`` (discrete environments) is run.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
from flashbax_loop import SYSTEM, make_loop  # noqa: E402
from spec import Reporter, RunSpec, parse_argv  # noqa: E402

from drlhet.runtime import compiling


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
