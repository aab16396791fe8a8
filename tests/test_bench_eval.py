"""experiments/bench_eval.py: the evaluation's loop timed against the scan it replaced, in one
run; its rows say what was played, where and how long (measured), and a loop whose returns
differ from the scan's ends the run instead of being timed."""

import json
import shlex

import numpy as np
import pytest
from experiment_scripts import check_run
from experiment_scripts import experiment as experiment  # a fixture
from experiment_scripts import fresh_run as fresh_run  # an autouse fixture

TINY = "--envs CartPole-v1 --agents untrained --episodes 3 --repeats 2 --out e.json"


def test_the_rows_say_each_loop_its_steps_and_times(cli, tmp_path, capsys):
    cli("bench_eval", *shlex.split(TINY))
    rows = json.loads((tmp_path / "e.json").read_text())
    assert [r["impl"] for r in rows] == ["while", "scan"]
    loop, scan = rows
    # the scan plays every one of CartPole's 500 steps; the loop stops after the longest
    # episode (CartPole's reward is 1 a step: no episode was longer than the steps played)
    assert scan["steps_played"] == scan["max_steps"] == loop["max_steps"] == 500
    assert loop["mean_return"] <= loop["steps_played"] < 500
    assert loop["mean_return"] == scan["mean_return"] and loop["same_returns"]
    for r in rows:
        assert r["ms_min"] <= r["ms"] <= r["ms_max"] and r["repeats"] == 2
        assert r["compile_s"] > 0 and r["device"] == "cpu:0" and r["host_env"] is False
        assert r["measured"].startswith("measured on ") and r["agent"] == "untrained"
        check_run(r["run"], "bench_eval.py --envs CartPole-v1")
    out = capsys.readouterr().out
    assert "CartPole-v1" in out and f"while {loop['steps_played']:>4} steps" in out


def test_a_loop_whose_returns_differ_from_the_scans_is_not_timed(experiment, monkeypatch):
    """The check can fail: the scan made to add one to every return."""
    bench = experiment("bench_eval")
    scan = bench.scan_returns
    monkeypatch.setattr(bench, "scan_returns", lambda c, n: lambda a, k: scan(c, n)(a, k) + 1)
    args = bench.Args(envs=("CartPole-v1",), agents=("untrained",), episodes=(2,))
    with pytest.raises(RuntimeError, match="the while loop's returns differ"):
        bench.main(args)


def test_a_trained_agent_is_trained_once_for_a_host_environment_and_its_twin(
    experiment, monkeypatch, tmp_path
):
    """``gymnasium:CartPole-v1``'s agent is trained on gymnax's CartPole-v1 (the same spaces),
    once for both; the training here is a stand-in that returns fresh agents."""
    pytest.importorskip("gymnasium")
    import jax

    import drlhet.runtime.run as run_module
    from drlhet.runtime.trainer import make_trainer

    bench = experiment("bench_eval")
    assert bench.twin("gymnasium:CartPole-v1") == "CartPole-v1"
    assert bench.twin("CartPole-v1") == "CartPole-v1"
    trained_on = []

    def stand_in(cfg):
        trained_on.append(cfg.env)
        agents = jax.vmap(make_trainer(cfg).agent.init)(jax.random.split(jax.random.key(1), 1))
        row = {"env_steps": cfg.steps, "eval_return": [9.0]}
        return type("States", (), {"agent": agents})(), [row]

    monkeypatch.setattr(run_module, "run", stand_in)
    args = bench.Args(
        envs=("CartPole-v1", "gymnasium:CartPole-v1"), agents=("trained",), episodes=(2,),
        repeats=1, out=tmp_path / "t.json",
    )  # fmt: skip
    rows = bench.main(args)
    assert trained_on == ["CartPole-v1"]
    assert [(r["env"], r["impl"]) for r in rows] == [
        (env, impl) for env in args.envs for impl in ("while", "scan")
    ]
    assert {r["agent_is"] for r in rows} == {
        "dqn trained 50,000 env steps on CartPole-v1 (0 s), its last evaluation [9.0]"
    }
    assert [r["host_env"] for r in rows] == [False, False, True, True]
    assert np.all([r["same_returns"] for r in rows])
