"""rllib_run.py's loop: `Algorithm.train` until the spec's env steps or return, its greedy
evaluations on Gymnasium envs of their own (a row each), and the replay ratio the run had.

Imports no ray or torch at import time: gymnasium, numpy and torch are imported where an
evaluator is made or an action taken.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spec import Reporter, RunSpec


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
