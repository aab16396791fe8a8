"""`ProfileKey`: what a profile depends on, the shape of a run (docs/design.md section 5)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import tyro

from drlhet.agents.ddpg import DDPGConfig
from drlhet.agents.dqn import DQNConfig
from drlhet.runtime.config import TrainConfig

__all__ = ["ProfileKey"]


@dataclasses.dataclass(frozen=True)
class ProfileKey:
    """What a profile depends on (a run's shape, not its learning hyper-parameters).

    Attributes:
      algo, env, hidden, batch, capacity, branching, num_envs, sgd_steps: the run's shape.
      backend: the replay backend profiled (None: the run's default, the fastest that loads).
        Not an option of ``drlhet dse`` and ``drlhet profile``: they profile every one that
        loads.
    """

    algo: str = "dqn"
    env: str = "CartPole-v1"
    hidden: tuple[int, ...] = (64, 64)
    batch: int = 128
    capacity: int = 50_000
    branching: int = 16
    num_envs: int = 4
    sgd_steps: int = 2
    backend: Annotated[str | None, tyro.conf.Suppress] = None

    def name(self) -> str:
        """The key as text (the profile cache's entry name)."""
        h = "x".join(map(str, self.hidden))
        return (
            f"{self.algo}-{self.env}-h{h}-B{self.batch}-C{self.capacity}-K{self.branching}"
            f"-E{self.num_envs}-S{self.sgd_steps}" + (f"-{self.backend}" if self.backend else "")
        )

    @classmethod
    def of(cls, cfg: TrainConfig) -> ProfileKey:
        """The key of a `drlhet.runtime.config.TrainConfig` (its shape; its replay backend)."""
        hidden = cfg.dqn.hidden if cfg.algo == "dqn" else cfg.ddpg.hidden
        return cls(
            algo=cfg.algo,
            env=cfg.env,
            hidden=tuple(hidden),
            batch=cfg.batch_size,
            capacity=cfg.buffer_size,
            branching=cfg.branching,
            num_envs=cfg.num_envs,
            sgd_steps=cfg.sgd_steps,
            backend=cfg.backend,
        )

    def train_config(self, delay: int = 0, **overrides: Any) -> TrainConfig:
        """The `TrainConfig` this key stands for (one seed); ``overrides`` replace its fields."""
        fields: dict[str, Any] = dict(
            algo=self.algo,
            env=self.env,
            batch_size=self.batch,
            buffer_size=self.capacity,
            branching=self.branching,
            num_envs=self.num_envs,
            sgd_steps=self.sgd_steps,
            backend=self.backend,
            delay=delay,
            warmup=max(1_000, self.batch),
            # a multiple of the envs (num_envs < 1 is left to the configuration's check)
            eval_every=self.num_envs * max(1, 5_000 // max(1, self.num_envs)),
            dqn=DQNConfig(hidden=self.hidden),
            ddpg=DDPGConfig(hidden=self.hidden),
        )
        fields.update(overrides)
        return TrainConfig(**fields)
