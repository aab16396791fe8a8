"""A training run stopped by a signal ends gently: the first SIGINT (Ctrl-C) or SIGTERM (what a
batch scheduler sends before it preempts a job) asks the run to end after the chunk it is in,
with a checkpoint of that chunk (`drlhet.runtime.saving.ChunkHook`), so that ``drlhet train
--resume`` goes on from there; a second signal stops at once, as Python would have (SIGINT
raises ``KeyboardInterrupt``, SIGTERM ends the process).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["SIGNALS", "StopRequest", "stop_on_signals", "HeldSignal", "held_while_starting"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that ask a run to stop after its chunk."""


class StopRequest:
    """Whether a stop was asked, and by which signal (``signum``; None: not asked)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def asked(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        """The signal's name (``SIGTERM``), or "" when none came."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def exit_status(self) -> int:
        """The shell's status of a process ended by the signal: 128 + its number."""
        assert self.signum is not None
        return 128 + self.signum


class HeldSignal:
    """A signal's handler between a start that put its own in place (Ray's, which exits 15 at
    once) and `stop_on_signals`: records the signal, which `stop_on_signals` then takes as a
    stop request; ``previous`` is the handler it stands in front of."""

    def __init__(self, previous: Any):
        self.previous = previous
        self.signum: int | None = None

    def __call__(self, signum: int, frame) -> None:
        del frame
        self.signum = signum


@contextlib.contextmanager
def held_while_starting(signum: int) -> Iterator[None]:
    """Inside the block, and after it until `stop_on_signals`, ``signum`` is recorded by a
    `HeldSignal` (which `stop_on_signals` takes as a stop request) rather than handled by
    what the block puts in place: a handler the block sets for it (Ray's start sets one that
    exits 15 at once) becomes the one the `HeldSignal` stands in front of. On the main thread
    only (elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = HeldSignal(signal.getsignal(signum))
    real = signal.signal

    def redirect(sig, handler):
        if sig != signum:
            return real(sig, handler)
        before, held.previous = held.previous, handler
        return before

    real(signum, held)
    signal.signal = redirect  # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = real
        real(signum, held)  # again: a C library's own handler (Ray's core worker) went in under it


@contextlib.contextmanager
def stop_on_signals(enabled: bool = True, saving: bool = True) -> Iterator[StopRequest | None]:
    """Inside the block the first of `SIGNALS` sets the yielded `StopRequest` (and says so on
    stderr, for a run with checkpoints or not: ``saving``) and puts back the handlers that
    were there before, which the block's end also does. Yields None, changing nothing, when
    not ``enabled`` or off the main thread (only it can handle signals)."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield None
        return
    request = StopRequest()
    now = {s: signal.getsignal(s) for s in SIGNALS}
    before = {s: h.previous if isinstance(h, HeldSignal) else h for s, h in now.items()}

    def restore() -> None:
        for s, handler in before.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)

    how = ", saving it" if saving else " (no checkpoints)"

    def ask(signum: int, frame) -> None:
        del frame
        request.signum = signum
        restore()
        name = request.name
        print(
            f"drlhet: {name}: stopping after this chunk{how}; {name} again stops at once",
            file=sys.stderr,
            flush=True,
        )

    for s in SIGNALS:
        signal.signal(s, ask)
    for h in now.values():  # one that came while held: as if it came now
        if isinstance(h, HeldSignal) and h.signum is not None:
            ask(h.signum, None)
    try:
        yield request
    finally:
        restore()
