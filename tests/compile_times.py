"""A pytest plugin that says where the suite's time goes (``make test-times``): per test, its
wall time beside the seconds JAX spent tracing programs to jaxprs, lowering them to MLIR,
compiling them with XLA, and loading them from the persistent compilation cache, with the
number of each. The suite is compile-bound; this is how to see which tests compile what.

The figures come from JAX's own monitoring events (``jax.monitoring``), summed over each test's
setup, call and teardown; a module fixture's work counts to the test that first asks for it.
Nested traces count once each (an inner ``jit`` traced inside an outer one is its own event),
and threads of a pipelined run compile side by side, so a test's compile seconds may exceed its
wall time.

Each process writes ``$DRLHET_TEST_TIMES`` (default ``test-times.json``); under pytest-xdist
each worker writes ``<stem>.<worker>.json`` and the controller merges them into the named file
and prints the totals and the files that took longest.
"""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path

import jax
import pytest

EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_load",
}
"""JAX's duration events and the names this plugin gives them."""

FIELDS = ("wall", *EVENTS.values())

_now: dict[str, str | None] = {"test": None}
_times: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def _heard(event: str, duration: float, **_: object) -> None:
    name = EVENTS.get(event)
    if name is not None and _now["test"] is not None:
        _times[_now["test"]][name] += duration
        _times[_now["test"]][f"{name}_n"] += 1


jax.monitoring.register_event_duration_secs_listener(_heard)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _now["test"] = item.nodeid
    start = time.perf_counter()
    yield
    _times[item.nodeid]["wall"] += time.perf_counter() - start
    _now["test"] = None


def _target() -> Path:
    return Path(os.environ.get("DRLHET_TEST_TIMES", "test-times.json"))


def _worker_file(worker: str) -> Path:
    target = _target()
    return target.with_name(f"{target.stem}.{worker}.json")


def _parts() -> list[Path]:
    return sorted(_target().parent.glob(f"{_target().stem}.gw*.json"))


def pytest_sessionstart(session) -> None:
    if not hasattr(session.config, "workerinput"):  # a killed run's parts are not this run's
        for part in _parts():
            part.unlink()


def pytest_sessionfinish(session) -> None:
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    rows = {test: dict(counts) for test, counts in _times.items()}
    if worker is not None:  # an xdist worker: its part, for the controller to merge
        _worker_file(worker).write_text(json.dumps(rows))
        return
    for part in _parts():
        rows.update(json.loads(part.read_text()))
        part.unlink()
    _target().write_text(json.dumps(rows, indent=1, sort_keys=True))
    session.config._drlhet_test_times = rows


def summary(rows: dict[str, dict]) -> list[str]:
    """Lines of totals over ``rows`` (test -> its figures) and the ten files of most wall time
    with their figures, in seconds."""
    total: collections.Counter = collections.Counter()
    files: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for test, figures in rows.items():
        total.update(figures)
        files[test.split("::")[0]].update(figures)
    head = " ".join(f"{f} {total[f]:.0f} s" for f in FIELDS)
    lines = [f"test times (worker seconds): {head}; XLA compiles {total['compile_n']:.0f}"]
    longest = sorted(files.items(), key=lambda kv: -kv[1]["wall"])[:10]
    for name, f in longest:
        lines.append(f"  {name}: " + ", ".join(f"{k} {f[k]:.1f}" for k in FIELDS))
    return lines


def pytest_terminal_summary(terminalreporter, config) -> None:
    rows = getattr(config, "_drlhet_test_times", None)
    if rows is not None:
        for line in summary(rows):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"  (per test: {_target()})")
