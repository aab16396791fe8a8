"""The peers comparison's protocol and harness (experiments/peers/spec.py, experiments/fig_peers.py)
on synthetic events: what every system's metrics are computed from. The peers themselves run
in their own environments (`make peers`) and are not part of this suite."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


peers_spec = _load("spec", EXPERIMENTS / "peers" / "spec.py")
_load("checked_cli", EXPERIMENTS / "checked_cli.py")  # fig_peers reads its command line with it
_load("_common", EXPERIMENTS / "_common.py")  # and says its run with it
fig_peers = _load("fig_peers", EXPERIMENTS / "fig_peers.py")


def _events(rows: list[tuple[int, int, float, float | None]], system: str = "x") -> str:
    lines = ["noise the runner printed", peers_spec.PREFIX + json.dumps({
        "kind": "header", "system": system, "version": "1", "threads": "1", "notes": "",
        "import_s": 1.5,
    })]  # fmt: skip
    for env_steps, updates, wall, ret in rows:
        lines.append(peers_spec.PREFIX + json.dumps({
            "kind": "row", "env_steps": env_steps, "sgd_updates": updates, "wall_s": wall,
            "eval_return": ret,
        }))  # fmt: skip
    lines.append(peers_spec.PREFIX + json.dumps({"kind": "end", "wall_s": rows[-1][2] + 0.5}))
    return "\n".join(lines)


def test_metrics_steady_state_and_time_to_return():
    spec = peers_spec.RunSpec(batch=128, stop_at_return=475.0)
    out = _events(
        [(6000, 2500, 10.0, 100.0), (11000, 5000, 12.0, 480.0), (16000, 7500, 14.5, 500.0)]
    )
    m = peers_spec.metrics(spec, peers_spec.read_events(out))
    # steady state: rows 1 -> 3 (the first chunk holds compilation): 5000 updates in 4.5 s
    assert m["trained_samples_per_s"] == pytest.approx(5000 * 128 / 4.5)
    assert m["env_steps_per_s"] == pytest.approx(10000 / 4.5)
    assert m["time_to_return_s"] == 12.0  # the first row at or above the target
    assert m["import_s"] == 1.5 and m["final_return"] == 500.0 and m["wall_s"] == 15.0


def test_metrics_never_reached_one_row_and_no_rows():
    spec = peers_spec.RunSpec(stop_at_return=475.0)
    out = _events([(6000, 2500, 10.0, None), (11000, 5000, 12.0, 200.0)])
    assert peers_spec.metrics(spec, peers_spec.read_events(out))["time_to_return_s"] is None
    # a run that stops at its first row (a recipe that reaches the target in one chunk) has a
    # time to the target but no steady state to time
    one = peers_spec.metrics(spec, peers_spec.read_events(_events([(6000, 2500, 10.0, 480.0)])))
    assert one["time_to_return_s"] == 10.0
    assert one["trained_samples_per_s"] is None and one["env_steps_per_s"] is None
    header_only = _events([(1, 1, 1.0, 1.0)]).splitlines()[:2]
    with pytest.raises(ValueError, match="no rows"):
        peers_spec.metrics(spec, peers_spec.read_events("\n".join(header_only)))


def test_spec_round_trip_and_unknown_field():
    spec = peers_spec.RunSpec(hidden=(256, 256), batch=32)
    assert peers_spec.RunSpec.from_json(spec.to_json()) == spec
    assert spec.samples_per_env_step == 2 * 32 / 4
    with pytest.raises(ValueError, match="bogus"):
        peers_spec.RunSpec.from_json('{"bogus": 1}')


def test_summary_ratios_are_drlhet_over_peer():
    runs = [
        {"system": "drlhet", "trained_samples_per_s": 600.0, "env_steps_per_s": 60.0,
         "time_to_return_s": 10.0},
        {"system": "drlhet", "trained_samples_per_s": 400.0, "env_steps_per_s": 40.0,
         "time_to_return_s": 30.0},
        {"system": "sb3", "trained_samples_per_s": 100.0, "env_steps_per_s": 10.0,
         "time_to_return_s": 200.0},
        {"system": "rllib", "skipped": "missing environment"},
    ]  # fmt: skip
    s = fig_peers.summarize(runs, ("drlhet", "sb3", "rllib"))
    assert s["drlhet"]["trained_samples_per_s"] == 500.0 and s["drlhet"]["runs"] == 2
    assert s["sb3"]["drlhet_ratio"]["trained_samples_per_s"] == 5.0
    assert s["sb3"]["drlhet_ratio"]["time_to_return"] == 10.0  # 200 s against a median of 20
    assert "rllib" not in s


def test_missing_environment_is_skipped_with_the_command(monkeypatch):
    monkeypatch.setitem(
        fig_peers.SYSTEMS, "nowhere", (".venv-missing/bin/python", "sb3_run.py", "matched", True)
    )
    row = fig_peers.launch("nowhere", peers_spec.RunSpec(), fig_peers.Args())
    assert "missing environment .venv-missing/bin/python" in row["skipped"]


def test_grid_range_names_both_ends():
    def row(ratio, batch):
        return {"config": {"batch": batch}, "summary": {"rllib": {"drlhet_ratio": {
            "trained_samples_per_s": ratio}}}}  # fmt: skip

    got = fig_peers._range([row(3.0, 32), row(40.0, 1024), row(7.0, 256)])
    assert got["lowest"] == {"ratio": 3.0, "config": {"batch": 32}}
    assert got["highest"] == {"ratio": 40.0, "config": {"batch": 1024}}


def test_eval_every_is_taken_and_a_bad_one_is_named():
    args = fig_peers.Args(steps=7000, eval_every=2000)
    spec = fig_peers.base_spec(args)
    assert (spec.steps, spec.eval_every) == (7000, 2000)
    assert fig_peers.base_spec(fig_peers.Args()).eval_every == peers_spec.RunSpec().eval_every
    assert fig_peers.refused(args) == ""
    for bad in (0, 2002):  # refused at argument checking (`checked_cli.run`), in one line
        why = fig_peers.refused(fig_peers.Args(eval_every=bad))
        assert why.startswith(f"--eval-every {bad} must be a positive multiple"), why


@pytest.mark.parametrize("overrides", fig_peers.GRID)
def test_grid_chunks_hold_the_same_learner_work(overrides):
    spec = fig_peers.grid_spec(fig_peers.Args(), overrides)
    assert spec.eval_every % spec.num_envs == 0
    updates = spec.eval_every // spec.num_envs * spec.sgd_steps
    assert fig_peers.GRID_UPDATES - spec.sgd_steps <= updates <= fig_peers.GRID_UPDATES
    assert (spec.steps - spec.warmup) // spec.eval_every == 3 and spec.warmup >= spec.batch
    assert spec.stop_at_return is None


@pytest.mark.parametrize(
    "args, line",
    [
        ("--env Bogus-v0", "--env 'Bogus-v0': unknown environment 'Bogus-v0'; gymnax offers"),
        ("--env ''", "--env '': unknown environment ''"),
        ("--env Pendulum-v1", "--env 'Pendulum-v1': its actions are not discrete, as --algo dqn"),
        ("--algo td3 --env CartPole-v1", "--env 'CartPole-v1': its actions are not continuous"),
    ],
)
def test_an_env_that_cannot_run_is_refused_before_any_system_starts(
    cli, capsys, monkeypatch, tmp_path, args, line
):
    """Every system was launched on it and failed there, each a row of ``failed``; the rows
    and an empty figure replaced the last run's, exit 1 (an empty ``--env`` ran CartPole)."""
    _refused_before_launch(
        cli, capsys, monkeypatch, tmp_path, f"{args} --steps 2000 --eval-every 1000", line
    )


