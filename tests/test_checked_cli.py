"""experiments/checked_cli.py: every experiment's bad counts, outputs and inputs, and drlhet's
configuration errors end the script with one line and exit status 2, before anything is
measured or written."""

import ast
import dataclasses
import importlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = [
    "bench_mapping",
    "bench_ray",
    "bench_replay",
    "bench_train",
    "fig_branching",
    "fig_delay",
    "fig_learning",
    "fig_mapping",
    "fig_mapping_parity",
    "fig_peers",
    "fig_primitives",
    "validate_dse",
]


@pytest.fixture
def checked(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("checked_cli")


@dataclasses.dataclass
class Args:
    repeats: int = 3
    batches: tuple[int, ...] = (32, 64)
    steps: int | None = None


@pytest.mark.parametrize(
    "change, message",
    [
        ({}, ""),
        ({"steps": 5}, ""),
        ({"repeats": 0}, "--repeats must be >= 1, got 0"),
        ({"batches": (32, 0, -1)}, "--batches must be integers >= 1, got [0, -1]"),
        ({"batches": ()}, "--batches must be integers >= 1, got none"),
        ({"steps": 0}, "--steps must be >= 1, got 0"),
    ],
)
def test_counts_below_their_least_are_named(checked, change, message):
    least = {"repeats": 1, "batches": 1, "steps": 1}
    assert checked.refused_counts(Args(**change), least) == message


def test_every_experiment_with_options_reads_its_command_line_through_it():
    """Those with counts (`SCRIPTS`) and the GPU-side tools alike; with_cuda_paths.py, a
    wrapper that hands the rest of its line to another command, reads its own through
    `drlhet.parse_errors.parse_or_refuse` as `checked_cli.run` does."""
    with_args = [
        p.stem
        for p in (REPO / "experiments").glob("*.py")
        if "class Args" in p.read_text() and 'if __name__ == "__main__":' in p.read_text()
    ]
    assert set(SCRIPTS) <= set(with_args) and len(with_args) > len(SCRIPTS)
    for name in with_args:
        text = (REPO / "experiments" / f"{name}.py").read_text()
        if name == "with_cuda_paths":
            assert "parse_or_refuse(" in text
            continue
        assert "checked_cli.run(" in text, name
        assert "tyro.cli(" not in text, name


@pytest.mark.parametrize(
    "script, args, line",
    [
        ("fig_delay", ["--seeds", "0"], "fig_delay: error: --seeds must be >= 1, got 0"),
        # drlhet's own configuration check, raised inside main before anything runs
        ("bench_train", ["--buffer-size", "10"], "bench_train: error: warmup (5) must be >= "),
        # what tyro itself refuses, read back from its box
        ("fig_delay", ["--seeds", "abc"], "fig_delay: error: --seeds: invalid literal for int()"),
        ("bench_replay", ["--bogus"], "bench_replay: error: Unrecognized options: --bogus"),
        ("pick_cuda_paths", [], "pick_cuda_paths: error: missing required option: --rows"),
    ],
)
def test_a_refused_script_prints_one_line_and_exits_2(tmp_path, script, args, line):
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "experiments" / f"{script}.py"), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "script",
    sorted(
        p.stem
        for p in (REPO / "experiments").glob("*.py")
        if 'if __name__ == "__main__":' in p.read_text()
    ),
)
def test_every_experiment_answers_help(script):
    """An import that no longer resolves, or options tyro cannot read, shows here rather than
    on the day someone runs the script (about 0.3 s each)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "experiments" / f"{script}.py"), "--help"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower(), done.stdout[-500:]


@pytest.mark.parametrize(
    "script, args",
    [
        ("report_dse", ["/nonexistent.json"]),
        ("report_replay", ["/nonexistent.json"]),
        ("rescore_dse", ["/nonexistent.json"]),
    ],
)
def test_the_report_scripts_name_a_missing_file(script, args):
    done = subprocess.run(
        [sys.executable, str(REPO / "experiments" / f"{script}.py"), *args],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"{script}: error: {args[0]}: no such file"]


def test_the_replay_report_reads_every_committed_row_file(monkeypatch, capsys):
    """Every bench_replay row file under results/ is read (the first GPU rows, of 2026-11-26,
    name no machine or threading: refused until 2026-11-30)."""
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    report = importlib.import_module("report_replay")
    files = sorted((REPO / "results").glob("bench_replay*.json"))
    assert len(files) >= 40
    for path in files:
        assert report.refused(report.Args(path)) == "", path.name
        report.main(str(path))
        assert capsys.readouterr().out.startswith("Machine: "), path.name


@dataclasses.dataclass
class Outputs:
    out: Path
    plot: Path
    repeats: int = 1


def test_outputs_that_cannot_be_written_are_named_and_nothing_is_made(checked, tmp_path):
    (tmp_path / "file").write_text("")
    good = Outputs(tmp_path / "new" / "rows.json", tmp_path / "fig.png")
    assert checked.unwritable_outputs(good) == ""
    folder = Outputs(tmp_path, tmp_path / "fig.png")  # a folder of files, where a script says so
    assert checked.unwritable_outputs(folder, folders=("out",)) == ""
    bad = Outputs(tmp_path / "rows.json", tmp_path / "file" / "fig.png")
    assert checked.unwritable_outputs(bad) == (
        f"--plot {bad.plot}: no file can be made in {tmp_path / 'file'} (Not a directory)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_an_output_of_the_wrong_kind_is_refused(checked, tmp_path):
    """A folder where a file goes (matplotlib would write ``<folder>.png``, json an
    IsADirectoryError after the run), a file where a folder goes, a plot without an image
    suffix, and an empty path (which a path reads as ``.``, the current folder)."""
    (tmp_path / "file").write_text("")
    assert checked.unwritable_outputs(Outputs(tmp_path, tmp_path / "f.png")) == (
        f"--out {tmp_path}: a folder, not a file; name the file to write"
    )
    assert checked.unwritable_outputs(Outputs(tmp_path / "o.json", tmp_path)).startswith(
        f"--plot {tmp_path}: a folder, not a file"
    )
    assert checked.unwritable_outputs(Outputs(Path(""), tmp_path / "f.png")).startswith(
        "--out .: a folder, not a file"
    )
    no_image = Outputs(tmp_path / "o.json", tmp_path / "fig")
    assert checked.unwritable_outputs(no_image).startswith(
        f"--plot {tmp_path / 'fig'}: no suffix, not an image type matplotlib writes ("
    )
    file = Outputs(tmp_path / "file", tmp_path / "f.png")
    assert checked.unwritable_outputs(file, folders=("out",)) == (
        f"--out {tmp_path / 'file'}: a file, not a folder; name the folder to write into"
    )
    trace = type("A", (), {"trace_dir": tmp_path / "file"})()  # always a folder
    assert checked.unwritable_outputs(trace).startswith("--trace-dir")
    assert checked.empty_outputs(["--out", "", "--seeds", "1"], ["out"]) == (
        "--out is empty; name the path to write"
    )
    assert checked.empty_outputs(["--plot="], ["plot"]).startswith("--plot is empty")
    assert checked.empty_outputs(["--out", "o.json", "--name", ""], ["out"]) == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_checking_an_output_imports_no_jax():
    """bench_replay.py sets its threading before jax is imported: the checks run before it."""
    code = (
        "import sys; sys.path.insert(0, 'experiments'); import checked_cli, pathlib; "
        "checked_cli.unwritable_outputs(type('A', (), {'out': pathlib.Path('x.json')})()); "
        "import drlhet.parse_errors; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'jax'); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_script_told_to_write_where_it_cannot_exits_before_it_runs(tmp_path):
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "rows.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "experiments" / "fig_learning.py"), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"fig_learning: error: --out {out}: no file can be made in {tmp_path / 'file'} "
        "(Not a directory)"
    ]


def _inputs(tmp: Path) -> dict[str, Path]:
    """What the refusals below are given: an existing folder and file, JSON of the wrong
    shape, a file that is not JSON, inputs the scripts read (bench_replay rows, an ncu log),
    and one run of fig_delay's --from-runs (dqn at k = 0)."""
    (tmp / "folder").mkdir()
    (tmp / "file").write_text("")
    (tmp / "object.json").write_text("{}")
    (tmp / "numbers.json").write_text("[1, 2]")
    (tmp / "rows.json").write_text(json.dumps([{"kind": "mapping"}]))  # fig_mapping's, say
    (tmp / "text.json").write_text("not json")
    step = {"impl": "drlhet-cuda", "op": "step", "mode": "fused", "capacity": 1 << 20}
    step |= {"batch": 256, "branching": 16, "items_per_s": 1e6, "cuda_block_max_batch": 0}
    step |= {"cuda_narrow_max_nodes": 4096, "cuda_cluster_max_batch": 0}
    (tmp / "steps.json").write_text(json.dumps([step]))  # a cuda step pick_cuda_paths reads
    (tmp / "kernels.csv").write_text(  # an ncu --csv log of one launch
        '"Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
        '"k","gpu__time_duration.sum","usecond","1.5"\n'
    )
    run = tmp / "runs" / "dqn-k0" / "metrics.jsonl"
    run.parent.mkdir(parents=True)
    run.write_text(json.dumps({"env_steps": 1, "eval_return": [1.0], "wall_s": 1.0}) + "\n")
    return {p.name: p for p in tmp.iterdir()}


