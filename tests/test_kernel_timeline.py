"""experiments/kernel_timeline.py: the step's kernels and gaps from Nsight Systems' GPU trace (nsys
needs a GPU; its cuda_gpu_trace CSV is written out here)."""

import dataclasses
import gzip
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEADER = (
    "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),"
    "DymSMem (MB),Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name"
)


def row(start_ns: float, duration_ns: float, name: str) -> str:
    return f"{start_ns:.0f},{duration_ns:.0f},1,8,1,1,512,1,1,40,0.026,0,,,,,0,1,,7,{name}"


def trace(steps: int, t0: float = 5e6) -> list[str]:
    """``steps`` steps of three kernels (sample 10 us, a fusion 2 us, update 12 us) with 1, 2
    and 3 us before each: a 30 us period, 24 us of it in kernels."""
    out, t = [], t0
    for _ in range(steps):
        for gap, dur, name in ((1e3, 10e3, "drlhet_cuda_sample_cluster_k16"),
                               (2e3, 2e3, "loop_add_compare_select_fusion"),
                               (3e3, 12e3, "drlhet_cuda_update_cluster")):  # fmt: skip
            t += gap
            out.append(row(t, dur, name))
            t += dur
    return out


@pytest.fixture
def timeline(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("kernel_timeline")


def test_the_longest_burst_gives_the_period_kernels_and_gaps_per_step(timeline, tmp_path):
    warm_up = [row(1e6, 50e3, "drlhet_cuda_sample_cluster_k16"), row(1.2e6, 3e3, "fill")]
    log = tmp_path / "timeline_cuda_trace.log"
    log.write_text(
        "machine: x86_64\nGenerating SQLite file /tmp/t.sqlite\nProcessing [...] with "
        "[cuda_gpu_trace.py]...\n\n"
        + "\n".join([HEADER, *warm_up, *trace(64)])
        + "\n\nwrote 1 rows\n"
    )
    out = tmp_path / "t.json"
    (entry,) = timeline.main(timeline.Args(csv_files=(log,), out=out))
    assert json.loads(out.read_text()) == [entry]
    assert entry["steps"] == 64 and entry["events"] == 192  # the warm-up is another burst
    # the burst's first gap (1 us, before its first kernel) is not inside its span
    assert entry["period_us"] == pytest.approx(30.0 - 1.0 / 64)
    assert entry["kernel_us_per_step"] == pytest.approx(24.0)
    assert entry["gap_us_per_step"] == pytest.approx(6.0 - 1.0 / 64)
    update = entry["kernels"][0]  # the most time first
    assert update["kernel"] == "drlhet_cuda_update_cluster" and update["launches"] == 64
    assert update["median_us"] == pytest.approx(12.0)
    assert update["median_gap_before_us"] == pytest.approx(3.0)


def test_a_log_without_the_trace_is_refused_in_one_line(timeline, tmp_path, refused):
    log = tmp_path / "x.log"
    log.write_text("nsys: command failed\n")
    with refused("x.log: no cuda_gpu_trace table"):
        timeline.main(timeline.Args(csv_files=(log,), out=tmp_path / "t.json"))
    log.write_text("Start (us),Duration (furlongs),Name\n1,2,k\n")
    with refused("x.log: unknown unit 'furlongs'"):
        timeline.main(timeline.Args(csv_files=(log,), out=tmp_path / "t.json"))
    assert not (tmp_path / "t.json").exists()


def profiler_trace(steps: int) -> dict:
    """A jax profiler trace as a GPU run writes it: the GPU plane with a stream line and a
    derived line of XLA's ops (the same work again, to be left out), and a host plane."""
    meta = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 1, "tid": 7, "name": "thread_name",
         "args": {"name": "Stream #7(Compute)"}},
        {"ph": "M", "pid": 1, "tid": 9, "name": "thread_name", "args": {"name": "XLA Ops"}},
        {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 2, "tid": 1, "name": "thread_name", "args": {"name": "python"}},
    ]  # fmt: skip
    events = []
    for line in trace(steps, t0=5e6):
        start_ns, duration_ns, *_, name = line.split(",")
        ts, dur = float(start_ns) / 1e3, float(duration_ns) / 1e3  # the profiler's us
        events.append({"ph": "X", "pid": 1, "tid": 7, "ts": ts, "dur": dur, "name": name})
        events.append({"ph": "X", "pid": 1, "tid": 9, "ts": ts, "dur": dur, "name": "op"})
    for i in range(steps):  # the host launches each step's graph: 4 us of every 30
        ts = 5e3 + 30.0 * i
        events.append({"ph": "X", "pid": 2, "tid": 1, "ts": ts, "dur": 4.0, "name": "Launch"})
    events.append({"ph": "X", "pid": 2, "tid": 1, "ts": 1.0, "dur": 1.0, "name": "before"})
    return {"displayTimeUnit": "ns", "metadata": {}, "traceEvents": meta + events}


def test_a_profiler_trace_gives_the_streams_work_and_the_hosts(timeline, tmp_path):
    path = tmp_path / "drlhet-cuda-step.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(profiler_trace(64), f)
    args = timeline.Args(trace_files=(path,), out=tmp_path / "t.json")
    (entry,) = timeline.main(args)
    assert entry["steps"] == 64 and entry["events"] == 192  # not the XLA Ops line's
    assert entry["kernel_us_per_step"] == pytest.approx(24.0)
    assert entry["period_us"] == pytest.approx(30.0 - 1.0 / 64)
    assert entry["kernels"][0]["kernel"] == "drlhet_cuda_update_cluster"
    (launch,) = entry["host"]  # the event long before the burst is not in it
    assert launch["event"] == "Launch" and launch["count"] == 64
    assert launch["us_per_step"] == pytest.approx(4.0)
    # a given number of steps wins over the count of launches
    (entry,) = timeline.main(dataclasses.replace(args, steps=32))
    assert entry["period_us"] == pytest.approx(2 * (30.0 - 1.0 / 64))


