"""A learner that diverges: its NaN or overflowing priorities are refused by the replay buffer,
and the run ends saying so in words (which seeds, by which env step, the loss, what to try),
on every path (fused, host loop, pipeline) and from the CLI in one line. It said "replay
refused an operation (error flags per seed [1])"."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from drlhet.agents.dqn import DQNConfig
from drlhet.cli import main
from drlhet.replay.prioritized import ERR_EMPTY, ERR_INDEX, ERR_PRIORITY, refusals
from drlhet.runtime.chunks import ReplayRefused, check_replay_error
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run
from tests.runtime.test_run import SMALL
from tests.test_cli import TINY, one_error_line

DIVERGING = dataclasses.replace(SMALL, dqn=DQNConfig(hidden=(16,), learning_rate=1e30))
"""Adam's steps of 1e30 overflow the Q-network within the first chunk, in both seeds."""

PATHS = {
    "fused": None,
    "host loop": "actors=cpu:0,replay=jax@cpu:1,learner=cpu:1",
    "pipeline": "actors=cpu:0,replay=jax@cpu:1,learner=cpu:1",  # with a delay
}


@pytest.mark.parametrize("path", PATHS)
def test_a_diverged_learner_ends_the_run_saying_so(path):
    cfg = dataclasses.replace(DIVERGING, delay=4 if path == "pipeline" else 0)
    with pytest.raises(ReplayRefused) as e:
        run(cfg, PATHS[path])
    said = str(e.value)
    assert said.startswith(
        "the replay buffer of seeds 0, 1 refused a negative, NaN, infinite or too large "
        "priority by env step 708 (chunk 0; error bits per seed [1, 1]): the learner's new "
        "priorities (|TD error| + eps) were NaN, infinite or past the largest the tree holds, "
        "so training diverged (loss "
    ), said
    assert said.endswith("; try a lower learning rate (dqn.learning_rate 1e+30)")
    assert e.value.chunk == 0 and e.value.errors == [1, 1]


def test_the_cli_says_it_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", *TINY, "--dqn.learning-rate", "1e30", "--out", str(tmp_path)])
    assert stop.value.code == 1
    line = one_error_line(capsys)
    assert "so training diverged (loss " in line, line
    assert line.endswith("try a lower learning rate (dqn.learning_rate 1e+30)"), line


def test_one_seed_and_other_bits_are_named():
    summary = {"env_steps": np.array([1234, 1234]), "loss": [0.5, np.inf], "abs_td": [1, 2]}
    with pytest.raises(ReplayRefused) as e:
        check_replay_error(np.array([0, ERR_PRIORITY]), 3, summary)
    assert "seed 1 refused a negative" in str(e.value)
    assert "by env step 1,234 (chunk 3; error bits per seed [0, 1])" in str(e.value)
    assert "diverged (loss inf, mean |TD| 2); try" in str(e.value)
    with pytest.raises(ReplayRefused) as e:  # not a priority: no divergence claimed
        check_replay_error(np.array([ERR_INDEX | ERR_EMPTY]), 0)
    assert str(e.value) == (
        "the replay buffer of seed 0 refused an index outside the filled slots and a sample "
        "of an empty buffer or of all-zero priorities (chunk 0; error bits per seed [6])"
    )
    check_replay_error(np.zeros(3, np.int32), 0)  # nothing refused: nothing raised


def test_ddpg_names_both_of_its_learning_rates():
    cfg = TrainConfig(algo="ddpg", ddpg=dataclasses.replace(TrainConfig().ddpg, critic_lr=1e30))
    with pytest.raises(ReplayRefused) as e:
        check_replay_error(np.array([ERR_PRIORITY]), 0, None, cfg)
    assert str(e.value).endswith(
        "try lower learning rates (ddpg.critic_lr 1e+30, ddpg.actor_lr 0.001)"
    )


def test_unknown_bits_are_named_by_value():
    assert refusals(ERR_PRIORITY | 64) == [
        "a negative, NaN, infinite or too large priority",
        "unknown error bits 64",
    ]
