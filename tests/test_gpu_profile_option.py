"""``drlhet dse --gpu-profile FILE``: every refusal of the file is one line naming the option
and the file, before anything is profiled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drlhet.cli import main

REPO = Path(__file__).resolve().parents[1]

ROW = {"key": "k", "backend": "jax", "device_kind": "Toy", "sheet": "h100", "compute": {}}


@pytest.mark.parametrize(
    "content, why",
    [
        (None, "does not exist"),
        ("folder", "cannot be read (Is a directory)"),
        ("{not json", "is not valid JSON"),
        ("{}", "is not a list of rows"),
        ("[{}]", "row 0 lacks 'key'"),
        (json.dumps([ROW]), "row 0's compute lacks a median time of 'actors'"),
    ],
)
def test_a_bad_gpu_profile_is_refused_naming_the_option_and_the_file(
    tmp_path, capsys, monkeypatch, content, why
):
    """Was ``drlhet: error: GPU profile FILE ...``: the file, not the option that named it."""
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    path = tmp_path / "gpu.json"
    if content == "folder":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as stop:
        main(["dse", "--gpu-profile", str(path), "--out", str(tmp_path / "dse.json")])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("drlhet: error: "), err
    assert "--gpu-profile" in err[0] and str(path) in err[0] and why in err[0], err
    assert not (tmp_path / "dse.json").exists()


def test_a_gpu_profile_of_a_gpu_the_devices_leave_out_is_refused(tmp_path, capsys, monkeypatch):
    # its rows were left unused with no word: every GPU row stayed modeled from its sheet
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    path = REPO / "results" / "gpu_profile_h100.json"
    with pytest.raises(SystemExit) as stop:
        main(
            [
                "dse",
                "--devices",
                "cpu,h200",
                "--gpu-profile",
                str(path),
                "--out",
                str(tmp_path / "d.json"),
            ]
        )
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"drlhet: error: --gpu-profile {path} measured h100, which --devices cpu:0,cpu:1,h200 "
        "does not list: add it, or drop --gpu-profile"
    ]
