"""The checkpoints folder holds one history: a run resumed from an older checkpoint deletes the
newer ones of the run it abandons as it saves, and orbax keeps the newest of the new one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from drlhet.checkpoint import Checkpoints
from drlhet.runtime.run import Start, initial_example, run
from drlhet.runtime.saving import Saving, Stopped
from tests.test_checkpoint import CHUNKED

META = {"config": {}, "mapping": ""}


def test_a_run_resumed_from_an_older_checkpoint_leaves_one_history(tmp_path):
    # run A saves chunks 0..3; run B goes on from chunk 1 and is stopped after chunk 2. A's
    # chunk 3 stayed, and the newest checkpoint, the one `--resume` takes, was A's
    ckpt = Checkpoints(tmp_path / "ckpt", keep=10)
    _, rows_a = run(CHUNKED, saving=Saving(1, lambda c, s, r: ckpt.save(c, s, r, META)))
    assert ckpt.chunks() == [0, 1, 2, 3]
    saved = ckpt.restore(initial_example(CHUNKED), chunk=1)
    rows_b: list[dict] = []

    def write(chunk, states, rows):
        ckpt.save(chunk, states, saved.rows + rows, META)

    with pytest.raises(Stopped):
        run(
            CHUNKED,
            start=Start(saved.states, saved.chunk),
            saving=Saving(1, write),
            on_chunk=rows_b.append,
            stop_asked=lambda: True,
        )
    assert [r["chunk"] for r in rows_b] == [2] and rows_b[0]["wall_s"] != rows_a[2]["wall_s"]
    assert ckpt.chunks() == [0, 1, 2]
    newest = ckpt.restore(initial_example(CHUNKED))
    assert newest.chunk == 2 and newest.rows == json.loads(json.dumps(saved.rows + rows_b))


def state_of(history: str, chunk: int) -> dict:
    return {"x": np.full(3, 100 * (history == "B") + chunk, np.float32)}


def rows_of(history: str, chunks: range) -> list[dict]:
    return [{"chunk": c, "wall_s": 0.5 * c + (history == "B"), "of": history} for c in chunks]


def write(ckpt: Checkpoints, history: str, chunk: int, rows: list[dict]) -> None:
    ckpt.save(chunk, state_of(history, chunk), rows, META)


def written_by(ckpt: Checkpoints) -> dict[int, str]:
    """``{chunk: history}`` of every checkpoint in the folder, from its state and its rows."""
    example = {"x": np.zeros(3, np.float32)}
    out = {}
    for c in ckpt.chunks():
        saved = ckpt.restore(example, chunk=c)
        history = saved.rows[-1]["of"]
        assert saved.states["x"][0] == state_of(history, c)["x"][0]
        out[c] = history
    return out


def history_a(folder: Path, keep: int) -> Checkpoints:
    """Run A's checkpoints of chunks 0..5, every chunk, ``keep`` deep."""
    ckpt = Checkpoints(folder, keep=keep)
    for c in range(6):
        write(ckpt, "A", c, rows_of("A", range(c + 1)))
    return ckpt


def test_a_resumed_run_saving_less_often_deletes_the_abandoned_ones_between(tmp_path):
    # B goes on from A's chunk 3 and saves every 2nd chunk (5, 7, 9): A's 4, between 3 and B's
    # first checkpoint, is deleted as B saves 5 (deleting only later chunks left it there, for
    # `restore(chunk=4)` to give); orbax then keeps B's newest 3
    ckpt = history_a(tmp_path / "ckpt", keep=3)
    assert written_by(ckpt) == {3: "A", 4: "A", 5: "A"}
    branch = ckpt.restore({"x": np.zeros(3, np.float32)}, chunk=3).rows
    kept = {5: {3: "A", 5: "B"}, 7: {3: "A", 5: "B", 7: "B"}, 9: {5: "B", 7: "B", 9: "B"}}
    for c, want in kept.items():
        write(ckpt, "B", c, branch + rows_of("B", range(4, c + 1)))
        assert written_by(ckpt) == want, c


def test_orbax_keeps_the_newest_of_the_resumed_history(tmp_path):
    # A saved chunks 0, 2, 4, 6 (3 kept); B goes on from 2 and saves 3, 5, 7. orbax deletes
    # the oldest in the order it holds them, a saved one last: B's 3 made it drop A's 2 and
    # keep A's 4 and 6, and `restore` then took A's 6
    ckpt = Checkpoints(tmp_path / "ckpt", keep=3)
    for c in (0, 2, 4, 6):
        write(ckpt, "A", c, rows_of("A", range(c + 1)))
    branch = ckpt.restore({"x": np.zeros(3, np.float32)}, chunk=2).rows
    kept = {3: {2: "A", 3: "B"}, 5: {2: "A", 3: "B", 5: "B"}, 7: {3: "B", 5: "B", 7: "B"}}
    for c, want in kept.items():
        write(ckpt, "B", c, branch + rows_of("B", range(3, c + 1)))
        assert written_by(ckpt) == want, c
        assert ckpt.restore({"x": np.zeros(3, np.float32)}).chunk == c


def test_rows_of_the_resumed_run_only_keep_the_one_resumed_from(tmp_path):
    # a writer that passes only the resumed run's rows (chunks 4..): the checkpoints up to the
    # one resumed from share no chunk with them and stay; A's 4 and 5 go
    ckpt = history_a(tmp_path / "ckpt", keep=10)
    write(ckpt, "B", 6, rows_of("B", range(4, 7)))
    assert written_by(ckpt) == {0: "A", 1: "A", 2: "A", 3: "A", 6: "B"}


def test_one_history_saved_in_order_keeps_all_and_a_later_one_goes(tmp_path):
    ckpt = history_a(tmp_path / "ckpt", keep=10)
    assert ckpt.chunks() == list(range(6))  # rows that agree: none deleted
    write(ckpt, "A", 2, [])  # rows that say nothing: only the later ones go
    assert ckpt.chunks() == [0, 1, 2]


def test_a_meta_that_is_not_json_leaves_the_folder_untouched(tmp_path):
    ckpt = history_a(tmp_path / "ckpt", keep=10)
    with pytest.raises(TypeError):
        ckpt.save(2, state_of("B", 2), [], {"config": {}, "mapping": object()})
    assert written_by(ckpt) == {c: "A" for c in range(6)}