# Each small enough that where a check is missing (the code before these fixes) the work done
# before the failure is short: the tests were run against that code once, and each failed.
PARITY = "--steps 6000 --seeds 1 --out mp"  # one chunk each (the old code: ~30 s, then failed)
REPLAY_TINY = (
    "--capacities 64 --batches 8 --branchings 4 --repeats 1 --ops sample --modes fused "
    "--backends jax --no-thread-scaling --no-limits --no-peers --out b.json"
)
PRIMITIVES_TINY = (
    "--batches 8 --capacities 64 --at-capacity 64 --at-batch 8 --backends jax --modes fused "
    "--out f.json --plot f.png"
)
PEERS_TINY = "--steps 1 --timeout-s 1 --out p.json --plot p.png"  # a launch ends in a second
SOAK_TINY = "--backends jax --capacity 64 --batch 8 --inserts 4 --updates 8 --block 1 --out s.json"
BRANCHING_TINY = (
    "--branchings 4 --capacity 64 --batch 8 --repeats 2 --backends jax --modes fused --sheets "
    "--out b.json --plot b.png"
)
VALIDATION = REPO / "results" / "dse_validation_in_program_k4.json"  # read, never written
BAD_INPUT = [
    # 7: a folder where a file goes, and empty paths
    ("kernel_times", "--csv-files kernels.csv --out folder", "--out folder: a folder, not a file"),
    ("kernel_times", "--csv-files kernels.csv --out ''", "--out is empty"),
    ("fig_mapping", f"--validation {VALIDATION} --out m.json --plot folder", "--plot folder: a "),
    ("fig_delay", "--from-runs runs --tasks dqn --delays 0 --out fd --plot ''", "--plot is empty"),
    # 8: outputs that were never checked
    ("bench_replay", f"--trace-dir file {REPLAY_TINY}", "--trace-dir file: a file, not a folder"),
    (
        "pick_cuda_paths",
        "--rows steps.json --out p.json --env-out file/x.env",
        "--env-out file/x.env: no file can be made in file (Not a directory)",
    ),
    (
        "fig_delay",
        "--from-runs runs --tasks dqn --delays 0 --out fd --plot nodir/x.png",
        "--plot 'nodir/x.png': a file name (written under --out), not a path",
    ),
    # 9: fig_learning
    ("fig_learning", "--tasks bogus --out fl", "--tasks takes one or more of dqn, ddpg; got 'bog"),
    ("fig_learning", "--tasks --out fl", "--tasks takes one or more of dqn, ddpg; got none"),
    ("fig_learning", "--out file", "--out file: a file, not a folder"),
    ("fig_learning", "--backend bogus --out fl", "backend 'bogus' is not registered"),
    # 10: fig_delay
    ("fig_delay", "--tasks bogus --out fd", "--tasks takes one or more of dqn, ddpg, td3-hopper"),
    ("fig_delay", "--tasks bogus --from-runs runs --out fd", "--tasks takes one or more of dqn"),
    (
        "fig_delay",
        "--tasks dqn --delays 0 4 --from-runs runs --out fd",
        "runs/dqn-k4/metrics.jsonl: no such file",
    ),
    # 11: fig_mapping_parity: both mappings and the folder before the first mapping trains
    (
        "fig_mapping_parity",
        f"--fused bogus {PARITY}",
        "--fused bogus: mapping item 'bogus' is not key=backend@device",
    ),
    (
        "fig_mapping_parity",
        f"--split actors=cpu:0,replay=jax@cpu:7,learner=cpu:1 {PARITY}",
        "device 'cpu:7' is not present",
    ),
    ("fig_mapping_parity", f"{PARITY} --out file", "--out file: a file, not a folder"),
    # 12: fig_peers
    (
        "fig_peers",
        f"--eval-every 3 {PEERS_TINY}",
        "--eval-every 3 must be a positive multiple of the 4 envs stepped together",
    ),
    ("fig_peers", f"--systems drlhet bogus {PEERS_TINY}", "--systems takes one or more of"),
    ("fig_peers", f"--algo bogus --systems drlhet {PEERS_TINY}", "invalid choice 'bogus' for"),
    # 13: fig_primitives
    ("fig_primitives", f"--repeats 1 {PRIMITIVES_TINY}", "--repeats must be >= 2, got 1"),
    ("fig_primitives", f"--sheets bogus {PRIMITIVES_TINY}", "--sheets takes one or more of"),
    ("fig_primitives", f"--replot nope.json {PRIMITIVES_TINY}", "nope.json: no such file"),
    # 14: inputs missing or not what the script reads, a name checked up front, counts
    ("fig_mapping", "--validation nope.json --out m.json --plot m.png", "nope.json: no such"),
    ("report_dse", "rows.json", "rows.json: not validate_dse.py's JSON (the file is a list, not"),
    ("report_dse", "text.json", "text.json: not JSON (Expecting value"),
    ("rescore_dse", "object.json", "object.json: not validate_dse.py's JSON with its rounds"),
    ("report_replay", "object.json", "object.json: not bench_replay.py's JSON rows (the file"),
    ("report_replay", "numbers.json", "(item 0 is a number, not an object)"),
    ("bench_train", "--env Bogus-v0 --out t.json", "--env: unknown environment 'Bogus-v0'"),
    ("probe_regimes", "--processes 0 --out r.json", "--processes must be >= 1, got 0"),
    (
        "probe_regimes",
        "--batch 0 --capacities 64 --settings default --processes 1 --out r.json",
        "--batch must be >= 1, got 0",
    ),
    ("kernel_times", "--csv-files --out k.json", "--csv-files: no file given"),
    ("kernel_stalls", "--csv-files --out k.json", "--csv-files: no file given"),
    # 15: the scripts that checked no count (a child's traceback and exit 0, a file of nonsense,
    # K 1 looping for ever), names that were tracebacks or exit 1, a count the first chunk eats
    # (each first option refused before the one the old code tripped on)
    ("soak_replay", f"{SOAK_TINY} --updates 0", "--updates must be >= 1, got 0"),
    ("soak_replay", f"{SOAK_TINY} --backends bogus", "--backends takes one or more of cuda,"),
    (
        "soak_replay",
        f"{SOAK_TINY} --backends fpga --branching 3",
        "--backends fpga: the FPGA replay module supports K in (4, 8, 16, 32, 64), got 3",
    ),
    ("fpga_cycles", "--capacity 0 --out c.json", "--capacity must be >= 1, got 0"),
    ("fpga_cycles", "--branchings 1 --board bogus --out c.json", "--branchings must be integ"),
    ("fpga_cycles", "--board h100 --out c.json", "--board takes one or more of u200, u250;"),
    ("fpga_learner", "--board bogus --out l.json", "--board takes one or more of u200, u250;"),
    ("fpga_learner", "--batches 16 512 --out l.json", "--batches must be at most 256 (the lea"),
    ("profile_gpu", "--shapes bogus --out g.json", "--shapes takes one or more of default, large"),
    ("profile_host_loop", "--mapping bogus --out h.json", "--mapping bogus: mapping item 'bog"),
    ("profile_host_loop", "--chunks 1 --mapping bogus --out h.json", "--chunks must be >= 2"),
    ("bench_mapping", "--configs bogus --out m.json", "--configs takes one or more of jax-b256,"),
    ("bench_mapping", "--chunks 1 --configs bogus --out m.json", "--chunks must be >= 2, got 1"),
    ("fig_branching", f"{BRANCHING_TINY} --modes bogus", "invalid choice 'bogus' for argument"),
    ("fig_branching", f"{BRANCHING_TINY} --repeats 1", "--repeats must be >= 2, got 1"),
    ("fig_branching", f"{BRANCHING_TINY} --sheets bogus", "--sheets takes one or more of"),
    ("fig_primitives", f"{PRIMITIVES_TINY} --modes bogus", "invalid choice 'bogus' for argument"),
    ("fig_peers", f"--target nan {PEERS_TINY}", "--target must be a number, got nan"),
    ("fig_mapping_parity", f"--target nan {PARITY}", "--target must be a number, got nan"),
]


