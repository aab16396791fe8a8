"""The FPGA board drivers (pynq, pyxrt) and `BoardTree`, on stand-ins that run the module's
C-simulation behind each library's call shapes (board_standins.py): the tree on the board equals
the fixed-point reference, every missing piece is named, bad input is refused before a word is
sent, and a bitstream built for another K, capacity or F (or too old to say) is refused."""

from __future__ import annotations

import re
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from board_standins import Memory, pynq_module, pyxrt_module

from drlhet import backends
from drlhet.backends.base import BackendUnavailable
from drlhet.backends.fpga_board import BoardTree, PynqBoard, XrtBoard, open_board
from drlhet.backends.rmm_spec import INFO, PROTOCOL_VERSION
from drlhet.dse.devices import load_sheets
from drlhet.dse.devices.fpga import board_memory
from drlhet.replay import fixed_point as fp

N, K = 3000, 16
STANDINS = {"pynq": pynq_module, "pyxrt": pyxrt_module}


@pytest.fixture(scope="module", autouse=True)
def module_loads():
    backends.load("fpga")


@pytest.fixture
def bitstream(tmp_path):
    path = tmp_path / "rmm_u250.xclbin"
    path.write_bytes(b"xclbin2\0")
    return path


def board_for(driver, monkeypatch, bitstream, memory, boards=1, **kw):
    monkeypatch.setitem(sys.modules, driver, STANDINS[driver](memory, boards))
    return open_board(bitstream, driver, **kw)


@pytest.mark.parametrize("driver", ["pynq", "pyxrt"])
def test_a_tree_on_the_board_equals_the_reference(driver, monkeypatch, bitstream):
    memory = Memory(N, K)
    tree = BoardTree(board_for(driver, monkeypatch, bitstream, memory, max_batch=256), N, K)
    ref = fp.init(N, K)
    rng = np.random.default_rng(1)
    for _ in range(4):
        idx = rng.integers(0, N, 200)
        idx[:20] = idx[20]  # duplicates: the last write wins
        v = (10.0 ** rng.uniform(-6, 3, 200)).astype(np.float32)
        v[:3] = [0.0, 1e-9, 1e30]  # zero, below half a step, saturating
        clamped = tree.write(idx, v)
        ref, before = fp.write(ref, jnp.asarray(idx, jnp.int32), jnp.asarray(v)), ref
        assert clamped == int(ref.saturated) - int(before.saturated)
        bits = rng.integers(0, 2**32, (128, 2), dtype=np.uint64).astype(np.uint32)
        for stratified in (True, False):
            got, want = tree.sample(bits, stratified), fp.draw(ref, jnp.asarray(bits), stratified)
            np.testing.assert_array_equal(got[0], np.asarray(want.indices))
            np.testing.assert_array_equal(got[1], np.asarray(want.values))
            assert got[2] == (int(want.total.hi) << 32) | int(want.total.lo)
    np.testing.assert_array_equal(tree.leaves(), np.asarray(ref.leaves)[:N])
    lay = ref.layout
    level = slice(lay.offsets[1], lay.offsets[1] + lay.widths[1])
    sums = (np.asarray(ref.hi[level], np.uint64) << np.uint64(32)) | np.asarray(ref.lo[level])
    np.testing.assert_array_equal(tree.read(1, np.arange(lay.widths[1])), sums)
    assert tree.read(0, [0])[0] == got[2] and tree.read(1, []).size == 0
    assert memory.runs > 0


def test_pynq_moves_only_the_words_a_command_uses(monkeypatch, bitstream):
    memory = Memory(N, K)
    board = board_for("pynq", monkeypatch, bitstream, memory, max_batch=4096)
    tree = BoardTree(board, N, K)
    tree.write(np.arange(100), np.ones(100, np.float32))
    got = tree.sample(np.zeros((8, 2), np.uint32))
    assert got[2] > 0  # the tree on the board took the write
    moved = [n for _, n in board.inputs.synced + board.out.synced]
    assert moved and max(moved) <= board.inputs.nbytes // 10  # a batch of 100, room for 4096


@pytest.mark.parametrize("driver", ["pynq", "pyxrt"])
def test_what_is_missing_is_named(driver, monkeypatch, bitstream, tmp_path):
    cls = {"pynq": PynqBoard, "pyxrt": XrtBoard}[driver]
    monkeypatch.setitem(sys.modules, driver, None)  # the library is not installed
    with pytest.raises(BackendUnavailable, match=f"no {driver}"):
        cls(bitstream)
    memory = Memory(N, K)
    with pytest.raises(BackendUnavailable, match="no board"):
        board_for(driver, monkeypatch, bitstream, memory, boards=0)
    with pytest.raises(BackendUnavailable, match="no bitstream at"):
        board_for(driver, monkeypatch, tmp_path / "missing.xclbin", memory)
    if driver == "pynq":
        with pytest.raises(BackendUnavailable, match="no kernel 'rmm_2'"):
            board_for(driver, monkeypatch, bitstream, memory, kernel="rmm_2")


