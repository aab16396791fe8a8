"""The pipeline's threads (`drlhet.runtime.threads`): a crew that raises the first error once
every thread ended, a stop every thread takes at the same chunk, a wait that idles, and an
interrupt that stops the threads first."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from drlhet.runtime.threads import ChunkEnd, Crew, Stopped
from tests.runtime.pipeline_threads import stage_threads


def test_crew_raises_the_first_error_after_every_thread_ended():
    crew = Crew()
    ch = crew.channel(1)
    crew.start("waits", ch.get)  # blocked until the crew stops
    crew.start("fails", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        crew.join()
    assert stage_threads() == []


@pytest.mark.parametrize("margin", [1, 2])
def test_a_stop_ends_every_thread_at_the_same_chunk_past_any_one_entered(margin):
    end = ChunkEnd(10, margin)
    assert end.enter(0) == 10 and end.enter(3) == 10 and end.enter(1) == 10
    assert end.ask() == 3 + margin and end.ask() == 3 + margin  # asked twice: the same
    assert end.enter(3) == 3 + margin  # a chunk entered before the stop runs in every thread
    if margin == 2:  # and, entered as not the last, stays so
        assert 3 != end.enter(3) - 1
    assert list(end) == list(range(3 + margin))
    assert ChunkEnd(3, margin).ask() == margin  # no thread started: chunk 0 (and 1) still run
    assert ChunkEnd(9, margin).ask(at_least=5) == 5  # rows owed: their chunks run
    late = ChunkEnd(4, margin)
    late.enter(3)
    assert late.ask() == 4  # every thread in the last chunk: the run ends as usual
    with pytest.raises(ValueError, match="margin must be 1 or 2"):
        ChunkEnd(4, 3)


def test_a_waiting_get_calls_idle_until_an_item_comes():
    # the host thread's stop check while it waits for a row
    crew, calls = Crew(), []
    channel = crew.channel(1)

    def idle():
        calls.append(1)
        if len(calls) == 3:
            channel.put("row")

    assert channel.get(idle=idle) == "row" and len(calls) == 3
    crew.halt()
    with pytest.raises(Stopped):  # a stopped crew: idle is not called again
        channel.get(idle=idle)
    assert len(calls) == 3


def test_an_interrupt_while_waiting_for_the_threads_stops_them_first():
    # a second Ctrl-C while `run_pipeline` waits for its threads: they must have ended before
    # the process may exit (else it aborts, a thread ended inside native code)
    crew, ended = Crew(), threading.Event()
    channel = crew.channel(1)

    def waits():  # blocked until the crew stops
        try:
            channel.get()
        finally:
            ended.set()

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    crew.start("waits", waits)
    before = signal.signal(signal.SIGUSR1, interrupt)
    try:
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        with pytest.raises(KeyboardInterrupt):
            crew.join()
        assert ended.is_set()
    finally:
        signal.signal(signal.SIGUSR1, before)
        crew.halt()  # (a failed check must not leave the thread waiting)
