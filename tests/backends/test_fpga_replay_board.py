"""The FPGA replay module's tree on a board inside the training loop
(`drlhet.backends.fpga_replay_board`, ``TrainConfig.replay_board``): on the simulated board
(the module's own code behind its host protocol) the buffer samples what the C-simulation's FFI
samples and ends with the same tree, in a jitted scan and in whole runs (fused and split, k = 0
and 2); its checkpoints are the FFI run's, and a resume from one goes on bit for bit on the
board; a stale state is refused; what the board cannot take (several seeds, a backend without a
board, uniform replay, a bitstream built for another tree) is refused before the run, in one
line from the CLI."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.backends import BackendUnavailable, board_tree_ops, tree_ops
from drlhet.backends import fpga_replay_board as frb
from drlhet.cli import main
from drlhet.replay.checks import ERR_EMPTY
from drlhet.replay.prioritized import make_prioritized_replay
from drlhet.runtime.config import ConfigError
from drlhet.runtime.run import Start, initial_example, run
from tests.backends.test_fpga_learner_board_run import host
from tests.cli_args import TINY, refused_before_the_run
from tests.runtime.test_run import SMALL as RUN_SMALL
from tests.test_checkpoint import CHUNKED as RUN_CHUNKED
from tests.test_checkpoint import same_rows, saving_to

SMALL = dataclasses.replace(RUN_SMALL, backend="fpga", seeds=1)
"""tests/runtime/test_run.py's small run, one seed, its replay the FPGA module's."""
CHUNKED = dataclasses.replace(RUN_CHUNKED, backend="fpga", seeds=1)
"""tests/test_checkpoint.py's run of 4 chunks, one seed, its replay the FPGA module's."""
EXAMPLE = {"x": jnp.zeros(3)}
slow = pytest.mark.slow


def _steps(ops, capacity: int, branching: int, batch: int, steps: int = 40):
    """``steps`` of add 8 / sample / update with duplicates (every index twice) in one jitted
    scan, stamps checked; ``(final state, indices [T, B], weights [T, B])``."""
    r = make_prioritized_replay(capacity, batch, branching=branching, tree_ops=ops)

    @jax.jit
    def prog(key):
        def body(st, k):
            k1, k2, k3 = jax.random.split(k, 3)
            st = r.add(st, {"x": jax.random.normal(k1, (8, 3))})
            s = r.sample(st, k2, 0.5)
            idx = jnp.concatenate([s.indices[: batch // 2]] * 2)  # duplicates: the last wins
            prio = jax.random.uniform(k3, (batch,)) * 3
            return r.update_priorities(st, idx, prio, s.stamps), (s.indices, s.weights)

        return jax.lax.scan(body, r.init(EXAMPLE), jax.random.split(key, steps))

    state, (indices, weights) = prog(jax.random.key(7))
    return state, indices, weights


def _board_levels(handle: int) -> list[np.ndarray]:
    tree = frb._SLOTS[handle].tree
    return [tree.read(level, np.arange(w)) for level, w in enumerate(tree_widths(tree))]


def tree_widths(tree) -> tuple[int, ...]:
    from drlhet.replay.sum_tree import layout

    return layout(tree.capacity, tree.branching).widths


@pytest.mark.parametrize("capacity, branching", [(1000, 16), (300, 4), (130, 64)])
def test_the_board_samples_and_holds_what_the_ffi_does(capacity, branching):
    ffi, want_idx, want_w = _steps(tree_ops("fpga"), capacity, branching, 32)
    ops = board_tree_ops("fpga", frb.SIM, capacity, branching, 32)
    state, idx, w = _steps(ops, capacity, branching, 32)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(w, want_w)
    assert int(state.tree.gen) == 80 and int(state.tree.saturated) == int(ffi.tree.saturated)
    leaves = _board_levels(int(state.tree.handle))[-1]
    np.testing.assert_array_equal(leaves[:capacity], np.asarray(ffi.tree.leaves)[:capacity])
    root = (int(ffi.tree.hi[0]) << 32) | int(ffi.tree.lo[0])
    assert int(_board_levels(int(state.tree.handle))[0][0]) == root > 0


def test_an_empty_board_is_refused_as_the_ffi_refuses_it():
    for ops in (tree_ops("fpga"), board_tree_ops("fpga", frb.SIM, 64, 16, 8)):
        r = make_prioritized_replay(64, 8, branching=16, tree_ops=ops)
        s = jax.jit(lambda k, r=r: r.sample(r.init(EXAMPLE), k, 0.5))(jax.random.key(0))
        assert int(s.error) & ERR_EMPTY and not np.asarray(s.weights).any()


def test_a_state_used_twice_is_refused():
    r = make_prioritized_replay(64, 8, branching=16, tree_ops=board_tree_ops(
        "fpga", frb.SIM, 64, 16, 8))  # fmt: skip
    add = jax.jit(r.add)
    old = jax.jit(r.init)(EXAMPLE)
    add(old, {"x": jnp.ones((4, 3))})
    with pytest.raises(Exception, match="a state of a tree on a board is used once") as e:
        jax.block_until_ready(add(old, {"x": jnp.ones((4, 3))}))
    assert "has seen 0 writes of the board's tree and the board 1" in str(e.value)


SPLIT = "actors=cpu:0,replay=fpga@cpu:1,learner=cpu:1"


# the strict host loop (k < S = 2) and the pipeline with in-program channels (k >= S); the
# fused loop: the checkpoint test below (every chunk's state the FFI run's)
@pytest.mark.parametrize("mapping, delay", [(SPLIT, 0), (SPLIT, 2)])
def test_a_run_on_the_simulated_board_equals_the_ffi_run(mapping, delay):
    cfg = dataclasses.replace(SMALL, delay=delay)
    ffi, ffi_rows = run(cfg, mapping)
    states, rows = run(dataclasses.replace(cfg, replay_board="sim"), mapping)
    same = jax.tree.map(np.array_equal, host(states.agent), host(ffi.agent))
    assert all(jax.tree.leaves(same))
    np.testing.assert_array_equal(states.replay.storage["obs"], ffi.replay.storage["obs"])
    for key in ("eval_return", "loss", "abs_td"):
        assert [r[key] for r in rows] == [r[key] for r in ffi_rows], key
    levels = _board_levels(int(states.replay.tree.handle[0]))
    n = cfg.buffer_size
    np.testing.assert_array_equal(levels[-1][:n], ffi.replay.tree.leaves[0][:n])


@pytest.mark.parametrize(
    "change, said, fields",
    [
        ({"seeds": 2}, "holds one tree, so one seed: seeds must be 1, got 2",
         ("replay_board", "seeds")),
        ({"backend": "native"}, "and backend 'native' has none (fpga has one)",
         ("replay_board", "backend")),
        ({"backend": None, "uniform": True}, "uniform replay has none: drop replay_board",
         ("replay_board", "uniform")),
        ({"replay_board": " "}, "replay_board is empty: a bitstream's path, or sim",
         ("replay_board",)),
    ],
)  # fmt: skip
def test_a_board_the_run_cannot_use_is_refused(change, said, fields):
    cfg = dataclasses.replace(SMALL, **{"replay_board": "sim", **change})
    with pytest.raises(ConfigError, match=None) as e:
        run(cfg)
    assert said in str(e.value) and e.value.fields == fields


def _same(a, b) -> bool:
    return all(jax.tree.leaves(jax.tree.map(np.array_equal, host(a), host(b))))


@pytest.mark.parametrize(
    "mapping, delay",
    [(None, 0), pytest.param("actors=cpu:0,replay=fpga@cpu:0,learner=cpu:1", 4, marks=slow)],
)  # fused; the pipeline with in-program channels
def test_a_board_run_saves_the_ffi_run_s_checkpoints_and_resumes_from_them(
    tmp_path, mapping, delay
):
    """Every checkpoint of the board's run is the FFI run's, so a resume onto the board from
    either is the one below, and one off the board is an FFI resume (tests/test_checkpoint.py)."""
    ffi_cfg = dataclasses.replace(CHUNKED, delay=delay)
    cfg = dataclasses.replace(ffi_cfg, replay_board="sim")
    ffi_store, ffi_saving = saving_to(tmp_path / "ffi")
    ffi, ffi_rows = run(ffi_cfg, mapping, saving=ffi_saving)
    store, saving = saving_to(tmp_path / "board")
    full, rows = run(cfg, mapping, saving=saving)
    assert store.chunks() == ffi_store.chunks() == [0, 1, 2, 3]
    for c in store.chunks():  # the tree read back from the board: the FFI's, bit for bit
        assert _same(store.restore(initial_example(cfg), c).states,
                     ffi_store.restore(initial_example(ffi_cfg), c).states)  # fmt: skip
    saved = store.restore(initial_example(cfg), chunk=1)
    resumed, more = run(cfg, mapping, start=Start(saved.states, saved.chunk))
    same_rows(rows, saved.rows + more)
    assert _same(resumed.agent, full.agent) and _same(full.agent, ffi.agent)
    same_rows(rows, ffi_rows)


def test_a_save_of_a_state_the_board_has_moved_past_is_refused():
    r = make_prioritized_replay(64, 8, branching=16, tree_ops=board_tree_ops(
        "fpga", frb.SIM, 64, 16, 8))  # fmt: skip
    old = jax.jit(r.init)(EXAMPLE)
    new = jax.jit(r.add)(old, {"x": jnp.ones((4, 3))})
    assert int(frb.read_back(new.tree).leaves[:4].astype(bool).sum()) == 4
    with pytest.raises(frb.StaleBoardState, match="has seen 0 writes"):
        frb.read_back(old.tree)


class _OtherBuild(frb.SimulatedBoard):
    """A board whose bitstream was built for 2^12 leaves, and takes 16 entries a command."""

    def __init__(self):
        super().__init__(4096, 16, 20, max_batch=16)


def test_a_bitstream_built_for_another_tree_or_batch_is_refused(monkeypatch):
    monkeypatch.setattr(frb, "open_board", lambda where: _OtherBuild())
    with pytest.raises(ConfigError, match=r"capacity 4096 \(given: 1000\)") as e:
        run(dataclasses.replace(SMALL, replay_board="/boards/a.xclbin", buffer_size=1000))
    assert e.value.fields == ("replay_board",)
    with pytest.raises(ConfigError, match="the board takes 1..16 entries a command, not a batch"):
        run(dataclasses.replace(SMALL, replay_board="/boards/b.xclbin"))
    with pytest.raises(BackendUnavailable, match="runs on no board"):
        board_tree_ops("jax", "sim", 64, 16, 8)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--replay-board", "sim"], "--replay-board 'sim' keeps the sum tree on a board, and "
                                    "--backend 'native' has none (fpga has one)"),
        (["--backend", "fpga", "--replay-board", "{tmp}/none.xclbin"],
         "no pyxrt: the FPGA board driver needs it"),
        (["--backend", "fpga", "--replay-board", "sim", "--seeds", "2"],
         "--seeds must be 1, got 2"),
    ],
)  # fmt: skip
def test_the_cli_refuses_a_board_it_cannot_use_in_one_line(tmp_path, capsys, args, message):
    refused_before_the_run(main, tmp_path, capsys, args, message)


def test_the_cli_trains_on_the_simulated_board_and_evaluates_its_checkpoint(tmp_path, capsys):
    main(["train", *TINY, "--backend", "fpga", "--replay-board", "sim", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "final evaluation return per seed" in out
    assert "note: replay=fpga@cpu:0 is a simulation of its hardware" in out
    (run_dir,) = tmp_path.iterdir()
    assert any((run_dir / "checkpoints").iterdir())
    main(["eval", str(run_dir), "--episodes", "2"])
    assert "seed 0" in capsys.readouterr().out


def test_the_report_says_which_part_ran_on_a_board(capsys):
    from drlhet.cli.report import _simulation_notes

    mapping = "actors=jax@cpu:0,replay=fpga@cpu:0,learner=fpga@cpu:0"
    cfg = dataclasses.replace(SMALL, learner="fpga", replay_board="/b/rmm.xclbin")
    _simulation_notes(cfg, mapping)
    assert capsys.readouterr().out.splitlines() == [
        "note: replay=fpga@cpu:0 ran its module on the board of /b/rmm.xclbin, the rest on "
        "this host",
        "note: learner=fpga@cpu:0 is a simulation of its hardware: its speed is not that "
        "hardware's",
    ]
