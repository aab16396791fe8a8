"""Which of the CUDA backend's switchable parts the GPU tests found wrong, from their JUnit XML.

``experiments/gpu_checks.sh`` runs the GPU tests first (its ``tests`` stage) and then measures,
in the same call of a lent machine. Three parts of the backend can be switched off by a setting
that the later stages pass on, without a rebuild:

- ``cluster``: the update and sample in one cluster of blocks per tree
  (``drlhet.backends.cuda.CLUSTER_MAX_BATCH``; 0 turns it off). Its tests are the cases whose
  id names the path ``one cluster per tree`` (``tests/backends/cuda_places.py``; marked
  ``cuda_cluster``). ``gpu_checks.sh`` runs them in a stage of their own, after the others,
  and turns the path off on any failure there without this script; a report that holds them
  is classified here all the same.
- ``key``: the sample's targets drawn inside the sample call (``drlhet.backends.cuda.
  KEY_TARGETS``). Its tests are the functions in ``KEY_TESTS``.
- ``top``: the sample's descents through a copy of the tree's top levels in shared memory
  (``drlhet.backends.cuda.SHARED_TOP``). Its test is the function in ``TOP_TESTS`` (marked
  ``cuda_shared_top``): the copy on against off, on every path.

A failed test of a part turns that part off (a case of two parts turns off both). Any other
failure is *unexplained* for now: the buffer-level tests also draw their targets in the sample
call, and a process whose GPU context a faulting kernel poisoned fails every test after it, so
``gpu_checks.sh`` reruns the unexplained ones (``--rerun-out``: their pytest node ids) alone,
with the failed parts off (``DRLHET_TEST_CUDA_KEY_TARGETS=0``, ``DRLHET_TEST_CUDA_SHARED_TOP=0``:
tests/backends/conftest.py), and
triages that run's report: what still fails is unexplained, and the ``pick`` stage, which
chooses between paths by speed, then keeps the library's defaults. This script reads the XML
that pytest's ``--junitxml`` wrote, prints what failed and what it turns off, and writes
``KEY=value`` lines for the shell (``--env-out``) and the same as JSON (``--out``).

A missing XML file is no failure but *no report*: the stage did not run, or it ended before
pytest wrote the file (timed out, killed, crashed), so nothing is known of any test. It is said
so in one line, nothing is turned off, and no failure is counted (``unexplained`` stays empty);
the shell's lines say ``TRIAGE_NO_REPORT=1``, and ``TRIAGE_UNEXPLAINED=1``, the gate that
``gpu_checks.sh`` reads, so that its ``pick`` stage keeps the library's defaults: no path is
chosen that no test has checked. A file that is there but not a JUnit report counts as one
unexplained failure (``<the report>``).

Usage:
  python experiments/triage_gpu_tests.py --junit tests.xml --env-out triage.env --out triage.json \
      --rerun-out rerun.txt
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import checked_cli

CLUSTER_PATH = "one cluster per tree"
"""The id of the cluster path in the GPU tests' parameters (``cuda_places.PATHS``)."""
KEY_TESTS = (
    "test_targets_from_the_key_are_jax_randoms_bit_for_bit",
    "test_the_sample_from_the_key_equals_the_sample_from_xlas_targets",
    "test_the_targets_are_drawn_in_the_call_only_where_they_equal_xlas",
    "test_targets_are_never_drawn_in_the_call_without_the_partitionable_layout",
    "test_key_targets_turned_off_draws_the_targets_in_xla",
)
"""The tests of the targets drawn in the sample call (``tests/backends/test_cuda_buffer*.py``)."""
TOP_TESTS = ("test_the_top_copy_gives_the_bits_of_descents_that_read_the_tree",)
"""The test of the descents' copy of the tree's top (in ``tests/backends/test_cuda_buffer*.py``)."""


@dataclasses.dataclass
class Args:
    junit: Path
    """The JUnit XML of the GPU tests (pytest ``--junitxml``)."""
    env_out: Path | None = None
    """Where to write the shell's ``KEY=value`` lines."""
    out: Path | None = None
    """Where to write the same as JSON."""
    rerun_out: Path | None = None
    """Where to write the pytest node ids of the unexplained failures, one a line."""


@dataclasses.dataclass(frozen=True)
class Triage:
    """What the GPU tests' failures say: the failed ids, and the parts to turn off."""

    failed: tuple[str, ...]
    cluster: bool
    key: bool
    unexplained: tuple[str, ...]
    reason: str = ""
    top: bool = False
    no_report: str = ""
    """Why there is no report to triage (the file is missing), or ""."""


