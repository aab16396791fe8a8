"""experiments/kernel_times.py: the per-kernel summary of an ncu CSV log (ncu itself needs a GPU;
its log format is written out here)."""

import importlib
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
    '"Metric Value"'
)


def row(i: int, kernel: str, unit: str, value: str) -> str:
    return (
        f'"{i}","7","python3","h","{kernel}","1","13","(256, 1, 1)","(16, 1, 1)","0","9.0",'
        f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"'
    )


@pytest.fixture
def kernel_times(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("kernel_times")


def test_rows_group_launches_by_kernel_in_microseconds(kernel_times, tmp_path):
    log = tmp_path / "ncu_cuda.csv"
    log.write_text(
        "==PROF== Connected to process 7\nwrote 3 rows\n"
        + "\n".join(
            [
                HEADER,
                row(0, "drlhet_cuda_update_top_args", "usecond", "12.5"),
                row(1, "loop_add_fusion", "nsecond", "2,048"),
                row(2, "drlhet_cuda_update_top_args", "usecond", "7.5"),
            ]
        )
    )
    out = tmp_path / "k.json"
    rows = kernel_times.main(kernel_times.Args(csv_files=(log,), out=out))
    assert json.loads(out.read_text()) == rows
    top, fusion = rows
    assert top["kernel"] == "drlhet_cuda_update_top_args" and top["launches"] == 2
    assert top["mean_us"] == 10.0 and top["total_us"] == 20.0
    assert fusion["launches"] == 1 and fusion["total_us"] == pytest.approx(2.048)


def test_a_log_without_the_table_or_with_an_unknown_unit_is_refused(
    kernel_times, tmp_path, refused
):
    empty = tmp_path / "empty.csv"
    empty.write_text("==PROF== no kernels were profiled\n")
    with refused("no gpu__time_duration.sum rows"):
        kernel_times.main(kernel_times.Args(csv_files=(empty,), out=tmp_path / "o.json"))
    odd = tmp_path / "odd.csv"
    odd.write_text(HEADER + "\n" + row(0, "k", "cycle", "5"))
    with refused("unknown unit 'cycle'"):
        kernel_times.main(kernel_times.Args(csv_files=(odd,), out=tmp_path / "o.json"))
    with refused("no such file"):
        kernel_times.main(kernel_times.Args(csv_files=(tmp_path / "x.csv",), out=tmp_path / "o"))


def test_a_log_lacking_a_column_or_a_number_or_not_text_is_refused_by_name(
    kernel_times, tmp_path, refused
):
    log = tmp_path / "kernels.csv"
    log.write_text(HEADER.replace('"Kernel Name"', '"Function"') + "\n" + row(0, "k", "ns", "5"))
    with refused(f"{log}: the ncu table has no Kernel Name column"):
        kernel_times.main(kernel_times.Args(csv_files=(log,), out=tmp_path / "o.json"))
    log.write_text(HEADER + "\n" + row(0, "k", "ns", "n/a"))
    with refused(f"{log}: k's duration 'n/a' is not a number"):
        kernel_times.main(kernel_times.Args(csv_files=(log,), out=tmp_path / "o.json"))
    log.write_bytes(HEADER.encode() + b"\n\xff\n")
    with refused(f"{log}: not a text file"):
        kernel_times.main(kernel_times.Args(csv_files=(log,), out=tmp_path / "o.json"))
    assert not (tmp_path / "o.json").exists()
