"""What the experiments draw says what it is: GPU rows are drawn under their GPU's model and
date, a figure's empty panel says why, the replay report says where each row was measured."""

import dataclasses
import json
import sys

import pytest
from experiment_scripts import PRIMITIVES_TINY, gpu_row, refused
from experiment_scripts import experiment as experiment  # a fixture
from experiment_scripts import fresh_run as fresh_run  # an autouse fixture
from matplotlib.figure import Figure


def test_a_gpu_rows_file_that_is_not_json_is_refused(cli, capsys, tmp_path):
    (tmp_path / "g.json").write_text("not json")
    line = refused(cli, capsys, "fig_primitives", f"{PRIMITIVES_TINY} --gpu-results g.json")
    assert line.startswith("fig_primitives: error: --gpu-results g.json: not JSON (")


def test_gpu_rows_are_drawn_under_their_gpu_and_date(experiment, tmp_path, monkeypatch):
    """They were ``cuda on cuda:0, measured (GPU, date not recorded)`` under a title saying
    an H100, whatever GPU they came from."""
    fp = experiment("fig_primitives")
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps([gpu_row(i, op) for i in ("drlhet-cuda", "drlhet-jax")
                                for op in ("sample", "update")]))  # fmt: skip
    got, notes = fp.gpu_measured((path,), 2**20, 16, ("sample", "update"))
    assert notes == [] and len(got) == 4
    assert {r["device"] for r in got} == {"NVIDIA H200"}
    assert {r["label"] for r in got} == {"measured (GPU, 2026-11-29)"}
    assert {fp.series_name(r) for r in got} == {
        "cuda on NVIDIA H200, measured",
        "jax on NVIDIA H200, measured",
    }
    titles = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: titles.append(fig._suptitle))
    rows = [{**r, "sweep": "batch"} for r in got]
    fp.plot(fp.Args(), rows, tmp_path / "p.png")
    text = titles[0].get_text()
    assert "GPU rows measured on NVIDIA H200 (2026-11-29)" in text and "H100" not in text


def test_an_empty_time_panel_says_whether_a_target_was_asked(experiment, tmp_path, monkeypatch):
    """With a target that no run reached, the panel said "not asked in this run"."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # fig_peers adds its peers folder
    peers = experiment("fig_peers")
    texts: list[list[str]] = []
    monkeypatch.setattr(
        Figure,
        "savefig",
        lambda fig, *a, **k: texts.append([t.get_text() for ax in fig.axes for t in ax.texts]),
    )
    summary = {"drlhet": {"trained_samples_per_s": 1e6, "time_to_return_s": None}}
    for target, says in ((475.0, "no run reached 475"), (None, "no target in this run")):
        spec = dataclasses.replace(peers.base_spec(peers.Args()), stop_at_return=target)
        peers._plot(summary, spec, tmp_path / "p.png")
        assert says in texts[-1], texts[-1]


def test_the_replay_report_says_where_each_row_was_measured(experiment, tmp_path, capsys):
    """A GPU run's tables set jax (on the GPU) beside native (on the host CPU) without saying
    so; rows of two runs in one file read as one."""
    report = experiment("report_replay")
    native = {**gpu_row("drlhet-native", "step"), "device": "cpu", "device_kind": "AMD EPYC",
              "speed_of": "this CPU"}  # fmt: skip
    jax_row = {**gpu_row("drlhet-jax", "step"), "run": {
        "started_utc": "2026-11-30T10:00:00Z", "commit": "abc", "versions": {"jax": "0.10.2"}
    }}  # fmt: skip
    native["run"] = {**jax_row["run"], "started_utc": "2026-11-29T10:00:00Z"}
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([jax_row, native]))
    report.main(str(path))
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith(
        "Measured on cuda:0 (NVIDIA H200): drlhet-jax; on cpu (AMD EPYC): drlhet-native. "
        "Rows of 2 runs, started 2026-11-30T10:00:00Z (commit abc, jax 0.10.2); "
    ), line


def test_peer_bars_start_a_decade_below_the_lowest(experiment, tmp_path, monkeypatch):
    """On the log axis's own limits 1.34M and 1.11M samples/s were drawn as bars of 10:1."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # fig_peers adds its peers folder
    peers = experiment("fig_peers")
    bottoms = []
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, *a, **k: bottoms.append(fig.axes[0].get_ylim()[0])
    )
    summary = {
        "drlhet": {"trained_samples_per_s": 1.34e6, "time_to_return_s": None},
        "flashbax": {"trained_samples_per_s": 1.11e6, "time_to_return_s": None},
    }
    peers._plot(summary, peers.base_spec(peers.Args()), tmp_path / "p.png")
    assert bottoms == [pytest.approx(1e5)]
