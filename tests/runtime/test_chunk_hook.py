"""`ChunkHook`: a stop that ``on_chunk`` asks for (``stop_asked`` true once it has seen a row)
ends the run after that chunk, saved; it ended the run one chunk later, as ``stop_asked`` was
read before ``on_chunk`` ran."""

from __future__ import annotations

import pytest

from drlhet.runtime.saving import ChunkHook, Saving, Stopped


def hook_with(saving: bool, stop_at: int):
    """A hook of 5 chunks whose ``on_chunk`` asks for a stop at chunk ``stop_at``; the chunks
    it saved."""
    asked, saved = [], []
    write = Saving(10, lambda chunk, states, rows: saved.append((chunk, states, len(rows))))

    def on_chunk(row):
        if row["chunk"] == stop_at:
            asked.append(True)

    return ChunkHook(5, write if saving else None, on_chunk, lambda: bool(asked)), saved


@pytest.mark.parametrize("saving", [True, False])
@pytest.mark.parametrize("held", [False, True])  # the state now, or when the path returns
def test_a_stop_asked_by_on_chunk_ends_the_run_after_that_chunk(saving, held):
    hook, saved = hook_with(saving, stop_at=1)
    hook.after({"chunk": 0}, None if held else (lambda: "s0"), last=held)
    if held:
        hook.ended("s0")
    with pytest.raises(Stopped) as e:
        hook.after({"chunk": 1}, None if held else (lambda: "s1"), last=held)
        if held:
            hook.ended("s1")
    assert e.value.chunk == 1 and e.value.saved is saving
    assert saved == ([(1, "s1", 2)] if saving else [])


def test_a_stop_asked_before_the_row_is_saved_before_on_chunk():
    seen = []
    saving = Saving(10, lambda chunk, states, rows: seen.append(("saved", chunk)))
    hook = ChunkHook(5, saving, lambda row: seen.append(("row", row["chunk"])), lambda: True)
    with pytest.raises(Stopped):
        hook.after({"chunk": 0}, lambda: "s0")
    assert seen == [("saved", 0), ("row", 0)]


def test_the_last_chunk_is_no_stop():
    hook, saved = hook_with(True, stop_at=4)
    for c in range(5):
        hook.after({"chunk": c}, lambda c=c: f"s{c}")
    assert saved == [(4, "s4", 5)]  # the last chunk's checkpoint, due anyway
