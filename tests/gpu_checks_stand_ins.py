"""The stand-ins of the tests of experiments/gpu_checks.sh and experiments/triage_gpu_tests.py
(tests/test_gpu_checks*.py): stand-in tests that carry the real GPU tests' names and ids, whose
JUnit report pytest itself writes (`report`); a stand-in Python that records each command the
shell's stages run instead of building, benchmarking or training, and runs pytest on the
stand-ins and the triage for real (`run_checks`); stand-ins of the profilers and nvcc
(`stand_in`)."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

STAND_INS = """
import os
import time

import pytest

KEY_OFF = os.environ.get("DRLHET_TEST_CUDA_KEY_TARGETS") == "0"
TOP_OFF = os.environ.get("DRLHET_TEST_CUDA_SHARED_TOP") == "0"
CLUSTER = pytest.param("one cluster per tree", marks=pytest.mark.cuda_cluster)
TAGGED = pytest.param("claims in a table kept by the call", marks=pytest.mark.cuda_tagged)
WIDE = pytest.param("clusters of 16 blocks, claims in a table", marks=pytest.mark.cuda_wide)
SORTED = pytest.param("sorted runs or claims in the workspace", marks=pytest.mark.cuda_sorted)

def hang():
    time.sleep(600)

@pytest.mark.parametrize("path", ["one block per tree", CLUSTER, TAGGED, WIDE, SORTED])
def test_weigh_and_checked_update_equal_the_buffers_code(path):
    assert path != "one cluster per tree" or {cluster_ok}
    assert path != "claims in a table kept by the call" or {tagged_ok}
    assert path != "clusters of 16 blocks, claims in a table" or {wide_ok}
    assert path != "sorted runs or claims in the workspace" or {sorted_ok}

@pytest.mark.cuda_key_targets
@pytest.mark.parametrize("path", ["one block per tree", CLUSTER])
def test_the_sample_from_the_key_equals_the_sample_from_xlas_targets(path):
    assert {key_ok}

@pytest.mark.cuda_shared_top
def test_the_top_copy_gives_the_bits_of_descents_that_read_the_tree():
    assert {top_ok}

def test_scan_of_sample_and_update_equals_jax():
    assert {other_ok}

@pytest.mark.cuda_spread
@pytest.mark.parametrize("where", ["gpu", "emulated cpu"])
def test_the_sample_spread_over_the_grid_equals_the_buffers_code(where):
    assert {spread_ok}
"""


PARTS = ("cluster", "key", "other", "top", "tagged", "spread", "wide", "sorted")
"""The stand-ins' parts, each passing unless its ``<part>_ok`` says otherwise."""


def stand_ins(tmp_path: Path, **failing: object) -> Path:
    """Writes the stand-in tests, failing as asked (each ``<part>_ok`` of `PARTS` a Python
    expression, True unless given; ``KEY_OFF``, ``TOP_OFF``: the run has the key targets, the
    top copy off; ``hang()``: sleeps 10 minutes)."""
    ok: dict[str, object] = {f"{part}_ok": True for part in PARTS}
    assert set(failing) <= set(ok), f"no such stand-in part: {set(failing) - set(ok)}"
    tests = tmp_path / "stand_in" / "test_stand_in.py"
    tests.parent.mkdir(exist_ok=True)
    tests.write_text(STAND_INS.format(**(ok | failing)))
    return tests


def report(tmp_path: Path, **failing) -> Path:
    """A JUnit XML report written by pytest, of the stand-ins (`stand_ins`)."""
    tests = stand_ins(tmp_path, **failing)
    xml = tmp_path / "tests.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-o", "addopts=", "--rootdir", str(tests.parent), "--junitxml", str(xml), str(tests)],
        capture_output=True, cwd=tests.parent,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # none needed: 5x faster
    )  # fmt: skip
    return xml


