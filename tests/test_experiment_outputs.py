"""What the experiments write and draw says what it is: every JSON row names its run (when, the
command, the commit, the machine, the versions: experiments/_common.py); a backend name that is
not registered, or a run that measures nothing, is refused before a results file is replaced;
GPU rows are drawn under their GPU's model and date; a figure's empty panel says why; a delay
figure drawn from saved runs is of one experiment's runs and labelled with their configuration.
"""

import dataclasses
import importlib
import json
import os
import shlex
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REPLAY_TINY = (
    "--capacities 64 --batches 8 --branchings 16 --repeats 1 --ops sample --modes fused "
    "--no-thread-scaling --no-limits --no-peers --out b.json"
)
PRIMITIVES_TINY = (
    "--batches 8 --capacities 64 --at-capacity 64 --at-batch 8 --repeats 2 --modes fused "
    "--out f.json --plot f.png"
)


@pytest.fixture(autouse=True)
def fresh_run(monkeypatch):
    """`_common.run_info` is one object per process: each test's script is a run of its own."""
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    common = importlib.import_module("_common")
    common._run.cache_clear()
    yield
    common._run.cache_clear()


@pytest.fixture
def experiment(monkeypatch):
    """Imports an experiments script by name (they import their siblings by name too)."""
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module


def refused(cli, capsys, script: str, args: str) -> str:
    """The one line ``script`` refuses ``args`` with (exit status 2, nothing on stdout)."""
    with pytest.raises(SystemExit) as stop:
        cli(script, *shlex.split(args))
    out, err = capsys.readouterr()
    assert stop.value.code == 2, (stop.value.code, err[-2000:])
    assert err.count("\n") == 1 and err.startswith(f"{script}: error: "), err
    assert out == ""
    return err.strip()


def check_run(run: dict, command: str) -> None:
    """``run`` is `_common.run_info`'s: this process's versions, machine and command."""
    import jax
    import numpy as np

    assert run["versions"]["jax"] == jax.__version__
    assert run["versions"]["numpy"] == np.__version__
    assert run["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert run["machine"]["cores"] == os.cpu_count() and run["machine"]["cpu"]
    assert run["command"].startswith(f"experiments/{command}")
    assert run["started_utc"].endswith("Z") and "commit" in run


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


def test_a_gpu_rows_file_that_is_not_json_is_refused(cli, capsys, tmp_path):
    (tmp_path / "g.json").write_text("not json")
    line = refused(cli, capsys, "fig_primitives", f"{PRIMITIVES_TINY} --gpu-results g.json")
    assert line.startswith("fig_primitives: error: --gpu-results g.json: not JSON (")


def gpu_row(impl: str, op: str) -> dict:
    """A fused row of bench_replay --device gpu as it writes them now (``device`` the JAX
    device, the model in ``device_kind`` and ``speed_of``, the date in its run)."""
    return {
        "impl": impl, "op": op, "mode": "fused", "capacity": 2**20, "branching": 16,
        "batch": 4096, "items_per_s": 1e8, "items_per_s_min": 9e7, "items_per_s_max": 1.1e8,
        "device": "cuda:0", "device_kind": "NVIDIA H200", "speed_of": "this GPU (NVIDIA H200)",
        "run": {"started_utc": "2026-11-29T10:00:00Z"},
    }  # fmt: skip


def test_gpu_rows_are_drawn_under_their_gpu_and_date(experiment, tmp_path, monkeypatch):
    """They were ``cuda on cuda:0, measured (GPU, date not recorded)`` under a title saying
    an H100, whatever GPU they came from."""
    fp = experiment("fig_primitives")
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps([gpu_row(i, op) for i in ("drlhet-cuda", "drlhet-jax")
                                for op in ("sample", "update")]))  # fmt: skip
    got, notes = fp.gpu_measured((path,), 2**20, 16, ("sample", "update"))
    assert notes == [] and len(got) == 4
    assert {r["device"] for r in got} == {"NVIDIA H200"}
    assert {r["label"] for r in got} == {"measured (GPU, 2026-11-29)"}
    assert {fp.series_name(r) for r in got} == {
        "cuda on NVIDIA H200, measured",
        "jax on NVIDIA H200, measured",
    }
    titles = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: titles.append(fig._suptitle))
    rows = [{**r, "sweep": "batch"} for r in got]
    fp.plot(fp.Args(), rows, tmp_path / "p.png")
    text = titles[0].get_text()
    assert "GPU rows measured on NVIDIA H200 (2026-11-29)" in text and "H100" not in text


