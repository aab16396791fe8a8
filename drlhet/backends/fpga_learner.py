"""The FPGA learner module (``hls/learner``) as the learner step of an agent, C-simulated.

docs/design.md section 3 ("The FPGA learner"). `wrap` swaps an agent's JAX ``update`` for the
module's step (the HLS sources compiled with g++ behind an XLA FFI custom call, inside the
jitted training program on a CPU device); the agent's state keeps its flax/optax pytree, so
its ``act``, checkpoints and every other part of the loop are unchanged. The step proves
function, to float32 rounding against the flax/optax step (tested), not the board's speed: the
DSE costs it from the module's cycle model.

Parameter memory (what crosses the FFI boundary, the layout the module keeps on chip): one flat
float32 array ``[P]``, the layers in order (the hidden layers, then the heads: a dueling
network's value then advantages), each its kernel ``[in, out]`` row-major then its bias
``[out]``; the target network and Adam's two moments in the same layout, Adam's count as an
int32.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.backends.learner_spec import why_not

__all__ = ["layer_paths", "pack", "unpack", "wrap"]


def layer_paths(tree: Any) -> list[tuple[str, ...]]:
    """The flax parameter tree's dense layers in the module's order: the MLP's hidden layers,
    then the heads (``("MLP_0", "Dense_0")``, ..., ``("Dense_0",)``, ``("Dense_1",)``)."""
    p = tree["params"]
    mlp = p.get("MLP_0", {})
    hidden: list[tuple[str, ...]] = [("MLP_0", f"Dense_{i}") for i in range(len(mlp))]
    heads: list[tuple[str, ...]] = [(f"Dense_{i}",) for i in range(len(p) - (1 if mlp else 0))]
    return hidden + heads


def _layer(tree: Any, path: tuple[str, ...]) -> dict:
    node = tree["params"]
    for k in path:
        node = node[k]
    return node


def pack(tree: Any) -> jax.Array:
    """A flax parameter tree (or an optimizer moment of one) -> the parameter memory ``[P]``."""
    parts = []
    for path in layer_paths(tree):
        d = _layer(tree, path)
        parts += [jnp.ravel(d["kernel"]), jnp.ravel(d["bias"])]
    return jnp.concatenate(parts)


def unpack(flat: jax.Array, like: Any) -> Any:
    """The parameter memory ``[P]`` -> a tree shaped like ``like`` (`pack`'s inverse)."""
    out = jax.tree.map(lambda x: x, like)
    at = 0
    for path in layer_paths(like):
        d, new = _layer(like, path), {}
        for name in ("kernel", "bias"):
            n = math.prod(d[name].shape)
            new[name] = flat[at : at + n].reshape(d[name].shape)
            at += n
        node = out["params"]
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = new
    return out


def _dqn_update(config: Any, obs_dim: int, num_actions: int, call: Any):
    """DQN's ``update`` through the module (see `wrap`)."""
    hidden = tuple(config.hidden)
    widths = (*hidden, 0, 0, 0)[:3]
    attrs = {
        "obs_dim": np.int64(obs_dim),
        "hidden": np.int64(len(hidden)),
        "w0": np.int64(widths[0]),
        "w1": np.int64(widths[1]),
        "w2": np.int64(widths[2]),
        "actions": np.int64(num_actions),
        "dueling": np.int64(config.dueling),
        "double_q": np.int64(config.double),
        "period": np.int64(config.target_period),
        "sgd": np.int64(0),
        "huber_delta": np.float64(config.huber_delta),
        "priority_eps": np.float64(config.priority_eps),
        "tau": np.float64(config.tau),
        "lr": np.float64(config.learning_rate),
        "b1": np.float64(0.9),
        "b2": np.float64(0.999),
        "eps": np.float64(1e-8),
        "max_norm": np.float64(config.max_grad_norm),
    }

    def update(state, batch, weights, key):
        del key  # DQN's update draws no noise
        b = weights.shape[-1]
        why = why_not("dqn", hidden, (obs_dim,), num_actions, b)
        if why:
            raise ValueError(why)
        clip, (adam, rest) = state.opt_state
        memory = [pack(t) for t in (state.params, state.target_params, adam.mu, adam.nu)]
        steps = state.steps + 1
        out_types = (
            *(jax.ShapeDtypeStruct(m.shape, jnp.float32) for m in memory),
            jax.ShapeDtypeStruct((), jnp.int32),
            jax.ShapeDtypeStruct((b,), jnp.float32),
            jax.ShapeDtypeStruct((2,), jnp.float32),
        )
        data = (
            jnp.reshape(batch["obs"], (b, obs_dim)).astype(jnp.float32),
            jnp.asarray(batch["action"], jnp.int32),
            jnp.asarray(batch["reward"], jnp.float32),
            jnp.asarray(batch["discount"], jnp.float32),
            jnp.reshape(batch["next_obs"], (b, obs_dim)).astype(jnp.float32),
            jnp.asarray(weights, jnp.float32),
        )
        params, target, mu, nu, count, priorities, metrics = call(out_types)(
            *memory, adam.count, steps, *data, **attrs
        )
        adam = adam._replace(count=count, mu=unpack(mu, adam.mu), nu=unpack(nu, adam.nu))
        new = state._replace(
            params=unpack(params, state.params),
            target_params=unpack(target, state.target_params),
            opt_state=(clip, (adam, rest)),
            steps=steps,
        )
        return new, priorities, {"loss": metrics[0], "abs_td": metrics[1]}

    return update


def wrap(
    algo: str,
    config: Any,
    agent: Any,
    obs_shape: tuple[int, ...],
    outputs: int,
    batch: int,
    call: Any,
):
    """``agent`` (`drlhet.agents.base.AgentFns`) with its ``update`` run by the learner module.

    Args:
      algo: ``"dqn"`` (the module's DQN step; DDPG/TD3 not yet).
      config: the agent's configuration (`drlhet.agents.dqn.DQNConfig`).
      agent: the agent built from ``config`` (its ``init`` and ``act`` are kept).
      obs_shape: the observations' shape (flat: ``(D,)``).
      outputs: the number of discrete actions.
      batch: the mini-batch size B it will train on.
      call: ``out_types -> callable`` of the FFI target (`drlhet.backends.fpga`).

    Raises:
      ValueError: a network or an algorithm the module cannot run (`why_not`).
    """
    why = why_not(algo, config.hidden, obs_shape, outputs, batch)
    if why:
        raise ValueError(why)
    update = _dqn_update(config, obs_shape[0], outputs, call)
    return agent._replace(update=update)
