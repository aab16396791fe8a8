"""experiments/triage_gpu_tests.py and the shell around it in experiments/gpu_checks.sh: when the
GPU tests of a lent machine fail, the parts they test are turned off for the later stages of the
same call. The GPU tests' report is made here by pytest itself, from stand-in tests that carry
the real tests' names and ids; the shell runs its stages with a stand-in Python that records
each command instead of building, benchmarking or training."""

import functools
import gzip
import importlib
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TAGGED_PATH = "claims in a table kept by the call"  # tests/backends/cuda_places.py
TAGGED_CLAIMS_PATH = "claims in a table and parents from the tree"  # idem
KERNEL_REGEX = "--kernel-name regex:drlhet_cuda_(update|sample)_(cluster|block|spread).*"

STAND_INS = """
import os
import time

import pytest

KEY_OFF = os.environ.get("DRLHET_TEST_CUDA_KEY_TARGETS") == "0"
TOP_OFF = os.environ.get("DRLHET_TEST_CUDA_SHARED_TOP") == "0"
CLUSTER = pytest.param("one cluster per tree", marks=pytest.mark.cuda_cluster)
TAGGED = pytest.param("claims in a table kept by the call", marks=pytest.mark.cuda_tagged)

def hang():
    time.sleep(600)

@pytest.mark.parametrize("path", ["one block per tree", CLUSTER, TAGGED])
def test_weigh_and_checked_update_equal_the_buffers_code(path):
    assert path != "one cluster per tree" or {cluster_ok}
    assert path != "claims in a table kept by the call" or {tagged_ok}

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


@pytest.fixture
def triage(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("triage_gpu_tests")


PARTS = ("cluster", "key", "other", "top", "tagged", "spread")
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


@pytest.mark.parametrize(
    "failing, cluster, key, unexplained",
    [
        ({}, False, False, 0),
        ({"cluster_ok": False}, True, False, 0),
        ({"key_ok": False}, True, True, 0),  # the key test has a cluster case too
        ({"cluster_ok": False, "key_ok": False}, True, True, 0),
        ({"other_ok": False}, False, False, 1),
        ({"other_ok": False, "key_ok": False}, True, True, 1),
    ],
)
def test_each_failure_turns_off_the_part_it_tests(triage, tmp_path, failing, cluster, key,
                                                   unexplained):  # fmt: skip
    t = triage.main(
        triage.Args(report(tmp_path, **failing), tmp_path / "t.env", tmp_path / "t.json")
    )
    assert (t.cluster, t.key, len(t.unexplained)) == (cluster, key, unexplained)
    assert len(t.failed) == (not failing.get("cluster_ok", True)) + 2 * (
        not failing.get("key_ok", True)
    ) + (not failing.get("other_ok", True))
    env = (tmp_path / "t.env").read_text()
    assert ("CUDA_CLUSTER_MAX_BATCH=0" in env) == cluster
    assert ("CUDA_KEY_TARGETS=0" in env) == key
    assert f"TRIAGE_UNEXPLAINED={unexplained}\n" in env
    assert json.loads((tmp_path / "t.json").read_text())["cluster"] == cluster


@pytest.mark.parametrize("content", ["not xml <", "<html></html>"])
def test_an_unreadable_report_is_an_unexplained_failure(triage, tmp_path, content):
    xml = tmp_path / "tests.xml"
    xml.write_text(content)
    t = triage.main(triage.Args(xml, tmp_path / "t.env"))
    assert not t.cluster and not t.key and len(t.unexplained) == 1
    assert str(xml) in t.reason and not t.no_report
    assert "TRIAGE_UNEXPLAINED=1" in (tmp_path / "t.env").read_text()


def test_a_missing_report_is_said_to_be_no_report_not_an_unexplained_failure(
    triage, tmp_path, capsys
):
    """Was ``no JUnit XML at ...: every failure unexplained`` and ``unexplained: 1``: the stage
    did not run, or ended before pytest wrote the file, and no test is known to have failed.
    The shell's gate stays shut all the same: pick must not choose paths that no test checked."""
    xml = tmp_path / "tests.xml"
    args = triage.Args(xml, tmp_path / "t.env", tmp_path / "t.json", tmp_path / "rerun.txt")
    t = triage.main(args)
    assert (t.failed, t.unexplained, t.cluster, t.key, t.top) == ((), (), False, False, False)
    assert t.no_report.startswith(f"no JUnit XML at {xml}: the stage did not run")
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"== triage: no report: no JUnit XML at {xml}")
    assert "unexplained" not in out[0] and "pick keeps the library's defaults" in out[0]
    assert (tmp_path / "t.env").read_text() == "TRIAGE_NO_REPORT=1\nTRIAGE_UNEXPLAINED=1\n"
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["unexplained"] == [] and saved["no_report"] == t.no_report
    assert (tmp_path / "rerun.txt").read_text() == ""


