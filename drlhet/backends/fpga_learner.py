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
int32. DDPG/TD3 keeps the actor's memory and the critics' ``[n, P_critic]`` (n = 2 for TD3's
twins, whose flax trees are stacked on a leading axis; a critic's input is the observation's
columns, then the action's), their targets and moments alike, and one Adam count each for the
actor and the critics. TD3's target-policy noise is drawn in JAX from the update's key, as the
JAX agent draws it, and passed in.
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


def _widths(hidden: tuple[int, ...]) -> dict[str, np.int64]:
    widths = (*hidden, 0, 0, 0)[:3]
    return {
        "hidden": np.int64(len(hidden)),
        **{f"w{i}": np.int64(w) for i, w in enumerate(widths)},
    }


def _rows(batch: Any, name: str, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
    """``batch[name]`` reshaped to ``shape`` (``[B]`` or ``[B, width]``) as ``dtype``; the
    module reads that many values, so another size is refused (it read past a shorter array)."""
    x = jnp.asarray(batch[name])
    if x.size != math.prod(shape):
        raise ValueError(f"batch[{name!r}] has shape {x.shape}; the step takes {list(shape)}")
    return jnp.reshape(x, shape).astype(dtype)


def _dqn_update(config: Any, obs_dim: int, num_actions: int, call: Any):
    """DQN's ``update`` through the module (see `wrap`)."""
    hidden = tuple(config.hidden)
    attrs = {
        "obs_dim": np.int64(obs_dim),
        **_widths(hidden),
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
            _rows(batch, "obs", (b, obs_dim)),
            _rows(batch, "action", (b,), jnp.int32),
            _rows(batch, "reward", (b,)),
            _rows(batch, "discount", (b,)),
            _rows(batch, "next_obs", (b, obs_dim)),
            jnp.asarray(weights, jnp.float32),
        )
        params, target, mu, nu, count, priorities, metrics = call(
            "drlhet_learner_dqn", out_types, 5
        )(*memory, adam.count, steps, *data, **attrs)
        adam = adam._replace(count=count, mu=unpack(mu, adam.mu), nu=unpack(nu, adam.nu))
        new = state._replace(
            params=unpack(params, state.params),
            target_params=unpack(target, state.target_params),
            opt_state=(clip, (adam, rest)),
            steps=steps,
        )
        return new, priorities, {"loss": metrics[0], "abs_td": metrics[1]}

    return update


def _stacked_pack(tree: Any) -> jax.Array:
    """Stacked critics' trees (leading axis n) -> their memories ``[n, P]``."""
    return jax.vmap(pack)(tree)


def _stacked_unpack(flat: jax.Array, like: Any) -> Any:
    return jax.vmap(lambda f: unpack(f, jax.tree.map(lambda x: x[0], like)))(flat)


def _ddpg_noise(config: Any, key: jax.Array, shape: tuple[int, int], half_range: float):
    """TD3's clipped target-policy noise ``[B, M]``, drawn as `drlhet.agents.ddpg` draws it."""
    if not config.td3:
        return jnp.zeros(shape, jnp.float32)
    return jnp.clip(
        config.target_noise * half_range * jax.random.normal(key, shape),
        -config.target_noise_clip * half_range,
        config.target_noise_clip * half_range,
    )


def _ddpg_attrs(config: Any, obs_dim: int, action_dim: int, low: float, high: float) -> dict:
    """The DDPG/TD3 FFI call's attributes (kernels/fpga_sim/learner_ddpg_ffi.cc)."""
    floats = {
        "tau": config.tau,
        "priority_eps": config.priority_eps,
        "low": low,
        "high": high,
        "actor_lr": config.actor_lr,
        "critic_lr": config.critic_lr,
        "b1": 0.9,
        "b2": 0.999,
        "eps": 1e-8,
    }
    return {
        "obs_dim": np.int64(obs_dim),
        "actions": np.int64(action_dim),
        **_widths(tuple(config.hidden)),
        "critics": np.int64(2 if config.td3 else 1),
        "td3": np.int64(config.td3),
        "policy_delay": np.int64(config.policy_delay),
        **{k: np.float64(v) for k, v in floats.items()},
    }


def _ddpg_update(config: Any, obs_dim: int, action_dim: int, bounds: tuple, call: Any):
    """DDPG/TD3's ``update`` through the module (see `wrap`)."""
    hidden = tuple(config.hidden)
    low, high = float(bounds[0]), float(bounds[1])
    attrs = _ddpg_attrs(config, obs_dim, action_dim, low, high)

    def update(state, batch, weights, key):
        b = weights.shape[-1]
        why = why_not("ddpg", hidden, (obs_dim,), action_dim, b)
        if why:
            raise ValueError(why)
        (a_adam, a_rest), (c_adam, c_rest) = state.actor_opt, state.critic_opt
        memory = (
            *(pack(t) for t in (state.actor, state.target_actor, a_adam.mu, a_adam.nu)),
            *(_stacked_pack(t) for t in (state.critic, state.target_critic, c_adam.mu, c_adam.nu)),
        )
        order = (0, 4, 1, 5, 2, 3, 6, 7)  # actor, critic, targets, actor's then critic's moments
        operands = [memory[k] for k in order]
        steps = state.steps + 1
        data = (
            _rows(batch, "obs", (b, obs_dim)),
            _rows(batch, "action", (b, action_dim)),
            _rows(batch, "reward", (b,)),
            _rows(batch, "discount", (b,)),
            _rows(batch, "next_obs", (b, obs_dim)),
            jnp.asarray(weights, jnp.float32),
            _ddpg_noise(config, key, (b, action_dim), 0.5 * (high - low)),
        )
        out_types = (
            *(jax.ShapeDtypeStruct(m.shape, jnp.float32) for m in operands),
            *(jax.ShapeDtypeStruct((), jnp.int32) for _ in range(2)),
            jax.ShapeDtypeStruct((b,), jnp.float32),
            jax.ShapeDtypeStruct((3,), jnp.float32),
        )
        out = call("drlhet_learner_ddpg", out_types, 10)(
            *operands, a_adam.count, c_adam.count, steps, *data, **attrs
        )
        actor, critic, t_actor, t_critic, a_mu, a_nu, c_mu, c_nu = out[:8]
        a_adam = a_adam._replace(
            count=out[8], mu=unpack(a_mu, a_adam.mu), nu=unpack(a_nu, a_adam.nu)
        )
        c_adam = c_adam._replace(
            count=out[9], mu=_stacked_unpack(c_mu, c_adam.mu), nu=_stacked_unpack(c_nu, c_adam.nu)
        )
        new = state._replace(
            actor=unpack(actor, state.actor),
            critic=_stacked_unpack(critic, state.critic),
            target_actor=unpack(t_actor, state.target_actor),
            target_critic=_stacked_unpack(t_critic, state.target_critic),
            actor_opt=(a_adam, a_rest),
            critic_opt=(c_adam, c_rest),
            steps=steps,
        )
        metrics = out[11]
        return new, out[10], {"loss": metrics[0], "actor_loss": metrics[1], "abs_td": metrics[2]}

    return update


def wrap(
    algo: str,
    config: Any,
    agent: Any,
    obs_shape: tuple[int, ...],
    outputs: int,
    batch: int,
    call: Any,
    bounds: tuple[float, float] = (-1.0, 1.0),
):
    """``agent`` (`drlhet.agents.base.AgentFns`) with its ``update`` run by the learner module.

    Args:
      algo: ``"dqn"`` or ``"ddpg"`` (DDPG or TD3, as ``config.td3`` says).
      config: the agent's configuration (`drlhet.agents.dqn.DQNConfig` or
        `drlhet.agents.ddpg.DDPGConfig`).
      agent: the agent built from ``config`` (its ``init`` and ``act`` are kept).
      obs_shape: the observations' shape (flat: ``(D,)``).
      outputs: the number of discrete actions (DQN) or the action's dimension M (DDPG).
      batch: the mini-batch size B it will train on.
      call: ``(target, out_types, aliased) -> callable`` of an FFI target
        (`drlhet.backends.fpga`).
      bounds: DDPG's action bounds ``(low, high)``, as the agent was built with.

    Raises:
      ValueError: a network or an algorithm the module cannot run (`why_not`).
    """
    why = why_not(algo, config.hidden, obs_shape, outputs, batch)
    if not why and getattr(config, "actor_is_weights", False):
        why = "the FPGA learner module trains the actor unweighted: ddpg.actor_is_weights=True"
    if why:
        raise ValueError(why)
    if algo == "dqn":
        return agent._replace(update=_dqn_update(config, obs_shape[0], outputs, call))
    return agent._replace(update=_ddpg_update(config, obs_shape[0], outputs, bounds, call))