def test_auto_takes_the_first_driver_that_opens(monkeypatch, bitstream):
    memory = Memory(N, K)
    monkeypatch.setitem(sys.modules, "pyxrt", None)
    monkeypatch.setitem(sys.modules, "pynq", pynq_module(memory))
    assert isinstance(open_board(bitstream), PynqBoard)
    monkeypatch.setitem(sys.modules, "pynq", None)
    with pytest.raises(BackendUnavailable, match="no pyxrt.*; no pynq"):
        open_board(bitstream)
    with pytest.raises(ValueError, match="driver must be"):
        open_board(bitstream, "opencl")


def test_bad_input_is_refused_before_a_word_is_sent(monkeypatch, bitstream):
    memory = Memory(N, K)
    tree = BoardTree(board_for("pyxrt", monkeypatch, bitstream, memory, max_batch=64), N, K)
    with pytest.raises(ValueError, match="cannot sample from an empty replay buffer"):
        tree.sample(np.zeros((4, 2), np.uint32))
    runs = memory.runs
    for idx, v, match in (
        ([0, 1], [1.0, -1.0], "finite and >= 0, got -1.0"),
        ([0, 1], [1.0, np.nan], "finite and >= 0, got nan"),
        ([0, 1], [np.inf, 1.0], "finite and >= 0, got inf"),
        ([0, N], [1.0, 1.0], f"index {N} outside"),
        ([-1], [1.0], "index -1 outside"),
        ([0, 1], [1.0], "must both be"),
        (np.arange(65), np.ones(65), "1..64 entries, got 65"),
        ([], [], "1..64 entries, got 0"),
    ):
        with pytest.raises(ValueError, match=match):
            tree.write(idx, v)
    with pytest.raises(ValueError, match="bits must be"):
        tree.sample(np.zeros((4, 3), np.uint32))
    with pytest.raises(ValueError, match="level must be"):
        tree.read(tree.depth + 1, [0])
    assert memory.runs == runs and not memory.words[0].any()
    for k, n, match in (
        (2, N, "supports K in"),
        (K, 0, "capacity must be >= 1"),
        (K, (1 << 31) + 1, "holds"),
    ):
        with pytest.raises(ValueError, match=match):
            BoardTree(tree.board, n, k)
    u250 = load_sheets()["u250"]["values"]
    memory = (u250["sram_mb"]["value"] * 1e6, u250["ddr_gb"]["value"] * 1e9)
    for n, where in ((1 << 22, "on-chip"), (1 << 23, "ddr")):
        board = board_for("pynq", monkeypatch, bitstream, Memory(n, 16))  # a bitstream of n
        assert BoardTree(board, n, 16, memory=memory).leaves_at == where
    with pytest.raises(ValueError, match="inner nodes .* exceed the board's on-chip memory"):
        BoardTree(tree.board, 1 << 30, 16, memory=memory)
    with pytest.raises(ValueError, match="leaves .* exceed the board's on-chip .* and DDR"):
        BoardTree(tree.board, 1 << 23, 16, memory=(memory[0], 1e6))
    # counted in URAM blocks as the top binds its memories (the DSE's count): at K 4 the inner
    # levels' banks leave no room for 2^22 leaves
    blocks = board_memory(load_sheets()["u250"])
    for n, k, where in ((1 << 22, 16, "on-chip"), (1 << 22, 4, "ddr")):
        board = board_for("pynq", monkeypatch, bitstream, Memory(n, k))
        assert BoardTree(board, n, k, memory=blocks).leaves_at == where


def test_indices_slots_and_levels_that_are_not_in_range_integers_are_refused(
    monkeypatch, bitstream
):
    """A float index was truncated (``write([1.7], ...)`` wrote leaf 1), and ``read`` sent
    slots as uint32 unchecked: slot 2^32 + 1 read slot 1, -1 and slots past the level read 0,
    and level 1.5 read level 1. Now refused with the value, before a word is sent."""
    memory = Memory(N, K)
    tree = BoardTree(board_for("pynq", monkeypatch, bitstream, memory, max_batch=64), N, K)
    tree.write([1, 2], [1.0, 2.0])
    runs, width = memory.runs, fp.init(N, K).layout.widths[1]
    with pytest.raises(ValueError, match="indices must have an integer dtype, got float64"):
        tree.write(np.array([1.7, 2.2]), [3.0, 4.0])
    for slot, match in (
        ((1 << 32) + 1, f"slot {(1 << 32) + 1} outside level 1's"),
        (-1, "slot -1 outside"),
        (width, f"slot {width} outside level 1's \\[0, {width}\\)"),
    ):
        with pytest.raises(ValueError, match=match):
            tree.read(1, [0, slot])
    with pytest.raises(ValueError, match="slots must have an integer dtype"):
        tree.read(1, [0.0])
    with pytest.raises(ValueError, match="level must be an integer in .*got 1.5"):
        tree.read(1.5, [0])  # type: ignore[arg-type]
    assert memory.runs == runs
    assert tree.read(tree.depth, np.uint64([1, 2])).tolist() == [1 << 20, 2 << 20]


