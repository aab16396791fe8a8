"""``drlhet train --uniform``: uniform replay has no tree, so no replay backend is named for it
(``--backend``, or a backend in the mapping's replay placement); placed on a device alone it
runs, resumes and is reported as uniform replay."""

from __future__ import annotations

import json

import pytest

from drlhet.checkpoint import config_from_dict
from drlhet.cli import main
from drlhet.runtime.config import check
from tests.test_cli import TINY, one_error_line

NAMED = "actors=cpu:0,replay=native@cpu:0,learner=cpu:0"
"""A mapping that names a replay backend (the one a bare device gets on a CPU)."""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "native"], "--backend 'native' runs a sum tree, and --uniform replay has "
                                  "none: drop --backend"),
        (["--backend", "jax"], "--backend 'jax' runs a sum tree"),
        (["--mapping", NAMED], "--mapping replay=native@cpu:0 names a replay backend, and "
                               "--uniform replay has no tree for it: place the replay on a device "
                               "alone (replay=cpu:0)"),
        # a primitive of the replay places the whole group
        (["--mapping", "actors=cpu:0,sample=jax@cpu:0,learner=cpu:0"],
         "--mapping sample=jax@cpu:0 names a replay backend"),
    ],
)  # fmt: skip
def test_a_replay_backend_named_for_uniform_replay_is_refused_in_one_line(
    tmp_path, capsys, args, message
):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--uniform", *args, *TINY, "--out", str(tmp_path / "runs")])
    assert stop.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith("drlhet: error: ") and message in line, line
    assert not (tmp_path / "runs").exists()


def test_a_uniform_run_on_a_bare_device_runs_resumes_and_says_uniform(tmp_path, capsys):
    bare = "actors=cpu:0,replay=cpu:0,learner=cpu:0"
    where = ["--out", str(tmp_path), "--name", "run", "--checkpoint-every", "1"]
    main(["train", "--uniform", "--mapping", bare, *TINY, *where])
    out = capsys.readouterr().out
    assert "(uniform replay, actors=" in out and "replay backend" not in out, out
    run = tmp_path / "run"
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["uniform"] and recorded["backend"] is None
    check(config_from_dict(recorded))  # what the run says it ran passes the check
    # the checkpoint's mapping names the backend the run placed: going on with it is no choice
    # of the user's (here: nothing left to run)
    (run / "config.json").unlink()  # a finished run's resume writes back what it lacks
    main(["train", "--resume", str(run), "--no-progress"])
    assert "has run all its 2 chunks: nothing left to resume" in capsys.readouterr().out
    assert json.loads((run / "config.json").read_text()) == recorded
    with pytest.raises(SystemExit) as stop:  # a mapping given on resuming is checked
        main(["train", "--resume", str(run), "--mapping", NAMED, "--no-progress"])
    assert stop.value.code == 2
    assert "--mapping replay=native@cpu:0 names a replay backend" in one_error_line(capsys)
