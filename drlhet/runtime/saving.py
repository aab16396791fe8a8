"""When a run hands its state out for a checkpoint, and in which order it reports chunks.

Every run path (`drlhet.runtime.run`) calls `ChunkHook.after` once per chunk with the chunk's row
and a way to get the state after it. The fused and per-iteration loops have their state between
chunks; the pipelined loop has it only when its threads have ended, so `drlhet.runtime.run` runs
it in segments that end where a checkpoint is due (`ChunkHook.segments`) and saves after each.
A chunk's checkpoint is written before its row reaches the caller's ``on_chunk``, so a run that
``on_chunk`` stops (a return reached) still has its last chunk saved; a stop that ``on_chunk``
asks for (``stop_asked`` true once it has seen the row) ends the run after that chunk too,
saved after ``on_chunk``.

A run asked to stop (``stop_asked``; the CLI asks on SIGINT or SIGTERM) ends after the chunk it is
in, that chunk saved when checkpoints are on, by `Stopped`. The pipelined loop's threads run ahead
of the rows its host thread reports (nothing holds them back for its evaluations): it ends at the
first chunk boundary that no thread has passed (one later with in-program channels where a
device's program runs one stage a call ahead of the other: it picks its last chunk's program
as it enters that chunk; `drlhet.runtime.threads.ChunkEnd`), then saves, as its state is out
only when its threads have ended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from drlhet.runtime.board_state import saved_form

__all__ = ["Saving", "ChunkHook", "Stopped"]


class Saving(NamedTuple):
    """Checkpoints during a run.

    Attributes:
      every: save after every ``every``-th chunk (counted from the run's first chunk, 0) and
        after the last.
      write: ``(chunk, states, rows) -> None``: the state of every seed after ``chunk`` and the
        rows of every chunk this run made so far (``chunk`` included); it must copy what it
        keeps before returning (the state's buffers are donated to the next chunk).
      config: the `TrainConfig` the checkpoints record (`drlhet.checkpoint_saving` sets it);
        `drlhet.runtime.run.run` refuses one that differs from its own. None: unchecked.
    """

    every: int
    write: Callable[[int, Any, list[dict]], None]
    config: Any = None


class Stopped(Exception):
    """A run asked to stop ended early: after chunk ``chunk``, its state saved or not
    (``saved``: checkpoints on)."""

    def __init__(self, chunk: int, saved: bool):
        super().__init__(f"stopped after chunk {chunk}{' (saved)' if saved else ''}")
        self.chunk, self.saved = chunk, saved


class ChunkHook:
    """Collects a run's rows, writes its checkpoints when due and passes rows on.

    Args:
      chunks: chunks in the whole run.
      saving: the checkpoints to write (None: none).
      on_chunk: the caller's ``(row) -> None``.
      stop_asked: ``() -> bool``; once true, the run ends after the chunk it is in (with a
        checkpoint of it) by raising `Stopped` (None: never).
    """

    def __init__(
        self,
        chunks: int,
        saving: Saving | None,
        on_chunk: Callable[[dict], None] | None,
        stop_asked: Callable[[], bool] | None = None,
    ):
        if saving is not None and saving.every < 1:
            raise ValueError(f"checkpoint every must be >= 1 chunk, got {saving.every}")
        self.chunks, self.saving, self.on_chunk = chunks, saving, on_chunk
        self.stop_asked = stop_asked
        self._asked = False  # once asked, a stop stays asked
        self.rows: list[dict] = []
        self._held: dict | None = None

    def due(self, chunk: int) -> bool:
        """Whether a checkpoint is written after ``chunk``."""
        if self.saving is None:
            return False
        return (chunk + 1) % self.saving.every == 0 or chunk == self.chunks - 1

    def segments(self, first: int) -> list[tuple[int, int]]:
        """``[(start, stop), ...]`` chunk ranges from ``first`` to the end, each ending where a
        checkpoint is due (one range without checkpoints; none from past the last chunk)."""
        if first >= self.chunks:
            return []
        ends = [c + 1 for c in range(first, self.chunks) if self.due(c)]
        if not ends or ends[-1] != self.chunks:
            ends.append(self.chunks)
        starts = [first, *ends[:-1]]
        return list(zip(starts, ends, strict=True))

    def after(self, row: dict, get_state: Callable[[], Any] | None, last: bool = False) -> None:
        """A chunk's row; ``get_state`` gives the state after it (None: not until the path
        returns, then `ended` saves it and passes the row on). ``last``: the path ends after
        this row, stopped early (the pipeline; it has no state here).

        Raises:
          Stopped: a stop was asked and the state is here (after it was saved, when
            checkpoints are on, and the row passed on).
        """
        self.rows.append(row)
        chunk = row["chunk"]
        stopping = get_state is not None and self.stopping(chunk)
        if get_state is None and (last or self.due(chunk)):
            self._held = row
            return
        written = self.due(chunk) or (stopping and self.saving is not None)
        if written:
            assert get_state is not None
            self._write(chunk, get_state())
        if self.on_chunk:
            self.on_chunk(row)
        if get_state is not None:  # (the pipeline's host thread asks its threads to stop)
            self._stop_if_asked(chunk, written, get_state)

    def _stop_if_asked(self, chunk: int, written: bool, get_state: Callable[[], Any]) -> None:
        """Raises `Stopped` after ``chunk`` when a stop was asked, before or by ``on_chunk``
        (then the chunk is saved now, unless ``written``)."""
        if not self.stopping(chunk):
            return
        if self.saving is not None and not written:  # asked by on_chunk: saved after it
            self._write(chunk, get_state())
        raise Stopped(chunk, self.saving is not None)

    def ended(self, states: Any) -> None:
        """A path (or segment) returned ``states``: saves them if its last chunk was held
        (due, or the last of a stop: then raises `Stopped`)."""
        row, self._held = self._held, None
        if row is None:
            return
        chunk = row["chunk"]
        written = self.due(chunk) or (self.stopping(chunk) and self.saving is not None)
        if written:
            self._write(chunk, states)
        if self.on_chunk:
            self.on_chunk(row)
        self._stop_if_asked(chunk, written, lambda: states)

    def stopping(self, chunk: int) -> bool:
        """Whether to end the run after ``chunk``: a stop was asked (now or by any earlier
        call: ``stop_asked`` going back to false changes nothing) and it is not the last."""
        if not self._asked and self.stop_asked is not None:
            self._asked = bool(self.stop_asked())
        return chunk < self.chunks - 1 and self._asked

    def _write(self, chunk: int, states: Any) -> None:
        assert self.saving is not None
        self.saving.write(chunk, saved_form(states), list(self.rows))