def test_frac_bits_outside_the_leaf_format_are_refused(monkeypatch, bitstream):
    """``frac_bits`` was kept unchecked (40, 2.5 or "20" accepted); the leaf format holds
    ``[0, 31]``, as `drlhet.replay.fixed_point.init` refuses. Nothing is sent for those; a valid
    one is the bitstream's (its info op answers it)."""
    memory = Memory(N, K)
    board = board_for("pynq", monkeypatch, bitstream, memory, max_batch=64)
    for bad in (-1, 32, 40, 2.5, "20"):
        with pytest.raises(ValueError, match=re.escape(f"frac_bits {bad!r} outside [0, 31]")):
            BoardTree(board, N, K, frac_bits=bad)  # type: ignore[arg-type]
    assert memory.runs == 0
    for f in (np.int64(31), 0):
        board = board_for("pynq", monkeypatch, bitstream, Memory(N, K, int(f)), max_batch=64)
        assert BoardTree(board, N, K, frac_bits=f).frac_bits == f


@pytest.mark.parametrize("driver", ["pynq", "pyxrt"])
@pytest.mark.parametrize(
    "build, named",
    [
        ((N, 8, 20), ["K 8 (given: 16)"]),
        ((1000, K, 20), ["capacity 1000 (given: 3000)"]),
        ((N, K, 12), ["frac_bits 12 (given: 20)"]),
        ((4096, 4, 31), ["K 4 (given: 16)", "capacity 4096 (given: 3000)", "frac_bits 31"]),
    ],
)
def test_a_bitstream_built_for_other_values_is_refused_naming_them(
    driver, monkeypatch, bitstream, build, named
):
    """The protocol reported no build: a bitstream of another K, capacity or F served the
    caller's commands and gave wrong samples without an error. Now `BoardTree` asks once (the
    info op) and refuses, in one line naming each differing value, before any other command."""
    memory = Memory(*build)
    board = board_for(driver, monkeypatch, bitstream, memory, max_batch=64)
    with pytest.raises(ValueError) as refused:
        BoardTree(board, N, K)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("the bitstream was built for")
    for part in named:
        assert part in message
    assert message.count("given:") == len(named)
    assert memory.runs == 1 and not any(w.any() for w in memory.words)  # the info op only


@pytest.mark.parametrize("driver", ["pynq", "pyxrt"])
def test_the_build_is_asked_once(driver, monkeypatch, bitstream):
    memory = Memory(N, K, 12)
    tree = BoardTree(board_for(driver, monkeypatch, bitstream, memory), N, K, frac_bits=12)
    assert memory.runs == 1
    tree.write(np.arange(4), np.ones(4, np.float32))
    tree.sample(np.zeros((4, 2), np.uint32))
    assert memory.runs == 3 and tree.leaves()[:4].tolist() == [1 << 12] * 4


@pytest.mark.parametrize("driver", ["pynq", "pyxrt"])
def test_a_bitstream_older_than_the_info_op_is_refused(driver, monkeypatch, bitstream):
    """A bitstream built before the info op ignores it (its out buffer keeps what it held): it
    cannot say its build, so it is refused, naming that it is older than the protocol; so is a
    stale answer left in the buffer (the nonce differs), and another protocol version."""
    old = Memory(N, K, protocol=None)
    board = board_for(driver, monkeypatch, bitstream, old)
    older = rf"does not answer the info op \(op {INFO}\): it is older than protocol version"
    with pytest.raises(ValueError, match=older + f" {PROTOCOL_VERSION}.*RMM_K={K} RMM_CAPACITY"):
        BoardTree(board, N, K)
    memory = Memory(N, K)
    board = board_for(driver, monkeypatch, bitstream, memory)
    BoardTree(board, N, K)  # its answer stays in the board's out buffer
    memory.protocol = None  # the same buffers, now an old bitstream's
    with pytest.raises(ValueError, match=older):
        BoardTree(board, N, K)
    memory.protocol = PROTOCOL_VERSION + 1
    with pytest.raises(ValueError, match=f"speaks protocol version {PROTOCOL_VERSION + 1}, th"):
        BoardTree(board, N, K)
    assert not any(w.any() for w in old.words + memory.words)