def test_the_triage_names_the_real_tests_and_paths(triage):
    """A renamed GPU test or path would silently leave its part switched on: the names must be
    the real ones."""
    sys.path.insert(0, str(REPO / "tests" / "backends"))
    try:
        places = importlib.import_module("cuda_places")
    finally:
        sys.path.pop(0)
    assert triage.CLUSTER_PATH in places.PATHS
    assert places.PATHS[triage.CLUSTER_PATH].get("CLUSTER_MAX_BATCH", 0) > 0
    assert places.TAGGED_PATH == TAGGED_PATH and places.PATHS[TAGGED_PATH]["TAGGED_CLAIMS"]
    assert places.TAGGED_CLAIMS_PATH == TAGGED_CLAIMS_PATH
    assert places.PATHS[TAGGED_CLAIMS_PATH]["TAGGED_CLAIMS"]
    defined = set(
        re.findall(r"^def (test_\w+)", (REPO / "tests/backends/test_cuda_buffer.py").read_text(),
                   re.M)
    )  # fmt: skip
    assert set(triage.KEY_TESTS) <= defined
    assert {n for n in defined if "key" in n or "drawn_in_the_call" in n} <= set(triage.KEY_TESTS)
    assert set(triage.TOP_TESTS) <= defined
    assert {n for n in defined if "top_copy" in n} <= set(triage.TOP_TESTS)


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


def stand_in(tmp_path: Path, name: str, script: str) -> dict[str, str]:
    """A stand-in ``name`` (NCU, NVCC, NSYS) for gpu_checks.sh: its path and where it records
    its calls, as the environment that points the script at it."""
    tool = tmp_path / name
    tool.write_text(script)
    tool.chmod(0o755)
    upper = name.upper()
    return {upper: str(tool), f"{upper}_CALLS": str(tmp_path / f"{name}.log")}


def test_the_later_stages_run_without_the_parts_that_failed(tmp_path):
    out, calls = run_checks(
        tmp_path, ["tests", "cluster", "pick", "quick", "train"], cluster_ok=False, key_ok=False
    )
    assert "== cluster: skipped, the cluster path failed the tests stage" in out
    assert not any("--cuda-cluster-max-batch 65536" in c for c in calls)
    quick = [c for c in calls if "bench_quick.json" in c]
    assert len(quick) == 1
    assert "--cuda-cluster-max-batch 0" in quick[0] and "--no-cuda-key-targets" in quick[0]
    train = [c for c in calls if " train " in c]
    assert len(train) == 2 and all(
        c.startswith("experiments/with_cuda_paths.py --cluster-max-batch 0 --no-key-targets --")
        for c in train
    )
    assert (
        "pick: skipped, no cluster, narrow, top, tagged, find or spread rows" in out
    )  # not for a failure


def test_an_unexplained_failure_keeps_the_defaults(tmp_path):
    out, calls = run_checks(tmp_path, ["tests", "cluster", "pick", "quick"], other_ok=False)
    assert "unexplained: 1" in out
    assert "pick: skipped, 1 test failure(s) that no setting turns off" in out
    assert any("--cuda-cluster-max-batch 65536" in c for c in calls)  # the cluster stage ran
    quick = [c for c in calls if "bench_quick.json" in c]
    assert "--cuda-cluster-max-batch" not in quick[0] and "--no-cuda-key-targets" not in quick[0]


def test_passing_tests_are_not_triaged(tmp_path):
    out, calls = run_checks(tmp_path, ["tests", "quick"])
    assert "triage" not in out
    assert not (tmp_path / "out" / "triage.env").exists()
    assert (tmp_path / "out" / "tests.xml").is_file()
    assert "--no-cuda-key-targets" not in next(c for c in calls if "bench_quick.json" in c)


@pytest.mark.parametrize("setting, flag", [(None, " --peers "), ("0", " --no-peers ")])
def test_the_quick_stage_times_the_installed_peers_unless_told_not_to(tmp_path, setting, flag):
    """flashbax, pure JAX, runs on the same GPU in the quick stage (its wheel in WHEELS)."""
    extra = {} if setting is None else {"QUICK_PEERS": setting}
    _, calls = run_checks(tmp_path, ["quick"], extra_env=extra)
    quick = [c for c in calls if "bench_quick.json" in c]
    assert len(quick) == 1 and flag in quick[0]


def test_a_key_targets_failure_keeps_the_cluster_path_and_every_later_run_draws_in_xla(tmp_path):
    out, calls = run_checks(tmp_path, ["tests", "cluster", "narrow", "quick"], key_ok=False)
    runs = [c for c in calls if c.startswith("experiments/bench_replay.py")]
    assert any("--cuda-cluster-max-batch 65536" in c for c in runs)  # the cluster stage ran
    assert len(runs) == 2 + 4 + 1 and all("--no-cuda-key-targets" in c for c in runs)
    assert "turned off: key" in out


