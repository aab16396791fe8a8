"""experiments/pick_cuda_paths.py refuses rows files that are missing, foreign, not JSON rows or
not readable: one line naming the file, exit status 2, nothing written."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_paths_rows import REPO, row, write
from cuda_paths_rows import experiments as experiments  # a fixture


def test_missing_or_foreign_rows_are_refused_with_one_line(experiments, tmp_path, refused):
    picker = experiments[0]
    with refused("none.json: no such file"):
        picker.main(picker.Args(rows=(tmp_path / "none.json",), out=tmp_path / "p.json"))
    jax_only = write(tmp_path, "j.json", [row(4096, 1.0, impl="drlhet-jax")])
    with refused("no fused cuda step rows at capacity 1048576, K 16 in " + str(jax_only)):
        picker.main(picker.Args(rows=(jax_only,), out=tmp_path / "p.json"))
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "bad.json: not JSON"),
        (b"\xff\xfe", "bad.json: not JSON"),
        ("[1, 2]", "bad.json: not a list of bench_replay rows (item 0 is a number, not an object)"),
        ('{"rows": []}', "bad.json: not a list of bench_replay rows (the file is an object"),
        (json.dumps([{k: v for k, v in row(4096, 1.0).items() if k != "items_per_s"}]),
         "bad.json: item 0, a fused cuda step at B 4096: lacks 'items_per_s'"),
        (json.dumps([row(4096, "fast")]), "bad.json: item 0, a fused cuda step at B 4096: "
         "items_per_s 'fast' is not a number"),
        (json.dumps([row(4096, 1.0), row("big", 1.0)]),
         "bad.json: item 1, a fused cuda step at B 'big': batch 'big' is not a whole number"),
        (json.dumps([row(4096, 1.0, region="all")]),
         "bad.json: item 0, a fused cuda step at B 4096: cuda_region_max_batch 'all' is not"),
    ],
)  # fmt: skip
def test_rows_files_that_are_not_json_rows_are_refused_naming_the_file(
    experiments, tmp_path, refused, text, message
):
    """Met in `main`, not at parsing: one line naming the file and what is wrong, exit 2."""
    picker = experiments[0]
    good = write(tmp_path, "good.json", [row(4096, 1.0)])
    bad = tmp_path / "bad.json"
    bad.write_bytes(text if isinstance(text, bytes) else text.encode())
    with refused(message):
        picker.main(picker.Args(rows=(good, bad), out=tmp_path / "p.json"))
    assert not (tmp_path / "p.json").exists()


def test_a_rows_file_that_cannot_be_read_is_refused_naming_it(
    experiments, tmp_path, refused, monkeypatch
):
    picker = experiments[0]
    bad = write(tmp_path, "locked.json", [row(4096, 1.0)])
    real = Path.read_text

    def read_text(path, *a, **kw):
        if path == bad:  # as a file without read permission does (the tests may run as root)
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(Path, "read_text", read_text)
    with refused(f"{bad}: cannot be read (Permission denied)"):
        picker.main(picker.Args(rows=(bad,), out=tmp_path / "p.json"))


def test_the_script_refuses_a_foreign_rows_file_in_one_line(tmp_path):
    bad = write(tmp_path, "bad.json", [7])
    done = subprocess.run(
        [sys.executable, str(REPO / "experiments" / "pick_cuda_paths.py"), "--rows", str(bad),
         "--out", str(tmp_path / "p.json")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"pick_cuda_paths: error: {bad}: not a list of bench_replay rows (item 0 is a number, "
        "not an object)"
    ]
