"""Each experiment's bad input, case by case (`BAD_INPUT`): refused as experiments/checked_cli.py
refuses it, one line and exit status 2, before anything is trained, measured or written; and a
soak whose backend failed keeps its rows and says so."""

import json
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
ROWS_OF_PRIMITIVES = REPO / "results" / "fig_primitives.json"  # read, never written
BAD_INPUT = [
    # 7: a folder where a file goes, and empty paths
    ("kernel_times", "--csv-files kernels.csv --out folder", "--out folder: a folder, not a file"),
    ("kernel_times", "--csv-files kernels.csv --out ''", "--out is empty"),
    ("fig_mapping", f"--validation {VALIDATION} --out m.json --plot folder", "--plot folder: a "),
    # options a run would ignore: a validation's without --measure, a measurement's with
    # --replot, --validation with --measure
    ("fig_mapping", "--delay 8 --out m.json --plot m.png", "--delay does nothing without --me"),
    ("fig_mapping", "--measure --validation v.json --out m.json", "--validation does nothing w"),
    (
        "fig_primitives",
        f"--replot {ROWS_OF_PRIMITIVES} --full --out p.json",
        "--full does nothing with --replot",
    ),
    # the JSON, then the plot over it
    ("fig_mapping", f"--validation {VALIDATION} --out m.png --plot m.png", "m.png is also --"),
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
    # a backend that runs on the CPU as a simulation: its times were drawn labelled measured
    (
        "fig_primitives",
        f"{PRIMITIVES_TINY} --backends cuda",
        "--backends cuda: on the CPU it runs as a simulation of its hardware (function, not speed)",
    ),
    # 14: inputs missing or not what the script reads, a name checked up front, counts
    ("fig_mapping", "--validation nope.json --out m.json --plot m.png", "nope.json: no such"),
    ("report_dse", "rows.json", "rows.json: not validate_dse.py's JSON (the file is a list, not"),
    ("report_dse", "text.json", "text.json: not JSON (Expecting value"),
    ("rescore_dse", "object.json", "object.json: not validate_dse.py's JSON with its rounds"),
    ("report_replay", "object.json", "object.json: not bench_replay.py's JSON rows (the file"),
    ("report_replay", "numbers.json", "(item 0 is a number, not an object)"),
    ("bench_train", "--env Bogus-v0 --out t.json", "--env: unknown environment 'Bogus-v0'"),
    ("probe_regimes", "--processes 0 --out r.json", "--processes must be >= 1, got 0"),
    ("bench_board_callback", "--commands 0 --out b.json", "--commands must be >= 1, got 0"),
    ("bench_board_callback", "--branching 3 --out b.json", "the FPGA replay module supports K"),
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
    # the module is built for K 4 to 64 and at most 2^30 leaves: they were modeled all the same
    ("fpga_cycles", "--branchings 16 2 --out c.json", "--branchings 2 --capacity 1048576: the F"),
    ("fpga_cycles", "--capacity 4294967296 --out c.json", "holds <= 1073741824 leaves, got 42"),
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
    ("bench_eval", "--agents bogus --out e.json", "--agents takes one or more of untrained, tr"),
    ("bench_eval", "--episodes 100001 --out e.json", "--episodes must be at most 100,000, got 1"),
    ("bench_eval", "--episodes 0 --out e.json", "--episodes must be integers >= 1, got [0]"),
    ("bench_eval", "--envs bogus --out e.json", "--envs bogus: unknown environment 'bogus'"),
    ("bench_eval", "--train-steps 10 --out e.json", "--train-steps 10: n_step (3) must be <= s"),
    ("bench_eval", "--train-steps 5000 --out e.json", "--train-steps 5000: steps (5000) must"),
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