@pytest.mark.parametrize("rc", [124, 137])
def test_a_tests_stage_out_of_time_turns_the_cluster_path_off_and_keeps_the_defaults(tmp_path, rc):
    out, calls = run_checks(tmp_path, ["tests", "cluster", "pick", "quick"], pytest_rc=rc)
    assert "== triage: no report: no JUnit XML" in out and "unexplained: 1" not in out
    assert "== cluster: skipped" in out
    assert "pick: skipped, the tests stage wrote no report" in out and "1 test failure" not in out
    quick = [c for c in calls if "bench_quick.json" in c]
    assert len(quick) == 1 and "--cuda-cluster-max-batch 0" in quick[0]
    assert "--no-cuda-key-targets" not in quick[0]


def test_a_failure_that_passes_alone_without_the_failed_part_is_explained(tmp_path):
    """A buffer-level test fails only while the key targets are on: its rerun, alone and with
    them off, passes, so pick still chooses."""
    out, calls = run_checks(tmp_path, ["tests", "pick"], key_ok=False, other_ok="KEY_OFF")
    rerun = [c for c in calls if c.startswith("-m pytest") and "rerun.xml" in c]
    assert len(rerun) == 1 and "::test_scan_of_sample_and_update_equals_jax" in rerun[0]
    assert "::test_the_sample_from_the_key" not in rerun[0]  # only the unexplained ones
    assert "0 failure(s) left unexplained after the rerun" in out
    assert "pick: skipped, no cluster, narrow, top, tagged, find or spread rows" in out


def test_a_failure_that_fails_again_alone_stays_unexplained(tmp_path):
    out, _ = run_checks(tmp_path, ["tests", "pick"], key_ok=False, other_ok=False)
    assert "1 failure(s) left unexplained after the rerun" in out
    assert "pick: skipped, 1 test failure(s)" in out


def test_a_top_copy_failure_turns_the_copy_off_and_explains_the_failures_it_caused(tmp_path):
    """The copy's own test fails, and a buffer-level test fails only while the copy is on: the
    copy is off for the later stages (the top stage skipped, pick keeps it off) and the rerun,
    with it off, explains the other failure."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rows = [{"impl": "drlhet-cuda", "op": "step", "mode": "fused", "capacity": 2**20,
             "batch": 4096, "branching": 16, "cuda_block_max_batch": 1024,
             "cuda_narrow_max_nodes": 1024, "cuda_cluster_max_batch": 4096,
             "cuda_shared_top": top, "cuda_tagged_claims": 1,
             "items_per_s": 1e8 * (2 if top else 1)}
            for top in (True, False)]  # fmt: skip
    (out_dir / "top_old.json").write_text(json.dumps(rows))  # rows that would pick the copy
    out, calls = run_checks(
        tmp_path, ["tests", "top", "pick", "quick"], top_ok=False, other_ok="TOP_OFF"
    )
    assert "turned off: top" in out and "== top: skipped, the copy failed" in out
    rerun = [c for c in calls if c.startswith("-m pytest") and "rerun.xml" in c]
    assert len(rerun) == 1 and "::test_scan_of_sample_and_update_equals_jax" in rerun[0]
    assert "0 failure(s) left unexplained after the rerun" in out
    assert "SHARED_TOP = True" in out  # what the rows say; the triage keeps the copy off
    quick = next(c for c in calls if "bench_quick.json" in c)
    assert "--no-cuda-shared-top" in quick
    cluster_run = next(c for c in calls if "tests_cluster.xml" in c)
    assert "and not cuda_shared_top" in cluster_run


def test_nothing_is_rerun_when_no_part_was_turned_off(tmp_path):
    out, calls = run_checks(tmp_path, ["tests", "pick"], other_ok=False)
    assert not any("rerun.xml" in c for c in calls) and "pick: skipped, 1 test" in out


def test_a_hanging_cluster_case_costs_its_timeout_and_turns_the_cluster_path_off(tmp_path):
    """Its worker is killed after TEST_TIMEOUT (3 s here), its case is an error, the other
    cases of the stage still run, and nothing of the other tests' stage is lost."""
    pytest.importorskip("pytest_timeout", reason="missing library: pytest-timeout")
    started = time.monotonic()
    out, calls = run_checks(
        tmp_path,
        ["tests", "cluster", "quick"],
        extra_env={"STAND_IN_XDIST": "1"},
        cluster_ok="hang()",
    )
    assert time.monotonic() - started < 100  # not the stage's 120 s
    assert "== tests_cluster: 1; the cluster path off" in out
    assert "== cluster: skipped" in out
    quick = [c for c in calls if "bench_quick.json" in c]
    assert len(quick) == 1 and "--cuda-cluster-max-batch 0" in quick[0]
    cases = cases_of(tmp_path / "out" / "tests_cluster.xml")
    assert cases["test_weigh_and_checked_update_equal_the_buffers_code[one cluster per tree]"] == [
        "error"
    ]
    assert cases["test_the_sample_from_the_key_equals_the_sample_from_xlas_targets["
                 "one cluster per tree]"] == []  # fmt: skip
    assert all(not v for v in cases_of(tmp_path / "out" / "tests.xml").values())


