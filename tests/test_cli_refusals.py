"""Bad input to the command line (a bad option, a value tyro cannot parse, an output that cannot
be made, a run that cannot fit): one line, exit status 2, nothing written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cli_args import TINY, one_error_line

from drlhet.cli import main


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["--mapping", "actors=cpu:0,replay=bogus@cpu:1,learner=cpu:1"], "no backend 'bogus'"),
        (["--mapping", "actors=cpu:0,replay=python@cpu:0,learner=cpu:0"], "modeled only"),
        (["--backend", "nope"], "--backend 'nope' is not registered"),
        (["--backend", "python"], "--backend 'python' is modeled only: the DSE costs it"),
        (["--buffer-size", "3000000000"], "--buffer-size must be <= 2147483647"),
        (["--buffer-size", str(2**31 - 1)], "needs 2290649248 tree nodes, more than int32"),
        (["--backend", "fpga", "--branching", "2"], "--branching 2: the FPGA replay module"),
        (["--backend", "cuda", "--branching", "300"], "--branching 300: the cuda backend supports"),
        # what a backend accepts is checked for the backend a mapping names too
        (
            ["--mapping", "actors=cpu:0,replay=fpga@cpu:0,learner=cpu:0", "--branching", "2"],
            "--backend 'fpga' cannot hold --buffer-size 50000 at --branching 2",
        ),
        (["--steps", "2000"], "--steps (2000) must be >= --warmup + --eval-every (1000 + 5000)"),
        (
            ["--batch-size", "512", "--buffer-size", "100"],
            "--batch-size (512) must be <= --buffer-size (100)",
        ),
        (
            ["--mapping", "actors=cpu:0,replay=cpu:x,learner=cpu:0"],
            "--mapping: device 'cpu:x': the index after ':' must be a number",
        ),
        (
            ["--mapping", "actors=cpu:0,replay=jax@cpu:0,learner=cpu:0", "--backend", "native"],
            "--backend native disagrees with the mapping's replay=jax@cpu:0",
        ),
        (
            ["--mapping", "actors=cpu:0,replay=cpu:1,learner=cpu:1", "--cpu-devices", "1"],
            "--mapping names cpu:1 but --cpu-devices is 1",
        ),
        (["--env", "Pendulum-v1", "--steps", "6000"], "DQN needs discrete actions"),
        (["--env", "Bogus-v0"], "--env: unknown environment 'Bogus-v0'; gymnax offers"),
        (["--dqn.priority-eps", "0"], "--dqn.priority-eps must be finite and > 0, got 0.0"),
        (["--dqn.learning-rate", "nan"], "--dqn.learning-rate must be finite and > 0, got nan"),
        (["--ddpg.tau", "2"], "--ddpg.tau must be in (0, 1], got 2.0"),
        (["--dqn.hidden", "64", "0"], "--dqn.hidden must be layer widths >= 1, got (64, 0)"),
        (["--seed", str(2**32)], "--seed must be in [0, 4294967295]"),
        # was "--mapping names cpu:0 but --cpu-devices is 0", an option not given
        (["--cpu-devices", "0"], "--cpu-devices must be in [1, 1024], got 0"),
        (["--cpu-devices", "100000"], "--cpu-devices must be in [1, 1024], got 100000"),  # hung
        # was "failed: OSError: File name too long" (exit 1), the --out folder left behind
        (["--name", "a" * 256], "--name must be at most 255 bytes, got 256"),
        (["--stop-at-return", "nan"], "--stop-at-return must be a number (inf: never stop"),
        (["--checkpoint-every", "-5"], "--checkpoint-every must be >= 0 chunks, got -5"),
        (["--keep-checkpoints", "0"], "--keep-checkpoints must be >= 1 (0 only with"),
        (
            ["--keep-checkpoints", "-1", "--checkpoint-every", "0"],
            "--keep-checkpoints must be >= 1 (0 only with --checkpoint-every 0), got -1",
        ),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *args, "--out", str(tmp_path / "runs"), "--no-progress"])
    assert exit_info.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith("drlhet: error: ") and message in line
    assert not (tmp_path / "runs").exists()


def test_keep_checkpoints_0_is_taken_where_no_checkpoint_is_written(tmp_path):
    from drlhet.cli.checkpoints import saving_for
    from drlhet.runtime.config import TrainConfig

    assert saving_for(tmp_path / "run", TrainConfig(), "", every=0, keep=0, before=[]) is None
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="got 0"):
        saving_for(tmp_path / "run", TrainConfig(), "", every=1, keep=0, before=[])


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "missing subcommand: Expected one of {train, backends, eval, profile, dse}."),
        (["nope"], "Unrecognized options: nope"),
        (["train", "--bogus", "1"], "Unrecognized options: --bogus, 1"),
        (["train", "--batch-size", "abc"], "--batch-size: 'abc' is not an integer"),
        (
            ["train", "--steps", "1.5e2", "--batch-size", "2.5"],
            "--batch-size: '2.5' is not a whole",
        ),
        (["train", "--steps", "1e31"], "--steps: '1e31' has more than 30 digits"),
        # an optional option: its type's error alone (tyro listed None's "does not match" too)
        (["eval", "r", "--chunk", "2.5"], "--chunk: '2.5' is not a whole number (or None)"),
        (["train", "--algo", "foo"], "invalid choice 'foo' for argument '--algo'"),
        (["dse", "--devices"], "Missing value for argument '--devices'"),
    ],
)
def test_what_tyro_cannot_parse_is_one_line_too(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--out", str(tmp_path / "runs")] if args[:1] == ["train"] else args)
    assert exit_info.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith("drlhet: error: ") and message in line, line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "text",
    [  # tyro draws a box on some streams and plain rules on others
        "╭─ Value error ──────────────╮\n│ Error parsing --batch-size: │\n│ bad 'abc'  │\n"
        "│ ─────────── │\n│ Argument helptext: │\n╰────────────╯\n",
        "Value error\n-----------\nError parsing --batch-size:\nbad 'abc'\n-----------\nhelp\n",
    ],
)
def test_a_tyro_error_is_read_back_as_its_message(text):
    from drlhet.parse_errors import parse_error

    assert parse_error(text) == "--batch-size: bad 'abc'"


def test_missing_required_options_are_named_by_their_flags():
    from drlhet.parse_errors import parse_error

    box = (
        "╭─ Required options ──────╮\n│ Missing from x.py:      │\n"
        "│     --rows [STR [STR ...]] │\n│         row files. (required) │\n"
        "│     --out STR           │\n│         where. (required) │\n│ ────────── │\n"
        "│ For full helptext, run: │\n╰─────────────────────────╯\n"
    )
    assert parse_error(box) == "missing required options: --rows, --out"
    one = box.replace("│     --out STR           │\n│         where. (required) │\n", "")
    assert parse_error(one) == "missing required option: --rows"


@pytest.mark.parametrize("name", ["../escaped", "a/b", "..", "."])
def test_a_name_that_is_not_one_folder_is_refused(tmp_path, capsys, name):
    out = tmp_path / "deep" / "runs"
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--out", str(out), "--name", name, "--no-progress"])
    assert exit_info.value.code == 2
    assert f"--name must be one folder's name (no '/', not '..'), got {name!r}" in one_error_line(
        capsys
    )
    assert list(tmp_path.iterdir()) == []  # nothing made, inside or outside --out


def test_an_out_where_no_folder_can_be_made_is_refused_and_nothing_is_made(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    for out, where, why in [
        (tmp_path / "file", tmp_path / "file", "Not a directory"),
        (tmp_path / "file" / "sub", tmp_path / "file", "Not a directory"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["train", "--out", str(out), "--no-progress"])
        assert exit_info.value.code == 2
        line = one_error_line(capsys)
        assert (
            line == f"drlhet: error: --out {out}: no run directory can be made in {where} ({why})"
        )
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "taken").write_text("")
    with pytest.raises(SystemExit):
        main(["train", "--out", str(tmp_path / "runs"), "--name", "taken", "--no-progress"])
    assert "taken exists and is not a folder" in one_error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "runs"]
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["taken"]


@pytest.mark.parametrize("out", [["--out", ""], ["--out="]])
def test_an_empty_out_is_refused_not_read_as_the_current_folder(tmp_path, capsys, monkeypatch, out):
    """``--out "$RUNS"`` with the variable unset: the run went into the current folder."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *TINY, *out])
    assert exit_info.value.code == 2
    assert one_error_line(capsys) == "drlhet: error: --out is empty; name the path"
    assert list(tmp_path.iterdir()) == []


