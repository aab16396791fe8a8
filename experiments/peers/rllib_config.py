"""rllib_run.py's configs: RLlib's own tuned recipes, and the RLlib config (DQN, or SAC for
``td3``) of a `RunSpec`, matched or tuned, with the header's notes on what it maps and how.

Imports no ray or torch at import time: they are imported where a config is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spec import RunSpec

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

    common: dict[str, Any] = dict(
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

        dqn = DQNConfig().training(
            lr=spec.lr,
            double_q=True,
            dueling=True,
            epsilon=[(0, 1.0), (spec.epsilon_steps, spec.epsilon_end)],
            td_error_loss_fn="huber",
            # drlhet DQNConfig.max_grad_norm (the spec has none); RLlib's DQN annotates
            # grad_clip as int, but takes a float (its own default is 40.0)
            grad_clip=10.0,  # type: ignore[arg-type]
            grad_clip_by="global_norm",
            **common,
        )
        return dqn, model
    if not isinstance(env.action_space, gym.spaces.Box):
        raise ValueError(f"algo 'td3' needs a continuous action space; {spec.env} has none")
    from ray.rllib.algorithms.sac import SACConfig

    sac = SACConfig().training(
        lr=None,
        actor_lr=spec.lr,
        critic_lr=spec.lr,
        alpha_lr=spec.lr,
        twin_q=True,
        **common,
    )
    return sac, model


def tuned_config(spec: RunSpec) -> tuple[Any, dict]:
    """RLlib's config of its own recipe for the spec's algo and env, and its model."""
    recipe = TUNED[(spec.algo, spec.env)]
    if spec.algo == "dqn":
        from ray.rllib.algorithms.dqn import DQNConfig

        return DQNConfig().training(**recipe["training"]), dict(recipe["model"])
    from ray.rllib.algorithms.sac import SACConfig

    return SACConfig().training(**recipe["training"]), dict(recipe["model"])


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
