"""The static configuration of a training run."""

from __future__ import annotations

import dataclasses
from typing import Literal

from drlhet.agents.ddpg import DDPGConfig
from drlhet.agents.dqn import DQNConfig
from drlhet.backends import default, get, names

__all__ = ["TrainConfig", "check", "n_step_of", "with_backend"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (static)."""

    algo: Literal["dqn", "ddpg"] = "dqn"
    env: str = "CartPole-v1"
    seeds: int = 1
    """Independent seeds trained together (vmap)."""
    seed: int = 0
    steps: int = 100_000
    """Env steps per seed (all environments together)."""
    num_envs: int = 4
    sgd_steps: int = 2
    """SGD steps per iteration; replay ratio = sgd_steps / num_envs SGD steps per env step."""
    warmup: int = 1_000
    """Env steps with random actions before learning starts."""
    buffer_size: int = 50_000
    batch_size: int = 128
    n_step: int | None = None
    """n-step returns (sum_i gamma^i r_i over up to n steps of one episode); None: 3 for DQN
    (Rainbow's choice; it made CartPole reliable here), 1 for DDPG."""
    alpha: float = 0.6
    beta_start: float = 0.4
    """IS exponent at the start, annealed linearly to 1 at the end of training."""
    branching: int = 16
    backend: str | None = None
    """Replay backend (`drlhet.backends`; ``drlhet backends`` lists them); None: the fastest one
    that loads on the device the replay runs on."""
    learner: str | None = None
    """Learner backend (a mapping's ``learner=NAME@device`` sets it); None: the agents' JAX
    step. ``fpga`` runs the FPGA learner module's C-simulation (DQN)."""
    uniform: bool = False
    """Uniform replay instead of PER (the baseline)."""
    delay: int = 0
    """Learner steps by which priority updates are delayed (0: strict PER; see replay.delayed).
    With delay >= 1 the actors also act with the parameters of one iteration earlier, so that
    they need not wait for the learner (the host loops of drlhet.runtime.host_loop)."""
    eval_every: int = 5_000
    eval_envs: int = 10
    dqn: DQNConfig = DQNConfig()
    ddpg: DDPGConfig = DDPGConfig()


MAX_BUFFER = (1 << 31) - 1
"""Slots a buffer can have: its indices are int32 inside the jitted program."""


def check(cfg: TrainConfig) -> None:
    """Raises ``ValueError`` naming the first bad field of ``cfg``."""
    if cfg.n_step is not None and cfg.n_step < 1:
        raise ValueError(f"n_step must be >= 1, got {cfg.n_step}")
    for name in (
        "steps",
        "num_envs",
        "sgd_steps",
        "batch_size",
        "buffer_size",
        "eval_every",
        "eval_envs",
        "seeds",
    ):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.buffer_size > MAX_BUFFER:
        raise ValueError(
            f"buffer_size must be <= {MAX_BUFFER} (int32 slots), got {cfg.buffer_size}"
        )
    if cfg.eval_every % cfg.num_envs:
        raise ValueError(f"eval_every ({cfg.eval_every}) must be a multiple of num_envs")
    if cfg.warmup < cfg.batch_size:
        raise ValueError(f"warmup ({cfg.warmup}) must be >= batch_size ({cfg.batch_size})")
    if cfg.delay < 0:
        raise ValueError(f"delay must be >= 0, got {cfg.delay}")
    if cfg.algo not in ("dqn", "ddpg"):
        raise ValueError(f"algo must be 'dqn' or 'ddpg', got {cfg.algo!r}")
    accepts = get(cfg.backend).accepts if cfg.backend in names() else None
    why = accepts(cfg.buffer_size, cfg.branching) if accepts else ""
    if why:
        raise ValueError(why)


def n_step_of(cfg: TrainConfig) -> int:
    """The n of n-step returns: ``cfg.n_step``, or 3 for DQN and 1 for DDPG when unset."""
    if cfg.n_step is not None:
        return cfg.n_step
    return 3 if cfg.algo == "dqn" else 1


def with_backend(cfg: TrainConfig, platform: str) -> TrainConfig:
    """``cfg`` with its replay backend named: the fastest that loads on ``platform`` when
    ``cfg.backend`` is None.

    Raises:
      BackendUnavailable: no replay backend loads on ``platform``.
    """
    if cfg.backend is not None:
        return cfg
    return dataclasses.replace(cfg, backend=default("replay", platform))