@pytest.mark.parametrize(
    "args, line",
    [
        ("--steps 8", "--steps 8 --eval-every 5000: drlhet would refuse the run: n_step (3) must"),
        ("--steps 5000", "--steps 5000 --eval-every 5000: drlhet would refuse the run: steps "
         "(5000) must be >= warmup + eval_every (1000 + 5000)"),
        ("--algo td3 --steps 2500", "--steps 2500 --eval-every 2000: drlhet would refuse the "
         "run: steps (2500) must be >= warmup + eval_every (1000 + 2000)"),
        ("--env gymnasium:CartPole-v1 --steps 4000 --eval-every 4000", "--steps 4000 "
         "--eval-every 4000: drlhet would refuse the run: steps (4000) must be >= warmup"),
    ],
)  # fmt: skip
def test_a_run_drlhet_would_refuse_is_refused_before_any_system_starts(
    cli, capsys, monkeypatch, tmp_path, args, line
):
    """drlhet's runner failed on it after the launch ("n_step must be <= steps / num_envs"),
    and every peer on its own, the last run's rows and figure replaced by failures."""
    _refused_before_launch(cli, capsys, monkeypatch, tmp_path, args, line)


def test_the_runs_drlhet_checks_are_the_ones_that_run():
    """``--grid`` sizes its own runs (`grid_spec`): the ``--steps`` it ignores is not refused;
    a run that fits is not refused either."""
    assert fig_peers.refused(fig_peers.Args(grid=True, steps=8)) == ""
    assert fig_peers.refused(fig_peers.Args(steps=6000)) == ""


