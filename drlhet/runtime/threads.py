"""Stage threads and the bounded channels between them, stopped together on the first error.

The pipelined host loop (`drlhet.runtime.pipeline`) runs each device group's stage loop on its
own host thread (docs/design.md section 6). A `Crew` owns those threads: every blocking
operation of a channel wakes up when the crew stops, a thread that raises stops the crew, and
`Crew.join` re-raises the first error (with the stage it came from) after every thread ended.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ChunkEnd", "Crew", "Channel", "Clock", "Stopped", "THREAD_PREFIX"]

THREAD_PREFIX = "drlhet-stage-"
"""Name prefix of every stage thread (``drlhet-stage-actors``, ...)."""
_POLL_S = 0.05
_START_S = 1.0  # a thread interrupted as it started runs `_guard` by then


class Stopped(Exception):
    """Raised inside a blocked channel operation when the crew stops (another thread failed)."""


class Channel:
    """A bounded FIFO between two stage threads (``maxsize`` items) that gives up when ``stop``
    is set instead of blocking forever."""

    def __init__(self, maxsize: int, stop: threading.Event):
        if maxsize < 1:
            raise ValueError(f"a channel holds at least one item, got maxsize {maxsize}")
        self._q: queue.Queue = queue.Queue(maxsize)
        self._stop = stop

    def put(self, item: Any) -> None:
        """Appends ``item``, waiting while the channel is full. Raises `Stopped`."""
        while True:
            if self._stop.is_set():
                raise Stopped
            try:
                self._q.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def get(self, idle: Callable[[], None] | None = None) -> Any:
        """Removes the oldest item, waiting while the channel is empty; ``idle()``, if given,
        is called every 50 ms of the wait (the host thread's stop check). Raises `Stopped`."""
        while True:
            try:
                return self._q.get(timeout=_POLL_S)
            except queue.Empty:
                if self._stop.is_set():
                    raise Stopped from None
                if idle is not None:
                    idle()

    def drain(self) -> list[Any]:
        """Every item left, oldest first (after the threads ended)."""
        items = []
        while True:
            try:
                items.append(self._q.get_nowait())
            except queue.Empty:
                return items


class ChunkEnd:
    """How many chunks the stage threads of one run go through, which a stop request may
    lower while they run, so that every thread ends at the same chunk boundary.

    Each thread calls `enter` before it starts a chunk and runs that chunk only if it is below
    the count `enter` returns. `ask` lowers the count to ``margin`` chunks past the latest one
    any thread has entered: no thread is then past the new end, and every chunk that some
    thread has entered still runs in every thread. ``margin`` 2 where a thread picks a
    different program for its last chunk as it enters it (`drlhet.runtime.channel_stages`):
    a chunk entered as not the last stays so. Thread-safe.

    Args:
      chunks: the run's chunks, if no stop is asked.
      margin: 1 or 2 (above).
    """

    def __init__(self, chunks: int, margin: int = 1):
        if margin not in (1, 2):
            raise ValueError(f"margin must be 1 or 2, got {margin}")
        self.chunks, self._margin = chunks, margin
        self._entered = -1
        self._lock = threading.Lock()

    def enter(self, chunk: int) -> int:
        """A thread is about to start ``chunk``: returns the run's chunk count as of now
        (run ``chunk`` only if below it; with ``margin`` 2, ``chunk == count - 1`` stays
        right for the last chunk)."""
        with self._lock:
            if chunk < self.chunks:
                self._entered = max(self._entered, chunk)
            return self.chunks

    def ask(self, at_least: int = 0) -> int:
        """Ends the run as soon as every thread can, but not before ``at_least`` chunks (those
        whose rows are owed: a chunk no thread has entered yet then runs in all), and never
        before chunk 0 ran (as if entered: with ``margin`` 2 the first chunk is never the
        last): returns the new chunk count."""
        with self._lock:
            end = max(self._entered, 0) + self._margin
            self.chunks = min(self.chunks, max(end, at_least))
            return self.chunks

    def __iter__(self) -> Iterator[int]:
        """The chunks one thread runs, each `enter`-ed as it starts: ``0, 1, ...``."""
        chunk = 0
        while chunk < self.enter(chunk):
            yield chunk
            chunk += 1


class Clock:
    """Where one stage thread's time goes, per call: ``dispatch`` (the jitted stage returning;
    the whole run when it executes on the calling thread), ``transfer`` (device puts),
    ``wait`` (blocked on a channel: another group is the bottleneck) and ``sync`` (waiting for
    its own device to finish an earlier call). `mark` charges the time since the last mark;
    ``mark("dispatch", stage)`` also keeps the dispatch of each stage apart (``dispatch_<stage>``:
    one thread may dispatch two stages)."""

    KINDS = ("dispatch", "transfer", "wait", "sync")

    def __init__(self):
        self._t = time.perf_counter()
        self._seconds = dict.fromkeys(self.KINDS, 0.0)
        self._calls = 0

    def mark(self, kind: str, stage: str | None = None) -> None:
        now = time.perf_counter()
        self._seconds[kind] += now - self._t
        if stage is not None:
            key = f"{kind}_{stage}"
            self._seconds[key] = self._seconds.get(key, 0.0) + now - self._t
        self._t = now

    def call(self) -> None:
        """Counts one call (of every stage the thread runs)."""
        self._calls += 1

    def take(self) -> dict[str, float]:
        """Milliseconds per call of each kind since the last `take` (and ``calls``); resets."""
        n = max(self._calls, 1)
        out = {f"{k}_ms": 1e3 * v / n for k, v in self._seconds.items()}
        out["calls"] = self._calls
        self._seconds = dict.fromkeys(self.KINDS, 0.0)
        self._calls = 0
        return out


class Crew:
    """The stage threads of one run. ``start(name, fn)`` runs ``fn()`` on a thread named
    ``THREAD_PREFIX + name``; its return value lands in ``results[name]``."""

    def __init__(self):
        self.stop = threading.Event()
        self.results: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []
        self._done: list[threading.Event] = []  # set as each thread's function ends
        self._errors: list[tuple[str, BaseException]] = []
        self._lock = threading.Lock()
        self._on_halt: list[Callable[[], None]] = []

    def on_halt(self, fn: Callable[[], None]) -> None:
        """Calls ``fn()`` when the crew halts (e.g. closes the in-program channels, whose
        waiting calls then fail: they do not watch ``stop``)."""
        self._on_halt.append(fn)

    def halt(self) -> None:
        """Stops every thread: sets ``stop`` and runs the `on_halt` callbacks."""
        self.stop.set()
        for fn in self._on_halt:
            fn()

    def channel(self, maxsize: int) -> Channel:
        return Channel(maxsize, self.stop)

    def start(self, name: str, fn: Callable[[], Any]) -> None:
        """Starts ``fn()`` on a thread of its own; `join` waits for it. A thread that could not
        start is not waited for (its ``done`` would never be set: `join` would hang); one
        interrupted while it starts (Ctrl-C in `threading.Thread.start`) runs, and is."""
        done, began = threading.Event(), threading.Event()
        args = (name, fn, done, began)
        t = threading.Thread(target=self._guard, args=args, name=THREAD_PREFIX + name)
        self._threads.append(t)
        self._done.append(done)
        try:
            t.start()
        except BaseException as e:
            if isinstance(e, Exception) or not began.wait(_START_S):  # it never ran
                self._threads.remove(t)
                done.set()
            raise

    def _guard(self, name: str, fn: Callable[[], Any], done, began: threading.Event) -> None:
        began.set()
        try:
            self.results[name] = fn()
        except Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the caller by join()
            if not self.stop.is_set():  # else: the halt's consequence, not its cause
                self.fail(name, e)
        finally:
            done.set()

    def fail(self, name: str, error: BaseException) -> None:
        """Records ``error`` of stage ``name`` (the first one wins) and halts every thread."""
        with self._lock:
            self._errors.append((name, error))
        self.halt()

    def join(self) -> None:
        """Waits for every thread, then re-raises the first recorded error (noting its stage).
        Interrupted while it waits (a second Ctrl-C), it halts the threads and waits for them
        before the interruption goes on: a process must not exit while a stage thread runs a
        program (the interpreter's exit would end that thread inside native code and abort)."""
        try:
            for done in self._done:
                done.wait()
        except BaseException:
            self.halt()
            for done in self._done:  # not `Thread.join`: Python 3.11 marks a thread whose
                done.wait()  # join was interrupted as ended while it still runs
            raise
        for t in self._threads:
            t.join()
        if self._errors:
            name, error = self._errors[0]
            error.add_note(f"(raised in the {name} stage of the pipelined host loop)")
            raise error