@pytest.mark.parametrize(
    "script, args, message", BAD_INPUT, ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(BAD_INPUT)]
)
def test_bad_input_is_refused_before_anything_is_made(cli, capsys, tmp_path, script, args, message):
    """Each refused as the ``refused`` fixture expects (one line, ``<script>: error: ...``,
    exit status 2) at argument checking: nothing trained, measured, printed or written first
    (the folder holds only what the test put there)."""
    before = _inputs(tmp_path)
    with pytest.raises(SystemExit) as stop:
        cli(script, *shlex.split(args))
    out, err = capsys.readouterr()
    assert stop.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"{script}: error: ") and message in err, err
    assert out == ""
    assert {p.name: p for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("script", ["kernel_times", "kernel_stalls", "kernel_source"])
def test_the_ncu_scripts_usage_names_the_option_of_their_files(script):
    """tyro takes the logs only after ``--csv-files``: a bare file is an unknown argument."""
    text = ast.get_docstring(ast.parse((REPO / "experiments" / f"{script}.py").read_text()))
    assert text is not None
    usage = [ln for ln in text.split("Usage:")[1].splitlines() if "python experiments/" in ln]
    assert usage and all(f"{script}.py --csv-files " in ln for ln in usage), usage


def test_a_soak_whose_backend_failed_keeps_its_rows_and_says_so(cli, monkeypatch, tmp_path):
    # a child that crashed was a row marked failed, and the soak exited 0
    crashed = subprocess.CompletedProcess([], 3, stdout="")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: crashed)
    with pytest.raises(SystemExit) as stop:
        cli("soak_replay", *shlex.split(SOAK_TINY))
    assert stop.value.code == "soak_replay: failed: jax (exit 3)"
    rows = json.loads((tmp_path / "s.json").read_text())
    assert [{k: v for k, v in r.items() if k != "run"} for r in rows] == [
        {"backend": "jax", "failed": 3, "measured": True}
    ]
    assert rows[0]["run"]["versions"]["jax"]  # the run's (experiments/_common.py)