def test_a_cluster_case_that_fails_only_beside_the_key_targets_keeps_the_cluster_path(tmp_path):
    """The key targets fail: the cluster stage runs with them off and without their cases."""
    out, calls = run_checks(
        tmp_path, ["tests", "cluster", "quick"], key_ok=False, cluster_ok="KEY_OFF"
    )
    cluster_run = next(c for c in calls if "tests_cluster.xml" in c)
    assert "not slow and cuda_cluster and not cuda_key_targets" in cluster_run
    assert "tests_cluster: exit 0" in out and "== cluster: skipped" not in out
    quick = next(c for c in calls if "bench_quick.json" in c)
    assert "--cuda-cluster-max-batch 0" not in quick and "--no-cuda-key-targets" in quick


def cases_of(xml: Path) -> dict[str, list[str]]:
    """Each case of a JUnit report: what it holds (failure, error, skipped; none: passed)."""
    root = ElementTree.parse(xml).getroot()
    return {
        c.get("name", ""): [e.tag for e in c if e.tag != "system-out"]
        for c in root.iter("testcase")
    }


def test_the_tagged_stage_is_an_ab_in_one_run_and_a_failing_case_of_it_turns_it_off(tmp_path):
    """`tagged`: one bench_replay run with --cuda-tagged-ab (the update and step of cuda with
    its claims in a tagged table, its parents from it or not, beside cuda without, and jax);
    with CUDA_TAGGED_CLAIMS=1 and CUDA_TAGGED_SIBLINGS=1 the later stages run with them, unless
    their GPU tests (tests_tagged) failed; the cluster path stays on either way."""
    arm, switch = "tagged", "tagged-claims"
    env = {"CUDA_TAGGED_CLAIMS": "1", "CUDA_TAGGED_SIBLINGS": "1"}
    wrapped = " --tagged-claims --tagged-siblings --"
    out, calls = run_checks(tmp_path, ["tests", arm, "quick", "train"], extra_env=env)
    assert f"== tests_{arm}: exit 0" in out
    main = next(c for c in calls if "tests.xml" in c)
    assert f"and not cuda_{arm}" in main
    assert f"not slow and cuda_{arm}" in next(c for c in calls if f"tests_{arm}.xml" in c)
    (ab,) = [c for c in calls if f"/{arm}.json" in c]
    assert f"--cuda-{arm}-ab" in ab and "--backends cuda jax" in ab and "--ops update step" in ab
    # its base arm on the workspace's claims, though the paths in force have the table on
    assert "--cuda-tagged-claims False" in ab and "True" not in ab, ab
    quick = next(c for c in calls if "bench_quick.json" in c)
    assert f"--cuda-{switch}" in quick and "--cuda-tagged-siblings" in quick
    train = [c for c in calls if " train " in c]
    assert len(train) == 2 and all(wrapped in c for c in train)
    again = tmp_path / "again"
    again.mkdir()
    out, calls = run_checks(again, ["tests", arm, "quick"], extra_env=env, **{f"{arm}_ok": False})
    assert f"== tests_{arm}: 1; the {arm} path off" in out and f"== {arm}: skipped" in out
    assert not any(f"/{arm}.json" in c for c in calls)
    quick = next(c for c in calls if "bench_quick.json" in c)
    # off, not the library's: its default is on
    assert f"--cuda-{switch} False" in quick and "--cuda-cluster-max-batch 0" not in quick
    assert "--cuda-tagged-siblings" not in quick


@pytest.mark.parametrize("claims, flag, wrapped", [
    ("0", " --cuda-tagged-claims False", " --no-tagged-claims --"),
    ("1", " --cuda-tagged-claims True", " --tagged-claims --"),
    (None, None, None),
])  # fmt: skip
def test_the_tagged_claims_setting_reaches_every_stage_and_unset_is_the_librarys(
    tmp_path, claims, flag, wrapped
):
    """CUDA_TAGGED_CLAIMS (from pick, or by hand): 0 turns the library's default (on) off in the
    benchmarks and the wrapped commands, 1 turns it on; unset, no flag (the library's)."""
    env = {} if claims is None else {"CUDA_TAGGED_CLAIMS": claims}
    _, calls = run_checks(tmp_path, ["quick", "train"], extra_env=env)
    quick = next(c for c in calls if "bench_quick.json" in c)
    train = [c for c in calls if " train " in c]
    assert len(train) == 2
    if claims is None:
        assert "-tagged-claims" not in quick and not any("-tagged-claims" in c for c in train)
    else:
        assert flag in quick and all(wrapped in c for c in train)


