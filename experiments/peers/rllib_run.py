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

Usage (the harness, `experiments/fig_peers.py`, runs it):
  .venv-peers/rllib/bin/python experiments/peers/rllib_run.py --spec '{"algo": "dqn"}' \
      --launched-at T
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from spec import ENV_ONE_THREAD, Reporter, RunSpec, gymnasium_id, parse_argv  # noqa: E402

for _name, _value in ENV_ONE_THREAD.items():
    os.environ.setdefault(_name, _value)

# RLlib's own recipe for DQN on CartPole-v1: ray-project/ray
# rllib/examples/algorithms/dqn/cartpole_dqn.py (formerly rllib/tuned_examples/dqn/
# cartpole_dqn.py; the same values in both; neither ships in the ray wheel). Everything it
# leaves unset stays at RLlib's DQN defaults (one env per runner, hard target update every 500
# env steps, learning starts at 1000 env steps, the natural replay ratio).
TUNED_DQN_CARTPOLE: dict[str, Any] = {
    "training": {
        "lr": 0.0005,
        "train_batch_size_per_learner": 32,
        "replay_buffer_config": {
            "type": "PrioritizedEpisodeReplayBuffer",
            "capacity": 50_000,
            "alpha": 0.6,
            "beta": 0.4,
        },
        "n_step": (2, 5),
        "double_q": True,
        "dueling": True,
        "epsilon": [(0, 1.0), (10_000, 0.02)],
    },
    "model": {
        "fcnet_hiddens": [256],
        "fcnet_activation": "tanh",
        "fcnet_bias_initializer": "zeros_",
        "head_fcnet_hiddens": [256],
        "head_fcnet_bias_initializer": "zeros_",
    },
}

# RLlib's own recipe for SAC on Pendulum-v1: ray-project/ray
# rllib/examples/algorithms/sac/pendulum_sac.py (formerly rllib/tuned_examples/sac/
# pendulum_sac.py; the same values in both). ``xavier_uniform_`` is ``nn.init.xavier_uniform_``
# there, named here so that this table needs no torch import.
TUNED_SAC_PENDULUM: dict[str, Any] = {
    "training": {
        "initial_alpha": 1.001,
        "actor_lr": 2e-4,
        "critic_lr": 8e-4,
        "alpha_lr": 9e-4,
        "lr": None,
        "target_entropy": "auto",
        "n_step": (2, 5),
        "tau": 0.005,
        "train_batch_size_per_learner": 256,
        "target_network_update_freq": 1,
        "replay_buffer_config": {
            "type": "PrioritizedEpisodeReplayBuffer",
            "capacity": 100_000,
            "alpha": 1.0,
            "beta": 0.0,
        },
        "num_steps_sampled_before_learning_starts": 256,
    },
    "model": {
        "fcnet_hiddens": [256, 256],
        "fcnet_activation": "relu",
        "fcnet_kernel_initializer": "xavier_uniform_",
        "head_fcnet_hiddens": [],
        "head_fcnet_activation": None,
        "head_fcnet_kernel_initializer": "orthogonal_",
        "head_fcnet_kernel_initializer_kwargs": {"gain": 0.01},
    },
}

TUNED = {("dqn", "CartPole-v1"): TUNED_DQN_CARTPOLE, ("td3", "Pendulum-v1"): TUNED_SAC_PENDULUM}
TUNED_SOURCE = {
    "dqn": "rllib/examples/algorithms/dqn/cartpole_dqn.py",
    "td3": "rllib/examples/algorithms/sac/pendulum_sac.py",
}
# Iterations of `algo.train()` sample at least this many env steps (RLlib's DQN default).
ITERATION_STEPS = 1_000


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


def replay_buffer(spec: RunSpec) -> dict:
    """The spec's buffer as RLlib's ``replay_buffer_config`` (PER or uniform episodes)."""
    if spec.prioritized:
        return {
            "type": "PrioritizedEpisodeReplayBuffer",
            "capacity": spec.buffer,
            "alpha": spec.alpha,
            "beta": spec.beta_start,
        }
    return {"type": "EpisodeReplayBuffer", "capacity": spec.buffer}


