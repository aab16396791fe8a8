"""Ray RLlib's runner for the peers comparison (the protocol: `spec`).

Trains one seed of the `RunSpec` with RLlib's new API stack (RLModule, Learner, EnvRunner,
``PrioritizedEpisodeReplayBuffer``), all in the driver process: no remote env runners, the
learner local, one torch thread. ``dqn`` is RLlib's DQN (double Q, dueling); ``td3`` is RLlib's
SAC, the nearest continuous off-policy algorithm it still ships (TD3 and DDPG were removed).
Greedy evaluation runs ``eval_episodes`` episodes side by side on separate Gymnasium envs
through the env runner's RLModule (``forward_inference``), so it never touches the training
env runner's episodes or counters.

Replay ratio: each DQN/SAC ``training_step`` samples at least ``rollout_fragment_length *
num_envs`` env steps (``rollout_fragment_length`` "auto" is ``n_step``) and then runs
``round(training_intensity / native_ratio)`` updates of ``batch``, where ``native_ratio =
batch / (rollout_fragment_length * num_envs)`` (``ray.rllib.algorithms.dqn.dqn.
calculate_rr_weights``). With ``training_intensity = sgd_steps * batch / num_envs`` that is
``sgd_steps * n_step`` updates per ``n_step * num_envs`` env steps, exactly the spec's ratio,
except that RLlib does not count the reset step of a finished sub-env, so a sample call that
sees episode ends runs one more vector step (more env steps per update while episodes are short).

The configs are built by ``rllib_config.py``, the training loop and its evaluations run in
``rllib_loop.py``.

Usage (the harness, `experiments/fig_peers.py`, runs it):
  .venv-peers/rllib/bin/python experiments/peers/rllib_run.py --spec '{"algo": "dqn"}' \
      --launched-at T
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rllib_config import TUNED, build_config, notes  # noqa: E402
from rllib_loop import make_evaluator, replay_ratio, train  # noqa: E402
from spec import ENV_ONE_THREAD, Reporter, RunSpec, gymnasium_id, parse_argv  # noqa: E402

for _name, _value in ENV_ONE_THREAD.items():
    os.environ.setdefault(_name, _value)


def check_spec(spec: RunSpec) -> None:
    """Raises `ValueError` naming the first field of ``spec`` that this runner cannot run."""
    if spec.algo not in ("dqn", "td3"):
        raise ValueError(f"algo {spec.algo!r}: RLlib's runner takes 'dqn' or 'td3'")
    if spec.recipe not in ("matched", "tuned"):
        raise ValueError(f"recipe {spec.recipe!r}: 'matched' or 'tuned'")
    if spec.recipe == "tuned" and (spec.algo, spec.env) not in TUNED:
        raise ValueError(f"recipe 'tuned': RLlib's runner has {sorted(TUNED)}, not {spec.env!r}")
    positive = ("batch", "buffer", "num_envs", "sgd_steps", "n_step", "steps", "eval_every")
    for name in (*positive, "eval_episodes", "epsilon_steps"):
        value = getattr(spec, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} {value!r}: must be a positive int")
    if not isinstance(spec.warmup, int) or spec.warmup < 0:
        raise ValueError(f"warmup {spec.warmup!r}: must be an int >= 0")
    if not spec.hidden or any(not isinstance(h, int) or h < 1 for h in spec.hidden):
        raise ValueError(f"hidden {spec.hidden!r}: must be positive ints")
    for name, low, high in (("gamma", 0, 1), ("tau", 0, 1), ("epsilon_end", 0, 1)):
        if not low <= getattr(spec, name) <= high:
            raise ValueError(f"{name} {getattr(spec, name)!r}: must be in [{low}, {high}]")
    if spec.lr <= 0 or spec.alpha < 0 or spec.beta_start < 0:
        raise ValueError("lr must be > 0, alpha and beta_start >= 0")


def fail(error: BaseException) -> None:
    """A bad spec: one line to stderr, exit status 2."""
    print(f"rllib_run: {error}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    """Parses and checks the spec (exit 2 on a bad one), reports the header after the imports,
    then trains, evaluates and reports in a local Ray instance that it shuts down."""
    try:
        spec, launched = parse_argv()
        spec = dataclasses.replace(spec, env=gymnasium_id(spec.env))  # gym.make's, RLlib's id
        check_spec(spec)
    except (ValueError, TypeError, AttributeError) as e:  # JSONDecodeError is a ValueError
        fail(e)
    reporter = Reporter(launched)
    import gymnasium as gym
    import ray
    import torch

    torch.set_num_threads(1)
    try:
        config = build_config(spec, gym.make(spec.env))
    except (ValueError, TypeError, gym.error.Error) as e:
        fail(e)
    name = "sac" if spec.algo == "td3" else "dqn"
    batch = config.train_batch_size_per_learner
    reporter.header(
        system=f"rllib-{name}",
        version=f"ray {ray.__version__} / torch {torch.__version__}",
        threads=f"torch {torch.get_num_threads()} thread, OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS')}; ray.init(address='local', num_cpus=1) (its own "
        "instance, never a running cluster), num_env_runners=0, "
        "num_learners=0 (sampling and learning in the driver)",
        notes=notes(spec, config),
        batch=batch,
    )
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    try:
        algo = config.build_algo()
        evaluate = make_evaluator(spec)
        result = train(algo, spec, batch, reporter, evaluate)
        print(f"rllib_run: {replay_ratio(result, config)}", file=sys.stderr)
        algo.stop()
    finally:
        ray.shutdown()
    reporter.end()


if __name__ == "__main__":
    main()
