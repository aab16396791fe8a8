"""n-step returns from a FIFO of the last n one-step transitions of each environment.

Each environment keeps its last ``n`` one-step transitions (oldest first). Once the FIFO is
full, its oldest transition is extended to an n-step one within its episode (Sutton and Barto,
ch. 7; the n-step target of Rainbow, Hessel et al., AAAI 2018):

* ``reward = sum_{i < m} gamma^i r_i`` over the ``m <= n`` steps up to and including the first
  step that ends the episode (terminated or truncated);
* ``discount = gamma^m`` if the episode goes on after those steps, 0 if step ``m`` terminated it
  (truncation bootstraps: its discount stays ``gamma^m``);
* ``next_obs`` is the observation after step ``m``.

With ``n = 1`` the transition is the one-step transition with ``discount = gamma * (1 -
terminated)``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["NStepFns", "cut", "make_nstep"]


class NStepFns(NamedTuple):
    """The accumulator's pure functions (per environment batch of ``N``).

    Attributes:
      init: ``(example_transition, num_envs) -> fifo``: zeros, each leaf ``[n, N, ...]``; the
        example holds one unbatched ``obs``, ``action``, ``reward``, ``discount``, ``next_obs``.
      push: ``(fifo, obs [N, ...], action [N, ...], reward [N], next_obs [N, ...],
        terminated [N] bool, truncated [N] bool) -> fifo``: drops the oldest step, appends this;
        a field of another shape, or a dtype not castable within its kind to the FIFO's, raises
        ``ValueError`` naming it (also while tracing).
      transition: ``(fifo) -> transitions``: the oldest step of each environment extended to n
        steps (``obs``, ``action``, ``reward``, ``discount``, ``next_obs``, each ``[N, ...]``).
    """

    init: Any
    push: Any
    transition: Any


def make_nstep(n: int, gamma: float) -> NStepFns:
    """Builds the n-step accumulator for ``n >= 1`` steps and discount ``gamma``."""
    if not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n_step must be an integer >= 1, got {n!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    n = int(n)
    powers = jnp.asarray(gamma ** np.arange(n + 1), jnp.float32)

    def init(example: Any, num_envs: int) -> Any:
        missing = [k for k in ("obs", "action", "reward", "next_obs") if k not in example]
        if missing:
            raise ValueError(f"n-step example transition lacks {', '.join(missing)}")
        fields = {**example, "done": jnp.bool_(False), "terminated": jnp.bool_(False)}
        return jax.tree.map(
            lambda x: jnp.zeros((n, num_envs) + jnp.shape(x), jnp.result_type(x)), fields
        )

    def push(fifo, obs, action, reward, next_obs, terminated, truncated):
        given = {"obs": obs, "action": action, "reward": reward, "next_obs": next_obs}
        _check_step(fifo, {**given, "terminated": terminated, "truncated": truncated})
        step = {
            "obs": obs,
            "action": action,
            "reward": reward,
            "discount": jnp.zeros_like(reward),
            "next_obs": next_obs,
            "done": terminated | truncated,
            "terminated": terminated,
        }
        return jax.tree.map(
            lambda q, x: jnp.concatenate([q[1:], jnp.asarray(x, q.dtype)[None]], axis=0), fifo, step
        )

    def transition(fifo):
        done = fifo["done"].astype(jnp.float32)  # [n, N]
        alive = jnp.cumprod(jnp.concatenate([jnp.ones_like(done[:1]), 1.0 - done[:-1]]), axis=0)
        ret = jnp.sum(alive * powers[:n, None] * fifo["reward"], axis=0)
        m = jnp.sum(alive, axis=0).astype(jnp.int32)  # steps included, 1..n
        last = m - 1
        pick = jax.vmap(lambda x, i: x[i], in_axes=(1, 0))  # [n, N, ...] -> [N, ...]
        term = pick(fifo["terminated"], last).astype(jnp.float32)
        return {
            "obs": fifo["obs"][0],
            "action": fifo["action"][0],
            "reward": ret,
            "discount": powers[m] * (1.0 - term),
            "next_obs": pick(fifo["next_obs"], last),
        }

    return NStepFns(init, push, transition)


def _check_step(fifo: Any, fields: dict) -> None:
    """Each of ``fields`` (pytrees of ``[N, ...]``) against one step of the FIFO's ``[n, N, ...]``:
    the same structure and shapes (nothing is broadcast) and a dtype that casts to the FIFO's
    within its kind (a float action into an integer FIFO is refused; ``terminated`` and
    ``truncated`` are bool), so that a push never changes the FIFO's types.

    Raises:
      ValueError: naming the first field that does not match.
    """
    for name, given in fields.items():
        held = fifo["terminated" if name == "truncated" else name]
        got: Any = jax.tree.structure(given)
        if got != jax.tree.structure(held):
            raise ValueError(
                f"n-step push: {name} is {got}, the FIFO holds {jax.tree.structure(held)}"
            )
        paths = jax.tree_util.tree_flatten_with_path(held)[0]
        for (path, q), x in zip(paths, jax.tree.leaves(given), strict=True):
            field = name + jax.tree_util.keystr(path)
            shape, dtype = jnp.shape(x), jnp.result_type(x)
            if shape != q.shape[1:]:
                raise ValueError(f"n-step push: {field} has shape {shape}, expected {q.shape[1:]}")
            if not np.can_cast(dtype, q.dtype, casting="same_kind"):
                raise ValueError(f"n-step push: {field} is {dtype}, the FIFO holds {q.dtype}")


def cut(fifo: Any) -> Any:
    """``fifo`` (`NStepFns.init`'s) with its newest step ending its episode as a truncation, so
    that the windows still to be extended end there and bootstrap from its ``next_obs`` (the
    true observation after it), never reaching into the steps pushed after it. For episodes
    cut short outside the environment: a run resumed on host environments, whose simulators
    start afresh (`drlhet.runtime.run`). An episode that ended at that step is unchanged."""
    return {**fifo, "done": fifo["done"].at[-1].set(True)}
