"""drlhet: off-policy deep RL with a prioritized replay buffer, each primitive of the training
loop mapped onto the CPU, GPU or FPGA that suits it (Zhang, Meng, Prasanna, TPDS 2023).

The names most programs need are here, each imported from its module on first use, so that
``import drlhet`` alone starts nothing (``drlhet train`` creates its XLA CPU devices before JAX
starts)::

    import drlhet

    states, rows = drlhet.run(drlhet.TrainConfig(env="CartPole-v1", seeds=3))
    replay = drlhet.make_prioritized_replay(2**20, 256, tree_ops=drlhet.tree_ops("native"))

The modules themselves (``drlhet.runtime``, ``drlhet.replay``, ``drlhet.backends``,
``drlhet.dse``, ...) hold the rest; docs/design.md section 9 says which depends on which.
"""

from __future__ import annotations

import importlib
from typing import Any

EXPORTS = {
    "TrainConfig": "drlhet.runtime.config",
    "DQNConfig": "drlhet.agents.dqn",
    "DDPGConfig": "drlhet.agents.ddpg",
    "run": "drlhet.runtime.run",
    "Start": "drlhet.runtime.run",
    "Mapping": "drlhet.runtime.mapping",
    "Saving": "drlhet.runtime.saving",
    "Stopped": "drlhet.runtime.saving",
    "initial_example": "drlhet.runtime.run",
    "Checkpoints": "drlhet.checkpoint",
    "checkpoint_saving": "drlhet.checkpoint",
    "make_prioritized_replay": "drlhet.replay.prioritized",
    "make_delayed_updates": "drlhet.replay.delayed",
    "tree_ops": "drlhet.backends",
    "BackendUnavailable": "drlhet.backends.base",
    "enable_compilation_cache": "drlhet.runtime.compiling",
}
"""Each top-level name and the module it comes from."""

__all__ = [*EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("drlhet")
    if name not in EXPORTS:
        raise AttributeError(f"module 'drlhet' has no attribute {name!r}")
    value = getattr(importlib.import_module(EXPORTS[name]), name)
    globals()[name] = value  # the next lookup is a plain one
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
