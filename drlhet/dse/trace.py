"""`shapes_of`: the `Shapes` of a run, traced from its trainer (shapes only, nothing runs)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from drlhet.dse.key import ProfileKey
from drlhet.dse.shapes import Shapes
from drlhet.replay.sum_tree import layout as tree_layout
from drlhet.runtime.trainer import make_trainer

__all__ = ["shapes_of"]


def _nbytes(tree: Any) -> int:
    return int(sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def shapes_of(key: ProfileKey, eval_every: int | None = None) -> Shapes:
    """The `Shapes` of ``key`` (``jax.eval_shape`` of the trainer's init; fast), for a run in
    chunks of ``eval_every`` env steps (None: not known, `Shapes.iterations` None)."""
    tr = make_trainer(key.train_config())
    lay = tree_layout(key.capacity, key.branching)
    state = jax.eval_shape(tr.init, jax.random.key(0))
    agent = state.agent
    nets = agent.params if key.algo == "dqn" else (agent.actor, agent.critic)
    leaves = jax.tree.leaves(nets)
    # the layers' weight matrices by name: the critics of DDPG/TD3 are made with vmap, so each
    # of their leaves has a leading [critics] axis (a kernel [n, in, out], a bias [n, out])
    kernels = [
        x.shape
        for path, x in jax.tree_util.tree_flatten_with_path(nets)[0]
        if getattr(path[-1], "key", None) == "kernel"
    ]
    row = _nbytes(state.replay.storage) // key.capacity
    return Shapes(
        batch=key.batch,
        capacity=key.capacity,
        branching=key.branching,
        num_envs=key.num_envs,
        sgd_steps=key.sgd_steps,
        levels=lay.depth,
        tree_bytes=4 * lay.size,
        row_bytes=row,
        params=int(sum(np.prod(x.shape) for x in leaves)),
        macs_per_sample=int(sum(np.prod(k) for k in kernels)),  # every critic's too
        layers=len(kernels),  # vmapped critics: one batched product a layer
        bytes={
            "transitions": key.num_envs * row + 8 * key.sgd_steps,
            "batch": key.batch * (row + 4) + 8,
            "priorities": key.batch * 12,
            "params": _nbytes(state.agent),  # the scheduler moves the whole agent state
        },
        algo=key.algo,
        net=(int(np.prod(tr.env.obs_shape)), *key.hidden, _outputs(tr)),
        dueling=tr.config.dqn.dueling,
        double=tr.config.dqn.double,
        td3=tr.config.ddpg.td3,
        policy_delay=tr.config.ddpg.policy_delay,
        iterations=None if eval_every is None else eval_every // key.num_envs,
    )


def _outputs(tr: Any) -> int:
    """The network's outputs: DQN's actions, DDPG's action dimensions."""
    return int(tr.env.num_actions if tr.config.algo == "dqn" else tr.env.action_dim)
