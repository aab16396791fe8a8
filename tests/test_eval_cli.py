"""``drlhet eval RUN``: a run's saved agents over many greedy episodes, the same evaluation the
run makes after each chunk (with more environments), from any of its checkpoints; bad input in
one line, status 2, nothing written."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from experiment_scripts import experiment as experiment  # a fixture

from drlhet.cli import main
from drlhet.cli.checkpoints import resume_run
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.trainer import make_evaluation, make_trainer
from tests.test_cli import TINY_SHAPE, one_error_line

RUN = [*TINY_SHAPE, "--env", "CartPole-v1", "--steps", "500", "--seeds", "2", "--no-progress"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A two-chunk CartPole run of two seeds with a checkpoint after each chunk."""
    out = tmp_path_factory.mktemp("runs")
    main(["train", *RUN, "--out", str(out), "--name", "r", "--checkpoint-every", "1"])
    return out / "r"


def test_it_reports_each_seed_and_writes_json(run_dir, tmp_path, capsys):
    main(["eval", str(run_dir), "--episodes", "7", "--out", str(tmp_path / "e")])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"evaluating {run_dir} after chunk 1 (")
    assert out[0].endswith("7 greedy episodes per seed of DQN on CartPole-v1")
    assert out[1].startswith("compiled in ") and out[1].endswith(" s; playing the episodes ...")
    assert [line.split(":")[0] for line in out[2:4]] == ["seed 0", "seed 1"]
    assert "the run's evaluation: " in out[2] and out[4].startswith("all seeds: return ")
    written = json.loads((tmp_path / "e").read_text())
    returns = np.array(written["returns"])
    assert returns.shape == (2, 7) and np.all(returns >= 1) and np.all(returns <= 500)
    assert written["per_seed"]["mean"] == pytest.approx(returns.mean(axis=1).tolist())
    assert written["all_seeds"]["std"] == pytest.approx(returns.std())
    across = written["all_seeds"]["std_of_seed_means"]
    assert across == pytest.approx(returns.mean(axis=1).std(ddof=1))
    assert "seeds' mean" in out[4] and out[4].endswith(" s with compiling)")
    assert 0 < written["compile_s"] < written["wall_s"]
    assert written["chunk"] == 1 and written["episodes"] == 7 and written["seed"] == 0


def evaluated(tmp_path, *args: str) -> dict:
    """The JSON ``drlhet eval`` writes for ``args``."""
    out = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
    main(["eval", *args, "--out", str(out)])
    return json.loads(out.read_text())


def test_it_is_the_runs_own_evaluation_with_more_environments(run_dir):
    config, _, saved = resume_run(run_dir, chunk=0)
    agent = jax.tree.map(lambda x: x[1], saved.states.agent)  # seed 1's
    key = jax.random.key(3)
    evaluate = make_trainer(config).parts.evaluate  # what the run reports per chunk
    returns = make_evaluation(config, config.eval_envs)(agent, key)
    assert float(np.mean(np.asarray(returns))) == float(evaluate(agent, key))
    more = np.asarray(make_evaluation(config, 3 * config.eval_envs)(agent, key))
    assert more.shape == (3 * config.eval_envs,)


def test_a_bar_over_the_steps_is_fed_from_inside_the_compiled_call(run_dir, tmp_path, capsys):
    """The episodes are one compiled call: a long evaluation said nothing while it played. A
    bar over the episodes' steps (of CartPole's 500 at most) now moves from inside it; the
    returns are the same with the bar or without."""
    shown = evaluated(tmp_path, str(run_dir), "--episodes", "3")
    err = capsys.readouterr().err
    assert "episode steps: " in err and "/500 [" in err, err  # up to the longest episode
    quiet = evaluated(tmp_path, str(run_dir), "--episodes", "3", "--no-progress")
    assert "episode steps" not in capsys.readouterr().err
    assert shown["returns"] == quiet["returns"]


def test_the_evaluation_stops_when_every_episode_has_ended_with_the_same_returns(
    run_dir, experiment
):
    """It stepped the environments through all 500 of CartPole's steps whatever the episodes
    (a host environment's simulator too); now until the longest episode ends: the returns
    are the scan's bit for bit (the scan as it was: experiments/bench_eval.py's, which times
    the two), and the steps told are the longest episode's."""
    scan_returns = experiment("bench_eval").scan_returns
    config, _, saved = resume_run(run_dir, chunk=0)
    keys = jax.random.split(jax.random.key(5), config.seeds)
    calls: list[tuple[int, int]] = []
    told = make_evaluation(config, 4, on_step=lambda t, total: calls.append((t, total)))
    got = np.asarray(jax.jit(jax.vmap(told))(saved.states.agent, keys))
    plain = np.asarray(jax.jit(jax.vmap(make_evaluation(config, 4)))(saved.states.agent, keys))
    scanned = np.asarray(jax.jit(jax.vmap(scan_returns(config, 4)))(saved.states.agent, keys))
    assert got.shape == (2, 4) and np.array_equal(got, plain) and np.array_equal(got, scanned)
    steps = {t for t, _ in calls}
    assert {total for _, total in calls} == {500} and steps == set(range(len(steps)))
    assert len(steps) == got.max() < 500  # CartPole's reward is 1 a step: the longest played


def test_an_older_chunk_and_the_seed_are_taken(run_dir, tmp_path, capsys):
    first = evaluated(tmp_path, str(run_dir), "--chunk", "0", "--episodes", "5")
    again = evaluated(tmp_path, str(run_dir), "--chunk", "0", "--episodes", "5")
    other = evaluated(tmp_path, str(run_dir), "--chunk", "0", "--episodes", "5", "--seed", "1")
    assert first["chunk"] == 0 and first["returns"] == again["returns"]
    assert first["returns"] != other["returns"]  # CartPole's resets differ with the seed
    assert "after chunk 0 (" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["{run}", "--chunk", "7"], "eval {run}: no checkpoint of chunk 7 (chunks 0, 1)"),
        (["{run}", "--chunk", "-1"], "--chunk must be >= 0, got -1"),
        (["{run}", "--episodes", "0"], "--episodes must be in [1, 100,000], got 0"),
        (["{run}", "--seed", "-1"], "--seed must be in [0, 4294967295] (JAX's key keeps 32"),
        (["{run}", "--seed", "4294967296"], "--seed must be in [0, 4294967295] (JAX's key"),
        (["{run}", "--out", "{run}"], "--out {run} is a folder; name a JSON file"),
        (["{tmp}/none"], "eval {tmp}/none: no run directory (a run of drlhet train with"),
        (["{tmp}"], "eval {tmp}: no checkpoints/ folder in it"),
    ],
)
def test_bad_input_is_one_line(run_dir, tmp_path, capsys, args, message):
    def fill(text: str) -> str:
        return text.format(run=run_dir, tmp=tmp_path)

    with pytest.raises(SystemExit) as stop:
        main(["eval", *map(fill, args)])
    assert stop.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith("drlhet: error: ") and fill(message) in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_episodes_must_be_a_positive_integer_in_the_library():
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="episodes must be an integer >= 1"):
            make_evaluation(TrainConfig(env="probe-constant"), bad)
