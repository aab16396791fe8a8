"""Stable-Baselines3 end-to-end runner of the peers comparison (the protocol is `spec.py`'s).

``python sb3_run.py --spec '<RunSpec json>' [--launched-at EPOCH_S]`` trains SB3's ``DQN``
(algo "dqn") or ``TD3`` (algo "td3") on ``spec.env`` and prints the header, a row every
``spec.eval_every`` env steps (mean greedy return over ``spec.eval_episodes`` episodes on a
separate Gymnasium env) and the end, as JSON lines. A bad spec prints one line to stderr and
exits 2.

Mapping of the matched recipe: ``num_envs`` envs in a ``DummyVecEnv`` (stepped one after the
other in this process), ``train_freq=1`` vector step with ``gradient_steps=sgd_steps`` SGD steps
of ``batch`` (the spec's replay ratio), ``learning_starts=warmup`` (random actions until then),
n-step returns through SB3's ``NStepReplayBuffer`` and uniform replay (SB3 has no PER). The
"tuned" recipe is SB3's own, from rl-baselines3-zoo (`ZOO_RECIPES`).

Runs in the SB3 virtual environment (``make .venv-peers/sb3/.installed``): standard library,
Stable-Baselines3, Gymnasium and PyTorch only.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import stable_baselines3 as sb3
import torch
from stable_baselines3 import DQN, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv

sys.path.insert(0, str(Path(__file__).parent))
from spec import Reporter, RunSpec, gymnasium_id, parse_argv  # noqa: E402

torch.set_num_threads(1)

# SB3's published hyper-parameters (rl-baselines3-zoo), keyed by (algo, env); keys the zoo does
# not set take SB3's defaults, and n_envs is the zoo's default, 1.
# - ("dqn", "CartPole-v1"): DLR-RM/rl-baselines3-zoo, hyperparams/dqn.yml, "CartPole-v1" (marked
#   "Almost Tuned"; commit ce95481b041fe5314c1b2f1a53940d169b9253fc).
# - ("td3", "Pendulum-v1"): DLR-RM/rl-baselines3-zoo, hyperparams/td3.yml, "Pendulum-v1" (as on
#   the zoo's master since its off-policy recipes moved to train_freq=1, gradient_steps=1; read
#   from the mirror michelled01/rl-final-project@6528961e, the DLR-RM versions at hand being
#   older: Pendulum-v0/v1 with train_freq [1, "episode"], gradient_steps -1, otherwise equal).
# n_timesteps is the zoo's training budget: it only turns exploration_fraction (a fraction of
# the budget in SB3) into env steps; the run's length is the spec's.
ZOO_RECIPES: dict[tuple[str, str], dict[str, Any]] = {
    ("dqn", "CartPole-v1"): {
        "n_timesteps": 50_000,
        "learning_rate": 2.3e-3,
        "batch_size": 64,
        "buffer_size": 100_000,
        "learning_starts": 1_000,
        "gamma": 0.99,
        "target_update_interval": 10,
        "train_freq": 256,
        "gradient_steps": 128,
        "exploration_fraction": 0.16,
        "exploration_final_eps": 0.04,
        "policy_kwargs": {"net_arch": [256, 256]},
    },
    ("td3", "Pendulum-v1"): {
        "n_timesteps": 20_000,
        "gamma": 0.98,
        "buffer_size": 200_000,
        "learning_starts": 10_000,
        "noise_type": "normal",
        "noise_std": 0.1,
        "gradient_steps": 1,
        "train_freq": 1,
        "learning_rate": 1e-3,
        "policy_kwargs": {"net_arch": [400, 300]},
    },
}
ALGOS = {"dqn": (DQN, gym.spaces.Discrete), "td3": (TD3, gym.spaces.Box)}
# TD3's exploration and target-smoothing noise, as fractions of the half action range (SB3 adds
# them to actions scaled to [-1, 1]): the values drlhet's TD3 uses.
TD3_NOISE = {"exploration": 0.1, "target_policy_noise": 0.2, "target_noise_clip": 0.5}
EVAL_SEED_OFFSET = 10_000


def check_spec(spec: RunSpec) -> None:
    """Raises ValueError naming the first field of ``spec`` this runner cannot run."""
    if spec.algo not in ALGOS:
        raise ValueError(f"algo={spec.algo!r}: expected one of {sorted(ALGOS)}")
    if spec.recipe not in ("matched", "tuned"):
        raise ValueError(f"recipe={spec.recipe!r}: expected 'matched' or 'tuned'")
    if spec.recipe == "tuned" and (spec.algo, spec.env) not in ZOO_RECIPES:
        raise ValueError(f"recipe='tuned': rl-baselines3-zoo recipes here: {sorted(ZOO_RECIPES)}")
    minimum = {"batch": 1, "buffer": 1, "num_envs": 1, "sgd_steps": 1, "warmup": 0, "n_step": 1}
    minimum |= {"epsilon_steps": 0, "steps": 1, "eval_every": 1, "eval_episodes": 1, "seed": 0}
    for name, low in minimum.items():
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r}: expected an integer >= {low}")
    if not spec.hidden or not all(isinstance(h, int) and h > 0 for h in spec.hidden):
        raise ValueError(f"hidden={spec.hidden!r}: expected positive integer widths")
    reals = {
        "lr": (spec.lr, lambda x: x > 0, "> 0"),
        "gamma": (spec.gamma, lambda x: 0 < x <= 1, "in (0, 1]"),
        "tau": (spec.tau, lambda x: 0 < x <= 1, "in (0, 1]"),
        "epsilon_end": (spec.epsilon_end, lambda x: 0 <= x <= 1, "in [0, 1]"),
    }
    for name, (value, ok, expected) in reals.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not ok(value):
            raise ValueError(f"{name}={value!r}: expected a number {expected}")
    stop = spec.stop_at_return
    if stop is not None and (isinstance(stop, bool) or not isinstance(stop, int | float)):
        raise ValueError(f"stop_at_return={stop!r}: expected a number or null")


def make_env(spec: RunSpec) -> gym.Env:
    """One Gymnasium env of ``spec.env``; ValueError when the id is unknown or its action space
    does not suit ``spec.algo``."""
    try:
        env = gym.make(spec.env)
    except gym.error.Error as err:
        raise ValueError(f"env={spec.env!r}: {err}") from None
    space = ALGOS[spec.algo][1]
    if not isinstance(env.action_space, space):
        raise ValueError(f"env={spec.env!r}: {spec.algo} needs {space.__name__} actions")
    return env


def recipe_settings(spec: RunSpec, action_dim: int) -> tuple[dict[str, Any], int, str]:
    """``(SB3 constructor kwargs, n_envs, notes)`` for the spec's recipe."""
    if spec.recipe == "tuned":
        return _tuned_settings(spec, action_dim)
    kwargs: dict[str, Any] = {
        "learning_rate": spec.lr,
        "buffer_size": spec.buffer,
        "learning_starts": spec.warmup,
        "batch_size": spec.batch,
        "gamma": spec.gamma,
        "train_freq": 1,  # one vector step (num_envs env steps) ...
        "gradient_steps": spec.sgd_steps,  # ... then sgd_steps SGD steps of batch
        "n_steps": spec.n_step,  # SB3 >= 2.7 builds an NStepReplayBuffer when > 1
        "policy_kwargs": {"net_arch": list(spec.hidden)},
    }
    if spec.algo == "dqn":
        # SB3 updates DQN's target once per vector step (after the gradient_steps SGD steps);
        # this rate is the spec's Polyak tau applied after every SGD step, as drlhet does.
        tau = 1.0 - (1.0 - spec.tau) ** spec.sgd_steps
        kwargs |= {
            "tau": tau,
            "target_update_interval": 1,
            "exploration_initial_eps": 1.0,
            "exploration_final_eps": spec.epsilon_end,
            # SB3's schedule runs over a fraction of total_timesteps (= spec.steps).
            "exploration_fraction": min(1.0, spec.epsilon_steps / spec.steps),
        }
        algo_note = (
            "vanilla DQN (no double Q, no dueling: SB3 has neither), Huber loss, grad-norm "
            f"clip 10; target Polyak {tau:.4g} per vector step (= tau {spec.tau:g} per SGD step)"
        )
    else:
        sigma = TD3_NOISE["exploration"] * np.ones(action_dim)
        kwargs |= {
            "tau": spec.tau,
            "action_noise": NormalActionNoise(mean=np.zeros(action_dim), sigma=sigma),
            "policy_delay": 2,
            "target_policy_noise": TD3_NOISE["target_policy_noise"],
            "target_noise_clip": TD3_NOISE["target_noise_clip"],
        }
        algo_note = (
            "TD3: Gaussian exploration noise 0.1, target noise 0.2 clipped at 0.5 (x half action "
            "range), policy delay 2, targets updated with the actor"
        )
    n_step = f"n-step {spec.n_step} (SB3 NStepReplayBuffer)" if spec.n_step > 1 else "1-step"
    notes = (
        f"recipe matched; uniform replay (SB3 has no PER); {n_step}; DummyVecEnv x{spec.num_envs} "
        f"(envs stepped in sequence in-process); {algo_note}"
    )
    return kwargs, spec.num_envs, notes


