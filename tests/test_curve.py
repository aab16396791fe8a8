"""The curve ``drlhet train`` draws: its title names the agent as it ran (TD3 where DDPG runs
its twin critics; it said DDPG) and the replay; one seed is drawn once and called one seed (it
said "mean of 1 seeds" over a second copy of the same line), every evaluation marked."""

from __future__ import annotations

import dataclasses
import re

import matplotlib.pyplot as plt
import pytest

from drlhet.agents.ddpg import DDPGConfig
from drlhet.cli.report import curve_title, plot_curves
from drlhet.runtime.config import TrainConfig


@pytest.mark.parametrize(
    "change, title",
    [
        ({}, "DQN + PER on CartPole-v1 (measured)"),
        ({"uniform": True}, "DQN + uniform replay on CartPole-v1 (measured)"),
        ({"algo": "ddpg", "env": "Pendulum-v1"}, "DDPG + PER on Pendulum-v1 (measured)"),
        (
            {"algo": "ddpg", "env": "Pendulum-v1", "ddpg": DDPGConfig(td3=True)},
            "TD3 + PER on Pendulum-v1 (measured)",
        ),
    ],
)
def test_the_title_names_the_agent_and_replay_that_ran(change, title):
    assert curve_title(dataclasses.replace(TrainConfig(), **change)) == title


@pytest.fixture
def drawn(monkeypatch):
    """The figures `plot_curves` closes, kept."""
    figs: list = []
    close = plt.close
    monkeypatch.setattr(plt, "close", figs.append)
    yield figs
    for fig in figs:
        close(fig)


@pytest.mark.parametrize("seeds, lines, label", [(1, 1, "one seed"), (3, 4, "mean of 3 seeds")])
def test_seeds_are_drawn_once_each_with_their_mean(tmp_path, drawn, seeds, lines, label):
    rows = [{"env_steps": s, "eval_return": [10.0 * s + k for k in range(seeds)]} for s in (1, 2)]
    plot_curves(rows, "t", tmp_path / "c.png")
    (ax,) = drawn[0].axes
    assert len(ax.lines) == lines and ax.lines[-1].get_marker() == "o"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [label]
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_the_return_reached_is_said_as_the_other_figures_are(tmp_path, capsys):
    from drlhet.cli import main
    from tests.test_cli import TINY_SHAPE

    args = [*TINY_SHAPE, "--eval-every", "1000", "--steps", "3000", "--no-progress"]
    main(["train", *args, "--stop-at-return", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    # (was "reached 1.0 after 1108 env steps": no thousands separator, a float's ".0")
    assert re.search(r"mean evaluation return reached 1 after 1,\d{3} env steps, ", out), out
