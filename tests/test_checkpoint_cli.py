"""``drlhet train --resume``: a run killed with SIGKILL (between checkpoints, or while one is
written) and resumed ends bit for bit as the run that was not killed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from drlhet.checkpoint import Checkpoints, config_from_dict
from drlhet.cli import main
from drlhet.runtime.run import initial_example
from tests.runtime.test_run import assert_same_state

TINY = [
    "--warmup", "500", "--eval-every", "200", "--eval-envs", "2", "--seeds", "2",
    "--batch-size", "32", "--checkpoint-every", "1", "--keep-checkpoints", "10", "--no-progress",
]  # fmt: skip
CASES = {
    "dqn-fused-k0": ["--steps", "1500", "--buffer-size", "4096", "--dqn.hidden", "16"],
    "ddpg-split-k4": [
        "--algo", "ddpg", "--env", "Pendulum-v1", "--steps", "1500", "--buffer-size", "4096",
        "--ddpg.hidden", "16", "--delay", "4", "--sgd-steps", "8",
        "--mapping", "actors=cpu:0,replay=jax@cpu:1,learner=cpu:1",
    ],
    "dqn-split-k0": [
        "--steps", "1500", "--buffer-size", "4096", "--dqn.hidden", "16", "--sgd-steps", "8",
        "--mapping", "actors=cpu:0,replay=jax@cpu:1,learner=cpu:1",
    ],
    "ddpg-fused-k4": [
        "--algo", "ddpg", "--env", "Pendulum-v1", "--steps", "1500", "--buffer-size", "4096",
        "--ddpg.hidden", "16", "--delay", "4",
    ],
}  # fmt: skip
LEARNING = ("eval_return", "train_return", "loss", "env_steps", "chunk")


def train(tmp: Path, name: str | None, args: list[str]) -> subprocess.Popen:
    """``drlhet train`` in a subprocess, its run in ``tmp / name`` (None: a resume, which goes
    on in its own folder and refuses ``--out`` and ``--name``)."""
    env = {**os.environ, "DRLHET_CACHE": str(tmp / "cache")}
    where = [] if name is None else ["--out", str(tmp), "--name", name]
    cmd = [sys.executable, "-m", "drlhet", "train", *where, *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def kill_when(proc: subprocess.Popen, folder: Path, mid_write: bool) -> str:
    """SIGKILLs ``proc`` once checkpoint 1 exists, or (``mid_write``) as soon as a checkpoint
    after it is being written; ``-> what was seen when the signal went``."""
    while proc.poll() is None:
        names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
        writing = [n for n in names if "tmp" in n]
        if (mid_write and writing and "1" in names) or (not mid_write and "1" in names):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return "mid-write" if writing else "between"
        time.sleep(0.002)
    raise AssertionError(f"the run ended before it was killed: {proc.stderr.read().decode()}")


def plant_half_written(folder: Path) -> Path:
    """What a kill in the middle of writing checkpoint n + 1 leaves when the poll missed it:
    orbax's temporary folder with a truncated array file and no commit marker."""
    newest = max(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    half = folder / f"{newest + 1}.orbax-checkpoint-tmp-1"
    shutil.copytree(folder / str(newest), half)
    (half / "_CHECKPOINT_METADATA").unlink()
    data = max((p for p in half.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    return half


def final(run_dir: Path):
    store = Checkpoints(run_dir / "checkpoints")
    saved = store.restore(lambda meta: initial_example(config_from_dict(meta["config"])))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return saved, rows


@pytest.mark.parametrize(
    "case,mid_write",
    [
        pytest.param("dqn-fused-k0", False, marks=pytest.mark.slow),  # in-process: test_checkpoint
        ("ddpg-split-k4", True),
        pytest.param("dqn-split-k0", True, marks=pytest.mark.slow),
        pytest.param("ddpg-fused-k4", False, marks=pytest.mark.slow),
    ],
)
def test_a_killed_run_resumes_bit_for_bit(tmp_path, case, mid_write):
    args = [*TINY, *CASES[case]]
    # one run after the other: the second loads the first's programs from the shared cache
    # (side by side, both would compile them, on a machine whose cores pytest keeps busy)
    whole = train(tmp_path, "whole", args)
    assert whole.wait() == 0, whole.stderr.read().decode()
    killed = train(tmp_path, "killed", args)
    seen = kill_when(killed, tmp_path / "killed" / "checkpoints", mid_write)
    if mid_write and seen == "between":
        plant_half_written(tmp_path / "killed" / "checkpoints")
    resumed = train(tmp_path, None, ["--resume", str(tmp_path / "killed"), "--no-progress"])
    assert resumed.wait() == 0, resumed.stderr.read().decode()
    a, rows_a = final(tmp_path / "whole")
    b, rows_b = final(tmp_path / "killed")
    assert a.chunk == b.chunk == len(rows_a) - 1, seen
    # resumed with the run's own --checkpoint-every 1 --keep-checkpoints 10 (not 10 and 2)
    kept = (tmp_path / "killed" / "checkpoints").iterdir()
    assert sorted(int(p.name) for p in kept if p.name.isdigit()) == list(range(len(rows_a)))
    assert_same_state(a.states, b.states)
    assert len(rows_a) == len(rows_b)
    for x, y in zip(rows_a, rows_b, strict=True):
        assert {k: x[k] for k in LEARNING} == {k: y[k] for k in LEARNING}, seen


def test_resume_refuses_other_settings_and_a_folder_without_checkpoints(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--resume", str(tmp_path), "--no-progress"])
    assert e.value.code == 2
    assert "no checkpoint in" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["train", "--resume", str(tmp_path), "--batch-size", "64"])
    assert e.value.code == 2
    assert "--batch-size" in capsys.readouterr().err
    # written at their default values: refused too (they were ignored without a word)
    with pytest.raises(SystemExit) as e:
        main(["train", "--resume", str(tmp_path), "--steps", "100000", "--dqn.hidden", "64", "64"])
    assert e.value.code == 2
    assert "; drop --dqn.hidden, --steps" in capsys.readouterr().err  # as given
    for where in (["--out", str(tmp_path / "elsewhere")], ["--name", "other"]):  # were ignored
        with pytest.raises(SystemExit) as e:
            main(["train", "--resume", str(tmp_path), *where])
        assert e.value.code == 2
        assert f"--resume goes on in {tmp_path}; drop --out and --name" in capsys.readouterr().err


# orbax's failed read of the corrupt one leaves a callback that runs after its event loop closed
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_resume_skips_a_corrupt_checkpoint_naming_it(tmp_path, capsys):
    args = [*TINY, *CASES["dqn-fused-k0"], "--steps", "900"]
    main(["train", *args, "--out", str(tmp_path), "--name", "run", "--no-compilation-cache"])
    folder = tmp_path / "run" / "checkpoints"
    assert sorted(int(p.name) for p in folder.iterdir()) == [0, 1]
    data = max(
        (p for p in (folder / "1").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size
    )
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # truncated
    capsys.readouterr()
    main(["train", "--resume", str(tmp_path / "run"), "--no-progress", "--no-compilation-cache"])
    err = capsys.readouterr()
    assert f"drlhet: warning: checkpoint {folder / '1'} skipped: " in err.err
    assert f"after chunk 0 ({folder / '0'})" in err.out
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["chunk"] for r in rows] == [0, 1]
    # resumed once more, the run has nothing left: said, and nothing changed
    before = sorted((p, p.stat().st_mtime_ns) for p in (tmp_path / "run").rglob("*"))
    main(["train", "--resume", str(tmp_path / "run"), "--no-progress", "--no-compilation-cache"])
    out = capsys.readouterr().out
    assert f"{tmp_path / 'run'} has run all its 2 chunks: nothing left to resume" in out
    assert sorted((p, p.stat().st_mtime_ns) for p in (tmp_path / "run").rglob("*")) == before
    # killed after its last checkpoint, before its last row, config.json and curve: resumed,
    # they come from that checkpoint
    run = tmp_path / "run"
    whole = {f: (run / f).read_text() for f in ("metrics.jsonl", "config.json")}
    (run / "metrics.jsonl").write_text(whole["metrics.jsonl"].splitlines(keepends=True)[0])
    (run / "config.json").unlink()
    (run / "curve.png").unlink()
    main(["train", "--resume", str(run), "--no-progress", "--no-compilation-cache"])
    out = capsys.readouterr().out
    assert "nothing left to resume (metrics.jsonl, config.json, curve.png written from" in out
    assert {f: (run / f).read_text() for f in whole} == whole and (run / "curve.png").is_file()


def test_a_new_run_is_refused_the_folder_of_another_and_leaves_it_alone(tmp_path, capsys):
    """A fresh run named as an existing one would write over its metrics and mix its
    checkpoints with the other's (retention deleting them, --resume taking the other's).
    --resume is advised only where a checkpoint is there to go on from (a run stopped before
    its first was advised it, which then said "no checkpoint in ...")."""
    for name, held in [("stopped", "metrics.jsonl"), ("empty", "checkpoints"), ("saved", "")]:
        run = tmp_path / name
        run.mkdir()
        if name == "saved":  # a complete checkpoint (orbax's commit marker)
            held = "checkpoints"
            (run / held / "3").mkdir(parents=True)
            (run / held / "3" / "_CHECKPOINT_METADATA").write_text("{}")
        (run / held).mkdir(exist_ok=True) if held == "checkpoints" else (run / held).write_text("")
        before = sorted(run.rglob("*"))
        with pytest.raises(SystemExit) as e:
            main(["train", "--out", str(tmp_path), "--name", name, "--no-progress"])
        assert e.value.code == 2
        go_on = (
            f"go on with it with --resume {run}"
            if name == "saved"
            else "it has no checkpoint to go on from (stopped before its first); remove it"
        )
        line = f"{run} already holds a run ({held}); {go_on}, or give another --name"
        assert line in capsys.readouterr().err
        assert sorted(run.rglob("*")) == before


def test_a_run_killed_in_its_first_chunk_leaves_its_name_free(tmp_path, monkeypatch, capsys):
    """A run killed before its first row (a second SIGTERM: the default action, no cleanup;
    SIGKILL) left an empty ``metrics.jsonl``, and the same --name was then refused ("remove
    it"): the file is now made at the first row. What a kill would leave is read inside the
    run (the runner's call); the folder left with it takes a new run of that name."""
    from drlhet.cli.common import run_directory

    left: list[str] = []

    def killed(*args, on_chunk, **kwargs):
        left.extend(sorted(p.name for p in (tmp_path / "r").iterdir()))
        on_chunk({"backend": "jax", "eval_return": [1.0], "env_steps": 8, "wall_s": 0.1,
                  "env_steps_per_s": 1.0, "trained_samples_per_s": 1.0})  # fmt: skip
        row = (tmp_path / "r" / "metrics.jsonl").read_text()
        assert json.loads(row)["env_steps"] == 8  # the first row makes it, whole
        raise KeyboardInterrupt  # (the CLI's cleanup then removes the folder)

    monkeypatch.setattr("drlhet.cli.train.run", killed)
    with pytest.raises(SystemExit) as e:
        main(["train", "--out", str(tmp_path), "--name", "r", *TINY, "--no-progress"])
    assert e.value.code == 130 and left == []  # not even metrics.jsonl
    (tmp_path / "r").mkdir()  # the folder as the kill left it
    assert run_directory(tmp_path, "r") == tmp_path / "r"


def test_a_checkpoint_is_read_with_the_replay_its_mapping_placed():
    """A replay backend named only in the mapping (``replay=fpga@cpu:0``: other state leaves
    than the default backend's) is the one whose state a checkpoint is read as."""
    import dataclasses

    import jax

    from drlhet.cli.checkpoints import _example
    from drlhet.runtime.config import TrainConfig

    config = TrainConfig(buffer_size=4096, batch_size=32, seeds=1)
    mapping = "actors=jax@cpu:0,replay=fpga@cpu:0,learner=jax@cpu:0"
    got = _example({"config": dataclasses.asdict(config), "mapping": mapping})
    want = initial_example(dataclasses.replace(config, backend="fpga", learner="jax"))
    assert jax.tree.structure(got) == jax.tree.structure(want)
    assert jax.tree.leaves(got) == jax.tree.leaves(want)
    assert jax.tree.structure(got) != jax.tree.structure(initial_example(config))


def test_resume_with_mapping_auto_creates_its_devices_before_the_checkpoint_is_read(
    tmp_path, monkeypatch
):
    """Reading the checkpoint starts JAX with the devices it has then: ``--resume RUN
    --mapping auto`` was always refused (``2 CPU devices are needed; JAX already started with
    1``), the devices that auto searches over created only after the read."""
    from drlhet.cli import train as cli_train
    from drlhet.runtime.config import TrainConfig

    calls: list[tuple] = []
    saved_mapping = "actors=jax@cpu:0,replay=jax@cpu:0,learner=jax@cpu:0"
    monkeypatch.setattr(cli_train, "peek_run", lambda run_dir: (TrainConfig(), saved_mapping))
    monkeypatch.setattr(cli_train, "set_cpu_devices", lambda n: calls.append(("devices", n)))
    monkeypatch.setattr(
        cli_train, "resume_run", lambda run_dir: calls.append(("read",)) or (0, 0, 0)
    )
    for given, devices in ((None, 2), (3, 3)):
        calls.clear()
        cli_train._resume(TrainConfig(), tmp_path, "auto", given, Path("runs"), None)
        assert calls == [("devices", devices), ("read",)]


def test_sigterm_stops_after_the_chunk_with_its_checkpoint_and_resume_goes_on(tmp_path, capsys):
    # in this process, with the shapes of the test above (its programs are in the cache): 20
    # chunks, a checkpoint due every 10; SIGTERM once the first row is out
    args = [*TINY, *CASES["dqn-fused-k0"], "--steps", "4500", "--checkpoint-every", "10"]
    metrics = tmp_path / "run" / "metrics.jsonl"

    def signal_after_the_first_row() -> None:
        while not (metrics.is_file() and metrics.read_text()):
            time.sleep(0.002)
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:  # never kill the test
            os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=signal_after_the_first_row, daemon=True)
    sender.start()
    with pytest.raises(SystemExit) as e:
        main(["train", *args, "--out", str(tmp_path), "--name", "run"])
    out, err = capsys.readouterr()
    assert e.value.code == 128 + signal.SIGTERM, err
    assert "drlhet: SIGTERM: stopping after this chunk, saving it" in err
    saved, rows = final(tmp_path / "run")
    assert 0 <= saved.chunk == len(rows) - 1 < 9  # before the first checkpoint that was due
    assert f"stopped after chunk {saved.chunk}, saved: drlhet train --resume" in out
    main(["train", "--resume", str(tmp_path / "run"), "--no-progress"])
    _, rows = final(tmp_path / "run")
    assert [r["chunk"] for r in rows] == list(range(20))


def test_peek_names_checkpoints_whose_metadata_does_not_read_back(tmp_path):
    # "no checkpoint" was said of a folder of complete checkpoints whose metadata was garbage
    from drlhet.cli.checkpoints import peek_run

    meta = tmp_path / "checkpoints" / "3" / "meta"
    meta.mkdir(parents=True)
    (meta / "metadata").write_text("{not json")
    (meta.parent / "_CHECKPOINT_METADATA").write_text("{}")
    with pytest.raises(
        ValueError, match=r"no checkpoint in .* whose metadata reads back \(chunks 3\)"
    ):
        peek_run(tmp_path)
    # valid JSON whose mapping is not text: skipped too (it failed later, exit 1)
    (meta / "metadata").write_text('{"config": {}, "mapping": 5}')
    with pytest.raises(ValueError, match=r"whose metadata reads back \(chunks 3\)"):
        peek_run(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no checkpoint in \S+$"):
        peek_run(tmp_path / "empty")


def test_a_run_stopped_at_its_return_saves_that_chunk(tmp_path, capsys):
    # --stop-at-return ended the run before the chunk that reached it was saved: `make run`
    # left no checkpoint to evaluate or resume (the default saves every 10 chunks)
    args = [*CASES["dqn-fused-k0"], "--warmup", "500", "--eval-every", "200", "--no-progress"]
    main(["train", *args, "--out", str(tmp_path), "--name", "r", "--stop-at-return", "0"])
    assert "mean evaluation return reached 0 after 708 env steps" in capsys.readouterr().out
    run = tmp_path / "r"
    assert Checkpoints(run / "checkpoints").chunks() == [0]
    saved, rows = final(run)
    assert saved.chunk == 0 and [r["chunk"] for r in rows] == [0]
    # its --stop-at-return is the resume's too (it was forgotten: the resume trained on to
    # --steps); reached already, there is nothing to go on with
    assert saved.meta["stop_at_return"] == 0
    main(["train", "--resume", str(run)])
    assert "reached --stop-at-return 0 at chunk 0: nothing to go on with" in capsys.readouterr().out
    assert Checkpoints(run / "checkpoints").chunks() == [0]


def test_only_the_closed_event_loops_of_a_corrupt_read_are_kept_quiet(monkeypatch):
    # orbax's failed read of a truncated checkpoint printed 4-37 tracebacks of these around
    # the one warning line (measured from `drlhet eval` on one, 2026-11-30)
    import types

    from drlhet.cli import quiet_closed_loops

    printed: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: printed.append(str(u.exc_value)))
    quiet_closed_loops()
    quiet_closed_loops()  # once only: main may run many times in one process
    for value in (RuntimeError("Event loop is closed"), RuntimeError("other"), ValueError("x")):
        sys.unraisablehook(types.SimpleNamespace(exc_value=value))
    assert printed == ["other", "x"]
