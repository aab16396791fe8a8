"""experiments/report_dse.py: validate_dse.py's JSON whose values are of the wrong type is refused
in one line naming the file and the value, before a table is printed (not a traceback halfway)."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAPPING = "actors=jax@cpu:0,replay=native,learner=jax@cpu:1"
ROW = {"batch": 256, "capacity": 2**20, "mapping": MAPPING, "error": 0.1,
       "error_per_round": [0.1, 0.12], "predicted_trained_samples_per_s": 1.1e5,
       "measured_trained_samples_per_s": 1e5}  # fmt: skip
BASELINE = {"all on CPU (jax)": {"pick_speedup": 1.5, "basis": "measured"}}
CONFIG = {"batch": 256, "capacity": 2**20, "pick": MAPPING, "pick_within": 0.99,
          "pick_over_worst": 2.0, "baselines": BASELINE}  # fmt: skip
GOOD = {"rows": [ROW], "configs": [CONFIG], "median_abs_error": 0.1, "max_abs_error": 0.2,
        "picks_within_5pct": True}  # fmt: skip


@pytest.fixture
def report(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("report_dse")


def test_the_committed_validation_and_a_good_file_are_read(report, tmp_path, capsys):
    assert report.wrong_shape(GOOD) == ""
    path = tmp_path / "v.json"
    path.write_text(json.dumps(GOOD))
    assert "| 256 | 2^20 | A cpu:0 / R native / L cpu:1 |" in report.main(path)
    for path in sorted((REPO / "results").glob("dse_validation*.json")):
        assert report.wrong_shape(json.loads(path.read_text())) == "", path.name


BAD = [
    (GOOD | {"median_abs_error": "low"}, "the file's median_abs_error is 'low', not a number"),
    (GOOD | {"rows": [ROW | {"capacity": "big"}]},
     "rows[0]'s capacity is 'big', not a whole number above 0"),
    (GOOD | {"rows": [ROW | {"mapping": "x"}]}, "rows[0]'s mapping is 'x', not actors="),
    (GOOD | {"rows": [ROW | {"error": None}]}, "rows[0]'s error is None, not a number"),
    (GOOD | {"rows": [ROW | {"error_per_round": 5}]}, "rows[0]'s error_per_round is 5, not a list"),
    (GOOD | {"rows": [ROW | {"error_per_round": [0.1, "x"]}]},
     "rows[0].error_per_round[1] is 'x', not a number"),
    (GOOD | {"configs": [CONFIG | {"pick": 3}]}, "configs[0]'s pick is 3, not actors="),
    (GOOD | {"configs": [CONFIG | {"baselines": [1]}]},
     "configs[0].baselines is a list, not an object"),
    (GOOD | {"configs": [CONFIG | {"baselines": {"all on GPU": {"pick_speedup": "2x",
                                                                "basis": "b"}}}]},
     "configs[0].baselines['all on GPU']'s pick_speedup is '2x', not a number"),
    (GOOD | {"max_abs_error_unpaired": 0.3}, "the file lacks 'median_abs_error_unpaired'"),
]  # fmt: skip


@pytest.mark.parametrize("data, message", BAD)
def test_values_of_the_wrong_type_are_named(report, data, message):
    why = report.wrong_shape(data)
    assert why.startswith(f"not validate_dse.py's JSON ({message}") and why.endswith(")"), why


def test_the_script_refuses_them_in_one_line_before_printing(tmp_path):
    data, message = BAD[1]
    path = tmp_path / "v.json"
    path.write_text(json.dumps(data))
    done = subprocess.run(
        [sys.executable, str(REPO / "experiments" / "report_dse.py"), str(path)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.splitlines() == [
        f"report_dse: error: {path}: not validate_dse.py's JSON ({message})"
    ]
