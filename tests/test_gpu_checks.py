"""experiments/triage_gpu_tests.py and the shell around it in experiments/gpu_checks.sh: when the
GPU tests of a lent machine fail, the parts they test are turned off for the later stages of the
same call. The GPU tests' report is made here by pytest itself, from stand-in tests that carry
the real tests' names and ids; the shell runs its stages with a stand-in Python that records
each command instead of building, benchmarking or training (tests/gpu_checks_stand_ins.py). The
stages that measure: test_gpu_checks_stages.py and test_gpu_checks_profiles.py."""

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
from gpu_checks_stand_ins import REPO, report, run_checks

TAGGED_PATH = "claims in a table kept by the call"  # tests/backends/cuda_places.py
TAGGED_CLAIMS_PATH = "claims in a table and parents from the tree"  # idem
BUFFER_TESTS = (
    "tests/backends/test_cuda_buffer.py",
    "tests/backends/test_cuda_buffer_lowering.py",
    "tests/backends/test_cuda_buffer_device.py",
)
"""The buffer calls' tests among the GPU tests (experiments/gpu_checks.sh's GPU_TESTS, beside
test_cuda.py and conformance.py): where the tests the triage names are."""


@pytest.fixture
def triage(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("triage_gpu_tests")


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
        re.findall(r"^def (test_\w+)", "\n".join((REPO / f).read_text() for f in BUFFER_TESTS),
                   re.M)
    )  # fmt: skip
    assert set(triage.KEY_TESTS) <= defined
    assert {n for n in defined if "key" in n or "drawn_in_the_call" in n} <= set(triage.KEY_TESTS)
    assert set(triage.TOP_TESTS) <= defined
    assert {n for n in defined if "top_copy" in n} <= set(triage.TOP_TESTS)


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
        "pick: skipped, no cluster, narrow, top, tagged, find, spread, wide or sorted rows" in out
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
    skipped = "pick: skipped, no cluster, narrow, top, tagged, find, spread, wide or sorted rows"
    assert skipped in out


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
    """The stages select by marks (tests/backends/conftest.py, test_cuda_buffer*.py): a lost mark
    would run the cluster path's cases with the others, or none of them apart."""
    (tmp_path / "marks_of.py").write_text(
        "def pytest_collection_finish(session):\n"
        "    for item in session.items:\n"
        "        names = ' '.join(sorted({m.name for m in item.iter_markers()}))\n"
        "        print(f'MARKS\\t{item.nodeid}\\t{names}')\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-s", "-p", "no:cacheprovider",
         "-p", "marks_of", "tests/backends/test_cuda.py", *BUFFER_TESTS],
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
