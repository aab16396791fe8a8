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


def test_the_rounds_spread_is_the_median_half_range_and_the_rows_of_both_signs(report):
    rows = [
        ROW | {"error_per_round": [-0.2, 0.4]},  # half-range 0.3, both signs
        ROW | {"error_per_round": [0.1, 0.3, 0.2]},  # 0.1, one side
        ROW | {"error_per_round": [0.0, 0.5]},  # 0.25: a zero is neither sign
        ROW | {"error_per_round": [0.7]},  # one round: no spread
    ]
    assert report.round_spread(rows) == pytest.approx((0.25, 1, 3))
    no_rounds = {k: v for k, v in ROW.items() if k != "error_per_round"}
    assert report.round_spread([ROW | {"error_per_round": [0.7]}, no_rounds]) is None
    assert report.spread_words(rows) == (
        "one mapping's rounds disagree by a median half-range of 25.0%; in 1 of 3 mappings "
        "the rounds' errors take both signs"
    )


def test_the_tables_end_with_the_spread_only_where_rounds_were_run(report, tmp_path):
    path = tmp_path / "v.json"
    path.write_text(json.dumps(GOOD))  # one row of two rounds, +10% and +12%
    assert report.main(path).endswith(
        "Between rounds, one mapping's rounds disagree by a median half-range of 1.0%; in 0 "
        "of 1 mappings the rounds' errors take both signs."
    )
    path.write_text(json.dumps(GOOD | {"rows": [ROW | {"error_per_round": [0.1]}]}))
    assert "Between rounds" not in report.main(path)


def test_the_validation_summary_keeps_the_spread(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    summary = importlib.import_module("validate_report")._spread
    assert summary([ROW]) == {"median_half_range": pytest.approx(0.01), "rows_both_signs": 0,
                              "rows": 1}  # fmt: skip
    assert summary([ROW | {"error_per_round": [0.1]}]) is None
