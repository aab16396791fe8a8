"""``drlhet train`` refuses options the run would ignore, in one line, before anything is
written: the other agent's (``--ddpg.td3`` on a DQN run) and, with ``--uniform``, prioritized
replay's (``--alpha``, ``--beta-start``, ``--branching``, ``--*.priority-eps``). They were taken
without a word (and ``--alpha 5 --branching 1000`` written into a uniform run's config.json)."""

from __future__ import annotations

import pytest

from drlhet.cli import main
from drlhet.cli.common import refuse_unused_flags
from tests.test_cli import TINY, one_error_line


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ddpg.td3"], "--ddpg.td3: DDPG's options, and this run trains DQN (--algo dqn); "
                         "drop them, or pass --algo ddpg"),
        (["--ddpg.no-td3", "--ddpg.tau", "0.1"], "--ddpg.no-td3, --ddpg.tau: DDPG's options"),
        (["--algo", "ddpg", "--env", "Pendulum-v1", "--dqn.learning-rate", "0.1"],
         "--dqn.learning-rate: DQN's options, and this run trains DDPG (--algo ddpg)"),
        (["--uniform", "--alpha", "0.5", "--dqn.priority-eps", "0.1"],
         "--alpha, --dqn.priority-eps: prioritized replay's options, and --uniform replay has "
         "no priorities; drop them, or --uniform"),
        (["--uniform", "--branching", "4", "--beta-start", "1"], "--beta-start, --branching: "),
    ],
)  # fmt: skip
def test_an_option_the_run_would_ignore_is_refused(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as stop:
        main(["train", *args, *TINY, "--out", str(tmp_path / "runs")])
    assert stop.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith("drlhet: error: ") and message in line, line
    assert not (tmp_path / "runs").exists()


def test_options_the_run_uses_pass():
    refuse_unused_flags("dqn", False, frozenset({"dqn.hidden", "alpha", "branching", "seed"}))
    refuse_unused_flags("ddpg", True, frozenset({"ddpg.td3", "delay", "uniform"}))
    refuse_unused_flags("dqn", True, None)  # called from Python: no flags known
