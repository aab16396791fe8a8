"""experiments/kernel_timeline.py: the step's kernels and gaps from Nsight Systems' GPU trace (nsys
needs a GPU; its cuda_gpu_trace CSV is written out here)."""

import importlib
import json
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


def test_a_log_without_the_trace_is_refused_in_one_line(timeline, tmp_path):
    log = tmp_path / "x.log"
    log.write_text("nsys: command failed\n")
    with pytest.raises(SystemExit, match="no cuda_gpu_trace table"):
        timeline.main(timeline.Args(csv_files=(log,), out=tmp_path / "t.json"))
    log.write_text("Start (us),Duration (furlongs),Name\n1,2,k\n")
    with pytest.raises(SystemExit, match="unknown unit 'furlongs'"):
        timeline.main(timeline.Args(csv_files=(log,), out=tmp_path / "t.json"))
    assert not (tmp_path / "t.json").exists()