def test_a_mapping_beyond_the_cores_is_refused_not_given_devices(tmp_path, capsys, monkeypatch):
    """``cpu:7`` on a 2-core machine used to create 8 XLA CPU devices without a word."""
    monkeypatch.setattr("drlhet.cli.train.os.cpu_count", lambda: 2)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--mapping", "actors=cpu:0,replay=cpu:7,learner=cpu:0"])
    assert exit_info.value.code == 2
    assert "more CPU devices than this machine has cores (2); pass --cpu-devices 8" in (
        one_error_line(capsys)
    )


def test_a_run_that_does_not_fit_in_memory_is_refused_with_the_figure(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr("drlhet.cli.train.available_memory", lambda: (24 * 2**30, "MemAvailable"))
    args = ["--buffer-size", str(2**30), "--steps", "6000", "--dqn.hidden", "8"]
    with pytest.raises(SystemExit) as exit_info:  # checkpoints keep a second copy on the host
        main(["train", *args, "--out", str(tmp_path / "runs")])
    assert exit_info.value.code == 2
    assert "the run needs ~104.5 GiB" in one_error_line(capsys)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *args, "--out", str(tmp_path / "runs"), "--checkpoint-every", "0"])
    assert exit_info.value.code == 2
    line = one_error_line(capsys)
    # CartPole: obs and next obs 2 x 16 B, action, reward, discount, stamp 4 B each, and the
    # tree's 4 B per leaf x 16/15: 52.3 B per slot
    assert "--buffer-size 1073741824 x --seeds 1: the run needs ~52.3 GiB" in line
    assert "this machine has 24.0 GiB available (MemAvailable)" in line
    assert not (tmp_path / "runs").exists()
    # an evaluation's working set counts too: 10^9 environments (~100 B each) ran out of
    # memory mid-run (a run not refused fails here, not by running out of memory)
    monkeypatch.setattr("drlhet.cli.train.run", lambda *a, **k: pytest.fail("not refused"))
    args = ["--eval-envs", str(10**9), "--steps", "6000", "--dqn.hidden", "8"]
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *args, "--out", str(tmp_path / "runs"), "--checkpoint-every", "0"])
    assert exit_info.value.code == 2
    line = one_error_line(capsys)
    assert "--eval-envs 1000000000 x --seeds 1: the run needs ~" in line
    assert "lower --eval-envs or --seeds" in line and not (tmp_path / "runs").exists()
    # a long delay's queue of pending updates (k x B entries) is named as the largest part
    # (the message named the buffer, 2.5 MiB, and left the queue out of its parts)
    monkeypatch.setattr("drlhet.cli.train.available_memory", lambda: (2**30, "MemAvailable"))
    args = ["--steps", "2000000", "--delay", "900000", "--dqn.hidden", "8"]
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *args, "--out", str(tmp_path / "runs"), "--checkpoint-every", "0"])
    line = one_error_line(capsys)
    assert "--delay 900000 x --batch-size 128 x --seeds 1: the run needs ~1.3 GiB" in line
    assert "delayed updates and the rest 1.3 GiB" in line and "lower --delay or --seeds" in line


