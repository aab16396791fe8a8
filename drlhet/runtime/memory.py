"""How much memory a run needs, estimated from the shapes of its state before anything runs.

A run's memory is dominated by its state (`drlhet.runtime.trainer.TrainState`, one per seed):
the replay buffer's transitions (``buffer_size`` rows of the environment's observation and
action shapes), its sum tree and insertion stamps, then the agent's parameters with their
optimizer and target copies. `estimate_memory` takes those sizes from `jax.eval_shape` of the
trainer's ``init`` (nothing is allocated) and multiplies by the copies the run keeps. Every run
path donates the state to each compiled step, so a run holds one copy of it at its peak
(measured on the development VM: CartPole, 2^23 slots, fused, per-iteration and pipelined
paths, peak resident memory grew by 0.9 to 1.2 times the estimate); a checkpoint adds a host
copy while it is written. An evaluation's working set (its environments and the networks'
activations over them) is counted once, as a lower bound: with ``eval_envs`` in the millions it
is the larger part. JAX's own runtime (about 0.6 GiB) is not counted.

Pure: reads neither the machine nor any setting; `drlhet.runtime.memory_check` compares the
figure with the memory the machine has.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from drlhet.machine import size_text
from drlhet.runtime.trainer import Trainer

__all__ = ["MemoryEstimate", "estimate_memory", "nbytes", "size_text"]


class MemoryEstimate(NamedTuple):
    """Bytes of a run's state, all seeds together.

    Attributes:
      replay: the buffers: transitions ``[S, N, ...]``, sum tree ``[S, nodes]``, stamps
        ``[S, N]``.
      agent: the learner's parameters, optimizer and target state, and the actors' copy of
        the parameters (``delay >= 1``).
      other: environment states, n-step windows, delayed priority updates, keys, counters.
      copies: copies of the state the run keeps at its peak.
      evaluation: an evaluation's working set, outside the state: ``eval_envs`` environments'
        states and observations, and the networks' activations over them (each layer's
        outputs, twice: before and after the nonlinearity); a lower bound.
    """

    replay: int
    agent: int
    other: int
    copies: int
    evaluation: int = 0

    @property
    def total(self) -> int:
        """Bytes the run needs: ``copies x (replay + agent + other) + evaluation``."""
        return self.copies * (self.replay + self.agent + self.other) + self.evaluation


def nbytes(tree: Any) -> int:
    """Bytes of the arrays (or `jax.ShapeDtypeStruct` leaves) of ``tree``; a typed key counts
    its key data."""
    total = 0
    for x in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            total += int(np.prod(x.shape)) * 8  # two uint32 words per key
        else:
            total += int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
    return total


def estimate_memory(tr: Trainer, seeds: int, copies: int = 1) -> MemoryEstimate:
    """The memory of a run of ``tr`` with ``seeds`` seeds (nothing is allocated).

    Args:
      tr: the run's trainer (`drlhet.runtime.trainer.make_trainer`).
      seeds: seeds trained together (the state is ``[seeds, ...]``).
      copies: copies of the state the run keeps (1: a run; 2: a run that writes checkpoints).

    Raises:
      ValueError: ``seeds`` or ``copies`` below 1.
    """
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    key = jax.eval_shape(jax.random.key, 0)  # a key's shape and dtype only
    state = jax.eval_shape(tr.init, key)
    replay = nbytes(state.replay)
    agent = nbytes((state.agent, state.actor_agent))
    other = nbytes(state) - replay - agent
    evaluation = tr.config.eval_envs * _per_eval_env(tr, state)
    return MemoryEstimate(seeds * replay, seeds * agent, seeds * other, copies, seeds * evaluation)


def _per_eval_env(tr: Trainer, state: Any) -> int:
    """Bytes an evaluation needs per environment: its state and observation (as a training
    environment's), and 2 x 4 bytes per output of each layer of the networks (a kernel
    ``[in, out]``, or ``[critics, in, out]`` for vmapped critics)."""
    env = (nbytes(state.env_state) + nbytes(state.obs)) // tr.config.num_envs
    agent = state.agent
    nets = agent.params if tr.config.algo == "dqn" else (agent.actor, agent.critic)
    outputs = sum(
        int(np.prod(x.shape[:-2])) * x.shape[-1]
        for path, x in jax.tree_util.tree_flatten_with_path(nets)[0]
        if getattr(path[-1], "key", None) == "kernel"
    )
    return env + 2 * 4 * outputs
