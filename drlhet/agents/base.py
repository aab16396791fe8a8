"""The interface every agent implements: a bundle of pure functions."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["AgentFns"]


class AgentFns(NamedTuple):
    """Pure functions of an agent.

    Attributes:
      init: ``(key) -> state``.
      act: ``(state, obs [N, ...], key, env_steps, explore=True) -> actions [N, ...]``.
      update: ``(state, batch, weights [B], key) -> (state, priorities [B], metrics)``; ``batch``
        is a dict of ``[B, ...]`` arrays: obs, action, reward, discount, next_obs. The key is
        required (an agent that draws noise, such as TD3's target smoothing, uses it).
    """

    init: Any
    act: Any
    update: Any