FAKE_PYTHON = """#!/usr/bin/env bash
# records each command; runs pytest on the stand-ins (their ids, or all of them, with the
# stage's options but its -k, its test files and, unless STAND_IN_XDIST is set, its workers)
# and the triage for real
echo "$*" >> "$CALLS"
echo "${XLA_FLAGS:-}" >> "$CALLS.xla_flags"
if [ "$1" = experiments/bench_replay.py ] && [ -n "${FAKE_TRACE:-}" ]; then  # --trace-dir DIR
  prev=""
  for a in "$@"; do
    [ "$prev" = --trace-dir ] && mkdir -p "$a" && mkdir -p "$a/raw" && \
      cp "$FAKE_TRACE" "$a/drlhet-cuda-step-c1048576-b4096-k16.trace.json.gz"
    prev=$a
  done
fi
if [ "$1 $2" = "-m pytest" ]; then
  [ -n "${PYTEST_RC:-}" ] && exit "$PYTEST_RC"  # e.g. 124: as if `timeout` had killed it
  [ -n "${STAND_IN_SLEEP:-}" ] && sleep "$STAND_IN_SLEEP"  # a stage that takes its time
  shift 2
  keep=(); ids=(); xdist=(-p no:xdist)
  while [ $# -gt 0 ]; do
    case "$1" in
      -k) shift ;;
      *::*) ids+=("$1") ;;
      tests/*) ;;
      -n) [ -n "${STAND_IN_XDIST:-}" ] && xdist=() && keep+=("$1" "$2"); shift ;;
      --dist) [ -n "${STAND_IN_XDIST:-}" ] && keep+=("$1" "$2"); shift ;;
      *) keep+=("$1") ;;
    esac
    shift
  done
  # the stand-ins need none of the suite's plugins but those the stage's flags name: without
  # the others each pytest starts in a fifth of the time
  plugins=()
  for a in "${keep[@]}"; do [ "$a" = --timeout ] && plugins=(-p pytest_timeout); done
  [ -n "${STAND_IN_XDIST:-}" ] && plugins+=(-p xdist.plugin)
  export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
  cd "$STAND_IN" && exec "$REAL_PY" -m pytest "${plugins[@]}" "${keep[@]}" "${xdist[@]}" \\
    -o addopts= --rootdir "$STAND_IN" "${ids[@]:-$STAND_IN}"
fi
case "$1" in
  experiments/triage_gpu_tests.py|experiments/pick_cuda_paths.py) exec "$REAL_PY" "$@" ;;
  experiments/kernel_stalls.py|experiments/kernel_timeline.py|experiments/kernel_source.py)
    exec "$REAL_PY" "$@" ;;
  -c) exec "$REAL_PY" "$@" ;;  # e.g. whether pytest_timeout imports
  experiments/profile_gpu.py) [ -n "${REAL_PROFILE:-}" ] && exec "$REAL_PY" "$@" ;;
esac
exit 0
"""


def run_checks(
    tmp_path: Path,
    stages: list[str],
    pytest_rc: int | None = None,
    extra_env: dict[str, str] | None = None,
    **failing,
) -> tuple[str, list[str]]:
    """gpu_checks.sh STAGES with the stand-in Python (its pytest exiting with ``pytest_rc``
    without a report, if given): the script's output and the commands it ran."""
    stand_ins(tmp_path, **failing)
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    calls = tmp_path / "calls.log"
    env = {
        **os.environ, "PYTHON": str(fake), "REAL_PY": sys.executable, "CALLS": str(calls),
        "STAND_IN": str(tmp_path / "stand_in"), "OUT": str(tmp_path / "out"),
        "TEST_WORKERS": "1", "TEST_TIMEOUT": "3",
    }  # fmt: skip
    for name in ("CUDA_CLUSTER_MAX_BATCH", "CUDA_NARROW_MAX_NODES", "CUDA_KEY_TARGETS",
                 "CUDA_TAGGED_CLAIMS", "CUDA_TAGGED_SIBLINGS", "CUDA_OWN_SAMPLE_MAX_BATCH",
                 "CUDA_SPREAD_MIN_BATCH", "CUDA_SPREAD_THREADS"):  # fmt: skip
        env.pop(name, None)
    for name in ("WHEELS", "QUICK_PEERS", "PYTEST_RC", "STAND_IN_XDIST", "STAND_IN_SLEEP"):
        env.pop(name, None)
    env.update(extra_env or {})
    if pytest_rc is not None:
        env["PYTEST_RC"] = str(pytest_rc)
    done = subprocess.run(
        ["bash", str(REPO / "experiments" / "gpu_checks.sh"), *stages],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout, calls.read_text().splitlines() if calls.exists() else []


def stand_in(tmp_path: Path, name: str, script: str) -> dict[str, str]:
    """A stand-in ``name`` (NCU, NVCC, NSYS) for gpu_checks.sh: its path and where it records
    its calls, as the environment that points the script at it."""
    tool = tmp_path / name
    tool.write_text(script)
    tool.chmod(0o755)
    upper = name.upper()
    return {upper: str(tool), f"{upper}_CALLS": str(tmp_path / f"{name}.log")}
