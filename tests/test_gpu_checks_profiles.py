"""experiments/gpu_checks.sh's profiling stages, run with a stand-in Python that records each
command and stand-ins of ncu, nvcc and nsys (tests/gpu_checks_stand_ins.py): profile, stalls,
source, floor, timeline and trace run their tools as asked, with the CUDA paths in force, and
read what the tools print. The GPU tests' triage: test_gpu_checks.py; the benchmark stages:
test_gpu_checks_stages.py."""

import gzip
import importlib
import json
import sys

import pytest
from gpu_checks_stand_ins import REPO, run_checks, stand_in

KERNEL_REGEX = "--kernel-name regex:drlhet_cuda_(update|sample)_(cluster|block|spread).*"


def test_the_profile_stage_without_a_gpu_says_so_in_one_line_with_its_own_status(tmp_path):
    """profile_gpu.py for real (``REAL_PROFILE``), JAX held to its CPU: was exit 1, a failure's
    status, after JAX's error in its own words; now one line naming what it looked for, and
    `profile_gpu.NO_GPU`, which the stage logs as it is (not a timeout's 124 or 137)."""
    env = {"REAL_PROFILE": "1", "JAX_PLATFORMS": "cpu"}
    out, calls = run_checks(tmp_path, ["profile"], extra_env=env)
    assert calls[-1] == f"experiments/profile_gpu.py --out {tmp_path}/out/gpu_profile.json"
    assert "== profile: exit 77 after" in out, out
    line = (
        "profile_gpu: no GPU: JAX has no 'gpu' device here (jax.devices('gpu'); its platforms: "
        "cpu); nothing profiled"
    )
    assert (tmp_path / "out" / "profile.log").read_text().splitlines() == [line]
    assert out.rstrip().endswith(line)  # the stage's tail shows it
    assert not (tmp_path / "out" / "gpu_profile.json").exists()


BARRIER = "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
FAKE_NCU = f"""#!/usr/bin/env bash
# records its arguments; prints a raw table (ncu --page raw --csv) of two launches
echo "$*" >> "$NCU_CALLS"
echo '==PROF== Connected to process 7'
echo '"ID","Kernel Name","gpu__time_duration.sum","{BARRIER}"'
echo '"","","nsecond","inst"'
echo '"0","drlhet_cuda_update_cluster","16,000","2.5"'
echo '"1","drlhet_cuda_update_cluster","17,000","3.5"'
"""


def test_the_stalls_stage_profiles_the_cuda_kernels_and_ranks_their_stalls(tmp_path):
    extra = {**stand_in(tmp_path, "ncu", FAKE_NCU), "CUDA_CLUSTER_MAX_BATCH": "8192"}
    out, calls = run_checks(tmp_path, ["stalls"], extra_env=extra)
    (args,) = (tmp_path / "ncu.log").read_text().splitlines()
    assert KERNEL_REGEX in args
    assert "--page raw --csv" in args and "--section WarpStateStats" in args
    assert "experiments/bench_replay.py --device gpu" in args
    assert "--cuda-cluster-max-batch 8192" in args  # the stage runs with the paths in force
    (entry,) = json.loads((tmp_path / "out" / "kernel_stalls.json").read_text())
    assert entry["kernel"] == "drlhet_cuda_update_cluster" and entry["launches"] == 2
    assert entry["stalls"] == {"barrier": 3.0}
    assert "stalls per issued instruction: barrier 3.00" in out


FAKE_NCU_SOURCE = """#!/usr/bin/env bash
# records its arguments; with --import, prints a source page (ncu --page source --csv) of one
# kernel: a load (8 samples), a cluster wait (2)
echo "$*" >> "$NCU_CALLS"
[ "$1" = --import ] || { echo '==PROF== Report: /tmp/source_cuda.ncu-rep'; exit 0; }
echo '"Kernel Name","drlhet_cuda_update_cluster_tagged",'
echo '"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb","stall_barrier"'
echo '"0x7f00","      LDG.E R2, desc[UR8][R4.64]","8","8","0"'
echo '"0x7f10","      UCGABAR_WAIT","2","0","2"'
"""


def test_the_source_stage_samples_the_cuda_kernels_and_sums_them_per_phase(tmp_path):
    extra = {**stand_in(tmp_path, "ncu", FAKE_NCU_SOURCE), "CUDA_CLUSTER_MAX_BATCH": "2048"}
    out, calls = run_checks(tmp_path, ["source"], extra_env=extra)
    profile, page = (tmp_path / "ncu.log").read_text().splitlines()
    assert KERNEL_REGEX in profile
    assert "--section SourceCounters" in profile and "--warp-sampling-interval 0" in profile
    assert "-o /tmp/source_cuda " in profile and "--batches 4096" in profile
    assert "--cuda-cluster-max-batch 2048" in profile  # the stage runs with the paths in force
    assert page == "--import /tmp/source_cuda.ncu-rep --page source --csv --print-source sass"
    (entry,) = json.loads((tmp_path / "out" / "kernel_source.json").read_text())
    assert entry["kernel"] == "drlhet_cuda_update_cluster_tagged" and entry["samples"] == 10
    (phase,) = entry["phases"]
    assert phase["ends_with"] == "UCGABAR_WAIT" and phase["stalls"] == {"long_sb": 8, "barrier": 2}
    assert "LDG.E R2" not in out.split("== kernel_source")[0]  # the page is not echoed
    assert "100.0% of samples; long_sb 8, barrier 2" in out


