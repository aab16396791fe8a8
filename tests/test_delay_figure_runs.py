"""A delay figure drawn from saved runs (fig_delay.py --from-runs) is of one experiment's runs,
labelled with their configuration, and never replaces the curves of another."""

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
from experiment_scripts import check_run, refused
from experiment_scripts import experiment as experiment  # a fixture
from experiment_scripts import fresh_run as fresh_run  # an autouse fixture
from matplotlib.figure import Figure


def saved_runs(folder: Path, task: str, delays: dict[int, dict], fig_delay) -> None:
    """``drlhet train`` run folders ``<task>-k<k>`` of three seeds, each with its
    ``config.json`` (the task's configuration with ``delays[k]``'s changes, at delay k)."""
    for k, change in delays.items():
        run = folder / f"{task}-k{k}"
        run.mkdir(parents=True)
        cfg = dataclasses.replace(fig_delay.TASKS[task], delay=k, seeds=3, **change)
        (run / "config.json").write_text(json.dumps(dataclasses.asdict(cfg)))
        rows = [{"env_steps": s, "eval_return": [s, 2.0, 3.0], "wall_s": 1.0} for s in (1, 2)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_delay_figure_from_saved_runs_is_labelled_by_their_configuration(
    experiment, cli, tmp_path, monkeypatch
):
    """1-step runs were titled 3-step (the task's), their 3 seeds "mean of 5 seeds", and the
    JSON said the task's configuration and 5 seeds."""
    saved_runs(tmp_path / "runs", "td3-hopper", {0: {"n_step": 1}, 4: {"n_step": 1}},
               experiment("fig_delay"))  # fmt: skip
    titles = []
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, *a, **k: titles.append(fig.axes[0].get_title())
    )
    cli("fig_delay", *shlex.split("--tasks td3-hopper --delays 0 4 --from-runs runs --out o"))
    saved = json.loads((tmp_path / "o" / "delay_td3-hopper.json").read_text())
    assert saved["seeds"] == 3 and saved["config"]["n_step"] == 1
    assert saved["config_from"] == "runs/td3-hopper-k0/config.json"
    assert titles == ["TD3 + PER, Hopper-v5: delay k (measured)"]
    check_run(saved["run"], "fig_delay.py --tasks td3-hopper")


def test_curves_of_another_configuration_are_not_replaced(experiment, cli, capsys, tmp_path):
    """fig_delay wrote ``delay_<task>.json`` whatever was there: redrawing the 1-step Hopper
    runs replaced the 3-step runs' data (another figure's), as would a run cut by --steps."""
    fig_delay = experiment("fig_delay")
    saved_runs(tmp_path / "n3", "td3-hopper", {0: {}, 4: {}}, fig_delay)
    saved_runs(tmp_path / "n1", "td3-hopper", {0: {"n_step": 1}, 4: {"n_step": 1}}, fig_delay)
    cli("fig_delay", *shlex.split("--tasks td3-hopper --delays 0 4 --from-runs n3 --out o"))
    data = tmp_path / "o" / "delay_td3-hopper.json"
    before = data.read_text()
    cli("fig_delay", *shlex.split("--tasks td3-hopper --delays 0 4 --from-runs n3 --out o"))
    capsys.readouterr()  # the two runs' lines
    line = refused(
        cli, capsys, "fig_delay", "--tasks td3-hopper --delays 0 4 --from-runs n1 --out o"
    )
    assert line == (
        "fig_delay: error: o/delay_td3-hopper.json holds the curves of another configuration "
        "(n_step 3 there, 1 here): move it, or pass another --out, so that its figure's data "
        "is not replaced"
    )
    assert json.loads(data.read_text())["config"] == json.loads(before)["config"]


def test_saved_runs_of_two_configurations_are_not_drawn_as_one(experiment, cli, capsys, tmp_path):
    saved_runs(tmp_path / "runs", "dqn", {0: {}, 4: {"steps": 20_000}}, experiment("fig_delay"))
    line = refused(cli, capsys, "fig_delay", "--tasks dqn --delays 0 4 --from-runs runs --out o")
    assert line == (
        "fig_delay: error: --from-runs: runs/dqn-k0 and runs/dqn-k4 differ in steps (steps "
        "100000 vs 20000): not one experiment's runs"
    )
    assert not (tmp_path / "o").exists()


def test_a_saved_run_at_another_delay_than_its_folder_is_refused(experiment, cli, capsys, tmp_path):
    saved_runs(tmp_path / "runs", "dqn", {0: {}, 4: {}}, experiment("fig_delay"))
    config = tmp_path / "runs" / "dqn-k4" / "config.json"
    config.write_text(config.read_text().replace('"delay": 4', '"delay": 0'))
    line = refused(cli, capsys, "fig_delay", "--tasks dqn --delays 0 4 --from-runs runs --out o")
    assert line == "fig_delay: error: --from-runs: runs/dqn-k4 ran at delay 0, not 4"


def test_delays_without_k0_are_refused(experiment, cli, capsys, tmp_path):
    """Without 0 among ``--delays`` every k was compared against the first (k = 4 here) under
    the name ``within_one_std_of_k0``."""
    saved_runs(tmp_path / "runs", "dqn", {4: {}, 16: {}}, experiment("fig_delay"))
    line = refused(cli, capsys, "fig_delay", "--tasks dqn --delays 4 16 --from-runs runs --out o")
    assert line == (
        "fig_delay: error: --delays 4 16: no k = 0, the baseline every k is compared against; add 0"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "where, text, line",
    [
        ("dqn-k4/metrics.jsonl", '{"env_steps": 1, "eval_return": [1.0], "wall_s": 1.0}\n{"env_',
         "--from-runs runs/dqn-k4/metrics.jsonl: not JSON lines (Unterminated string"),
        ("dqn-k4/metrics.jsonl", '{"env_steps": 1}\n',
         "--from-runs runs/dqn-k4/metrics.jsonl: row 0 lacks 'eval_return', 'wall_s'"),
        ("dqn-k0/config.json", "{", "--from-runs runs/dqn-k0/config.json: not JSON ("),
        ("dqn-k0/config.json", "[]", "--from-runs runs/dqn-k0/config.json: the file is a list"),
    ],
)  # fmt: skip
def test_a_saved_run_that_cannot_be_read_is_refused(
    experiment, cli, capsys, tmp_path, where, text, line
):
    """A run killed while writing its last row was a traceback."""
    saved_runs(tmp_path / "runs", "dqn", {0: {}, 4: {}}, experiment("fig_delay"))
    (tmp_path / "runs" / where).write_text(text)
    got = refused(cli, capsys, "fig_delay", "--tasks dqn --delays 0 4 --from-runs runs --out o")
    assert got.startswith(f"fig_delay: error: {line}"), got
