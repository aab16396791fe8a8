"""The pipelined host loop's queue of delayed priority updates, kept on the host."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp

__all__ = ["UpdateFifo"]


class UpdateFifo:
    """A deque of ``(indices, stamps, priorities)`` arrays ``[seeds, n, B]`` (n learner steps
    each, oldest first), so that taking the oldest ones never waits for the learner stage in
    flight.

    Made with ``k`` empty entries (stamp -1: `drlhet.replay.delayed` drops them), then pushed
    one learner stage's ``S`` entries at a time while each replay stage takes ``S``: the j-th
    update taken is the one learner step j - k produced (a delay of exactly k learner steps,
    Zhang, Meng, Prasanna, TPDS 2023, Sec. 5)."""

    def __init__(self, first: tuple[jax.Array, jax.Array, jax.Array]):
        self._q: collections.deque = collections.deque([first])

    @staticmethod
    def empty(seeds: int, n: int, batch: int) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``n`` empty entries: indices 0, stamps -1, priorities 1; each ``[seeds, n, batch]``."""
        shape = (seeds, n, batch)
        return jnp.zeros(shape, jnp.int32), jnp.full(shape, -1, jnp.int32), jnp.ones(shape)

    def __len__(self) -> int:
        return sum(int(head[0].shape[1]) for head in self._q)

    def push(self, entries: tuple[jax.Array, jax.Array, jax.Array]) -> None:
        """Appends the newest entries (``[seeds, n, B]`` each)."""
        self._q.append(entries)

    def take(self, n: int) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Removes and returns the ``n`` oldest entries (``[seeds, n, B]`` each)."""
        if n > len(self):
            raise ValueError(f"the update queue holds {len(self)} entries; {n} were asked for")
        parts = []
        while n:
            head = self._q[0]
            m = int(head[0].shape[1])
            if m <= n:
                parts.append(self._q.popleft())
                n -= m
            else:
                parts.append(tuple(x[:, :n] for x in head))
                self._q[0] = tuple(x[:, n:] for x in head)
                n = 0
        if len(parts) == 1:
            return parts[0]
        idx, stamps, prio = (jnp.concatenate(xs, axis=1) for xs in zip(*parts, strict=True))
        return idx, stamps, prio