def matched_config(spec: RunSpec, env) -> tuple[Any, dict]:
    """RLlib's config of the matched recipe (DQN for ``dqn``, SAC for ``td3``) and its model.

    Args:
      spec: the run.
      env: a Gymnasium env of ``spec.env``, to check that its action space fits the algorithm.

    Returns:
      (``DQNConfig`` or ``SACConfig`` with ``training`` set, ``DefaultModelConfig`` kwargs).
    """
    import gymnasium as gym

    common = dict(
        gamma=spec.gamma,
        tau=spec.tau,
        # 0: a Polyak update with `tau` after every SGD step (the learner's env-step test
        # `ts - last >= freq` always holds), as drlhet does.
        target_network_update_freq=0,
        train_batch_size_per_learner=spec.batch,
        replay_buffer_config=replay_buffer(spec),
        n_step=spec.n_step,
        num_steps_sampled_before_learning_starts=spec.warmup,
        training_intensity=spec.samples_per_env_step,
    )
    # ReLU trunk of spec.hidden, then linear heads (drlhet's dueling V and A, actor, critics).
    model = {
        "fcnet_hiddens": list(spec.hidden),
        "fcnet_activation": "relu",
        "head_fcnet_hiddens": [],
    }
    if spec.algo == "dqn":
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ValueError(f"algo 'dqn' needs a discrete action space; {spec.env} has none")
        from ray.rllib.algorithms.dqn import DQNConfig

        config = DQNConfig().training(
            lr=spec.lr,
            double_q=True,
            dueling=True,
            epsilon=[(0, 1.0), (spec.epsilon_steps, spec.epsilon_end)],
            td_error_loss_fn="huber",
            grad_clip=10.0,  # drlhet DQNConfig.max_grad_norm (the spec has none)
            grad_clip_by="global_norm",
            **common,
        )
        return config, model
    if not isinstance(env.action_space, gym.spaces.Box):
        raise ValueError(f"algo 'td3' needs a continuous action space; {spec.env} has none")
    from ray.rllib.algorithms.sac import SACConfig

    config = SACConfig().training(
        lr=None,
        actor_lr=spec.lr,
        critic_lr=spec.lr,
        alpha_lr=spec.lr,
        twin_q=True,
        **common,
    )
    return config, model


def tuned_config(spec: RunSpec) -> tuple[Any, dict]:
    """RLlib's config of its own recipe for the spec's algo and env, and its model."""
    recipe = TUNED[(spec.algo, spec.env)]
    if spec.algo == "dqn":
        from ray.rllib.algorithms.dqn import DQNConfig as Config
    else:
        from ray.rllib.algorithms.sac import SACConfig as Config
    return Config().training(**recipe["training"]), dict(recipe["model"])


def build_config(spec: RunSpec, env) -> Any:
    """The full, validated RLlib config: recipe, local execution, seed and iteration size.

    Raises:
      ValueError: the spec does not fit the algorithm or RLlib rejects the config.
    """
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    if spec.recipe == "tuned":
        config, model = tuned_config(spec)
        num_envs = 1  # the recipe's (RLlib's default)
    else:
        config, model = matched_config(spec, env)
        num_envs = spec.num_envs
    config = (
        config.environment(spec.env)
        .framework("torch")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs)
        .learners(num_learners=0)
        .rl_module(model_config=DefaultModelConfig(**model))
        .reporting(
            min_time_s_per_iteration=0,
            min_sample_timesteps_per_iteration=min(ITERATION_STEPS, spec.eval_every),
            min_train_timesteps_per_iteration=0,
        )
        .debugging(seed=spec.seed, log_level="ERROR")
    )
    config.validate()
    return config


def notes(spec: RunSpec, config) -> str:
    """The header's notes: buffer, n-step, recipe, and what of the spec did not map."""
    buf = config.replay_buffer_config
    per = buf["type"]
    if "alpha" in buf:
        per += f"(alpha={buf['alpha']}, beta={buf['beta']} fixed: RLlib does not anneal beta)"
    parts = [
        f"{per}, capacity {buf['capacity']}",
        f"n-step {config.n_step}",
        f"recipe {spec.recipe}"
        + (f" (RLlib's {TUNED_SOURCE[spec.algo]})" if spec.recipe == "tuned" else ""),
        f"num_envs_per_env_runner {config.num_envs_per_env_runner}, rollout fragment "
        f"{config.get_rollout_fragment_length()}",
        f"batch {config.train_batch_size_per_learner}, training_intensity "
        f"{config.training_intensity or 'None (natural: one update per sample call)'}",
        f"target update tau {config.tau} "
        + (
            "after every SGD step"
            if config.target_network_update_freq == 0
            else f"at most once per {config.target_network_update_freq} env steps"
        ),
    ]
    if spec.algo == "td3":
        parts.append(
            "td3 -> SAC (RLlib has no TD3/DDPG): twin Q kept; no target policy smoothing, no "
            "delayed actor updates, entropy-driven exploration instead of Gaussian noise"
        )
    if spec.recipe == "matched":
        parts.append(
            "warmup = learning starts (actions follow the policy's exploration, not uniform)"
        )
        if spec.algo == "dqn":
            parts.append("grad clip 10 (global norm, drlhet's), Huber loss")
        else:
            parts.append("actor, critic and alpha lr = lr")
    return "; ".join(parts)