def test_the_find_stage_is_an_ab_of_the_sample_in_one_run(tmp_path):
    """`find`: one bench_replay run with --cuda-find-ab (cuda's own sample call beside the sample
    in XLA around cuda's find, the sample and the step, jax too, 7 repeats by default)."""
    out, calls = run_checks(tmp_path, ["find"], extra_env={"FIND_BATCHES": "4096"})
    assert "== find: exit 0" in out
    (ab,) = [c for c in calls if "/find.json" in c]
    assert "--cuda-find-ab" in ab and "--backends cuda jax" in ab and "--ops sample step" in ab
    assert "--batches 4096 " in ab and "--repeats 7" in ab


def test_the_spread_stage_is_an_ab_in_one_run_and_a_failing_spread_case_turns_it_off(tmp_path):
    """`spread`: one bench_replay run with --cuda-spread-ab (three block sizes by default) and
    --cuda-find-ab; the spread sample's GPU tests run apart (tests_spread), and a failure there
    skips the stage and keeps the later stages off the spread path."""
    out, calls = run_checks(tmp_path, ["tests", "spread"])
    assert "== tests_spread: exit 0" in out
    main = next(c for c in calls if "/tests.xml" in c)
    assert "and not cuda_spread" in main
    assert "not slow and cuda_spread" in next(c for c in calls if "tests_spread.xml" in c)
    (ab,) = [c for c in calls if "/spread.json" in c]
    assert "--cuda-spread-ab 64 128 256 " in ab and "--cuda-find-ab" in ab
    assert "--ops sample step" in ab and "--batches 2048 4096 " in ab and "--repeats 7" in ab
    # with the spread sample in force, the A/B's base arm is still the own call, not spread
    on = tmp_path / "on"
    on.mkdir()
    env = {"CUDA_SPREAD_MIN_BATCH": "2048", "CUDA_SPREAD_THREADS": "64"}
    _, calls = run_checks(on, ["tests", "spread", "quick"], extra_env=env)
    (ab,) = [c for c in calls if "/spread.json" in c]
    assert f"--cuda-spread-min-batch {1 << 62} " in ab and "--cuda-spread-min-batch 2048" not in ab
    assert "--cuda-spread-min-batch 2048" in next(c for c in calls if "bench_quick.json" in c)
    again = tmp_path / "again"
    again.mkdir()
    env = {"CUDA_SPREAD_MIN_BATCH": "2048"}
    out, calls = run_checks(again, ["tests", "spread", "quick"], extra_env=env, spread_ok=False)
    assert "== tests_spread: 1; the spread path off" in out and "== spread: skipped" in out
    assert not any("/spread.json" in c for c in calls)
    assert "--cuda-spread-min-batch" not in next(c for c in calls if "bench_quick.json" in c)


