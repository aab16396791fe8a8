"""The prioritized replay buffer on its own, in a jitted loop.

Shows `drlhet.make_prioritized_replay`: a bundle of pure functions (init / add / sample /
update_priorities) over a pytree state. The state is donated to each jitted step, so XLA updates
the storage and the sum tree in place. The example

1. fills a buffer with made-up transitions (a dict of arrays: any pytree works);
2. runs a loop of sample -> new |TD|-like priorities -> update, a fresh key split off per step;
3. gives one slot a large priority and counts how often it is drawn, against an average slot;
4. checks that the importance-sampling weights of every batch have a maximum of 1.

Run it with::

    python examples/replay_buffer.py            # about 2^16 slots, a few thousand steps
    python examples/replay_buffer.py --quick    # a few seconds
    python examples/replay_buffer.py --backend jax

The counts it prints are measured: they come from the draws of this run.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import drlhet
from drlhet.replay.prioritized import raise_on_error


def replay_functions(capacity: int, batch: int, alpha: float, backend: str):
    """The buffer's functions on ``backend``, or on the pure-JAX tree if it cannot load here."""
    try:
        ops = drlhet.tree_ops(backend)
    except drlhet.BackendUnavailable as e:
        print(f"note: backend {backend!r} cannot load here ({e}); using 'jax' instead")
        backend, ops = "jax", drlhet.tree_ops("jax")
    fns = drlhet.make_prioritized_replay(capacity, batch, alpha=alpha, tree_ops=ops)
    return fns, backend


# The weights are w_i times the reciprocal of the batch's largest w, so the largest comes out as
# 1 or as the float32 just below it (x * (1/x) rounds either way).
ULP = np.float32(2**-24)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=2**16)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3000, help="sample + update steps")
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--backend", default="native", help="replay backend (default native)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a small buffer and few steps")
    args = parser.parse_args()
    if args.quick:
        args.capacity, args.steps = 4096, 200
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first one compiles and is not timed)")
    return args


def fill(fns, state, key, capacity: int):
    """Adds made-up transitions in batches of 512 until ``capacity`` slots hold one; new
    transitions get the running max priority. Returns the state and the key left over."""
    add = jax.jit(fns.add, donate_argnums=0)
    chunk = 512
    for start in range(0, capacity, chunk):
        n = min(chunk, capacity - start)
        key, k_obs = jax.random.split(key)
        transitions = {
            "obs": jax.random.normal(k_obs, (n, 4)),
            "action": jnp.arange(start, start + n, dtype=jnp.int32) % 2,
            "reward": jnp.ones((n,), jnp.float32),
        }
        state = add(state, transitions)
    return state, key


def train_steps(fns, state, key, args):
    """``args.steps`` steps of sample, new priorities, update, a fresh key each. Returns the
    state, the key left over, each batch's largest IS weight, and the wall time of the steps
    after the first (which compiles)."""

    def step(state, key, beta):
        k_sample, k_td = jax.random.split(key)
        batch = fns.sample(state, k_sample, beta)
        # Stand-in for the learner's |TD error|: anything >= 0 works; + eps keeps it drawable.
        td = jax.random.normal(k_td, (args.batch,)) * (1.0 + batch.data["obs"][:, 0] ** 2)
        state = fns.update_priorities(state, batch.indices, jnp.abs(td) + 1e-6, batch.stamps)
        return state, jnp.max(batch.weights)

    step = jax.jit(step, donate_argnums=0)
    max_weights = []
    for i in range(args.steps):
        if i == 1:  # time the steps after the first, which compiles
            jax.block_until_ready(state)
            t0 = time.perf_counter()
        key, k = jax.random.split(key)  # a new key every step, never one reused
        beta = 0.4 + 0.6 * i / max(1, args.steps - 1)  # the caller anneals beta to 1
        state, w = step(state, k, beta)
        max_weights.append(w)
    jax.block_until_ready(state)
    wall = time.perf_counter() - t0
    return state, key, max_weights, wall


