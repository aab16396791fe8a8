"""Failures injected into the multi-device run paths: each run ends, within seconds, with the
error that was raised (not a consequence of it in another thread), and leaves no stage thread."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from drlhet.runtime import channel_stages, host_loop, pipeline, stage_loops
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run
from drlhet.runtime.saving import Saving, Stopped
from drlhet.runtime.stage_loops import StageRun
from drlhet.runtime.threads import THREAD_PREFIX, Crew
from drlhet.runtime.update_fifo import UpdateFifo
from tests.runtime.test_run import SMALL, SPLITS

PIPED = TrainConfig(**{**SMALL.__dict__, "delay": 4})  # k >= S: the pipeline
STRICT = TrainConfig(**{**SMALL.__dict__, "delay": 1})  # k < S: the strict host loop
SOON_S = 10.0  # from the failure to the caller (a chunk of SMALL takes well under a second)


class Broke(Exception):
    """The injected failure."""


def stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


class Fault:
    """Raises `Broke` at its ``at``-th call (and after), noting when it first did."""

    def __init__(self, at: int, what: str = "injected"):
        self.at, self.what, self.calls, self.raised_at = at, what, 0, None

    def hit(self) -> None:
        self.calls += 1
        if self.calls >= self.at:
            if self.raised_at is None:
                self.raised_at = time.perf_counter()
            raise Broke(f"{self.what} failed at call {self.calls}")

    def wrap(self, fn):
        def failing(*args, **kwargs):
            self.hit()
            return fn(*args, **kwargs)

        return failing


def patch_stages(monkeypatch, module, name: str, field: str, fault: Fault) -> None:
    """``module.name`` (a stages factory) builds stages whose ``field`` goes through ``fault``."""
    build = getattr(module, name)

    def patched(*args, **kwargs):
        st = build(*args, **kwargs)
        return st._replace(**{field: fault.wrap(getattr(st, field))})

    monkeypatch.setattr(module, name, patched)


def assert_fails_with(fault: Fault, fn, stage: str | None = None) -> None:
    """``fn()`` raises the fault's own error soon after it was raised, and no thread is left."""
    with pytest.raises(Broke) as info:
        fn()
    assert info.value.args == (f"{fault.what} failed at call {fault.at}",)
    assert fault.raised_at is not None
    assert time.perf_counter() - fault.raised_at < SOON_S
    if stage is not None:
        assert any(f"{stage} stage" in n for n in getattr(info.value, "__notes__", []))
    assert stage_threads() == []


@pytest.mark.parametrize(
    "split,field,stage",
    [
        ("A+L|R", "actor", "actors+learner"),
        ("A+L|R", "replay", "replay"),
        ("A+R|L", "actor_replay", "actors+replay"),
        ("A|R+L", "learner", "replay+learner"),
    ],
)
def test_a_stage_that_fails_mid_run_ends_the_host_driven_pipeline(monkeypatch, split, field, stage):
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", True)
    fault = Fault(60, field)  # in the second chunk (50 calls a chunk)
    patch_stages(monkeypatch, pipeline, "pipeline_stages", field, fault)
    assert_fails_with(fault, lambda: run(PIPED, SPLITS[split]), stage)


def test_the_update_queue_failing_ends_the_host_driven_pipeline(monkeypatch):
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", True)
    fault = Fault(30, "take")
    monkeypatch.setattr(stage_loops.UpdateFifo, "take", fault.wrap(UpdateFifo.take))
    assert_fails_with(fault, lambda: run(PIPED, SPLITS["A+L|R"]), "replay")


@pytest.mark.parametrize("host", [True, False])
@pytest.mark.parametrize("tag", ["actors", "learner"])
def test_a_thread_that_fails_between_chunks_ends_the_pipeline(monkeypatch, host, tag):
    # in-program channels: the other device's program waits on a channel for ever unless the
    # failure closes them
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", host)
    fault = Fault(1, f"report {tag}")
    report = StageRun.report

    def failing(self, t, chunk, payload):
        if t == tag:
            fault.hit()
        return report(self, t, chunk, payload)

    monkeypatch.setattr(StageRun, "report", failing)
    assert_fails_with(fault, lambda: run(PIPED, SPLITS["A|R+L"]))


@pytest.mark.parametrize("host", [True, False])
def test_an_on_chunk_error_reaches_the_caller_from_the_pipeline(monkeypatch, host):
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", host)
    fault = Fault(1, "on_chunk")
    assert_fails_with(fault, lambda: run(PIPED, SPLITS["A+R|L"], on_chunk=lambda row: fault.hit()))


@pytest.mark.parametrize("host", [True, False])
def test_a_checkpoint_writer_error_reaches_the_caller_from_the_pipeline(monkeypatch, host):
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", host)
    fault = Fault(1, "write")
    saving = Saving(1, lambda chunk, states, rows: fault.hit())
    assert_fails_with(fault, lambda: run(PIPED, SPLITS["A+L|R"], saving=saving))


