"""drlhet's own runner for the peers comparison (the protocol: `spec`).

Trains one seed of the `RunSpec` with `drlhet.runtime.run.run` on its default mapping (every
group fused on one XLA CPU device, the fastest replay backend that loads), without the
persistent compilation cache, so compilation counts in the wall time as a first run's does;
with ``--compilation-cache DIR``, as ``drlhet train`` runs by default (a run after the first
loads its programs from there).

Usage (the harness, `experiments/fig_peers.py`, runs it):
  .venv/bin/python experiments/peers/drlhet_run.py --spec '{"algo": "dqn"}' --launched-at T
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).parent))
from spec import Reporter, RunSpec, parse_argv  # noqa: E402

if TYPE_CHECKING:
    from drlhet.runtime.config import TrainConfig


class _Reached(Exception):
    """Raised from the chunk callback to end the run at the target return."""


def train_config(spec: RunSpec) -> TrainConfig:
    """The `RunSpec` as drlhet's `TrainConfig` (one seed; ``td3`` is DDPG with its TD3 parts)."""
    from drlhet.agents.ddpg import DDPGConfig
    from drlhet.agents.dqn import DQNConfig
    from drlhet.runtime.config import TrainConfig

    common: dict[str, Any] = dict(
        env=spec.env,
        seeds=1,
        seed=spec.seed,
        steps=spec.steps,
        num_envs=spec.num_envs,
        sgd_steps=spec.sgd_steps,
        warmup=spec.warmup,
        buffer_size=spec.buffer,
        batch_size=spec.batch,
        n_step=spec.n_step,
        alpha=spec.alpha,
        beta_start=spec.beta_start,
        uniform=not spec.prioritized,
        eval_every=spec.eval_every,
        eval_envs=spec.eval_episodes,
    )
    if spec.algo == "dqn":
        dqn = DQNConfig(
            hidden=spec.hidden,
            learning_rate=spec.lr,
            gamma=spec.gamma,
            tau=spec.tau,
            epsilon_end=spec.epsilon_end,
            epsilon_steps=spec.epsilon_steps,
        )
        return TrainConfig(algo="dqn", dqn=dqn, **common)
    if spec.algo == "td3":
        ddpg = DDPGConfig(
            hidden=spec.hidden,
            actor_lr=spec.lr,
            critic_lr=spec.lr,
            gamma=spec.gamma,
            tau=spec.tau,
            td3=True,
        )
        return TrainConfig(algo="ddpg", ddpg=ddpg, **common)
    raise ValueError(f"algo {spec.algo!r}: drlhet's runner takes 'dqn' or 'td3'")


def main() -> None:
    argv = sys.argv[1:]
    cache = None
    if "--compilation-cache" in argv:  # drlhet's CLI default: JAX's persistent cache
        at = argv.index("--compilation-cache")
        cache, argv = Path(argv[at + 1]), argv[:at] + argv[at + 2 :]
    spec, launched = parse_argv(argv)
    reporter = Reporter(launched)
    from importlib.metadata import version

    import jax

    from drlhet.runtime.run import default_mapping, run

    if cache is not None:
        from drlhet.cli.common import enable_compilation_cache

        enable_compilation_cache(cache)
    try:
        cfg = train_config(spec)
    except ValueError as e:
        print(f"drlhet_run: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    reporter.header(
        system=f"drlhet-{spec.algo}",
        version=f"drlhet {version('drlhet')} / jax {jax.__version__}",
        threads=f"XLA default ({len(jax.devices('cpu'))} CPU device, all cores)",
        notes=f"mapping {default_mapping(cfg)}; PER={spec.prioritized}, "
        f"n-step {spec.n_step}; "
        + ("no persistent compilation cache" if cache is None else f"compilation cache {cache}"),
    )
    per_chunk = spec.eval_every // spec.num_envs * spec.sgd_steps
    done = [0]

    def on_chunk(row: dict) -> None:
        done[0] += 1
        ret = sum(row["eval_return"]) / len(row["eval_return"])
        reporter.row(row["env_steps"], done[0] * per_chunk, ret)
        if spec.stop_at_return is not None and ret >= spec.stop_at_return:
            raise _Reached

    try:
        run(cfg, None, on_chunk)
    except _Reached:
        pass
    except ValueError as e:  # a configuration drlhet refuses (ConfigError): one line
        print(f"drlhet_run: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    reporter.end()


if __name__ == "__main__":
    main()