def test_pick_reads_the_spread_rows_and_the_later_stages_spread_the_sample_where_it_won(
    tmp_path,
):
    """`pick` with only the spread stage's rows (written here as the stage would): where the
    spread sample in blocks of 64 wins from B 2048, the later stages run with it."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    base = {"op": "step", "mode": "fused", "capacity": 2**20, "branching": 16,
            "cuda_block_max_batch": 1024, "cuda_narrow_max_nodes": 1024,
            "cuda_cluster_max_batch": 4096, "cuda_own_sample": True,
            "cuda_tagged_claims": 1}  # fmt: skip
    arms = {"drlhet-cuda": (1 << 62, 128, 120e6), "drlhet-cuda-spread64": (1, 64, 135e6)}
    rows = [
        base | {"impl": impl, "batch": b, "cuda_spread_min_batch": least,
                "cuda_spread_threads": threads, "items_per_s": rate}
        for b in (2048, 4096)
        for impl, (least, threads, rate) in arms.items()
    ]  # fmt: skip
    (out_dir / "spread.json").write_text(json.dumps(rows))
    out, calls = run_checks(tmp_path, ["pick", "quick", "train"])
    assert "SPREAD_MIN_BATCH = 2048, SPREAD_THREADS = 64" in out
    env = (out_dir / "cuda_paths.env").read_text()
    assert "CUDA_SPREAD_MIN_BATCH=2048\nCUDA_SPREAD_THREADS=64\n" in env
    quick = next(c for c in calls if "bench_quick.json" in c)
    assert "--cuda-spread-min-batch 2048 --cuda-spread-threads 64" in quick
    train = [c for c in calls if " train " in c]
    assert train and all(" --spread-min-batch 2048 --spread-threads 64" in c for c in train)


EVERY_PATH_SETTING = {
    "CUDA_CLUSTER_MAX_BATCH": "2048", "CUDA_NARROW_MAX_NODES": "512", "CUDA_SHARED_TOP": "0",
    "CUDA_KEY_TARGETS": "0", "CUDA_TAGGED_CLAIMS": "1", "CUDA_TAGGED_SIBLINGS": "1",
    "CUDA_OWN_SAMPLE_MAX_BATCH": "1024", "CUDA_SPREAD_MIN_BATCH": "2048",
    "CUDA_SPREAD_THREADS": "64",
}  # fmt: skip


def test_every_command_the_stages_run_with_every_setting_parses(tmp_path, monkeypatch):
    """With every CUDA_* setting given (as `pick` or a person would), each bench_replay.py and
    with_cuda_paths.py command line the stages build, and the drlhet or profile_gpu.py command
    each wraps, parses with the scripts' own options (the stand-in Python runs none of them): a
    flag the scripts spell otherwise would cost a GPU call its stage, as `--cuda-tagged-claims`
    without its value once would have."""
    import tyro

    from drlhet import cli

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    bench = importlib.import_module("bench_replay")
    wrapper = importlib.import_module("with_cuda_paths")
    stages = ["quick", "train", "bench", "profile", "tagged", "spread", "find", "top", "probe",
              "narrow", "cluster", "targets", "flags", "split"]  # fmt: skip
    _, calls = run_checks(tmp_path, stages, extra_env=EVERY_PATH_SETTING)
    benches = [c.split() for c in calls if c.startswith("experiments/bench_replay.py")]
    wrapped = [c.split() for c in calls if c.startswith("experiments/with_cuda_paths.py")]
    assert len(benches) >= 15 and len(wrapped) >= 5
    for argv in benches:
        tyro.cli(bench.Args, args=argv[1:])  # the stages that set a path themselves: parse only
    for argv in [b for b in benches if "bench_quick.json" in b[-1]]:
        args = tyro.cli(bench.Args, args=argv[1:])
        assert args.cuda_tagged_claims is True and args.cuda_tagged_siblings is True
        assert args.cuda_cluster_max_batch == 2048 and args.cuda_spread_threads == 64
    profile = importlib.import_module("profile_gpu")
    ran = []
    for name in ("train_command", "backends_command", "profile_command", "dse_command"):
        real = getattr(cli, name)
        monkeypatch.setattr(cli, name, functools.wraps(real)(lambda *a, **k: ran.append(k)))
    for argv in wrapped:
        split = argv.index("--")
        args = tyro.cli(wrapper.Args, args=argv[1:split])
        assert args.tagged_claims and args.tagged_siblings and args.no_shared_top
        assert (args.cluster_max_batch, args.spread_min_batch) == (2048, 2048)
        command = argv[split + 1 :]
        if command[:2] == ["-m", "drlhet"]:
            cli.main(command[2:])  # parsed by drlhet's own CLI; the command itself stubbed
        else:
            assert command[0] == "experiments/profile_gpu.py", command
            tyro.cli(profile.Args, args=command[1:])
    assert len(ran) == len(wrapped) - 1  # every drlhet command (train, split) parsed and "run"


def test_the_own_sample_limit_reaches_the_benchmarks_and_the_wrapped_commands(tmp_path):
    """CUDA_OWN_SAMPLE_MAX_BATCH (set by hand after `find`): bench_replay's flag in quick, the
    wrapper's in train."""
    env = {"CUDA_OWN_SAMPLE_MAX_BATCH": "1024"}
    out, calls = run_checks(tmp_path, ["quick", "train"], extra_env=env)
    assert "--cuda-own-sample-max-batch 1024" in next(c for c in calls if "bench_quick.json" in c)
    train = [c for c in calls if " train " in c]
    assert train and all(" --own-sample-max-batch 1024 --" in c for c in train)


def test_pick_reads_the_tagged_stages_rows_and_the_later_stages_run_with_its_choice(tmp_path):
    """`pick` with only the tagged stage's rows (written here as the stage would): where its
    claims win, the later stages run with them."""
    arm, switch = "tagged", "tagged_claims"
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rows = [
        {"impl": impl, "op": "step", "mode": "fused", "capacity": 2**20, "batch": b,
         "branching": 16, "cuda_block_max_batch": 1024, "cuda_narrow_max_nodes": 1024,
         "cuda_cluster_max_batch": 4096, f"cuda_{switch}": int(impl.endswith(arm)),
         "items_per_s": 130e6 if impl.endswith(arm) else 120e6}
        for b in (2048, 4096)
        for impl in ("drlhet-cuda", f"drlhet-cuda-{arm}")
    ]  # fmt: skip
    (out_dir / f"{arm}.json").write_text(json.dumps(rows))
    out, calls = run_checks(tmp_path, ["pick", "quick"])
    assert f"{switch.upper()} = True" in out
    assert f"CUDA_{switch.upper()}=1" in (out_dir / "cuda_paths.env").read_text()
    flag = f"--cuda-{switch.replace('_', '-')}"
    assert flag in next(c for c in calls if "bench_quick.json" in c)