@pytest.mark.parametrize(
    "field", ["actor_step", "replay_in", "replay_next", "replay_apply", "learner"]
)
def test_a_stage_that_fails_ends_the_strict_host_loop(monkeypatch, field):
    fault = Fault(60, field)
    patch_stages(monkeypatch, host_loop, "iteration_stages", field, fault)
    assert_fails_with(fault, lambda: run(STRICT, SPLITS["A|R+L"]))


def test_callback_and_writer_errors_reach_the_caller_from_the_strict_host_loop():
    fault = Fault(1, "on_chunk")
    assert_fails_with(fault, lambda: run(STRICT, SPLITS["A+L|R"], on_chunk=lambda r: fault.hit()))
    fault = Fault(1, "write")
    saving = Saving(1, lambda chunk, states, rows: fault.hit())
    assert_fails_with(fault, lambda: run(STRICT, SPLITS["A+L|R"], saving=saving))


@pytest.mark.parametrize("host", [True, False])
def test_ctrl_c_while_the_pipeline_runs_ends_it(monkeypatch, host):
    # SIGINT reaches the main thread (the host thread) while the stage threads run
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", host)
    report, sent = StageRun.report, []

    def interrupting(self, tag, chunk, payload):
        if tag == "learner" and chunk == 0 and not sent:
            sent.append(time.perf_counter())
            os.kill(os.getpid(), signal.SIGINT)
        return report(self, tag, chunk, payload)

    monkeypatch.setattr(StageRun, "report", interrupting)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(PIPED, SPLITS["A|R+L"])
    finally:
        signal.signal(signal.SIGINT, before)
    assert time.perf_counter() - sent[0] < SOON_S
    assert stage_threads() == []


@pytest.mark.parametrize(
    "host",
    # in-program (17 s here; with `make test-slow`): test_checkpoint.py's pipelined stop of the
    # A+L|R split stops it too, and resumes; keeps the default suite under 15 minutes
    [True, pytest.param(False, marks=pytest.mark.slow)],
)
def test_a_stop_asked_still_ends_the_pipeline(monkeypatch, host):
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", host)
    cfg = TrainConfig(**{**PIPED.__dict__, "steps": 500 + 6 * 200})
    with pytest.raises(Stopped) as info:
        run(cfg, SPLITS["A|R+L"], stop_asked=lambda: True)
    assert info.value.chunk < 5
    assert stage_threads() == []


@pytest.fixture
def crews(monkeypatch):
    """The crews started in the test, halted and waited for at its end (a failed check must
    not leave a stage thread running into the next test, or blocking the process's exit)."""
    made: list[Crew] = []
    init = Crew.__init__

    def recorded(self):
        init(self)
        made.append(self)

    monkeypatch.setattr(Crew, "__init__", recorded)
    yield made
    for crew in made:
        crew.halt()
        for t in crew._threads:
            t.join(timeout=30)


@pytest.mark.parametrize("host", [True, False])
def test_ctrl_c_as_the_threads_start_ends_those_started(monkeypatch, crews, host):
    # Ctrl-C lands in `Thread.start` of the second thread, once it runs: the first had started
    # before the host thread's error handling began, and was left running (blocked on a channel)
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", host)
    start, started = Crew.start, []

    def interrupted(self, name, fn):
        start(self, name, fn)
        started.append(name)
        if len(started) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(Crew, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(PIPED, SPLITS["A|R+L"])
    assert len(started) == 2
    assert stage_threads() == []


def test_a_thread_that_cannot_start_is_not_waited_for(monkeypatch):
    crew, spawn = Crew(), threading.Thread.start

    def refused(self):
        if self.name == THREAD_PREFIX + "late":
            raise RuntimeError("can't start new thread")
        spawn(self)

    monkeypatch.setattr(threading.Thread, "start", refused)
    ch = crew.channel(1)
    crew.start("waits", ch.get)  # blocked until the crew stops
    with pytest.raises(RuntimeError, match="can't start new thread"):
        crew.start("late", lambda: None)
    crew.halt()
    joins = threading.Thread(target=crew.join, daemon=True)  # (it hung: never let go)
    joins.start()
    joins.join(timeout=10)
    assert not joins.is_alive()
    assert stage_threads() == []


def test_the_channels_are_freed_when_a_stage_fails_after_its_last_report(monkeypatch, crews):
    # in-program channels: the host thread has every row, then `join` raises the stage's error
    destroyed, fault = [], Fault(1, "learner's end")
    destroy, thread = channel_stages.Links.destroy, pipeline.group_thread

    def counted(links):
        destroyed.append(links)
        destroy(links)

    def fails_at_the_end(r, links, group, agent_words):
        results = thread(r, links, group, agent_words)
        if "learner" in group:
            fault.hit()
        return results

    monkeypatch.setattr(channel_stages.Links, "destroy", counted)
    monkeypatch.setattr(pipeline, "group_thread", fails_at_the_end)
    assert_fails_with(fault, lambda: run(PIPED, SPLITS["A+R|L"]), "learner")
    assert len(destroyed) == 1
