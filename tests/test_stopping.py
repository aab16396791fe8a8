"""A signal asks a run to stop after its chunk (`drlhet.cli.stopping`): the first SIGINT or
SIGTERM sets the request and puts the handlers from before back (Python's own in `drlhet
train`), so a second one acts at once."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from drlhet.cli.stopping import StopRequest, held_while_starting, stop_on_signals
from drlhet.cli.train import _end
from drlhet.runtime.saving import Stopped


def test_the_first_signal_asks_and_the_second_reaches_the_handler_from_before(capsys):
    # the handler from before, as Python's own would (a pytest worker's may differ: set here)
    got: list[int] = []
    outer = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        before = signal.getsignal(signal.SIGINT)
        with stop_on_signals() as stop:
            assert stop is not None and not stop.asked()
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.asked() and stop.name == "SIGINT" and stop.exit_status == 130
            err = capsys.readouterr().err
            assert "drlhet: SIGINT: stopping after this chunk, saving it" in err
            assert got == []
            os.kill(os.getpid(), signal.SIGINT)  # the second: to the handler from before
            assert got == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is before
    finally:
        signal.signal(signal.SIGINT, outer)


def test_sigterm_asks_and_the_handlers_come_back_at_the_end(capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with stop_on_signals(saving=False) as stop:
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop is not None and stop.exit_status == 143
    assert "stopping after this chunk (no checkpoints);" in capsys.readouterr().err
    assert {s: signal.getsignal(s) for s in before} == before


def test_nothing_changes_when_off_or_off_the_main_thread():
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals(enabled=False) as stop:
        assert stop is None and signal.getsignal(signal.SIGTERM) is before
    got = []

    def other() -> None:
        with stop_on_signals() as stop:
            got.append(stop)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert got == [None] and signal.getsignal(signal.SIGTERM) is before


def test_only_a_run_stopped_early_exits_with_the_signals_status(tmp_path):
    stop = StopRequest()
    stop.signum = signal.SIGTERM  # asked, but in the last chunk: the run ended as usual
    _end(None, [], {}, None, 0.0, tmp_path, stop)
    with pytest.raises(SystemExit) as e:
        _end(None, [], {"stopped": Stopped(3, True)}, None, 0.0, tmp_path, stop)
    assert e.value.code == 143


def test_a_signal_while_a_start_replaces_its_handler_is_a_stop_request_after_it(capsys):
    # Ray's start puts in a SIGTERM handler that exits 15 at once (and in the first seconds
    # of a Ray run a SIGTERM did that): held, it is the run's stop request once the run's own
    # handlers are in place, and the start's handler is the one a second signal reaches
    got: list[int] = []
    signal.signal(signal.SIGTERM, lambda s, f: got.append(-s))
    with held_while_starting(signal.SIGTERM):
        signal.signal(signal.SIGTERM, lambda s, f: got.append(s))  # as Ray's start does
        os.kill(os.getpid(), signal.SIGTERM)
    assert got == []
    os.kill(os.getpid(), signal.SIGTERM)  # after the start, before the run's handlers
    assert got == []
    with stop_on_signals() as stop:
        assert stop is not None and stop.asked() and stop.name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)
    assert got == [signal.SIGTERM]  # the start's handler
    assert "SIGTERM: stopping after this chunk" in capsys.readouterr().err
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_stop_that_saved_nothing_says_why(tmp_path):
    from drlhet.cli.report import _stopped_line

    stopped = Stopped(3, False)
    assert _stopped_line(stopped, tmp_path).endswith("nothing saved (--checkpoint-every 0)")
    # a Ray run writes no checkpoints: "--checkpoint-every 0" named an option it refuses
    ray = _stopped_line(stopped, tmp_path, ray=True)
    assert ray == "stopped after chunk 3; nothing saved (Ray runs write no checkpoints)"
    assert _stopped_line(Stopped(3, True), tmp_path, ray=True).endswith(f"--resume {tmp_path}")
