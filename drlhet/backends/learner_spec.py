"""What the FPGA learner module (``hls/learner``) can train: its sizes, in plain Python.

Shared by the backend (`drlhet.backends.fpga_learner`, before a run) and the DSE's cost model
(`drlhet.dse.devices.fpga`, which imports no JAX).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MAX_WIDTH", "MAX_HIDDEN", "MAX_BATCH", "why_not", "memory_words"]

MAX_WIDTH, MAX_HIDDEN, MAX_BATCH = 256, 3, 256
"""The module's sizes (hls/learner/memory.h): neurons per layer, hidden layers, batch."""


def why_not(
    algo: str, hidden: Sequence[int], obs_shape: tuple[int, ...], outputs: int, batch: int
) -> str:
    """Why the learner module cannot train this network (empty: it can)."""
    if algo not in ("dqn", "ddpg"):
        return f"the FPGA learner module runs DQN's and DDPG/TD3's steps, not {algo!r}"
    if len(obs_shape) != 1:
        return f"the FPGA learner module takes flat observations, got shape {obs_shape}"
    if len(hidden) > MAX_HIDDEN:
        return f"the FPGA learner module holds at most {MAX_HIDDEN} hidden layers, got {hidden}"
    widths = (*obs_shape, *hidden, outputs)
    if algo == "ddpg":  # the critic reads the observation and the action
        widths = (*widths, obs_shape[0] + outputs)
    if max(widths) > MAX_WIDTH or min(widths) < 1:
        return f"the FPGA learner module's layers are 1..{MAX_WIDTH} wide, got {widths}"
    if not 1 <= batch <= MAX_BATCH:
        return f"the FPGA learner module trains batches of 1..{MAX_BATCH}, got {batch}"
    return ""


def _net_size(inputs: int, hidden: Sequence[int], heads: Sequence[int]) -> int:
    """Parameters of an MLP of ``inputs``, the nonzero ``hidden`` widths and ``heads``."""
    size, prev = 0, inputs
    for w in (w for w in hidden if w):
        size, prev = size + prev * w + w, w
    return size + sum(prev * h + h for h in heads)


def memory_words(
    algo: str, obs: int, hidden: Sequence[int], outputs: int, dueling: bool, critics: int
) -> int:
    """Floats of the module's memories for this network (``learner_top.cpp``'s ``kMemory``):
    the parameters, the target network's and Adam's two moments, four times the network (DDPG:
    the actor and ``critics`` critics reading the observation and the action)."""
    if algo == "ddpg":
        critic = _net_size(obs + outputs, hidden, (1,))
        return 4 * (_net_size(obs, hidden, (outputs,)) + critics * critic)
    return 4 * _net_size(obs, hidden, (1, outputs) if dueling else (outputs,))
