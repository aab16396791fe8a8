"""What the experiments write says what it is: every JSON row names its run (when, the command,
the commit, the machine, the versions: experiments/_common.py); a backend name that is not
registered, or a run that measures nothing, is refused before a results file is replaced (GPU
rows and empty panels in the figures: test_experiment_figures.py; a delay figure drawn from
saved runs: test_delay_figure_runs.py).
"""

import json
import os
import shlex
import sys
from pathlib import Path

import pytest
from experiment_scripts import PRIMITIVES_TINY, REPLAY_TINY, REPO, check_run, refused
from experiment_scripts import experiment as experiment  # a fixture
from experiment_scripts import fresh_run as fresh_run  # an autouse fixture


def test_run_info_is_one_object_per_process(experiment, monkeypatch):
    common = experiment("_common")
    monkeypatch.setattr(sys, "argv", [str(REPO / "experiments" / "x.py"), "--out", "a b.json"])
    info = common.run_info("flashbax", "no-such-package")
    assert info["command"] == "experiments/x.py --out 'a b.json'"
    assert info["versions"]["no-such-package"] is None
    assert info["versions"]["flashbax"] is not None  # the bench extra
    assert common.run_info()["started_utc"] == info["started_utc"]  # the run's id
    assert "flashbax" not in common.run_info()["versions"]


def test_bench_replay_rows_say_their_run_and_device(cli, tmp_path):
    cli("bench_replay", *shlex.split(REPLAY_TINY), "--backends", "jax")
    rows = json.loads((tmp_path / "b.json").read_text())
    assert rows and all(r["repeats"] == 1 and r["device_kind"] for r in rows)
    for r in rows:
        check_run(r["run"], "bench_replay.py --capacities 64")


def study_rows(cmd: list[str]) -> list[dict]:
    """What a run of ``bench_replay --threading-study`` writes (drlhet-jax's items/s)."""
    mode = cmd[cmd.index("--threading") + 1]
    return [{"impl": "drlhet-jax", "threading": mode, "mode": m, "op": op, "items_per_s": 1.0}
            for m in ("fused", "percall") for op in ("sample", "update", "step")]  # fmt: skip


def test_the_threading_study_names_its_files_after_out(cli, monkeypatch, tmp_path):
    """It wrote ``bench_replay_threading*.json`` beside ``--out``, whatever its name: two
    studies into one folder replaced each other's rows."""
    import subprocess

    outs = []

    def run(cmd, **kwargs):  # each setting's run: writes its rows where it is told
        out = Path(cmd[cmd.index("--out") + 1])
        out.write_text(json.dumps(study_rows(cmd)))
        outs.append(out.relative_to(tmp_path) if out.is_absolute() else out)
        return subprocess.CompletedProcess(cmd, 0, stderr="")

    monkeypatch.setattr(subprocess, "run", run)
    (tmp_path / "o").mkdir()
    cli("bench_replay", "--threading-study", "--repeats", "1", "--out", "o/study.json")
    assert outs == [Path(f"o/study_threading_{m}.json") for m in ("default", "pin1", "xla1")]
    written = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert written == sorted(["study_threading.json", *(p.name for p in outs)])
    rows = json.loads((tmp_path / "o" / "study_threading.json").read_text())
    assert [r["threading"] for r in rows[::6]] == ["default", "pin1", "xla1"]


def test_a_failing_threading_study_run_is_one_line_naming_it(cli, capsys, monkeypatch, tmp_path):
    """A run that failed ended the study in `subprocess.CalledProcessError`'s traceback."""
    failing = tmp_path / "python"
    failing.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                       "echo 'RuntimeError: boom' >&2\nexit 3\n")  # fmt: skip
    failing.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(failing))
    with pytest.raises(SystemExit) as stop:
        cli("bench_replay", "--threading-study", "--repeats", "1", "--out", "study.json")
    out, err = capsys.readouterr()
    assert stop.value.code == 1 and err.count("\n") == 1, err
    assert err.startswith(
        "bench_replay: failed: threading study, --threading default: exit status 3 "
        "(RuntimeError: boom); study_threading.json not written; command: "
        f"{failing} {REPO / 'experiments' / 'bench_replay.py'} --quick --no-peers --threading "
        "default "
    ), err
    assert err.strip().endswith("--repeats 1 --out study_threading_default.json"), err
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize(
    "script, args",
    [
        ("bench_replay", f"{REPLAY_TINY} --backends jax bogus"),
        ("fig_primitives", f"{PRIMITIVES_TINY} --backends bogus"),
        ("fig_branching", "--branchings 4 --capacity 64 --batch 8 --repeats 2 --sheets "
         "--modes fused --backends bogus --out f.json --plot f.png"),
    ],
)  # fmt: skip
def test_a_backend_that_is_not_registered_is_refused(cli, capsys, tmp_path, script, args):
    """It was a note, and the run went on without it: an empty rows file (bench_replay) or a
    figure of modeled rows only, over the last run's."""
    (tmp_path / "b.json").write_text("[1]")
    (tmp_path / "f.json").write_text("[1]")
    line = refused(cli, capsys, script, args)
    assert "--backends takes one or more of cuda, fpga, jax, native" in line
    assert line.endswith("got 'bogus'")
    assert (tmp_path / "b.json").read_text() == (tmp_path / "f.json").read_text() == "[1]"
    assert not (tmp_path / "f.png").exists()


def test_a_replay_run_with_nothing_to_measure_is_refused(cli, capsys, tmp_path):
    (tmp_path / "b.json").write_text("[1]")
    line = refused(cli, capsys, "bench_replay", f"{REPLAY_TINY} --backends")
    assert line == "bench_replay: error: --backends names none and --no-peers: nothing to measure"
    assert (tmp_path / "b.json").read_text() == "[1]"


