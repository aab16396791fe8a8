"""drlhet/dse/pipelined.py against the runtime it models: the pipeline's iterations per stage
call (U) are the runtime's for every delay, SGD steps and chunk."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import pytest

from drlhet.dse.key import ProfileKey
from drlhet.dse.model import Model
from drlhet.dse.pipelined import unroll
from drlhet.dse.trace import shapes_of
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.stages import unroll_of
from drlhet.runtime.trainer import make_trainer
from tests.dse.test_model import PROFILE, SHAPES, US, places, toy_sheets


@pytest.mark.parametrize("sgd_steps", [1, 2, 3, 4])
@pytest.mark.parametrize("iterations", [1, 2, 7, 12, 250, 1000, 1250])
def test_the_models_unroll_is_the_runtimes(sgd_steps, iterations):
    for delay in range(sgd_steps, 12 * sgd_steps + 1):  # the pipeline runs from delay >= S
        cfg = TrainConfig(delay=delay, sgd_steps=sgd_steps)
        assert unroll(delay, sgd_steps, iterations) == unroll_of(cfg, iterations), delay


def test_a_run_s_shapes_hold_its_trainers_iterations_per_chunk():
    key = ProfileKey(num_envs=8)
    for every in (800, 1000, 4000):
        tr = make_trainer(key.train_config(eval_every=every))
        assert shapes_of(key, every).iterations == tr.iterations == every // 8
    assert shapes_of(key).iterations is None  # the run not known


def test_the_prediction_runs_as_many_iterations_a_call_as_the_runtime():
    # k = 16, S = 2: U = 4 where it divides the chunk (1000 iterations); a chunk of 1250 the
    # runtime runs with U = 2 (1250 is no multiple of 4 or 3). Per iteration the host's work
    # is 235 us of dispatch and hops over U (tests/dse/test_model.py's relaxed case)
    two = places("jax@cpu:0", "jax@cpu:1", "jax@cpu:1")
    cfg = TrainConfig(delay=16, sgd_steps=2)
    for iterations, u in ((None, 4), (1000, 4), (1250, 2), (1249, 1)):
        assert iterations is None or unroll_of(cfg, iterations) == u  # the runtime's U
        shapes = dataclasses.replace(SHAPES, iterations=iterations)
        m = Model(shapes, toy_sheets(), {"jax": PROFILE}, cpu_cores=2, host_driven=True)
        assert m.predict(two, delay=16).terms["busy host"] == pytest.approx(235 / u * US)


def test_rescore_predicts_with_the_chunks_a_validation_measured(monkeypatch, tmp_path, capsys):
    # experiments/rescore_dse.py re-predicts a validation's split rows (k = 16) with the U of
    # their chunks: 5000 env steps (1250 iterations of 4 envs) run U = 2, 4000 (1000) U = 4, as
    # does a row that does not say (not lowered); a chunk that is no whole number is refused
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.syspath_prepend(str(repo / "experiments"))
    rescore_dse = importlib.import_module("rescore_dse")
    data = json.loads((repo / "results/dse_validation_pipeline_k16.json").read_text())
    row = next(r for r in data["rows"] if r["mapping"].count("cpu:1") == 2)  # a split mapping
    assert row["delay"] == 16

    def error(steps):
        path = tmp_path / f"{steps}.json"
        one = dict(row) if steps is None else {**row, "chunk_steps": steps}
        path.write_text(json.dumps({**data, "rows": [one]}))
        assert rescore_dse.wrong_shape(json.loads(path.read_text())) == ""
        return rescore_dse.rescore(path)[0]

    assert error(4000) == error(None) != error(5000)
    bad = {**data, "rows": [{**row, "chunk_steps": 4000.5}]}
    assert "rows[0].chunk_steps is 4000.5" in rescore_dse.wrong_shape(bad)


@pytest.mark.timeout(20)
def test_a_huge_delay_is_predicted_at_once():
    # U was counted down one at a time from delay // 2S to a divisor of the chunk's
    # iterations: `drlhet dse --delay 1000000000000` ran for minutes and longer
    assert unroll(10**15, 2, 1250) == unroll(4 * 1250, 2, 1250) == 1250
    assert unroll(10**15, 3, 7) == 7 and unroll(10**15, 2, None) == 10**15 // 4
    two = places("jax@cpu:0", "jax@cpu:1", "jax@cpu:1")
    shapes = dataclasses.replace(SHAPES, iterations=1250)
    m = Model(shapes, toy_sheets(), {"jax": PROFILE}, cpu_cores=2, host_driven=True)
    huge, most = m.predict(two, delay=10**15), m.predict(two, delay=4 * 1250)
    assert huge.iteration_s == pytest.approx(most.iteration_s) and huge.terms == most.terms
