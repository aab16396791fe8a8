"""flashbax_dqn.py's replay: flashbax's prioritised item buffer as the runner drives it, with
the fixes of two flashbax 0.1.3 bugs (new items at the running max, `add_at_max`; draws of
zero probability replaced, `without_empty_draws`) and drlhet's IS weights and beta schedule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from flashbax_loop import _Pieces


def _strong_max(buffer: Any) -> Any:
    """``buffer`` with its ``max_recorded_priority`` a float32 array: flashbax makes it weakly
    typed (``jnp.array(1.0)``), the first ``set_priorities`` makes it strong, and the chunk
    would compile a second time for its second call."""
    tree = buffer.sum_tree_state
    tree = tree.replace(max_recorded_priority=jnp.asarray(tree.max_recorded_priority, jnp.float32))
    return buffer.replace(sum_tree_state=tree)


def add_at_max(p: _Pieces, buffer: Any, transitions: Any) -> Any:
    """flashbax's ``add`` of ``transitions`` ``[N, ...]``, then their leaves set to
    ``max_recorded_priority`` (PER: new items at the largest priority so far).

    flashbax 0.1.3 fills the new leaves with ``jnp.full_like(item_indices, max)``: int32, so they
    get ``floor(max p^alpha)`` (1 until the largest ``p^alpha`` reaches 2, 2 until 3, ...);
    fixed in its PR #58, not released. The item buffer writes item ``i`` to slot ``i``: the
    ``N`` new items are the ``N`` slots from ``current_index`` on.

    Returns:
      The buffer state.
    """
    n = p.spec.num_envs
    capacity = buffer.experience["reward"].shape[1]
    slots = (buffer.current_index + jnp.arange(n, dtype=jnp.int32)) % capacity
    buffer = p.buffer.add(buffer, transitions)
    tree = buffer.sum_tree_state
    top = jnp.broadcast_to(tree.max_recorded_priority, (n,))
    return buffer.replace(sum_tree_state=p.set_leaves(tree, slots, top))


def is_weights(probabilities: jax.Array, size: jax.Array, beta: jax.Array) -> jax.Array:
    """Importance-sampling weights ``(N P(i))^-beta`` normalised by the batch's largest, as
    drlhet computes them (Schaul et al., ICLR 2016, Sec. 3.4); N cancels in the normalisation
    but is kept for the formula's sake.

    Args:
      probabilities: ``[B]`` flashbax's ``P(i)`` of the sampled items, > 0 (`without_empty_draws`).
      size: ``[]`` N, items in the buffer.
      beta: ``[]`` the IS exponent.

    Returns:
      ``[B]`` weights, max 1.
    """
    raw = jnp.power(size.astype(jnp.float32) * probabilities, -beta)
    return raw / jnp.max(raw)


def without_empty_draws(sample: Any) -> Any:
    """flashbax's sample with every draw of a zero-probability item replaced by the batch's most
    probable draw (index, data and probability).

    flashbax 0.1.3's float32 sum tree keeps its inner sums by adding deltas, which drift from
    the leaves; a stratified target near a boundary then descends into a subtree of zero leaves
    and returns an item of ``P(i) = 0``: an unfilled slot (all-zero data) or, once the buffer
    is full, a padding leaf past the capacity (its data gathered from a clamped index). Its IS
    weight is infinite and the parameters turn NaN: in the default CartPole run, seed 0, the
    first such draw came after ~5.9k env steps, then up to 44 of the 320,000 draws per 5k env
    steps once the buffer was full. This is
    flashbax issue #52 (open); its fix (PR #58, a float64 tree) is not released, and the
    maintainer's suggested workaround is this replacement. It also keeps ``set_priorities``
    off those slots (a priority written to a padding leaf would be sampled from then on).

    Args:
      sample: ``PrioritisedTrajectoryBufferSample``: ``experience`` leaves ``[B, ...]``,
        ``indices`` ``[B]``, ``probabilities`` ``[B]``.

    Returns:
      The same structure with ``probabilities > 0`` everywhere (when the tree holds any mass).
    """
    probs = sample.probabilities
    pick = jnp.where(probs > 0, jnp.arange(probs.shape[0]), jnp.argmax(probs))
    return sample.replace(
        experience=jax.tree.map(lambda x: x[pick], sample.experience),
        indices=sample.indices[pick],
        probabilities=probs[pick],
    )


def _beta(p: _Pieces, env_steps: jax.Array) -> jax.Array:
    """beta_start -> 1 linearly over ``total_steps`` env steps (drlhet's `make_parts`); 0
    (weights 1) without PER."""
    if not p.spec.prioritized:
        return jnp.float32(0)
    frac = jnp.minimum(env_steps.astype(jnp.float32) / p.total_steps, 1.0)
    return p.spec.beta_start + (1.0 - p.spec.beta_start) * frac
