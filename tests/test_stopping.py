"""A signal asks a run to stop after its chunk (`drlhet.cli.stopping`): the first SIGINT or
SIGTERM sets the request and puts Python's handlers back, so a second one acts at once."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from drlhet.cli.stopping import stop_on_signals


def test_the_first_signal_asks_and_the_second_acts_as_python_would(capsys):
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signals() as stop:
        assert stop is not None and not stop.asked()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.asked() and stop.name == "SIGINT" and stop.exit_status == 130
        assert "drlhet: SIGINT: stopping after this chunk, saving it" in capsys.readouterr().err
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_sigterm_asks_and_the_handlers_come_back_at_the_end(capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with stop_on_signals(saving=False) as stop:
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop is not None and stop.exit_status == 143
    assert "(no checkpoints; a pipelined run goes on to its end)" in capsys.readouterr().err
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
