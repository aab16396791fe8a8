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

__all__ = ["SIGNALS", "StopRequest", "stop_on_signals"]

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
    before = {s: signal.getsignal(s) for s in SIGNALS}

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
    try:
        yield request
    finally:
        restore()
