"""The evaluation's timing: the greedy episodes drlhet plays after each chunk and in ``drlhet
eval`` (`drlhet.runtime.parts.episode_returns`: a while loop that stops once every episode has
ended) against the scan over all of the environment's ``max_steps`` that it replaced
(`scan_returns`), on the same agent, keys and environments, in one run.

Each case (environment, agent, episodes) compiles both (``compile_s``, apart), calls each once
untimed (the warm-up), checks that their returns are equal bit for bit (a case that differs
ends the run: a wrong loop is no speed-up), counts the steps the loop plays (one call more,
with a step counter: the longest episode), then times ``--repeats`` calls of each,
alternated; rows give the median, min and max (measured, on JAX's default device, named in
each row).

Agents: ``untrained`` (a fresh initialisation: short episodes, as in a run's first chunks) and
``trained`` (``--train-steps`` env steps of drlhet's default agent for the environment: DQN for
discrete actions, DDPG for continuous ones; a host environment's agent is trained on its gymnax
twin of the same id when there is one: the same spaces and dynamics, trained fast). The
trained agent's long episodes are where the loop saves least. Host environments
(``gymnasium:ID``, one Python simulator an environment, stepped on the host) are where the
steps cost most.

Usage:
  python experiments/bench_eval.py                  # ~2 min on 2 cores (the training included)
  python experiments/bench_eval.py --envs CartPole-v1 --agents untrained --episodes 10
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Literal

import checked_cli
from _common import cpu_model, run_info

AGENTS = ("untrained", "trained")
IMPLS = ("while", "scan")
"""The loop that drlhet plays the episodes in, and the scan it replaced."""


@dataclasses.dataclass
class Args:
    envs: tuple[str, ...] = ("CartPole-v1", "gymnasium:CartPole-v1")
    """Environments (gymnax names, or gymnasium:ID for a host environment)."""
    agents: tuple[str, ...] = AGENTS
    episodes: tuple[int, ...] = (10, 100)
    """Episodes per seed, played side by side (one environment each)."""
    seeds: int = 1
    """Agents evaluated together (vmap), as a run of that many seeds evaluates them."""
    train_steps: int = 50_000
    """Env steps of the trained agent's training."""
    repeats: int = 5
    out: Path = Path("results/eval_timing.json")


def task_config(env: str, seeds: int, steps: int):
    """The `TrainConfig` an agent for ``env`` is made (and trained) with: drlhet's defaults,
    the algorithm the actions call for."""
    from drlhet.envs import make_env
    from drlhet.runtime.config import TrainConfig

    algo: Literal["dqn", "ddpg"] = "dqn" if make_env(env, 1).discrete else "ddpg"
    return TrainConfig(algo=algo, env=env, seeds=seeds, steps=steps)


def twin(env: str) -> str:
    """The environment a trained agent for ``env`` trains on: a host environment's gymnax twin
    (``gymnasium:CartPole-v1`` -> ``CartPole-v1``) when gymnax has one with the same spaces,
    else ``env`` itself."""
    from drlhet.envs import make_env
    from drlhet.envs.host import PREFIX, is_host_env

    if not is_host_env(env):
        return env
    name = env.removeprefix(PREFIX)
    try:
        ours, theirs = make_env(name, 1), make_env(env, 1)
    except ValueError:
        return env
    same = (ours.obs_shape, ours.discrete, ours.num_actions, ours.action_dim) == (
        theirs.obs_shape, theirs.discrete, theirs.num_actions, theirs.action_dim
    )  # fmt: skip
    return name if same else env


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": an unknown agent, episodes past
    ``drlhet eval``'s most, an environment or a training drlhet would refuse."""
    from drlhet.cli.evaluate import MAX_EPISODES

    why = checked_cli.unknown_names("--agents", args.agents, AGENTS)
    for n in args.episodes:
        if n > MAX_EPISODES:
            why = why or f"--episodes must be at most {MAX_EPISODES:,}, got {n}"
    for env in args.envs:
        try:
            cfg = task_config(env, args.seeds, args.train_steps)
        except ValueError as e:
            return why or f"--envs {env}: {e}"
        if "trained" in args.agents:  # its training: what drlhet refuses, named
            training = checked_cli.refused_config(dataclasses.replace(cfg, env=twin(env)))
            why = why or (training and f"--train-steps {args.train_steps}: {training}")
    return why


def scan_returns(config, episodes: int):
    """``(agent_state, key) -> returns [episodes]``: the evaluation as drlhet played it until
    2026-12-01, a `jax.lax.scan` over all of the environment's ``max_steps`` steps whatever
    the episodes; each step's keys are the while loop's (`make_evaluation`'s), so the returns
    must be equal."""
    import jax
    import jax.numpy as jnp

    from drlhet.envs import make_env
    from drlhet.runtime.trainer import make_trainer

    env = make_env(config.env, episodes)
    agent = make_trainer(config).agent

    def returns(agent_state, key):
        k_reset, key = jax.random.split(key)
        obs, state = env.reset(k_reset)

        def body(carry, k):
            state, obs, ret, done = carry
            k_act, k_env = jax.random.split(k)
            a = agent.act(agent_state, obs.astype(jnp.float32), k_act, 0, explore=False)
            state, st = env.step(state, a, k_env)
            ret = ret + jnp.where(done, 0.0, st.reward)
            return (state, st.obs, ret, done | st.terminated | st.truncated), None

        n = env.num_envs
        init = (state, obs, jnp.zeros((n,)), jnp.zeros((n,), bool))
        return jax.lax.scan(body, init, jax.random.split(key, env.max_steps))[0][2]

    return returns


