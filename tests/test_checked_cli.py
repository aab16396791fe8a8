"""experiments/checked_cli.py: every experiment's bad counts, outputs and inputs, and drlhet's
configuration errors end the script with one line and exit status 2, before anything is
measured or written (each script's bad input, case by case: test_experiment_bad_input.py)."""

import ast
import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = [
    "bench_eval",
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
        ("fig_delay", ["--seeds", "abc"], "fig_delay: error: --seeds: 'abc' is not an integer"),
        (
            "fig_delay",
            ["--seeds", "1e0", "--steps", "2.5"],
            "fig_delay: error: --steps: '2.5' is not",
        ),
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


@pytest.mark.parametrize("script", ["kernel_times", "kernel_stalls", "kernel_source"])
def test_the_ncu_scripts_usage_names_the_option_of_their_files(script):
    """tyro takes the logs only after ``--csv-files``: a bare file is an unknown argument."""
    text = ast.get_docstring(ast.parse((REPO / "experiments" / f"{script}.py").read_text()))
    assert text is not None
    usage = [ln for ln in text.split("Usage:")[1].splitlines() if "python experiments/" in ln]
    assert usage and all(f"{script}.py --csv-files " in ln for ln in usage), usage
