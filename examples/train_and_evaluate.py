"""Train DQN + PER from Python, then evaluate the trained agents over many episodes.

Shows `drlhet.run` with a `drlhet.TrainConfig` and an ``on_chunk`` callback that prints each
chunk's row as it is measured (env steps, evaluation return per seed, throughput), then
`drlhet.runtime.trainer.make_evaluation`: a jittable ``(agent_state, key) -> returns`` that plays
greedy episodes side by side. It is vmapped over the seeds of the returned state, so every
seed's agent is evaluated in one compiled call.

Run it with::

    python examples/train_and_evaluate.py             # 3 seeds, 13k env steps, 200 episodes
    python examples/train_and_evaluate.py --quick     # a few seconds

Every figure printed is measured on this machine in this run (returns depend on the seed).
"""

from __future__ import annotations

import argparse

import jax
import numpy as np

import drlhet
from drlhet.runtime.trainer import make_evaluation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=13_000, help="env steps per seed")
    parser.add_argument("--eval-every", type=int, default=3_000)
    parser.add_argument("--episodes", type=int, default=200, help="evaluation episodes a seed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a short run, few episodes")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.eval_every, args.episodes = 2, 3_000, 1_000, 20

    cfg = drlhet.TrainConfig(
        algo="dqn",
        env=args.env,
        seeds=args.seeds,
        seed=args.seed,
        steps=args.steps,
        eval_every=args.eval_every,
        warmup=1_000,
    )

    def on_chunk(row: dict) -> None:  # called once per chunk, as soon as it is measured
        returns = ", ".join(f"{r:6.1f}" for r in row["eval_return"])
        print(
            f"chunk {row['chunk']}: {row['env_steps']:6d} env steps/seed, "
            f"eval return per seed [{returns}], "
            f"{row['env_steps_per_s']:,.0f} env steps/s, all seeds "
            f"(measured; wall {row['wall_s']:.1f} s incl. compilation)"
        )

    states, rows = drlhet.run(cfg, on_chunk=on_chunk)
    print(f"trained {len(rows)} chunks on mapping {rows[-1]['mapping']}")

    # Evaluate each seed's final agent. `states.agent` holds every seed's agent, stacked on a
    # leading axis of size cfg.seeds, so vmap over it with one key per seed.
    evaluate = make_evaluation(cfg, args.episodes)  # (agent_state, key) -> [episodes]
    evaluate_all = jax.jit(jax.vmap(evaluate))
    keys = jax.random.split(jax.random.key(args.seed + 1), cfg.seeds)
    returns = np.asarray(evaluate_all(states.agent, keys))  # [seeds, episodes]

    print(f"greedy evaluation, {args.episodes} episodes a seed (measured):")
    for s, r in enumerate(returns):
        print(
            f"  seed {s}: {r.mean():7.2f} +- {r.std():6.2f}  (min {r.min():.0f}, "
            f"max {r.max():.0f}; the run's own last evaluation {rows[-1]['eval_return'][s]:.1f})"
        )
    print(f"  all seeds: {returns.mean():7.2f} +- {returns.std():6.2f}")


if __name__ == "__main__":
    main()
