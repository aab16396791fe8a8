"""The pipelined host loop's queue of delayed priority updates, kept on the host."""

from __future__ import annotations

import collections
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["UpdateFifo"]


class UpdateFifo:
    """A deque of updates, each a pytree of arrays ``[seeds, n, ...]`` (n learner steps, oldest
    first; the unpacked ``(indices, stamps, priorities)`` or one packed word array), so that
    taking the oldest ones never waits for the learner stage in flight.

    Made with ``k`` empty entries (stamp -1: `drlhet.replay.delayed` drops them), then pushed
    one learner stage's ``P`` entries at a time while each replay stage takes ``P``: the j-th
    update taken is the one learner step j - k produced (a delay of exactly k learner steps,
    Zhang, Meng, Prasanna, TPDS 2023, Sec. 5)."""

    def __init__(self, first: Any):
        self._q: collections.deque = collections.deque([first])

    @staticmethod
    def empty(seeds: int, n: int, batch: int) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``n`` empty entries: indices 0, stamps -1, priorities 1; each ``[seeds, n, batch]``."""
        shape = (seeds, n, batch)
        return jnp.zeros(shape, jnp.int32), jnp.full(shape, -1, jnp.int32), jnp.ones(shape)

    @staticmethod
    def _n(item: Any) -> int:
        return int(jax.tree.leaves(item)[0].shape[1])

    def __len__(self) -> int:
        return sum(self._n(item) for item in self._q)

    def push(self, entries: Any) -> None:
        """Appends the newest entries (``[seeds, n, ...]`` each leaf)."""
        self._q.append(entries)

    def take(self, n: int) -> Any:
        """Removes and returns the ``n`` oldest entries (``[seeds, n, ...]`` each leaf)."""
        if n > len(self):
            raise ValueError(f"the update queue holds {len(self)} entries; {n} were asked for")
        parts = []
        while n:
            head = self._q[0]
            m = self._n(head)
            if m <= n:
                parts.append(self._q.popleft())
                n -= m
            else:
                parts.append(jax.tree.map(lambda x, n=n: x[:, :n], head))
                self._q[0] = jax.tree.map(lambda x, n=n: x[:, n:], head)
                n = 0
        if len(parts) == 1:
            return parts[0]
        return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1), *parts)
