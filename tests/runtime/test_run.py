"""The run paths: the host loops against the fused scan, the same state from every path."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from drlhet.agents.dqn import DQNConfig
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run
from drlhet.runtime.trainer import TrainState

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


SPLITS = {
    "A|R+L": "actors=cpu:0,replay=jax@cpu:1,learner=cpu:1",
    "A+R|L": "actors=cpu:0,replay=jax@cpu:0,learner=cpu:1",
    "A+L|R": "actors=cpu:0,replay=jax@cpu:1,learner=cpu:0",
}


@pytest.mark.parametrize(
    "delay,split",
    [
        (0, "A|R+L"),
        # ~27 s and ~11 s; suite time on 2 cores: k = 0 and 3 keep the no-delay and delayed cases
        pytest.param(1, "A|R+L", marks=pytest.mark.slow),
        pytest.param(2, "A|R+L", marks=pytest.mark.slow),
        # ~22 s: this split's delayed host loop is test_pipeline.py's k = 5 case and
        # test_checkpoint.py's resumed k = 4 case
        pytest.param(3, "A|R+L", marks=pytest.mark.slow),
        (3, "A+R|L"),
        (3, "A+L|R"),
    ],
)
def test_host_loop_equals_fused_scan(delay, split):
    # k = 0 is the acceptance line; for 1 <= k < 2 x sgd_steps the per-iteration host loop keeps
    # its queue on the host but must apply every update exactly where the fused scan does; k = 2
    # and 3 (sgd_steps 2) run the threaded pipeline with one iteration per call, whose threads
    # differ by split (two stages in one program, or two stage loops on one thread; with k = 2
    # the replay cannot run a call ahead of the learner on their shared thread)
    cfg = TrainConfig(**{**SMALL.__dict__, "delay": delay})
    fused_state, fused_rows = run(cfg, "actors=cpu:0,replay=jax@cpu:0,learner=cpu:0")
    loop_state, loop_rows = run(cfg, SPLITS[split])
    assert len(loop_rows[0]["segments"]) >= 2 and len(fused_rows[0]["segments"]) == 1
    assert_same_state(fused_state, loop_state)
    assert [r["eval_return"] for r in fused_rows] == [r["eval_return"] for r in loop_rows]
    # the learner's metrics mean the same on every path: each chunk's mean over all its SGD
    # steps (the fused loop kept only each iteration's last step, the others averaged them all)
    for name in ("loss", "abs_td"):
        for f, g in zip(fused_rows, loop_rows, strict=True):
            np.testing.assert_allclose(f[name], g[name], rtol=1e-5, err_msg=name)


def assert_same_state(a: TrainState, b: TrainState) -> None:
    """Every field of two runs' final states is equal, bit for bit (keys as their data)."""
    assert isinstance(a, TrainState) and isinstance(b, TrainState)
    for field in TrainState._fields:
        la, lb = jax.tree.leaves(getattr(a, field)), jax.tree.leaves(getattr(b, field))
        assert len(la) == len(lb), field
        for x, y in zip(la, lb, strict=True):
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                x, y = jax.random.key_data(x), jax.random.key_data(y)
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=field)


@pytest.mark.parametrize(
    "delay",
    [
        0,
        # ~57 s on the 2-core VM under `make test`; the default suite covers it: test_checkpoint
        # restores a pipelined run's state (k = 4) into `initial_example`, the fused shapes
        pytest.param(4, marks=pytest.mark.slow),
    ],
)
def test_pipelined_loop_returns_the_fused_state_type(delay):
    # delay 4 >= 2 x sgd_steps: the pipelined loop; its final state is a TrainState with the
    # k pending updates, as the fused scan's (values differ: the actors' lag differs)
    cfg = TrainConfig(**{**SMALL.__dict__, "delay": delay})
    fused, _ = run(cfg, "actors=cpu:0,replay=jax@cpu:0,learner=cpu:0")
    piped, _ = run(cfg, "actors=cpu:0,replay=jax@cpu:1,learner=cpu:0")
    shapes = jax.tree.map(lambda x: (x.shape, x.dtype), fused)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), piped) == shapes
    assert fused.pending.indices.shape == (cfg.seeds, delay, cfg.batch_size)


@pytest.mark.parametrize("backend", ["jax", "native"])
def test_pipelined_host_loop_runs_with_delay(backend):
    cfg = TrainConfig(**{**SMALL.__dict__, "delay": 3})
    state, rows = run(cfg, f"actors=cpu:0,replay={backend}@cpu:1,learner=cpu:0")
    assert rows[-1]["env_steps"] == cfg.steps + 2 * cfg.num_envs  # + the 3-step FIFO fill
    assert int(np.max(state.replay.error)) == 0
    assert rows[-1]["delay"] == 3


def test_pipelined_stages_run_u_iterations_a_call_with_k_updates_pending():
    # k >= 2 x sgd_steps: stages run U = k // (2 sgd_steps) iterations per call, and the run
    # ends with the last k learner steps' updates not yet applied. (Where each update lands is
    # compared bit for bit with the fused scan at U = 1, test_host_loop_equals_fused_scan; at
    # U >= 2 the pipeline applies a call's updates together, which no other path does.)
    cfg = TrainConfig(**{**SMALL.__dict__, "delay": 5, "sgd_steps": 1})
    state, rows = run(cfg, "actors=cpu:0,replay=native@cpu:1,learner=cpu:0")
    assert rows[-1]["iterations_per_stage_call"] == 2
    assert state.pending.indices.shape == (cfg.seeds, 5, cfg.batch_size)
    assert int(np.max(state.replay.error)) == 0
    assert rows[-1]["env_steps"] == cfg.steps + 2 * cfg.num_envs
    assert all(np.isfinite(r["loss"]).all() for r in rows)
