"""experiments/report_replay.py: bench_replay.py's rows whose values are of the wrong type are
refused in one line naming the file and the value, before a table is printed (not a traceback
halfway). That every committed row file is read: tests/test_checked_cli.py."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROW = {"impl": "drlhet-jax", "op": "step", "mode": "fused", "capacity": 2**20, "batch": 256,
       "branching": 16, "items_per_s": 1e6, "items_per_s_min": 9e5,
       "items_per_s_max": 1.1e6}  # fmt: skip
LIMIT = {"impl": "machine-limit", "dependent_ns": 90.0, "independent_per_s": 4e8,
         "sequential_gbs": 20.0}  # fmt: skip


@pytest.fixture
def report(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("report_replay")


def test_good_rows_are_read(report, tmp_path, capsys):
    assert report.wrong_shape([LIMIT, ROW, ROW | {"items_per_s_min": None}]) == ""
    assert report.wrong_threading_shape([ROW | {"threading": "pin1"}]) == ""
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([LIMIT, ROW]))
    report.main(str(path))
    assert "| drlhet-jax | fused | - | - | - | 1.00M (0.90M-1.10M) |" in capsys.readouterr().out


@pytest.mark.parametrize(
    "rows, message",
    [
        ([ROW | {"items_per_s": "fast"}], "item 0's items_per_s is 'fast', not a number"),
        ([ROW, ROW | {"items_per_s_max": [1]}], "item 1's items_per_s_max is [1], not a number"),
        ([ROW | {"capacity": "2^20"}], "item 0's capacity is '2^20', not a whole number"),
        ([ROW | {"capacity": 0}], "item 0's capacity is 0, not a whole number above 0"),
        ([ROW | {"batch": 2.5}], "item 0's batch is 2.5, not a whole number"),
        ([LIMIT | {"dependent_ns": "slow"}, ROW], "item 0's dependent_ns is 'slow', not a number"),
        ([{"impl": "machine-limit"}, ROW], "item 0 lacks 'dependent_ns'"),
    ],
)  # fmt: skip
def test_values_of_the_wrong_type_are_named(report, rows, message):
    why = report.wrong_shape(rows)
    assert why.startswith(f"not bench_replay.py's JSON rows ({message}") and why.endswith(")"), why


def test_the_script_refuses_a_threading_file_of_the_wrong_shape_in_one_line(tmp_path):
    grid, threading = tmp_path / "rows.json", tmp_path / "threading.json"
    grid.write_text(json.dumps([ROW]))
    threading.write_text(json.dumps([ROW | {"threading": "default", "items_per_s": None}]))
    done = subprocess.run(
        [sys.executable, str(REPO / "experiments" / "report_replay.py"), str(grid),
         str(threading)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.splitlines() == [
        f"report_replay: error: {threading}: not bench_replay.py's JSON rows (item 0's "
        "items_per_s is None, not a number)"
    ]