def test_pick_reads_the_find_rows_and_the_later_stages_sample_around_find_where_it_won(
    tmp_path,
):
    """`pick` with only the find stage's rows (written here as the stage would): where the
    sample around find wins from B 2048, the later stages run with OWN_SAMPLE_MAX_BATCH 2047."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rows = [
        {"impl": impl, "op": "step", "mode": "fused", "capacity": 2**20, "batch": b,
         "branching": 16, "cuda_block_max_batch": 1024, "cuda_narrow_max_nodes": 1024,
         "cuda_cluster_max_batch": 4096, "cuda_own_sample": impl == "drlhet-cuda",
         "cuda_tagged_claims": 1, "items_per_s": 130e6 if impl.endswith("find") else 120e6}
        for b in (2048, 4096)
        for impl in ("drlhet-cuda", "drlhet-cuda-find")
    ]  # fmt: skip
    (out_dir / "find.json").write_text(json.dumps(rows))
    out, calls = run_checks(tmp_path, ["pick", "quick"])
    assert "OWN_SAMPLE_MAX_BATCH = 2047" in out
    assert "CUDA_OWN_SAMPLE_MAX_BATCH=2047" in (out_dir / "cuda_paths.env").read_text()
    assert "--cuda-own-sample-max-batch 2047" in next(c for c in calls if "bench_quick.json" in c)


def test_a_cluster_stage_not_run_leaves_the_cluster_path_off(tmp_path):
    """Out of time before it (DEADLINE_S), the cluster and tagged paths are untested: off. The
    tests stage takes over a second, so that the clock (whole seconds) has moved after it."""
    out, calls = run_checks(
        tmp_path, ["tests", "quick"], extra_env={"DEADLINE_S": "15", "STAND_IN_SLEEP": "1.2"}
    )
    assert "== tests_cluster: skipped" in out and "== tests_tagged: skipped" in out
    assert "== tests_cluster: not run; the cluster path off" in out
    assert "== tests_tagged: not run; the tagged path off" in out
    assert not any("tests_cluster.xml" in c or "tests_tagged.xml" in c for c in calls)


def test_the_gpu_stages_select_the_cluster_and_key_cases_by_their_marks(triage, tmp_path):
    """The stages select by marks (tests/backends/conftest.py, test_cuda_buffer.py): a lost mark
    would run the cluster path's cases with the others, or none of them apart."""
    (tmp_path / "marks_of.py").write_text(
        "def pytest_collection_finish(session):\n"
        "    for item in session.items:\n"
        "        names = ' '.join(sorted({m.name for m in item.iter_markers()}))\n"
        "        print(f'MARKS\\t{item.nodeid}\\t{names}')\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-s", "-p", "no:cacheprovider",
         "-p", "marks_of", "tests/backends/test_cuda.py", "tests/backends/test_cuda_buffer.py"],
        capture_output=True, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    marks = {
        line.split("\t")[1]: set(line.split("\t")[2].split())
        for line in done.stdout.splitlines()
        if line.startswith("MARKS\t")
    }
    cluster = [i for i, m in marks.items() if "cuda_cluster" in m]
    assert len(cluster) >= 40 and all(triage.CLUSTER_PATH in i for i in cluster)  # GPU + emulated
    assert not any(triage.CLUSTER_PATH in i for i, m in marks.items() if "cuda_cluster" not in m)
    tagged = [i for i, m in marks.items() if "cuda_tagged" in m]  # on a GPU only
    for path in (TAGGED_PATH, TAGGED_CLAIMS_PATH):
        ids = [i for i in tagged if path in i]
        assert len(ids) >= 20 and all("[gpu, " in i for i in ids), path
        assert not any(path in i for i, m in marks.items() if "cuda_tagged" not in m)
    assert all(TAGGED_PATH in i or TAGGED_CLAIMS_PATH in i for i in tagged)
    key = {i.split("::")[-1].split("[")[0] for i, m in marks.items() if "cuda_key_targets" in m}
    assert key == set(triage.KEY_TESTS)


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


