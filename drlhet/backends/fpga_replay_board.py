"""The FPGA replay module on a board inside the training loop: the buffer's tree primitives
(`drlhet.replay.sum_tree.TreeOps`) as host callbacks that send the module's write and sample
commands to a board (`drlhet.backends.fpga_board.BoardTree`).

docs/design.md section 3 ("The replay board in the training loop"). The tree lives on the board;
the program's replay state holds its storage, counters and checks as for every backend, and in
place of the tree a `BoardTreeState`: which board (``handle``) and how many writes the state has
seen (``gen``). Every write bumps ``gen`` on the board and in the state, and every command first
checks that the two agree, so a state used twice (a stale copy, a retried chunk) is refused
instead of sampling a tree that has moved on. The callbacks are unordered ``io_callback``s
(ordered ones cannot be vmapped, and the trainer vmaps its seeds): data orders them, since every
command takes ``gen`` from the write before it and every write after a sample takes the
sample's indices (an update's own, or a delayed one's stamps through
`drlhet.replay.delayed.after_sample`).

One tree per board: a run with a replay board trains one seed. A checkpoint holds the tree read
back from the board (`read_back`) and a resume writes it onto one (`load`;
`drlhet.runtime.board_state`). ``sim`` is `SimulatedBoard`, the module's own code serving its
host protocol on host memory (`drlhet.backends.fpga.serve`), which answers as a bitstream built
from ``hls/rmm`` does, bit for bit; a path is a bitstream opened through pyxrt or pynq
(`drlhet.backends.fpga_board.open_board`). A board's speed is the cycle model's
(`drlhet.dse.devices.rmm_cycles`), never this host's.
"""

from __future__ import annotations

import dataclasses
import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from drlhet.backends import fpga
from drlhet.backends.fpga_board import BoardTree, open_board
from drlhet.backends.rmm_spec import INFO_WORDS, accepts
from drlhet.replay import fixed_point as fp
from drlhet.replay.sum_tree import TreeOps, layout
from drlhet.replay.uint64 import U64

__all__ = [
    "SIM",
    "SimulatedBoard",
    "BoardTreeState",
    "board_tree_ops",
    "StaleBoardState",
    "read_back",
    "load",
]

SIM = "sim"
"""`board_tree_ops`'s board for the module simulated through its host protocol."""
SIM_MAX_BATCH = 1 << 16
"""Entries of one `SimulatedBoard` command: the module's largest stratified sample."""
_GEN_MASK = 0x7FFFFFFF


class StaleBoardState(RuntimeError):
    """A replay state whose tree is not the board's: its writes are not the board's last."""


class SimulatedBoard:
    """A `drlhet.backends.fpga_board.Board` whose commands are served by the replay module's
    C-simulation (`drlhet.backends.fpga.serve`) on host memory: what ``rmm_top`` built with
    ``RMM_CAPACITY=capacity``, ``RMM_K=branching``, ``RMM_FRAC_BITS=frac_bits`` answers, words
    for words (its info op says that build). ``max_batch``: entries a command takes."""

    def __init__(
        self, capacity: int, branching: int, frac_bits: int, max_batch: int = SIM_MAX_BATCH
    ):
        why = accepts(capacity, branching) if capacity >= 1 else f"capacity {capacity} < 1"
        if why:
            raise ValueError(why)
        lay = layout(capacity, branching)
        self.build = (capacity, branching, frac_bits)
        zeros = [np.zeros(n, np.uint32) for n in (lay.widths[-1], lay.offsets[-1], lay.offsets[-1])]
        self.memory: tuple[np.ndarray, np.ndarray, np.ndarray] = (zeros[0], zeros[1], zeros[2])
        self.max_batch = max_batch

    def run(self, cmd: np.ndarray, inputs: np.ndarray, out_words: int) -> np.ndarray:
        """Serves one command ``cmd [3]`` with ``inputs``; the first ``out_words`` output words."""
        cmd = np.ascontiguousarray(cmd, np.uint32)
        inputs = np.ascontiguousarray(inputs, np.uint32)
        out = np.zeros(max(out_words, 2 * int(cmd[1]) + 2, INFO_WORDS), np.uint32)
        code = fpga.serve(*self.build, self.memory, cmd, inputs, out)
        if code:
            raise RuntimeError(f"the simulated board refused command {cmd.tolist()} ({code})")
        return out[:out_words]


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["handle", "gen", "saturated"],
    meta_fields=["capacity", "branching", "frac_bits"],
)
@dataclasses.dataclass(frozen=True)
class BoardTreeState:
    """The replay state's tree when the tree is on a board.

    Attributes:
      handle: ``[]`` int32, the board (`board_tree_ops`'s, in this process).
      gen: ``[]`` int32, the writes this state has seen (mod 2^31); the board's must agree.
      saturated: ``[]`` int32, leaf writes clamped to the format's range, as
        `drlhet.replay.fixed_point.FixedTreeState.saturated` counts them.
      capacity, branching, frac_bits: static N, K and F (the bitstream's build).
    """

    handle: jax.Array
    gen: jax.Array
    saturated: jax.Array
    capacity: int
    branching: int
    frac_bits: int


