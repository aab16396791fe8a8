"""The `drlhet dse` and `drlhet profile` commands refuse bad devices, shapes and outputs in one
line, before anything is profiled."""

from __future__ import annotations

import json

import pytest
from tiny_profile_key import TINY

from drlhet.cli import main


@pytest.mark.parametrize(
    "devices, message",
    [
        ("nonsense", "device 'nonsense' has no sheet"),
        ("cpu,pcie3", "'pcie3' is a link, not a device"),
        ("u250", "no device of u250 runs the actors"),
        ("cpu:5", "device 'cpu:5' is not present: this process has 2 CPU devices"),
        ("cpu:x", "device 'cpu:x': the index after ':' must be a number"),
        ("", "no devices given in ''"),  # not the default devices
    ],
)
def test_dse_refuses_bad_devices_before_profiling(tmp_path, capsys, monkeypatch, devices, message):
    def no_profiling(*args, **kwargs):
        pytest.fail("profiled before refusing the devices")

    monkeypatch.setattr("drlhet.cli.dse.build_model", no_profiling)
    with pytest.raises(SystemExit) as stop:
        main(
            [
                "dse",
                "--devices",
                devices,
                "--cache-dir",
                str(tmp_path),
                "--out",
                str(tmp_path / "d"),
            ]
        )
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"drlhet: error: --devices {devices}: ")
    assert message in err[0]


@pytest.mark.parametrize("command", ["dse", "profile"])
@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch", "2048", "--capacity", "1024"], "--batch (2048) must be <= --capacity (1024)"),
        # the shape's widths are both agents' (spelled as this command's option)
        (["--hidden", "64", "0"], "--hidden must be layer widths >= 1, got (64, 0)"),
        (["--num-envs", "0"], "--num-envs must be >= 1, got 0"),  # not a division by zero
        (["--cpu-devices", "100000"], "--cpu-devices must be in [1, 1024], got 100000"),
    ],
)
def test_a_shape_that_cannot_train_is_refused_before_profiling(
    capsys, monkeypatch, command, args, message
):
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    with pytest.raises(SystemExit) as stop:
        main([command, *args])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"drlhet: error: {message}"]


@pytest.mark.parametrize("command", ["dse", "profile"])
def test_backend_is_no_option_of_the_commands_that_profile_every_backend(
    capsys, monkeypatch, command
):
    # every backend that loads is profiled: a named one was ignored, not profiled alone; it
    # was listed as an option that was always refused
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    with pytest.raises(SystemExit) as stop:
        main([command, "--backend", "native"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Unrecognized or misplaced options: --backend" in err[0]
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--backend" not in capsys.readouterr().out


def test_a_gpu_profile_that_is_a_folder_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    with pytest.raises(SystemExit) as stop:  # was "failed: IsADirectoryError", exit 1
        main(["dse", "--gpu-profile", str(tmp_path), "--out", str(tmp_path / "d.json")])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"GPU profile {tmp_path} cannot be read (Is a directory)" in err[0]


@pytest.mark.parametrize("command", ["dse", "profile"])
def test_outputs_that_cannot_be_written_are_refused_before_profiling(
    tmp_path, capsys, monkeypatch, command
):
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    (tmp_path / "file").write_text("")
    cases = [
        (
            ["--cache-dir", str(tmp_path / "file" / "cache")],
            f"--cache-dir {tmp_path}/file/cache: no cache can be made in {tmp_path}/file "
            "(Not a directory)",
        )
    ]
    if command == "dse":
        cases += [
            (["--out", str(tmp_path)], f"--out {tmp_path} is a folder; name the JSON file"),
            (
                ["--out", str(tmp_path / "file" / "dse.json")],
                f"no file can be made in {tmp_path}/file (Not a directory)",
            ),
        ]
    for args, message in cases:
        with pytest.raises(SystemExit) as stop:
            main([command, *args])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("drlhet: error: ") and message in err[0]
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


@pytest.mark.parametrize("command", ["dse", "profile"])
def test_a_shape_this_machine_cannot_hold_is_refused_before_profiling(
    tmp_path, capsys, monkeypatch, command
):
    # it was profiled, and allocated its buffer (twice) until the machine ran out of memory
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    monkeypatch.setattr("drlhet.cli.dse.available_memory", lambda: (2**30, "MemAvailable"))
    out = ["--cache-dir", str(tmp_path / "cache")] + (
        ["--out", str(tmp_path / "d.json")] if command == "dse" else []
    )
    cases = [
        (["--capacity", "20000000"], "--capacity 20000000: profiling it needs ~"),
        (["--hidden", "20000", "20000"], "--hidden 20000 20000: profiling it needs ~"),
    ]
    for args, message in cases:
        with pytest.raises(SystemExit) as stop:
            main([command, *args, *out])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"drlhet: error: {message}"), err
        assert err[0].endswith("this machine has 1.0 GiB available (MemAvailable)")
    if command == "dse":  # a delay past the run's learner steps, before its queue's memory
        with pytest.raises(SystemExit) as stop:
            main([command, "--delay", "100000000", "--measure", "--hidden", "8", *out])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            "drlhet: error: --delay (100000000) must be below the run's learner steps (47500: "
            "19 chunks x --eval-every / --num-envs x --sgd-steps): no delayed priority update "
            "would ever be applied"
        ]
    assert list(tmp_path.iterdir()) == []
    # predicted only (no --measure), a long delay holds nothing: not refused
    from drlhet.cli.dse import _check_shape

    _check_shape(TINY, None)
    with pytest.raises(ValueError, match="delay .100000000. must be below the run's learner"):
        _check_shape(TINY, 10**8)
    # below them, a measured run's queue (k x B entries: 7.7 MB here) still counts in its memory
    monkeypatch.setattr("drlhet.cli.dse.available_memory", lambda: (2**20, "MemAvailable"))
    with pytest.raises(ValueError, match="--delay 40000: a run measured at it needs ~"):
        _check_shape(TINY, 40_000)


def test_a_sheets_folder_that_cannot_be_read_is_refused_before_profiling(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "unlinked").mkdir()
    board = {"name": "b", "kind": "fpga", "link": "pcie9", "values": {}}
    (tmp_path / "unlinked" / "b.json").write_text(json.dumps(board))
    cases = [
        (tmp_path / "none", "--sheets {} is not a folder"),
        (tmp_path / "empty", "--sheets {} holds no device sheet (*.json)"),
        (tmp_path / "unlinked", "device sheet b: its link 'pcie9' has no sheet of kind link"),
    ]
    for folder, message in cases:
        with pytest.raises(SystemExit) as stop:
            main(["dse", "--sheets", str(folder), "--out", str(tmp_path / "d.json")])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message.format(folder) in err[0], err
