"""The sizes of a run that the cost models need (pure data; `drlhet.dse.trace.shapes_of`
derives them from a configuration)."""

from __future__ import annotations

import dataclasses

__all__ = ["Shapes"]


@dataclasses.dataclass(frozen=True)
class Shapes:
    """Sizes the analytical models need (from the configuration, no measurement).

    Attributes:
      batch, capacity, branching, num_envs, sgd_steps: the run's shape.
      levels: tree levels below the root.
      tree_bytes: bytes of the sum tree's nodes.
      row_bytes: bytes of one stored transition.
      params: learner parameters (one network).
      macs_per_sample: multiply-accumulates of one forward pass for one sample.
      layers: dense layers of the network.
      bytes: payload bytes per hop (``transitions``, ``batch``, ``priorities``, ``params``).
      algo: ``dqn`` or ``ddpg``.
      net: the network's widths ``(input, hidden..., outputs)`` (DQN: outputs = actions).
      dueling, double: DQN's dueling head and double-Q targets.
      td3, policy_delay: DDPG's TD3 variant (twin critics, the actor trained one step in
        ``policy_delay``).
      iterations: iterations per chunk of the run predicted (``eval_every // num_envs``),
        which the pipeline's iterations per stage call divide (`drlhet.dse.pipelined.unroll`);
        None: not known (the most the delay allows is taken).
    """

    batch: int
    capacity: int
    branching: int
    num_envs: int
    sgd_steps: int
    levels: int
    tree_bytes: int
    row_bytes: int
    params: int
    macs_per_sample: int
    layers: int
    bytes: dict[str, int]
    algo: str = "dqn"
    net: tuple[int, ...] = ()
    dueling: bool = True
    double: bool = True
    td3: bool = False
    policy_delay: int = 2
    iterations: int | None = None
