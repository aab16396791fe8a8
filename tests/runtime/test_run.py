"""The scheduler: mapping validation, segments, and the host loop against the fused scan."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from drlhet.agents.dqn import DQNConfig
from drlhet.backends import BackendUnavailable
from drlhet.schedule import Mapping, UpdateFifo, run, segments
from drlhet.train import TrainConfig

SMALL = TrainConfig(
    env="CartPole-v1",
    steps=500 + 2 * 200,
    warmup=500,
    eval_every=200,
    eval_envs=2,
    seeds=2,
    sgd_steps=2,
    batch_size=32,
    buffer_size=4096,
    dqn=DQNConfig(hidden=(16,)),
)


def test_parse_and_segments():
    m = Mapping.parse("actors=cpu:0, replay=native@cpu:1, learner=cpu:1")
    assert m.sample == "native@cpu:1" and m.act == "jax@cpu:0" and m.train == "jax@cpu:1"
    assert segments(m) == [
        ("cpu:0", ("act", "env_step")),
        ("cpu:1", ("insert", "sample", "train", "update")),
    ]
    assert len(segments(Mapping())) == 1
    three = Mapping.parse("actors=cpu:0,replay=cpu:1,learner=cpu:0")
    assert [d for d, _ in segments(three)] == ["cpu:0", "cpu:1", "cpu:0", "cpu:1"]


@pytest.mark.parametrize(
    "text, error, match",
    [
        ("replay=cpu:7", BackendUnavailable, "not present"),
        ("replay=fpga@cpu:0", BackendUnavailable, "no backend 'fpga'"),
        ("train=native@cpu:0", ValueError, "backend 'jax' only"),
        ("sample=cpu:1", ValueError, "replay .* must share"),
        ("actors=gpu:0", BackendUnavailable, "gpu"),
        ("bogus=cpu:0", ValueError, "unknown primitive"),
        ("replay", ValueError, "key=backend@device"),
    ],
)
def test_bad_mappings_are_clear_errors(text, error, match):
    with pytest.raises(error, match=match):
        segments(Mapping.parse(text))


@pytest.mark.parametrize("delay", [0, 1, 3])
def test_host_loop_equals_fused_scan(delay):
    # k = 0 is the acceptance line; for 1 <= k < 2 x sgd_steps the per-iteration host loop keeps
    # its queue on the host but must apply every update exactly where the fused scan does
    cfg = TrainConfig(**{**SMALL.__dict__, "delay": delay})
    fused_state, fused_rows = run(cfg, Mapping())
    loop_state, loop_rows = run(cfg, Mapping.parse("actors=cpu:0,replay=cpu:1,learner=cpu:1"))
    assert len(loop_rows[0]["segments"]) == 2 and len(fused_rows[0]["segments"]) == 1
    for a, b in zip(
        jax.tree.leaves(fused_state["agent"]), jax.tree.leaves(loop_state["agent"]), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fused_state["replay"].tree.nodes, loop_state["replay"].tree.nodes)
    assert [r["eval_return"] for r in fused_rows] == [r["eval_return"] for r in loop_rows]


@pytest.mark.parametrize("backend", ["jax", "native"])
def test_pipelined_host_loop_runs_with_delay(backend):
    cfg = TrainConfig(**{**SMALL.__dict__, "delay": 3})
    mapping = Mapping.parse(f"actors=cpu:0,replay={backend}@cpu:1,learner=cpu:0")
    state, rows = run(cfg, mapping)
    assert rows[-1]["env_steps"] == cfg.steps + 2 * cfg.num_envs  # + the 3-step FIFO fill
    assert int(np.max(state["replay"].error)) == 0
    assert rows[-1]["delay"] == 3


def test_pipelined_stages_apply_each_update_k_learner_steps_later():
    # k >= 2 x sgd_steps: stages run U = k // (2 sgd_steps) iterations per call
    cfg = TrainConfig(**{**SMALL.__dict__, "delay": 5, "sgd_steps": 1})
    state, rows = run(cfg, Mapping.parse("actors=cpu:0,replay=native@cpu:1,learner=cpu:0"))
    assert rows[-1]["iterations_per_stage_call"] == 2
    assert int(np.max(state["replay"].error)) == 0
    assert rows[-1]["env_steps"] == cfg.steps + 2 * cfg.num_envs
    assert all(np.isfinite(r["loss"]).all() for r in rows)


@pytest.mark.parametrize("delay, sgd_steps", [(4, 1), (5, 1), (4, 2), (9, 2), (12, 3)])
def test_update_fifo_delays_each_update_exactly_k_learner_steps(delay, sgd_steps):
    # the pipelined loop's protocol: k empty entries first; per stage, take S (before the
    # replay stage) then push the learner stage's S entries, S = U * sgd_steps with
    # U = max(1, k // (2 * sgd_steps)) unrolled steps per stage (drlhet.schedule's choice when
    # U divides the chunk's iterations; it lowers U otherwise)
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