def greedy_actions(out: dict, action_space) -> list:
    """Per-env greedy actions from ``forward_inference``'s output ``out`` (a batch [B]).

    DQN's module returns the argmax actions. SAC's returns the squashed Gaussian's inputs
    ``[B, 2 * M]`` (mean, log std): the greedy action is ``tanh(mean)`` mapped from [-1, 1] to
    the action bounds, as RLlib's module-to-env connector unsquashes a sampled action.
    """
    import numpy as np
    import torch

    if "actions" in out:
        return [int(a) for a in out["actions"].numpy()]
    mean = torch.chunk(out["action_dist_inputs"], 2, dim=-1)[0]
    squashed = torch.tanh(mean).numpy()
    low, high = action_space.low, action_space.high
    return list((low + (squashed + 1.0) * (high - low) / 2.0).astype(np.float32))


def make_evaluator(spec: RunSpec):
    """``evaluate(module) -> mean return`` of ``spec.eval_episodes`` greedy episodes, played
    side by side on Gymnasium envs of their own (seeded apart from training, new seeds every
    call), one batched ``forward_inference`` per step."""
    import gymnasium as gym
    import numpy as np
    import torch

    envs = [gym.make(spec.env) for _ in range(spec.eval_episodes)]
    calls = [0]

    def evaluate(module) -> float:
        first_seed = spec.seed + 1_000_000 + calls[0] * len(envs)
        calls[0] += 1
        obs = [env.reset(seed=first_seed + i)[0] for i, env in enumerate(envs)]
        returns = np.zeros(len(envs))
        live = list(range(len(envs)))
        while live:
            batch = torch.as_tensor(np.stack([obs[i] for i in live]), dtype=torch.float32)
            with torch.no_grad():
                out = module.forward_inference({"obs": batch})
            still = []
            for i, action in zip(live, greedy_actions(out, envs[0].action_space), strict=True):
                obs[i], reward, terminated, truncated, _ = envs[i].step(action)
                returns[i] += reward
                if not (terminated or truncated):
                    still.append(i)
            live = still
        return float(returns.mean())

    return evaluate


def lifetime_counts(result: dict) -> tuple[int, int, int]:
    """(env steps sampled, samples trained, target-network updates), lifetime, from the
    result of `Algorithm.train` (the learner keys are absent until learning starts)."""
    learner = result.get("learners", {})
    trained = learner.get("__all_modules__", {}).get("num_module_steps_trained_lifetime", 0)
    targets = learner.get("default_policy", {}).get("num_target_updates", 0)
    return int(result["env_runners"]["num_env_steps_sampled_lifetime"]), int(trained), targets


def train(algo, spec: RunSpec, batch: int, reporter: Reporter, evaluate) -> dict:
    """Calls ``algo.train()`` until ``spec.steps`` env steps or ``spec.stop_at_return``,
    reporting a row (greedy evaluation) each time the lifetime env steps pass a multiple of
    ``spec.eval_every``: ``sgd_updates`` are the samples trained over ``batch`` (RLlib's
    learner updates, one minibatch each), ``eval_s`` the evaluation's seconds so far.
    Returns the last result."""
    next_eval = spec.eval_every
    eval_s = 0.0
    while True:
        result = algo.train()
        env_steps, trained, _ = lifetime_counts(result)
        if env_steps >= next_eval:
            while next_eval <= env_steps:
                next_eval += spec.eval_every
            start = time.perf_counter()
            ret = evaluate(algo.get_module())
            eval_s += time.perf_counter() - start
            reporter.row(env_steps, trained // batch, ret, eval_s=eval_s)
            if spec.stop_at_return is not None and ret >= spec.stop_at_return:
                return result
        if env_steps >= spec.steps:
            return result


def replay_ratio(result: dict, config) -> str:
    """The replay ratio the run really had (a JSON line for stderr, to check the config's):
    samples trained per env step sampled once learning started, and target updates."""
    env_steps, trained, targets = lifetime_counts(result)
    learning = max(env_steps - config.num_steps_sampled_before_learning_starts, 1)
    return json.dumps(
        dict(
            env_steps=env_steps,
            sgd_updates=trained // config.train_batch_size_per_learner,
            target_updates=targets,
            samples_per_env_step=round(trained / learning, 2),
            training_intensity=config.training_intensity,
        )
    )


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
        logging_level="ERROR",
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