def test_a_profiler_trace_without_the_plane_or_lines_is_refused_naming_them(
    timeline, tmp_path, refused
):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(profiler_trace(4)))
    args = timeline.Args(trace_files=(path,), plane="/device:TPU", out=tmp_path / "o.json")
    with refused("t.json: no process named /device:TPU... (there are ['/device:GPU:0'"):
        timeline.main(args)
    args = dataclasses.replace(args, plane="/device:GPU", lines="Queue")
    with refused("no thread named Queue... in /device:GPU (there are ['Stream #7(Compute)'"):
        timeline.main(args)
    path.write_text("{")
    with refused("t.json: not a profiler trace"):
        timeline.main(args)
    with refused("give --csv-files"):
        timeline.main(timeline.Args(out=tmp_path / "o.json"))
    assert not (tmp_path / "o.json").exists()


def _events(trace: dict, index: int, **changed) -> dict:
    """``trace`` with its event ``index`` changed."""
    events = list(trace["traceEvents"])
    events[index] = events[index] | changed
    return trace | {"traceEvents": events}


GOOD = profiler_trace(4)
X = next(i for i, e in enumerate(GOOD["traceEvents"]) if e["ph"] == "X")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe", "bad.json: not a profiler trace ("),
        (b"7", "bad.json: not a profiler trace (the file is a number, not a list)"),
        (json.dumps({"traceEvents": 5}).encode(),
         "bad.json: not a profiler trace (traceEvents is a number, not a list)"),
        (json.dumps({"traceEvents": [1]}).encode(),
         "bad.json: not a profiler trace (traceEvents[0] is a number, not an object)"),
        (json.dumps(_events(GOOD, 0, args=5)).encode(),
         "bad.json: not a profiler trace (traceEvents[0]'s args are not an object)"),
        (json.dumps(_events(GOOD, X, ts="soon")).encode(),
         f"bad.json: not a profiler trace (traceEvents[{X}]'s ts 'soon' is not a number)"),
        (json.dumps(_events(GOOD, X, dur=None)).encode(),
         f"bad.json: not a profiler trace (traceEvents[{X}]'s dur None is not a number)"),
    ],
)  # fmt: skip
def test_a_trace_that_is_not_text_or_of_the_wrong_shape_is_refused_naming_it(
    timeline, tmp_path, refused, content, message
):
    """Met in `main`, not at parsing: one line naming the file and what is wrong, exit 2."""
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with refused(message):
        timeline.main(timeline.Args(trace_files=(bad,), out=tmp_path / "o.json"))
    assert not (tmp_path / "o.json").exists()


def test_a_file_that_cannot_be_read_or_is_not_text_is_refused_naming_it(
    timeline, tmp_path, refused
):
    folder = tmp_path / "a_folder.csv"  # a folder cannot be read as a file, even by root
    folder.mkdir()
    with refused(f"{folder}: cannot be read (Is a directory)"):
        timeline.main(timeline.Args(csv_files=(folder,), out=tmp_path / "o.json"))
    with refused(f"{folder}: cannot be read (Is a directory)"):
        timeline.main(timeline.Args(trace_files=(folder,), out=tmp_path / "o.json"))
    binary = tmp_path / "trace.log"
    binary.write_bytes(b"Start (ns),Duration (ns),Name\n\xff\n")
    with refused(f"{binary}: not a text file"):
        timeline.main(timeline.Args(csv_files=(binary,), out=tmp_path / "o.json"))
    gz = tmp_path / "t.trace.json.gz"
    gz.write_bytes(gzip.compress(b"{")[:12])  # cut short
    with refused(f"{gz}: not a profiler trace"):
        timeline.main(timeline.Args(trace_files=(gz,), out=tmp_path / "o.json"))


def test_the_script_refuses_a_foreign_trace_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    done = subprocess.run(
        [sys.executable, str(REPO / "experiments" / "kernel_timeline.py"), "--trace-files",
         str(bad), "--out", str(tmp_path / "o.json")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"kernel_timeline: error: {bad}: not a profiler trace (item 0 is a number, not an object)"
    ]


def test_jax_profilers_own_trace_of_a_scan_on_the_cpu(timeline, tmp_path):
    """A real trace (jax's profiler on this CPU): XLA's CPU ops on the host plane's XLA thread,
    every step's ops once per step."""
    import jax
    import jax.numpy as jnp

    scan = jax.jit(lambda x: jax.lax.scan(lambda c, _: (jnp.sin(c) + 1.0, None), x, None, 16)[0])
    x = jnp.ones(4096)
    scan(x).block_until_ready()
    with jax.profiler.trace(str(tmp_path / "raw")):
        scan(x).block_until_ready()
    (path,) = (tmp_path / "raw").glob("plugins/profile/*/*.trace.json.gz")
    args = timeline.Args(
        trace_files=(path,), plane="/host:CPU", lines="tf_XLA", steps=16, out=tmp_path / "t.json"
    )
    (entry,) = timeline.main(args)
    assert entry["steps"] == 16 and entry["events"] >= 16
    assert 0 < entry["kernel_us_per_step"] <= entry["period_us"]
    assert any(k["launches"] == 16 for k in entry["kernels"])


def test_an_unreadable_trace_beside_good_ones_is_a_note_not_the_end(timeline, tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(profiler_trace(8)))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    (entry,) = timeline.main(timeline.Args(trace_files=(bad, good), out=tmp_path / "o.json"))
    assert entry["file"] == "good.json" and entry["steps"] == 8
    assert f"note: skipped {bad}: not a profiler trace" in capsys.readouterr().out