def _tuned_settings(spec: RunSpec, action_dim: int) -> tuple[dict[str, Any], int, str]:
    """`recipe_settings` for "tuned": the zoo's recipe with its exploration period in env steps
    kept (not its fraction of the budget), one env and 1-step returns, as the zoo runs it."""
    kwargs = copy.deepcopy(ZOO_RECIPES[(spec.algo, spec.env)])
    budget = kwargs.pop("n_timesteps")
    # the batch the run uses (the harness's trained samples/s): the recipe's, else SB3's default
    algo_cls = ALGOS[spec.algo][0]
    kwargs.setdefault("batch_size", inspect.signature(algo_cls).parameters["batch_size"].default)
    if "exploration_fraction" in kwargs:
        kwargs["exploration_fraction"] = min(
            1.0, kwargs["exploration_fraction"] * budget / spec.steps
        )
    if kwargs.pop("noise_type", None) == "normal":
        sigma = kwargs.pop("noise_std") * np.ones(action_dim)
        kwargs["action_noise"] = NormalActionNoise(mean=np.zeros(action_dim), sigma=sigma)
    shown = {k: v for k, v in ZOO_RECIPES[(spec.algo, spec.env)].items() if k != "policy_kwargs"}
    notes = (
        f"recipe tuned: rl-baselines3-zoo hyperparams/{spec.algo}.yml {spec.env} "
        f"{shown} net_arch {kwargs['policy_kwargs']['net_arch']}, SB3 defaults otherwise "
        f"(exploration over the zoo's env steps); uniform replay (SB3 has no PER); 1-step; "
        f"DummyVecEnv x1"
    )
    return kwargs, 1, notes