def test_an_empty_time_panel_says_whether_a_target_was_asked(experiment, tmp_path, monkeypatch):
    """With a target that no run reached, the panel said "not asked in this run"."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # fig_peers adds its peers folder
    peers = experiment("fig_peers")
    texts: list[list[str]] = []
    monkeypatch.setattr(
        Figure,
        "savefig",
        lambda fig, *a, **k: texts.append([t.get_text() for ax in fig.axes for t in ax.texts]),
    )
    summary = {"drlhet": {"trained_samples_per_s": 1e6, "time_to_return_s": None}}
    for target, says in ((475.0, "no run reached 475"), (None, "no target in this run")):
        spec = dataclasses.replace(peers.base_spec(peers.Args()), stop_at_return=target)
        peers._plot(summary, spec, tmp_path / "p.png")
        assert says in texts[-1], texts[-1]


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


def test_the_replay_report_says_where_each_row_was_measured(experiment, tmp_path, capsys):
    """A GPU run's tables set jax (on the GPU) beside native (on the host CPU) without saying
    so; rows of two runs in one file read as one."""
    report = experiment("report_replay")
    native = {**gpu_row("drlhet-native", "step"), "device": "cpu", "device_kind": "AMD EPYC",
              "speed_of": "this CPU"}  # fmt: skip
    jax_row = {**gpu_row("drlhet-jax", "step"), "run": {
        "started_utc": "2026-11-30T10:00:00Z", "commit": "abc", "versions": {"jax": "0.10.2"}
    }}  # fmt: skip
    native["run"] = {**jax_row["run"], "started_utc": "2026-11-29T10:00:00Z"}
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([jax_row, native]))
    report.main(str(path))
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith(
        "Measured on cuda:0 (NVIDIA H200): drlhet-jax; on cpu (AMD EPYC): drlhet-native. "
        "Rows of 2 runs, started 2026-11-30T10:00:00Z (commit abc, jax 0.10.2); "
    ), line


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


def test_peer_bars_start_a_decade_below_the_lowest(experiment, tmp_path, monkeypatch):
    """On the log axis's own limits 1.34M and 1.11M samples/s were drawn as bars of 10:1."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # fig_peers adds its peers folder
    peers = experiment("fig_peers")
    bottoms = []
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, *a, **k: bottoms.append(fig.axes[0].get_ylim()[0])
    )
    summary = {
        "drlhet": {"trained_samples_per_s": 1.34e6, "time_to_return_s": None},
        "flashbax": {"trained_samples_per_s": 1.11e6, "time_to_return_s": None},
    }
    peers._plot(summary, peers.base_spec(peers.Args()), tmp_path / "p.png")
    assert bottoms == [pytest.approx(1e5)]


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
    """It exited 0 with an empty summary and a figure of no bars."""
    import subprocess

    crashed = subprocess.CompletedProcess([], 1, stdout="", stderr="Traceback\nboom")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: crashed)
    with pytest.raises(SystemExit) as stop:
        cli("fig_peers", *shlex.split(PEERS_CRASH))
    assert stop.value.code == (
        "fig_peers: failed: no system ran (drlhet: exit 1: boom); rows in p.json"
    )
    rows = json.loads((tmp_path / "p.json").read_text())
    assert rows["summary"] == {} and rows["runs"][0]["failed"] == "exit 1: boom"


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
