"""The up-front memory estimate of a run, from the shapes of its state."""

from __future__ import annotations

import dataclasses

import pytest

from drlhet.agents.ddpg import DDPGConfig
from drlhet.agents.dqn import DQNConfig
from drlhet.replay.sum_tree import layout
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.memory import estimate_memory, size_text
from drlhet.runtime.trainer import make_trainer

CARTPOLE = TrainConfig(steps=6_000, buffer_size=2**30, dqn=DQNConfig(hidden=(8,)), backend="jax")


def test_the_replay_is_its_rows_stamps_and_tree():
    est = estimate_memory(make_trainer(CARTPOLE), seeds=1)
    n = CARTPOLE.buffer_size
    # obs and next obs (4 float32 each), action, reward, discount, stamp (4 B each)
    rows = n * (2 * 16 + 4 + 4 + 4 + 4)
    tree = 4 * layout(n, CARTPOLE.branching).size
    assert rows + tree <= est.replay <= rows + tree + 64  # + the buffer's scalar fields
    assert size_text(est.total) == "52.3 GiB"


def test_seeds_and_copies_multiply():
    tr = make_trainer(dataclasses.replace(CARTPOLE, buffer_size=4_096))
    one, three = estimate_memory(tr, seeds=1), estimate_memory(tr, seeds=3, copies=2)
    assert (three.replay, three.agent, three.other) == (
        3 * one.replay,
        3 * one.agent,
        3 * one.other,
    )
    assert three.evaluation == 3 * one.evaluation  # one evaluation at a time, not copied
    assert three.total == 6 * (one.total - one.evaluation) + three.evaluation


def test_the_agent_counts_parameters_optimizer_and_targets():
    cfg = TrainConfig(
        algo="ddpg",
        env="Pendulum-v1",
        steps=6_000,
        buffer_size=1_024,
        ddpg=DDPGConfig(hidden=(256, 256)),
    )
    est = estimate_memory(make_trainer(cfg), seeds=1)
    # actor 3-256-256-1 and critic 4-256-256-1: about 133k float32 parameters; with their
    # targets and Adam's two moments, at least 4 copies
    params = (3 * 256 + 256 + 256 * 256 + 256 + 256 + 1) + (4 * 256 + 256 + 256 * 256 + 256 + 257)
    assert 4 * 4 * params <= est.agent <= 6 * 4 * params


@pytest.mark.parametrize("seeds, copies", [(0, 1), (1, 0)])
def test_bad_counts_are_refused(seeds, copies):
    with pytest.raises(ValueError, match="must be >= 1"):
        estimate_memory(
            make_trainer(dataclasses.replace(CARTPOLE, buffer_size=4_096)), seeds, copies
        )


def test_an_evaluation_counts_its_environments_and_activations():
    # CartPole, hidden (8,): per evaluation env its state (int32 counter, float32 x 4 and
    # more) and obs (4 float32), and 2 x 4 B per layer output (8 + 2); seeds multiply
    tr = make_trainer(dataclasses.replace(CARTPOLE, buffer_size=4_096, eval_envs=1_000))
    one, two = estimate_memory(tr, seeds=1), estimate_memory(tr, seeds=2)
    assert 1_000 * (16 + 8 * 10) <= one.evaluation <= 1_000 * (16 + 8 * 10 + 64)
    assert two.evaluation == 2 * one.evaluation
    assert one.total == one.replay + one.agent + one.other + one.evaluation