def parts_of(test_id: str) -> set[str]:
    """The switchable parts a test id exercises: ``cluster``, ``key``, ``top``, or none."""
    function = test_id.split("::")[-1].split("[")[0]
    parts = set()
    if CLUSTER_PATH in test_id:
        parts.add("cluster")
    if function in KEY_TESTS:
        parts.add("key")
    if function in TOP_TESTS:
        parts.add("top")
    return parts


def node_id(classname: str, name: str) -> str:
    """The pytest node id of a JUnit case: ``tests.backends.test_x`` (and a ``TestY`` class)
    and ``test_z[params]`` -> ``tests/backends/test_x.py::TestY::test_z[params]``."""
    parts = classname.split(".")
    classes: list[str] = []
    while parts and parts[-1][:1].isupper():
        classes.insert(0, parts.pop())
    return "::".join(["/".join(parts) + ".py", *classes, name])


def failed_ids(junit: Path) -> tuple[str, ...]:
    """The pytest node ids (`node_id`) of the failed or errored cases of ``junit``.

    Raises:
      ValueError: the file is missing or is not a JUnit XML report.
    """
    if not junit.is_file():
        raise ValueError(f"no JUnit XML at {junit}")
    try:
        root = ElementTree.parse(junit).getroot()
    except ElementTree.ParseError as e:
        raise ValueError(f"{junit} is not XML ({e})") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError(f"{junit} is not a JUnit report (its root is <{root.tag}>)")
    return tuple(
        node_id(case.get("classname", ""), case.get("name", ""))
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    )


def triage(junit: Path) -> Triage:
    """Classifies the failures of ``junit`` (`parts_of`); a missing report is no report
    (``no_report``), an unreadable one is unexplained."""
    if not junit.exists():
        why = "the stage did not run, or it ended before pytest wrote it (timed out, crashed)"
        return Triage((), False, False, (), no_report=f"no JUnit XML at {junit}: {why}")
    try:
        failed = failed_ids(junit)
    except ValueError as e:
        return Triage((), False, False, ("<the report>",), reason=str(e))
    parts = [parts_of(t) for t in failed]
    unexplained = tuple(t for t, p in zip(failed, parts, strict=True) if not p)
    cluster = any("cluster" in p for p in parts)
    key = any("key" in p for p in parts)
    top = any("top" in p for p in parts)
    return Triage(failed, cluster, key, unexplained, top=top)


def env_lines(t: Triage) -> str:
    """The shell's lines: the settings that turn the failed parts off, and the count of
    unexplained failures (1 where there is no report: the shell's gate of ``pick``, which must
    not choose paths that no test has checked; ``TRIAGE_NO_REPORT=1`` says why)."""
    if t.no_report:
        return "TRIAGE_NO_REPORT=1\nTRIAGE_UNEXPLAINED=1\n"
    lines = []
    if t.cluster:
        lines.append("CUDA_CLUSTER_MAX_BATCH=0")
        lines.append("TRIAGE_NO_CLUSTER=1")
    if t.key:
        lines.append("CUDA_KEY_TARGETS=0")
    if t.top:
        lines.append("CUDA_SHARED_TOP=0")
        lines.append("TRIAGE_NO_TOP=1")
    lines.append(f"TRIAGE_UNEXPLAINED={len(t.unexplained)}")
    return "".join(f"{line}\n" for line in lines)


def main(args: Args) -> Triage:
    t = triage(args.junit)
    if t.no_report:
        print(
            f"== triage: no report: {t.no_report}; no test result to triage: nothing turned "
            "off, no failure counted, and pick keeps the library's defaults"
        )
    else:
        _print(t)
    for path in (args.env_out, args.out, args.rerun_out):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    if args.env_out is not None:
        args.env_out.write_text(env_lines(t))
    if args.out is not None:
        args.out.write_text(json.dumps(dataclasses.asdict(t), indent=1))
    if args.rerun_out is not None:  # an unreadable report has nothing to rerun
        rerun = [] if t.reason else t.unexplained
        args.rerun_out.write_text("".join(f"{test_id}\n" for test_id in rerun))
    return t


def _print(t: Triage) -> None:
    """What failed, what is turned off, and how many failures are unexplained."""
    if t.reason:
        print(f"== triage: {t.reason}: every failure unexplained")
    print(f"== triage: {len(t.failed)} failed")
    for test_id in t.failed:
        print(f"  {'+'.join(sorted(parts_of(test_id))) or 'other':11s} {test_id}")
    off = [part for part, on in (("cluster", t.cluster), ("key", t.key), ("top", t.top)) if on]
    print(f"turned off: {', '.join(off) or 'nothing'}")
    print(f"unexplained: {len(t.unexplained)}")


if __name__ == "__main__":
    checked_cli.run(Args, main, {})