def _refused_before_launch(cli, capsys, monkeypatch, tmp_path, args: str, line: str) -> None:
    """fig_peers on ``args`` ends with ``line`` and exit 2, launching no system and writing
    nothing."""
    import shlex
    import subprocess

    launched = []

    def fails(cmd, **kwargs):  # what each runner did with it
        launched.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="unknown environment")

    monkeypatch.setattr(subprocess, "run", fails)
    (tmp_path / "p.json").write_text("[1]")
    with pytest.raises(SystemExit) as stop:
        cli("fig_peers", *shlex.split(f"--systems drlhet flashbax {args} --out p.json "
                                      "--plot p.png"))  # fmt: skip
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"fig_peers: error: {line}"), err
    assert launched == [] and (tmp_path / "p.json").read_text() == "[1]"
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize(
    "env, gym_id",
    [("gymnasium:Hopper-v5", "Hopper-v5"), ("gymnasium:CartPole-v1", "CartPole-v1"),
     ("CartPole-v1", "CartPole-v1"), ("Pendulum-v1", "Pendulum-v1")],
)  # fmt: skip
def test_gymnasium_id_drops_drlhets_prefix(env, gym_id):
    assert peers_spec.gymnasium_id(env) == gym_id


def _fake_modules(monkeypatch, *names: str) -> None:
    """Stand-ins for the peers' heavy packages (not installed here), attributes on demand; a
    callback class SB3's runner subclasses."""
    from unittest import mock

    for name in names:
        monkeypatch.setitem(sys.modules, name, mock.MagicMock(BaseCallback=object))


def _gym_make_records(monkeypatch) -> list[str]:
    """``gymnasium.make`` records the id it is given and refuses it (the runner then exits 2
    before it trains)."""
    import gymnasium

    made: list[str] = []

    def make(env_id, *args, **kwargs):
        made.append(env_id)
        raise gymnasium.error.Error("stand-in")

    monkeypatch.setattr(gymnasium, "make", make)
    return made


@pytest.mark.parametrize("recipe", ["matched", "tuned"])
def test_sb3_runner_makes_the_gymnasium_env_of_a_prefixed_id(monkeypatch, capsys, recipe):
    """It called ``gym.make("gymnasium:CartPole-v1")`` (and found no tuned recipe for it)."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # the runner adds its folder
    _fake_modules(monkeypatch, "torch", "stable_baselines3", "stable_baselines3.common",
                  *(f"stable_baselines3.common.{m}"
                    for m in ("base_class", "callbacks", "noise", "vec_env")))  # fmt: skip
    made = _gym_make_records(monkeypatch)
    monkeypatch.setitem(sys.modules, "sb3_run", None)  # `_load`'s, removed after the test
    sb3_run = _load("sb3_run", EXPERIMENTS / "peers" / "sb3_run.py")
    spec = peers_spec.RunSpec(env="gymnasium:CartPole-v1", recipe=recipe)
    assert sb3_run.main(["--spec", spec.to_json()]) == 2
    assert made == ["CartPole-v1"], capsys.readouterr().err


@pytest.mark.parametrize("recipe", ["matched", "tuned"])
def test_rllib_runner_makes_the_gymnasium_env_of_a_prefixed_id(monkeypatch, capsys, recipe):
    """It called ``gym.make("gymnasium:CartPole-v1")`` (and found no tuned recipe for it)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    _fake_modules(monkeypatch, "torch", "ray")
    made = _gym_make_records(monkeypatch)
    monkeypatch.setitem(sys.modules, "rllib_run", None)
    for name in peers_spec.ENV_ONE_THREAD:  # what it sets on import, unset after the test
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    rllib_run = _load("rllib_run", EXPERIMENTS / "peers" / "rllib_run.py")
    spec = peers_spec.RunSpec(env="gymnasium:CartPole-v1", recipe=recipe)
    monkeypatch.setattr(sys, "argv", ["rllib_run.py", "--spec", spec.to_json()])
    with pytest.raises(SystemExit) as stop:
        rllib_run.main()
    assert stop.value.code == 2 and made == ["CartPole-v1"], capsys.readouterr().err


def test_drlhets_runner_refuses_a_run_drlhet_refuses_in_one_line():
    """A configuration `run` refuses (a ConfigError) was a traceback, exit 1."""
    import subprocess

    spec = json.dumps({"algo": "dqn", "steps": 8})
    done = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "peers" / "drlhet_run.py"), "--spec", spec],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("drlhet_run: "), lines
    assert "n_step" in lines[0] or "steps" in lines[0], lines
