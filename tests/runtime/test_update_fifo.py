"""The pipelined host loop's queue of delayed priority updates."""

from __future__ import annotations

import numpy as np
import pytest

from drlhet.runtime.update_fifo import UpdateFifo


@pytest.mark.parametrize("delay, sgd_steps", [(4, 1), (5, 1), (4, 2), (9, 2), (12, 3)])
def test_update_fifo_delays_each_update_exactly_k_learner_steps(delay, sgd_steps):
    # the pipelined loop's protocol: k empty entries first; per stage, take S (before the
    # replay stage) then push the learner stage's S entries, S = U * sgd_steps with
    # U = max(1, k // (2 * sgd_steps)) unrolled steps per stage (the choice of
    # drlhet.runtime.stages.unroll_of when U divides the chunk's iterations; it lowers U otherwise)
    seeds, batch = 2, 3
    s = max(1, delay // (2 * sgd_steps)) * sgd_steps
    fifo = UpdateFifo(UpdateFifo.empty(seeds, delay, batch))
    seen = []
    for stage in range(7):
        idx, stamps, prio = fifo.take(s)
        assert idx.shape == stamps.shape == prio.shape == (seeds, s, batch)
        seen.extend(np.asarray(stamps[0, :, 0]).tolist())
        made = np.arange(stage * s, (stage + 1) * s, dtype=np.int32)  # learner step ids
        grid = np.broadcast_to(made[None, :, None], (seeds, s, batch))
        fifo.push((grid + 1000, grid, grid.astype(np.float32) + 0.5))
        assert len(fifo) == delay
    # the j-th update applied is the one learner step j - k made (none before step k)
    assert seen == [j - delay if j >= delay else -1 for j in range(7 * s)]


def test_update_fifo_refuses_to_take_more_than_it_holds():
    fifo = UpdateFifo(UpdateFifo.empty(1, 2, 4))
    with pytest.raises(ValueError, match="holds 2 entries; 3 were asked"):
        fifo.take(3)
    assert len(fifo) == 2
