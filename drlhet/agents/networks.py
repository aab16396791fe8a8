"""Flax (linen) networks: Q-networks (optionally dueling), deterministic actors and critics."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp

__all__ = ["MLP", "QNetwork", "Actor", "Critic"]


class MLP(nn.Module):
    """ReLU MLP: ``[..., D] -> [..., hidden[-1]]``."""

    hidden: Sequence[int]

    @nn.compact
    def __call__(self, x):
        for h in self.hidden:
            x = nn.relu(nn.Dense(h)(x))
        return x


class QNetwork(nn.Module):
    """``obs [..., D] -> Q [..., A]``; dueling head ``V + A - mean(A)`` (Wang et al., 2016)."""

    hidden: Sequence[int]
    num_actions: int
    dueling: bool = False
    """Q = V + A - mean(A) (Wang et al., 2016), V and A two linear heads on the shared hidden
    layers (the paper gives each stream its own hidden layer)."""

    @nn.compact
    def __call__(self, obs):
        x = MLP(self.hidden)(obs)
        if not self.dueling:
            return nn.Dense(self.num_actions)(x)
        value = nn.Dense(1)(x)
        adv = nn.Dense(self.num_actions)(x)
        return value + adv - jnp.mean(adv, axis=-1, keepdims=True)


class Actor(nn.Module):
    """Deterministic policy ``obs [..., D] -> action [..., M]`` in ``[low, high]`` (tanh)."""

    hidden: Sequence[int]
    action_dim: int
    low: float
    high: float

    @nn.compact
    def __call__(self, obs):
        x = nn.tanh(nn.Dense(self.action_dim)(MLP(self.hidden)(obs)))
        return self.low + (x + 1.0) * 0.5 * (self.high - self.low)


class Critic(nn.Module):
    """``(obs [..., D], action [..., M]) -> Q [...]``."""

    hidden: Sequence[int]

    @nn.compact
    def __call__(self, obs, action):
        x = MLP(self.hidden)(jnp.concatenate([obs, action], axis=-1))
        return nn.Dense(1)(x)[..., 0]