def greedy_return(model: BaseAlgorithm, env: gym.Env, episodes: int) -> float:
    """Mean undiscounted return of ``episodes`` greedy (``deterministic=True``) episodes."""
    total = 0.0
    for _ in range(episodes):
        obs, _ = env.reset()
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
    return total / episodes


class PeersEval(BaseCallback):
    """Every ``spec.eval_every`` env steps (``num_timesteps``, all envs together) evaluates the
    greedy policy, prints a row, and stops training once ``spec.stop_at_return`` is reached."""

    def __init__(self, spec: RunSpec, reporter: Reporter, eval_env: gym.Env) -> None:
        super().__init__()
        self.spec, self.reporter, self.eval_env = spec, reporter, eval_env
        self.next_eval = spec.eval_every
        self.eval_s = 0.0

    def _on_step(self) -> bool:
        """Called by SB3 after every vector step; False stops `learn`."""
        if self.num_timesteps < self.next_eval:
            return True
        while self.next_eval <= self.num_timesteps:
            self.next_eval += self.spec.eval_every
        t0 = time.perf_counter()
        mean = greedy_return(self.model, self.eval_env, self.spec.eval_episodes)
        self.eval_s += time.perf_counter() - t0
        # _n_updates: SGD steps (minibatches) done; DQN and TD3 add one per gradient step.
        self.reporter.row(self.model.num_timesteps, self.model._n_updates, mean, self.eval_s)
        return self.spec.stop_at_return is None or mean < self.spec.stop_at_return


def main(argv: list[str] | None = None) -> int:
    """Runs one spec; returns the exit status (2: bad spec)."""
    try:
        spec, launched = parse_argv(argv)
        spec = dataclasses.replace(spec, env=gymnasium_id(spec.env))  # gym.make's id
        check_spec(spec)
        eval_env = make_env(spec)
    except (ValueError, TypeError, SystemExit) as err:
        print(f"sb3_run: bad spec: {err}", file=sys.stderr)
        return 2
    reporter = Reporter(launched)
    action_dim = int(np.prod(eval_env.action_space.shape or (1,)))
    kwargs, n_envs, notes = recipe_settings(spec, action_dim)
    reporter.header(
        system=f"sb3-{spec.algo}",
        version=f"stable-baselines3 {sb3.__version__} / torch {torch.__version__}",
        threads=f"torch {torch.get_num_threads()} thread, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}",
        notes=notes,
        batch=kwargs.get("batch_size", spec.batch),
    )
    env_id = spec.env
    venv = DummyVecEnv([lambda: gym.make(env_id)] * n_envs)
    eval_env.reset(seed=spec.seed + EVAL_SEED_OFFSET)
    with warnings.catch_warnings():
        # target_update_interval=1 < n_envs: SB3 warns that it updates once per vector step.
        warnings.filterwarnings("ignore", message="The number of environments used is greater")
        model = ALGOS[spec.algo][0]("MlpPolicy", venv, seed=spec.seed, device="cpu", **kwargs)
    model.learn(total_timesteps=spec.steps, callback=PeersEval(spec, reporter, eval_env))
    reporter.end()
    return 0


if __name__ == "__main__":
    sys.exit(main())