def test_errors_exit_with_their_status_in_a_fresh_process(tmp_path):
    """As a user sees it: exit 2 and one line for bad input, nothing else on stderr."""
    import subprocess
    import sys

    bad = [sys.executable, "-m", "drlhet", "train", "--steps", "2000", "--out", str(tmp_path)]
    done = subprocess.run(bad, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "drlhet: error: --steps (2000) must be >= --warmup + --eval-every (1000 + 5000): "
        "training is evaluated once per --eval-every after the warm-up"
    ]
    assert list(tmp_path.iterdir()) == []


def test_mapping_auto_profiles_only_once_its_options_are_known_good(tmp_path, capsys, monkeypatch):
    # the DSE's profiles take minutes: a bad --out or --name was refused only after them, and
    # --cpu-devices 0 was taken as not given (2 devices)
    monkeypatch.setattr("drlhet.cli.train.auto_mapping", lambda *a, **k: pytest.fail("profiled"))
    (tmp_path / "file").write_text("")
    bad = (["--out", str(tmp_path / "file")], ["--name", "a" * 300], ["--cpu-devices", "0"])
    for args in bad:
        with pytest.raises(SystemExit) as stop:
            main(["train", "--mapping", "auto", "--no-memory-check", *args])
        assert stop.value.code == 2
        assert one_error_line(capsys).startswith("drlhet: error: --")


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--uniform"],
            "--mapping auto: the DSE models prioritized replay only: with --uniform "
            "give the mapping (its replay on a bare device: replay=DEVICE)",
        ),
        (
            ["--learner", "fpga"],
            "--mapping auto: the DSE places no --learner fpga on this "
            "machine's devices (it runs here as a simulation",
        ),
    ],
)
def test_mapping_auto_refuses_what_it_cannot_search_before_profiling(
    tmp_path, capsys, monkeypatch, args, message
):
    # --learner fpga was profiled for a minute, then refused the pick it had ignored it for;
    # --uniform printed a prioritized replay's prediction and a replay backend uniform refuses
    monkeypatch.setattr("drlhet.cli.auto.build_model", lambda *a, **k: pytest.fail("profiled"))
    with pytest.raises(SystemExit) as stop:
        main(["train", "--mapping", "AUTO ", "--out", str(tmp_path), *args])  # any spelling
    assert stop.value.code == 2
    assert one_error_line(capsys).startswith(f"drlhet: error: {message}")
    assert list(tmp_path.iterdir()) == []


def test_a_closed_pipe_ends_the_command_quietly():
    # `drlhet dse | head`: "drlhet: failed: BrokenPipeError", exit 1
    code = (
        "import sys\nfrom drlhet.cli import main\n"
        "class Closed:\n"
        "    def write(self, text): raise BrokenPipeError(32, 'Broken pipe')\n"
        "    def flush(self): pass\n"
        "    def fileno(self): return 1\n"
        "sys.stdout = Closed()\nmain(['backends'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_compilation_cache_folder_that_cannot_be_made_is_named(tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("")  # DRLHET_CACHE under a file: was "failed: ...", exit 1
    monkeypatch.setenv("DRLHET_CACHE", str(tmp_path / "file" / "cache"))
    with pytest.raises(SystemExit) as stop:
        main(["train", *TINY, "--out", str(tmp_path / "runs")])
    assert stop.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith("drlhet: error: no compilation cache folder can be made at ")
    assert not (tmp_path / "runs").exists()