@dataclasses.dataclass
class _Slot:
    """One open board's tree, the writes it has taken and a lock (callbacks of several
    programs may come on several threads)."""

    tree: BoardTree
    gen: int = 0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def check(self, gen: np.ndarray) -> None:
        if int(gen) != self.gen:
            raise StaleBoardState(
                f"the replay state has seen {int(gen)} writes of the board's tree and the board "
                f"{self.gen}: a state of a tree on a board is used once, then replaced by the "
                "one its command returned"
            )


_SLOTS: list[_Slot] = []
_OPEN: dict[tuple, int] = {}
_LOCK = threading.Lock()


def _open(where: str, capacity: int, branching: int, frac_bits: int) -> int:
    """The handle of the board at ``where`` for this build, opened (and asked its build) on
    first use; `SIM` makes a simulated board."""
    key = (where, capacity, branching, frac_bits)
    with _LOCK:
        if key not in _OPEN:
            sim = where == SIM
            board = SimulatedBoard(capacity, branching, frac_bits) if sim else open_board(where)
            _SLOTS.append(_Slot(BoardTree(board, capacity, branching, frac_bits)))
            _OPEN[key] = len(_SLOTS) - 1
        return _OPEN[key]


def _write_all(tree: BoardTree, values: np.ndarray) -> None:
    """Writes leaves ``0..capacity - 1`` with ``values [capacity]``, ``max_batch`` a command."""
    step = tree.board.max_batch
    for start in range(0, tree.capacity, step):
        idx = np.arange(start, min(start + step, tree.capacity))
        tree.write(idx, values[idx])


def _clear(handle: np.ndarray) -> np.int32:
    """Zeroes every leaf of the board's tree (the module sums the levels: all 0); gen 0."""
    slot = _SLOTS[int(handle)]
    with slot.lock:
        _write_all(slot.tree, np.zeros(slot.tree.capacity, np.float32))
        slot.gen = 0
    return np.int32(0)


def read_back(tree: BoardTreeState) -> fp.FixedTreeState:
    """The board's tree as the C-simulation's state holds it (what a checkpoint saves): every
    level read back (the module's read op), ``[S]`` as ``tree`` (one board each).

    Raises:
      StaleBoardState: the board's tree is not the one ``tree`` names (its writes differ).
    """
    parts = []
    handles, gens = (np.asarray(x).reshape(-1) for x in (tree.handle, tree.gen))
    for handle, gen in zip(handles, gens, strict=True):
        slot = _SLOTS[int(handle)]
        with slot.lock:
            slot.check(gen)
            t, lay = slot.tree, layout(tree.capacity, tree.branching)
            leaves = t.read(t.depth, np.arange(lay.widths[-1])).astype(np.uint32)
            inner = [t.read(level, np.arange(lay.widths[level])) for level in range(t.depth)]
        words = np.concatenate(inner)
        parts.append((leaves, (words >> np.uint64(32)).astype(np.uint32), words.astype(np.uint32)))
    shape = np.shape(tree.handle)
    out = [jnp.asarray(np.stack(x).reshape(shape + x[0].shape)) for x in zip(*parts, strict=True)]
    return fp.FixedTreeState(
        out[0], out[1], out[2], tree.saturated, tree.capacity, tree.branching, tree.frac_bits
    )


def load(tree: fp.FixedTreeState, where: str) -> BoardTreeState:
    """``tree`` (one seed's, ``[1]`` or unbatched, as a checkpoint restores it) written onto the
    board at ``where``: the board cleared, then each leaf written as its word over 2^F, which
    the module quantizes back to that word (a word below 2^24 is a float32 integer, one above
    came from a float32 value scaled by 2^F; a clamped word clamps again); every leaf read back
    and compared. The returned state has seen no write (gen 0).

    Raises:
      ValueError: several seeds, or a board whose leaves then differ from ``tree``'s.
    """
    leaves = np.asarray(tree.leaves)
    if leaves.ndim == 2 and leaves.shape[0] != 1:
        raise ValueError(f"a board holds one tree; the state holds {leaves.shape[0]}")
    words = leaves.reshape(-1)
    handle = _open(where, tree.capacity, tree.branching, tree.frac_bits)
    slot = _SLOTS[handle]
    with slot.lock:
        values = (words[: tree.capacity].astype(np.float64) / 2.0**tree.frac_bits).astype(
            np.float32
        )
        _write_all(slot.tree, values)
        got = slot.tree.read(slot.tree.depth, np.arange(words.size)).astype(np.uint32)
        if not np.array_equal(got, words):
            bad = int(np.flatnonzero(got != words)[0])
            raise ValueError(f"the board holds leaf {bad} as {got[bad]}, the state {words[bad]}")
        slot.gen = 0
    shape = leaves.shape[:-1]
    i32 = jnp.int32
    return BoardTreeState(
        jnp.full(shape, handle, i32),
        jnp.zeros(shape, i32),
        jnp.asarray(tree.saturated, i32),
        tree.capacity,
        tree.branching,
        tree.frac_bits,
    )