def test_a_replay_run_that_measured_nothing_keeps_the_last_rows(cli, capsys, tmp_path):
    """Every cell skipped (each batch above its capacity): it wrote ``[]`` over the rows."""
    (tmp_path / "b.json").write_text("[1]")
    with pytest.raises(SystemExit) as stop:
        cli("bench_replay", *shlex.split(REPLAY_TINY.replace("--batches 8", "--batches 128")),
            "--backends", "jax")  # fmt: skip
    out, err = capsys.readouterr()
    assert stop.value.code == 2
    assert "note: batch 128 > capacity 64: skipped" in out
    assert err.startswith("bench_replay: error: nothing measured (") and err.count("\n") == 1
    assert err.strip().endswith("b.json left as it was")
    assert (tmp_path / "b.json").read_text() == "[1]"


def test_a_soak_of_more_inserts_than_the_capacity_is_refused(cli, capsys):
    """Each backend's process ended in a traceback, its row marked failed."""
    args = "--backends jax --capacity 64 --batch 8 --inserts 100 --updates 8 --block 1 --out s.json"
    line = refused(cli, capsys, "soak_replay", args)
    assert line == "soak_replay: error: --inserts 100 must be <= --capacity 64"


def test_the_ray_benchmark_refuses_pin_on_one_core(cli, capsys, monkeypatch):
    """It exited 1 with a bare message, not as every other bad option."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    line = refused(cli, capsys, "bench_ray", "--pin --out r.json")
    assert line == "bench_ray: error: --pin needs at least 2 cores, this machine has 1"


def test_modeled_rows_say_their_run(cli, tmp_path):
    cli("fpga_cycles", "--out", "c.json")
    rows = json.loads((tmp_path / "c.json").read_text())
    assert rows
    for r in rows:
        check_run(r["run"], "fpga_cycles.py --out c.json")


@pytest.mark.parametrize(
    "script, args, line",
    [
        ("kernel_timeline", "--csv-files k.csv --steps 0", "--steps must be >= 1, got 0"),
        ("kernel_timeline", "--csv-files k.csv --burst-gap-us nan",
         "--burst-gap-us must be a positive number, got nan"),
        ("kernel_timeline", "--csv-files k.csv --burst-gap-us -5",
         "--burst-gap-us must be a positive number, got -5.0"),
        ("kernel_stalls", "--csv-files k.csv --top -1", "--top must be >= 0, got -1"),
        ("kernel_source", "--csv-files k.csv --hottest -1", "--hottest must be >= 0, got -1"),
    ],
)  # fmt: skip
def test_the_ncu_and_nsys_readers_refuse_counts_they_cannot_use(cli, capsys, tmp_path, script,
                                                                args, line):  # fmt: skip
    """``--steps 0`` was read as not given, a negative ``--top`` / ``--hottest`` sliced all but
    the last entries, a NaN gap ended no burst."""
    (tmp_path / "k.csv").write_text('"Start (ns)","Duration (ns)","Name"\n"1","2","k"\n')
    assert refused(cli, capsys, script, f"{args} --out k.json") == f"{script}: error: {line}"


def test_a_parity_run_of_one_chunk_has_no_throughput_not_nan(experiment, monkeypatch):
    """Its throughput was the median of no chunk: NaN (with numpy's warning), written as
    ``NaN``, which JSON does not have."""
    import warnings

    from drlhet.runtime import run as run_module

    parity = experiment("fig_mapping_parity")
    one = {"env_steps": 5000, "eval_return": [100.0], "wall_s": 1.0, "trained_samples_per_s": 9.0}
    monkeypatch.setattr(run_module, "run", lambda cfg, mapping: (None, [one]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        curve = parity._curve(parity.Args(steps=6000, seeds=1), "fused")
    assert curve["trained_samples_per_s"] is None
    json.dumps(curve, allow_nan=False)


@pytest.mark.parametrize(
    "args, line",
    [
        ("--cuda-block-max-batch -5", "--cuda-block-max-batch must be >= 0, got -5"),
        ("--peer-limit-s nan", "--peer-limit-s must be a positive number of seconds, got nan"),
        ("--peer-limit-s -1", "--peer-limit-s must be a positive number of seconds, got -1.0"),
    ],
)
def test_a_negative_threshold_is_refused(cli, capsys, args, line):
    """A negative cuda threshold was set in `drlhet.backends.cuda` as given (with_cuda_paths.py
    refused it); a peer limit below 0 or NaN dropped every peer's rows, each with a note."""
    assert refused(cli, capsys, "bench_replay", f"{REPLAY_TINY} {args}") == (
        f"bench_replay: error: {line}"
    )


PEERS_CRASH = "--systems drlhet --steps 2000 --eval-every 1000 --out p.json --plot p.png"


def test_a_peers_run_where_no_system_ran_fails_and_keeps_its_rows(cli, monkeypatch, tmp_path):
    """It exited 0 with an empty summary and a figure of no bars; then it wrote those rows over
    ``--out`` (the committed results by default) and the empty figure over ``--plot``."""
    import subprocess

    crashed = subprocess.CompletedProcess([], 1, stdout="", stderr="Traceback\nboom")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: crashed)
    with pytest.raises(SystemExit) as stop:
        cli("fig_peers", *shlex.split(PEERS_CRASH))
    assert stop.value.code == (
        "fig_peers: failed: no system ran (drlhet: exit 1: boom); rows in p.failed.json"
    )
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "p.png").exists()
    rows = json.loads((tmp_path / "p.failed.json").read_text())
    assert rows["summary"] == {} and rows["runs"][0]["failed"] == "exit 1: boom"