def report_steps(max_weights, wall: float, args) -> None:
    """Prints the steps' rate and whether each batch's largest IS weight is 1."""
    max_weights = np.asarray(jax.device_get(max_weights))
    print(
        f"{args.steps - 1} sample+update steps after the first in {wall:.2f} s "
        f"(measured, this machine): {(args.steps - 1) * args.batch / wall:,.0f} items/s"
    )
    exact = int(np.sum(max_weights == 1.0))
    print(
        f"IS weights: max of each batch within one float32 ulp of 1: "
        f"{bool(np.all(np.abs(max_weights - 1) <= ULP))} "
        f"(exactly 1 in {exact} of {args.steps} batches, measured)"
    )


def draw_batches(fns, state, key, n_batches: int):
    """The indices and IS weights of ``n_batches`` batches drawn at once, the state only read."""

    @jax.jit
    def draws(state, keys):
        def one(k):
            batch = fns.sample(state, k, 1.0)
            return batch.indices, batch.weights

        return jax.vmap(one)(keys)

    return jax.device_get(draws(state, jax.random.split(key, n_batches)))


def report_hot_slot(indices, weights, hot: int, hot_priority: float, expected_p: float, args):
    """Prints how often slot ``hot`` was drawn against the other slots, and (step 4 again)
    whether each batch's largest IS weight is 1."""
    n_batches = indices.shape[0]
    counts = np.bincount(indices.ravel(), minlength=args.capacity)
    others = np.delete(counts, hot)
    print(
        f"slot {hot} at priority {hot_priority:g}, every other slot at 1: over "
        f"{n_batches} batches of {args.batch} (measured counts)"
    )
    print(
        f"  slot {hot} drawn {counts[hot]} times "
        f"(expected {n_batches * args.batch * expected_p:.1f} from P = {expected_p:.5f})"
    )
    print(f"  any other slot drawn {others.mean():.3f} times on average (max {others.max()})")
    print(f"  hot slot drawn more often than any other: {bool(counts[hot] > others.max())}")
    top = weights.max(axis=1)
    print(
        f"IS weights of these batches: max within one ulp of 1 in every batch: "
        f"{bool(np.all(np.abs(top - 1) <= ULP))}; the hot slot's weight "
        f"{weights[indices == hot].max():.4f} (it is drawn often, so it is weighted down)"
    )


def main() -> None:
    args = parse_args()
    fns, backend = replay_functions(args.capacity, args.batch, args.alpha, args.backend)
    print(
        f"buffer: {args.capacity} slots, batch {args.batch}, alpha {args.alpha}, backend {backend}"
    )

    # One unbatched transition gives the storage's layout: any pytree of arrays.
    example = {
        "obs": jnp.zeros((4,), jnp.float32),
        "action": jnp.int32(0),
        "reward": jnp.float32(0),
    }
    state = fns.init(example)

    # --- 1. Fill the buffer in batches of 512; new transitions get the running max priority.
    key = jax.random.key(args.seed)
    state, key = fill(fns, state, key, args.capacity)
    print(f"filled: size {int(state.size)}")

    # --- 2. The training-loop pattern: sample, compute new priorities, write them back.
    state, key, max_weights, wall = train_steps(fns, state, key, args)
    raise_on_error(state)  # a refused update under jit sets a bit; this raises if one did
    # The steps' rate, and (step 4) whether each batch's largest IS weight is 1.
    report_steps(max_weights, wall, args)

    # --- 3. One slot with a large priority is drawn far more often than the others.
    hot, hot_priority = 7, 1000.0
    priorities = jnp.ones((args.capacity,)).at[hot].set(hot_priority)
    update = jax.jit(fns.update_priorities, donate_argnums=0)
    state = update(state, jnp.arange(args.capacity, dtype=jnp.int32), priorities)
    expected_p = hot_priority**args.alpha / (hot_priority**args.alpha + args.capacity - 1)
    n_batches = 100 if args.quick else 1000
    key, k = jax.random.split(key)
    indices, weights = draw_batches(fns, state, k, n_batches)
    report_hot_slot(indices, weights, hot, hot_priority, expected_p, args)


if __name__ == "__main__":
    main()