def test_the_top_stage_times_the_copy_both_ways_and_pick_turns_it_off_where_it_loses(tmp_path):
    """`top`: the sample and step with the top levels copied and not; `pick` reads its rows
    (written here as the stage would) and the later stages run without the copy."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for name, top, rate in (("top_on", True, 90e6), ("top_off", False, 120e6)):
        rows = [{"impl": "drlhet-cuda", "op": "step", "mode": "fused", "capacity": 2**20,
                 "batch": 4096, "branching": 16, "cuda_block_max_batch": 1024,
                 "cuda_narrow_max_nodes": 1024, "cuda_cluster_max_batch": 4096,
                 "cuda_shared_top": top, "cuda_tagged_claims": 1, "items_per_s": rate}]  # fmt: skip
        (out_dir / f"{name}.json").write_text(json.dumps(rows))
    out, calls = run_checks(tmp_path, ["top", "pick", "quick", "train"])
    top = [c for c in calls if c.startswith("experiments/bench_replay.py") and "/top_" in c]
    assert len(top) == 2 and "--ops sample step" in top[0]
    assert " --cuda-shared-top " in top[0] and top[0].endswith("top_on.json")
    assert " --no-cuda-shared-top " in top[1] and top[1].endswith("top_off.json")
    assert "SHARED_TOP = False" in out
    quick = next(c for c in calls if "bench_quick.json" in c)
    assert "--no-cuda-shared-top" in quick
    train = [c for c in calls if " train " in c]
    assert train and all("--no-shared-top" in c.split(" -- ")[0] for c in train)


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


def test_the_flags_stage_times_the_step_with_the_loop_in_the_graph_and_unrolled(tmp_path):
    _, calls = run_checks(tmp_path, ["flags"], extra_env={"XLA_FLAGS": "--xla_mine=1"})
    flags = (tmp_path / "calls.log.xla_flags").read_text().splitlines()
    runs = [(c, f) for c, f in zip(calls, flags, strict=True) if "bench_replay" in c]
    assert [c.split("--out ")[1].split("/")[-1] for c, _ in runs] == [
        "flags_default.json", "flags_while.json", "flags_unroll.json", "flags_carry.json",
        "flags_carry_while.json",
    ]  # fmt: skip
    (default, _), (_, while_flags), (unroll, unroll_flags), (carry, carry_flags) = runs[:4]
    assert "WHILE,CONDITIONAL" in while_flags and while_flags.startswith("--xla_mine=1")
    assert unroll_flags == "--xla_mine=1" == carry_flags  # put back after the while run
    assert "--unroll 8" in unroll and "--unroll" not in default
    assert "--loop carry" in carry and "--loop" not in default + unroll
    carry_while, carry_while_flags = runs[4]
    assert "--loop carry" in carry_while and "WHILE,CONDITIONAL" in carry_while_flags


def test_the_targets_stage_times_the_key_xlas_targets_and_the_sample_around_find(tmp_path):
    _, calls = run_checks(tmp_path, ["targets"])
    runs = [c for c in calls if c.startswith("experiments/bench_replay.py")]
    assert [c.split("--out ")[1].split("/")[-1] for c in runs] == [
        "targets_key.json", "targets_xla.json", "targets_find.json"
    ]  # fmt: skip
    assert "--no-cuda-own-sample" in runs[2] and "--no-cuda-key-targets" in runs[1]


BROKEN_KEY = """
import emulated_gpu  # the GPU place on the emulated CPU device

from drlhet.backends import cuda

_draw = cuda.weigh_key


def broken(*args, **kwargs):  # the key's draw, its weights wrong (a GPU-only fault stand-in)
    out = _draw(*args, **kwargs)
    return out if out is None else (out[0], out[1], out[2] * 2.0, out[3])


cuda.weigh_key = broken
"""


@pytest.mark.slow
def test_the_tests_stage_turns_a_broken_key_draw_off_and_explains_the_rest(tmp_path):
    """The `tests` stage for real (pytest, the triage, its rerun, the apart stages) on the
    emulated 'GPU' (tests/backends/emulated_gpu.py) whose key draw gives wrong weights: the key
    tests fail, the triage turns the key's draw off, the other failures pass when rerun with it
    off, and the cluster, tagged and spread stages pass with it off, so nothing is left
    unexplained and every path stays on. Before their tests followed `cuda.KEY_TARGETS`, the
    spread stage failed here and the rerun's failures stayed unexplained."""
    (tmp_path / "broken_key.py").write_text(BROKEN_KEY)
    env = {
        **os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable,
        "TEST_WORKERS": "2", "TAIL": "2", "PYTEST_ADDOPTS": "-p broken_key",
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "backends"), str(tmp_path)]),
    }  # fmt: skip
    for name in ("WHEELS", "DEADLINE_S", "CUDA_KEY_TARGETS", "CUDA_CLUSTER_MAX_BATCH"):
        env.pop(name, None)
    done = subprocess.run(
        ["bash", str(REPO / "experiments" / "gpu_checks.sh"), "tests"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=900,
    )  # fmt: skip
    out = done.stdout
    assert "== tests: exit 1" in out and "turned off: key" in out, out[-3000:]
    assert "== tests: 0 failure(s) left unexplained after the rerun" in out, out[-3000:]
    for path in ("cluster", "tagged", "spread"):
        assert f"== tests_{path}: exit 0" in out, out[-3000:]
    assert "== the later stages run with: --no-cuda-key-targets" in out