def _write(handle, gen, indices, values, keep) -> tuple[np.int32, np.int32]:
    """The kept entries' write commands, ``max_batch`` at a time in order (the last duplicate
    wins, as in one command); ``(gen + 1, leaves clamped)``."""
    slot = _SLOTS[int(handle)]
    with slot.lock:
        slot.check(gen)
        kept = np.asarray(keep, bool)
        idx, v = np.asarray(indices)[kept], np.asarray(values, np.float32)[kept]
        step, clamped = slot.tree.board.max_batch, 0
        for start in range(0, idx.size, step):
            clamped += slot.tree.write(idx[start : start + step], v[start : start + step])
        slot.gen = (slot.gen + 1) & _GEN_MASK
        return np.int32(slot.gen), np.int32(clamped)


def _sample(handle, gen, bits, stratified: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One sample command: ``(indices [B] int32, leaf words [B] uint32, root [2] uint32)``; an
    empty tree answers root 0, which the buffer refuses (`drlhet.replay.checks.ERR_EMPTY`)."""
    slot = _SLOTS[int(handle)]
    with slot.lock:
        slot.check(gen)
        indices, values, root = slot.tree.sample(np.asarray(bits), stratified, refuse_empty=False)
    return indices, values, np.array([root >> 32, root & 0xFFFFFFFF], np.uint32)


def board_tree_ops(
    where: str, capacity: int, branching: int, batch: int, frac_bits: int = fp.DEFAULT_FRAC_BITS
) -> TreeOps:
    """The buffer's tree primitives on the board at ``where`` (`SIM` or a bitstream's path),
    built for ``capacity`` leaves, K ``branching`` and F ``frac_bits``, sampling ``batch`` a
    command: the board is opened and asked its build now, before a run starts.

    Raises:
      ValueError: a tree the module cannot hold, a bitstream built for another, or a batch
        past the board's buffers.
      BackendUnavailable: no driver, no board or no bitstream at ``where``; the C-simulation
        not built (`SIM`).
    """
    handle = _open(where, capacity, branching, frac_bits)
    top = _SLOTS[handle].tree.board.max_batch
    if not 1 <= batch <= top:
        raise ValueError(f"the board takes 1..{top} entries a command, not a batch of {batch}")
    i32, u32 = jnp.int32, jnp.uint32

    def init(cap: int, k: int, dtype=None) -> BoardTreeState:
        if (cap, k) != (capacity, branching):
            raise ValueError(f"the board holds a tree of {capacity} leaves at K {branching}")
        gen = io_callback(_clear, jax.ShapeDtypeStruct((), i32), i32(handle))
        return BoardTreeState(i32(handle), gen, i32(0), capacity, branching, frac_bits)

    def write(tree: BoardTreeState, indices, values, keep=None) -> BoardTreeState:
        indices = jnp.asarray(indices, i32)
        values = jnp.broadcast_to(jnp.asarray(values, jnp.float32), indices.shape)
        keep = jnp.ones(indices.shape, bool) if keep is None else jnp.asarray(keep, bool)
        keep = jnp.broadcast_to(keep, indices.shape)
        scalar = jax.ShapeDtypeStruct((), i32)
        gen, clamped = io_callback(
            _write, (scalar, scalar), tree.handle, tree.gen, indices, values, keep
        )
        return dataclasses.replace(tree, gen=gen, saturated=tree.saturated + clamped)

    def draw(tree: BoardTreeState, bits: jax.Array, stratified: bool = True) -> fp.FixedDraw:
        b = bits.shape[0]
        out = (
            jax.ShapeDtypeStruct((b,), i32),
            jax.ShapeDtypeStruct((b,), u32),
            jax.ShapeDtypeStruct((2,), u32),
        )
        call = functools.partial(_sample, stratified=bool(stratified))
        indices, values, root = io_callback(call, out, tree.handle, tree.gen, bits)
        return fp.FixedDraw(indices, values, U64(root[0], root[1]))

    holds = lambda cap, k, dtype: accepts(cap, k)  # noqa: E731
    return TreeOps(None, write, init, fp.sampler(draw), "fixed", holds=holds)