def agent_states(args: Args, env: str, agent: str, key, trained: dict):
    """``(agent states [S], what they are)``: fresh ones, or those of a training run (kept in
    ``trained`` by the environment trained on: a host environment and its twin share one)."""
    import jax

    from drlhet.runtime.run import run
    from drlhet.runtime.trainer import make_trainer

    cfg = task_config(env, args.seeds, args.train_steps)
    if agent == "untrained":
        init = make_trainer(cfg).agent.init
        return jax.vmap(init)(jax.random.split(key, args.seeds)), "a fresh initialisation"
    trained_on = twin(env)
    if trained_on in trained:
        return trained[trained_on]
    t = time.perf_counter()
    states, rows = run(dataclasses.replace(cfg, env=trained_on))
    said = (
        f"{cfg.algo} trained {rows[-1]['env_steps']:,} env steps on {trained_on} "
        f"({time.perf_counter() - t:.0f} s), its last evaluation "
        f"{[round(r, 1) for r in rows[-1]['eval_return']]}"
    )
    print(f"  {env}: {said}")
    trained[trained_on] = states.agent, said
    return trained[trained_on]


def one_case(args: Args, env: str, agent_state, episodes: int, key) -> dict:
    """Both loops at one case: ``{impl: (seconds per call [repeats], compile s)}``, and
    ``steps`` (the while loop's, the longest episode) and the returns ``[S, episodes]``.

    Raises:
      RuntimeError: the two loops' returns differ.
    """
    import jax
    import numpy as np

    from drlhet.runtime.trainer import make_evaluation

    cfg = task_config(env, args.seeds, args.train_steps)
    keys = jax.random.split(key, args.seeds)
    fns = {"while": make_evaluation(cfg, episodes), "scan": scan_returns(cfg, episodes)}
    calls, compile_s, returns = {}, {}, {}
    for impl, fn in fns.items():
        t = time.perf_counter()
        calls[impl] = jax.jit(jax.vmap(fn)).lower(agent_state, keys).compile()
        compile_s[impl] = time.perf_counter() - t
        returns[impl] = np.asarray(calls[impl](agent_state, keys))  # the warm-up, untimed
    if not np.array_equal(returns["while"], returns["scan"]):
        raise RuntimeError(f"{env}, {episodes} episodes: the while loop's returns differ")
    played: list[int] = []
    counted = make_evaluation(cfg, episodes, on_step=lambda t, _: played.append(t))
    jax.block_until_ready(jax.jit(jax.vmap(counted))(agent_state, keys))
    times: dict[str, list[float]] = {impl: [] for impl in fns}
    for _ in range(args.repeats):
        for impl in fns:  # alternated: a slower minute of the machine hits both
            t = time.perf_counter()
            jax.block_until_ready(calls[impl](agent_state, keys))
            times[impl].append(time.perf_counter() - t)
    return {
        "times": times,
        "compile_s": compile_s,
        "steps": max(played) + 1,
        "returns": returns["while"],
    }


def rows_of(args: Args, env: str, agent: str, said: str, episodes: int, got: dict) -> list:
    import jax
    import numpy as np

    from drlhet.envs import make_env
    from drlhet.envs.host import is_host_env

    device = jax.devices()[0]
    kind = cpu_model() if device.platform == "cpu" else device.device_kind
    limit = make_env(env, 1).max_steps
    rows = []
    for impl in IMPLS:
        ms = sorted(1e3 * s for s in got["times"][impl])
        rows.append({
            "impl": impl, "env": env, "host_env": is_host_env(env), "agent": agent,
            "agent_is": said, "episodes": episodes, "seeds": args.seeds,
            "steps_played": got["steps"] if impl == "while" else limit, "max_steps": limit,
            "mean_return": float(np.mean(got["returns"])),
            "ms": float(np.median(ms)), "ms_min": ms[0], "ms_max": ms[-1],
            "repeats": args.repeats, "compile_s": got["compile_s"][impl],
            "same_returns": True, "device": str(device), "device_kind": kind,
            "measured": f"measured on {kind} ({device.platform})", "run": run_info("gymnasium"),
        })  # fmt: skip
    return rows


def main(args: Args) -> list[dict]:
    import jax

    print(f"== the evaluation's loop against the scan it replaced, on {jax.devices()[0]} ==")
    key = jax.random.key(0)
    rows: list[dict] = []
    trained: dict = {}
    for env in args.envs:
        for agent in args.agents:
            key, k_agent = jax.random.split(key)
            state, said = agent_states(args, env, agent, k_agent, trained)
            for episodes in args.episodes:
                key, k = jax.random.split(key)
                got = one_case(args, env, state, episodes, k)
                rows += rows_of(args, env, agent, said, episodes, got)
                print_case(rows[-2:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {args.out}")
    return rows


def print_case(pair: list[dict]) -> None:
    """One line: the case, the steps each loop played and their medians (measured)."""
    loop, scan = pair
    print(
        f"  {loop['env']:<24} {loop['agent']:<9} {loop['episodes']:>6} episodes: while "
        f"{loop['steps_played']:>4} steps {loop['ms']:9.2f} ms ({loop['ms_min']:.2f}-"
        f"{loop['ms_max']:.2f}), scan {scan['steps_played']:>4} steps {scan['ms']:9.2f} ms: "
        f"{scan['ms'] / loop['ms']:.2f}x, mean return {loop['mean_return']:.1f}",
        flush=True,
    )


LEAST = {"episodes": 1, "seeds": 1, "train_steps": 1, "repeats": 1}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
