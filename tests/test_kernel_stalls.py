"""experiments/kernel_stalls.py: the stall reasons of each kernel from ncu's raw CSV (ncu needs a
GPU; its raw page's layout, a row of units after the header, is written out here)."""

import importlib
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXED = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Block Size", "Grid Size"]
METRICS = [
    "gpu__time_duration.sum",
    "launch__registers_per_thread",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_membar_per_issue_active.ratio",
    "smsp__pcsamp_warps_issue_stalled_barrier",  # not a per-instruction ratio: not ranked
]


def line(cells) -> str:
    return ",".join(f'"{c}"' for c in cells)


def launch(i, kernel, usec, barrier, scoreboard, membar) -> str:
    fixed = [i, "7", "python3", "h", kernel, "(512, 1, 1)", "(8, 1, 1)"]
    return line(fixed + [f"{usec:,}", "40", barrier, scoreboard, membar, "9"])


@pytest.fixture
def stalls(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("kernel_stalls")


def test_each_kernel_s_stalls_are_averaged_and_ranked(stalls, tmp_path, capsys):
    log = tmp_path / "stalls_cuda.log"
    log.write_text(
        "==PROF== Connected to process 7\nmachine: x86_64\n"
        + "\n".join(
            [
                line(FIXED + METRICS),
                line(
                    [""] * len(FIXED) + ["nsecond", "register/thread", "inst", "inst", "inst", ""]
                ),
                launch(0, "drlhet_cuda_update_cluster", 16800, "3.0", "9.0", "1.0"),
                launch(1, "drlhet_cuda_sample_cluster_k16", 12400, "0.5", "6.0", "0"),
                launch(2, "drlhet_cuda_update_cluster", 16600, "5.0", "7.0", "n/a"),
            ]
        )
        + "\nwrote 1 rows\n"
    )
    out = tmp_path / "s.json"
    entries = stalls.main(stalls.Args(csv_files=(log,), out=out))
    assert json.loads(out.read_text()) == entries
    update, sample = entries  # the longest first
    assert update["kernel"] == "drlhet_cuda_update_cluster" and update["launches"] == 2
    assert update["metrics"]["gpu__time_duration.sum"] == 16700.0
    assert update["units"]["gpu__time_duration.sum"] == "nsecond"
    assert update["stalls"] == {"long_scoreboard": 8.0, "barrier": 4.0, "membar": 1.0}
    assert list(update["stalls"]) == ["long_scoreboard", "barrier", "membar"]
    assert sample["stalls"] == {"long_scoreboard": 6.0, "barrier": 0.5}  # a zero says nothing
    printed = capsys.readouterr().out
    assert (
        "drlhet_cuda_update_cluster (2 launches, 16700 nsecond): stalls per issued "
        "instruction: long_scoreboard 8.00, barrier 4.00, membar 1.00" in printed
    )


def test_a_log_without_a_raw_table_is_refused_by_name(stalls, tmp_path, refused):
    details = tmp_path / "details.log"  # ncu's default page: one row per metric
    details.write_text('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n')
    with refused("details.log: no raw table"):
        stalls.main(stalls.Args(csv_files=(details,), out=tmp_path / "o.json"))
    empty = tmp_path / "empty.log"
    empty.write_text(line(FIXED + METRICS) + "\n==PROF== No kernels were profiled.\n")
    with refused("no launch"):
        stalls.main(stalls.Args(csv_files=(empty,), out=tmp_path / "o.json"))
    with refused("no such file"):
        stalls.main(stalls.Args(csv_files=(tmp_path / "none.log",), out=tmp_path / "o.json"))


def test_a_log_that_is_not_text_is_refused_by_name(stalls, tmp_path, refused):
    log = tmp_path / "stalls_cuda.log"
    log.write_bytes(line(FIXED + METRICS).encode() + b"\n\xff\xfe\n")
    with refused(f"{log}: not a text file"):
        stalls.main(stalls.Args(csv_files=(log,), out=tmp_path / "o.json"))
    assert not (tmp_path / "o.json").exists()