FAKE_NVCC = """#!/usr/bin/env bash
# records its arguments; writes at -o a program that writes a stand-in floor to its argument
# (FAIL_BUILD set: fails instead)
echo "$*" >> "$NVCC_CALLS"
[ -n "${FAIL_BUILD:-}" ] && { echo 'error: no sm_90 here' >&2; exit 1; }
prev=""
for a in "$@"; do
  if [ "$prev" = -o ]; then
    printf '#!/usr/bin/env bash\necho "phase : 2 us a node"\necho "{}" > "$1"\n' > "$a"
    chmod +x "$a"
  fi
  prev=$a
done
"""


@pytest.mark.parametrize("builds", [True, False])
def test_the_floor_stage_builds_its_program_for_the_arch_and_runs_it(tmp_path, builds):
    extra = {**stand_in(tmp_path, "nvcc", FAKE_NVCC), "CUDA_ARCH": "100"}
    if not builds:
        extra["FAIL_BUILD"] = "1"
    out, _ = run_checks(tmp_path, ["floor"], extra_env=extra)
    (args,) = (tmp_path / "nvcc.log").read_text().splitlines()
    assert "-arch=sm_100" in args and args.endswith("experiments/gpu_floor.cu")
    floor = tmp_path / "out" / "gpu_floor.json"
    if builds:
        assert floor.read_text() == "{}\n" and "phase : 2 us a node" in out
    else:
        assert not floor.exists()
        assert "== floor: skipped, experiments/gpu_floor.cu did not build" in out


FAKE_NSYS = """#!/usr/bin/env bash
# records its arguments; `stats` prints a GPU trace of 32 steps of two kernels (10 and 5 us,
# 3 us before each: a 21 us period)
echo "$*" >> "$NSYS_CALLS"
[ "$1" = stats ] || exit 0
echo 'Start (ns),Duration (ns),Name'
t=1000000
for i in $(seq 32); do
  t=$((t + 3000)); echo "$t,10000,drlhet_cuda_sample_cluster_k16"; t=$((t + 10000))
  t=$((t + 3000)); echo "$t,5000,drlhet_cuda_update_cluster"; t=$((t + 5000))
done
"""


def test_the_timeline_stage_traces_each_backend_and_splits_the_step_into_kernels_and_gaps(
    tmp_path,
):
    extra = {**stand_in(tmp_path, "nsys", FAKE_NSYS), "TIMELINE_BACKENDS": "cuda",
             "CUDA_SHARED_TOP": "0"}  # fmt: skip
    out, _ = run_checks(tmp_path, ["timeline"], extra_env=extra)
    profile, stats = (tmp_path / "nsys.log").read_text().splitlines()
    assert profile.startswith("profile --trace cuda --cuda-graph-trace node")
    assert "experiments/bench_replay.py --device gpu" in profile and "--backends cuda" in profile
    assert "--no-cuda-shared-top" in profile  # the settings in force
    assert stats.startswith("stats --report cuda_gpu_trace --format csv")
    (entry,) = json.loads((tmp_path / "out" / "kernel_timeline.json").read_text())
    assert entry["steps"] == 32 and entry["kernel_us_per_step"] == pytest.approx(15.0)
    assert entry["period_us"] == pytest.approx(21.0 - 3.0 / 32)
    assert "32 steps, period 20.9 us = kernels 15.0 us + gaps 5.9 us" in out


def test_the_trace_stage_traces_graphs_and_ops_and_splits_each_step(tmp_path):
    """No Nsight Systems: jax's profiler, once with XLA's command buffers kept, once op by op."""
    sys.path.insert(0, str(REPO / "tests"))
    try:
        fake = importlib.import_module("test_kernel_timeline").profiler_trace(32)
    finally:
        sys.path.pop(0)
    trace = tmp_path / "fake.trace.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump(fake, f)
    extra = {"FAKE_TRACE": str(trace), "CUDA_SHARED_TOP": "0"}
    out, calls = run_checks(tmp_path, ["trace"], extra_env=extra)
    graph, ops = (c for c in calls if c.startswith("experiments/bench_replay.py"))
    assert "--trace-dir" in graph and "--trace-command-buffers" in graph
    assert "--no-trace-command-buffers" in ops and "--no-cuda-shared-top" in ops
    assert "--backends cuda jax" in graph and "--ops sample update step" in graph
    assert not (tmp_path / "out" / "trace_graph" / "raw").exists()  # the raw folders go
    entries = json.loads((tmp_path / "out" / "step_trace.json").read_text())
    assert len(entries) == 2 and all(e["steps"] == 32 for e in entries)
    assert entries[0]["kernel_us_per_step"] == pytest.approx(24.0)
    assert "host: Launch" in out
