"""Board drivers of the FPGA replay module: pynq (``Overlay``) and XRT's Python binding (pyxrt).

docs/design.md section 3. A board runs the synthesized ``rmm_top`` (``hls/rmm``) from a
bitstream (an ``.xclbin``); the host talks to it through the module's protocol, the same words
the C-simulation serves: a command buffer ``[op, B, flags]``, an input buffer and an output
buffer of ``uint32`` (``hls/rmm/rmm.h``). pynq 3.1 and later dropped the Alveo cards, so an
Alveo is driven through ``pyxrt`` behind the same `Board` interface. Both are imported lazily;
what is missing (the library, a board, the bitstream) raises `BackendUnavailable` naming it.

`BoardTree` is the module's sum tree on a board, with the checks every backend makes: a write of
priorities ``v = p^alpha`` (refusing negative, NaN and infinite values and indices out of
range), a sample of B draws (refusing an empty tree) and a read-back of any level
(checkpoints). The tree lives on the board; only the batch's words cross the link. It asks the
bitstream once, by the protocol's info op, for the K, capacity and F it was built with, and
refuses a bitstream built for others (or one too old to say).
"""

from __future__ import annotations

import importlib
import secrets
from pathlib import Path
from types import ModuleType
from typing import Protocol

import numpy as np

from drlhet.backends.base import BackendUnavailable
from drlhet.backends.rmm_spec import (
    INFO,
    INFO_MAGIC,
    INFO_WORDS,
    PROTOCOL_VERSION,
    accepts,
    placement,
)
from drlhet.replay.sum_tree import layout

__all__ = [
    "Board",
    "PynqBoard",
    "XrtBoard",
    "BoardTree",
    "check_build",
    "open_board",
    "DRIVERS",
    "board_library",
    "bitstream_file",
    "open_with",
]

WRITE, SAMPLE, READ = 1, 2, 3
"""The protocol's ops (``rmm.h``: kWrite, kSample, kRead; kInfo is `rmm_spec.INFO`)."""
STRATIFIED = 1
DROPPED = 0xFFFFFFFF
DRIVERS = ("pyxrt", "pynq")
"""The drivers `open_board` tries, in this order (``auto``)."""


class Board(Protocol):
    """A board that serves the protocol: ``run(cmd [3], inputs [n], out_words) -> out``."""

    max_batch: int

    def run(self, cmd: np.ndarray, inputs: np.ndarray, out_words: int) -> np.ndarray: ...


def board_library(name: str) -> ModuleType:
    """The board driver ``name`` (``pynq``, ``pyxrt``), imported; `BackendUnavailable` naming
    the extra that installs it."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise BackendUnavailable(
            f"no {name}: the FPGA board driver needs it (`pip install drlhet[fpga]`)"
        ) from e


def bitstream_file(path: str | Path, build: str = "hls/rmm/README.md") -> Path:
    """``path`` as a file that exists; `BackendUnavailable` naming it and where the bitstream's
    build is described (``build``)."""
    p = Path(path)
    if not p.is_file():
        raise BackendUnavailable(f"no bitstream at {p} (build it: {build})")
    return p


def _cmd(op: int, batch: int, flags: int) -> np.ndarray:
    """The command words ``[op, B, flags]``."""
    return np.array([op, batch, flags], np.uint32)


def _integers(name: str, a: np.ndarray) -> np.ndarray:
    """``a`` as int64, refusing a non-integer dtype (a float index would be truncated)."""
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must have an integer dtype, got {a.dtype}")
    if a.dtype == np.uint64 and a.size and a.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name}: {int(a.max())} is past int64")
    return a.astype(np.int64)


def _words(max_batch: int) -> tuple[int, int]:
    """Words of the input and output buffers for batches of up to ``max_batch`` (the output
    holds the info op's answer too)."""
    return 2 * max_batch, max(2 * max_batch + 2, INFO_WORDS)


class PynqBoard:
    """The module on a board through pynq: ``Overlay(bitstream)``, buffers from
    ``pynq.allocate``, ``sync_to_device``/``sync_from_device`` and the kernel's ``call``;
    ``kernel`` is the compute unit's name (``rmm`` in ``hls/rmm/u250.cfg``)."""

    def __init__(self, bitstream: str | Path, kernel: str = "rmm", max_batch: int = 4096) -> None:
        pynq = board_library("pynq")
        path = bitstream_file(bitstream)
        if not list(getattr(pynq.Device, "devices", [])):
            raise BackendUnavailable("no board: pynq finds no FPGA device")
        self.overlay = pynq.Overlay(str(path))
        if not hasattr(self.overlay, kernel):
            raise BackendUnavailable(f"no kernel {kernel!r} in {path}")
        self.kernel = getattr(self.overlay, kernel)
        self.max_batch = max_batch
        n_in, n_out = _words(max_batch)
        self.cmd = pynq.allocate((3,), np.uint32)
        self.inputs = pynq.allocate((n_in,), np.uint32)
        self.out = pynq.allocate((n_out,), np.uint32)

    def run(self, cmd: np.ndarray, inputs: np.ndarray, out_words: int) -> np.ndarray:
        """One command; only the words it uses cross the link (a pynq buffer's slice syncs its
        own range), as `XrtBoard` moves them."""
        self.cmd[:] = cmd
        self.inputs[: inputs.size] = inputs
        self.cmd.sync_to_device()
        if inputs.size:
            self.inputs[: inputs.size].sync_to_device()
        self.kernel.call(self.cmd, self.inputs, self.out)
        if out_words:
            self.out[:out_words].sync_from_device()
        return np.array(self.out[:out_words], np.uint32)


class XrtBoard:
    """The module on an Alveo through pyxrt: ``device``, ``xclbin``, ``load_xclbin``,
    ``kernel``, buffer objects (``bo``) written, synced and read, and a run waited for."""

    def __init__(
        self,
        bitstream: str | Path,
        kernel: str = "rmm_top",
        max_batch: int = 4096,
        index: int = 0,
    ) -> None:
        xrt = board_library("pyxrt")
        path = bitstream_file(bitstream)
        try:
            self.device = xrt.device(index)
        except Exception as e:  # pyxrt raises a RuntimeError without a device
            raise BackendUnavailable(f"no board: XRT opens no device {index} ({e})") from e
        xclbin = xrt.xclbin(str(path))
        uuid = self.device.load_xclbin(xclbin)
        self.kernel = xrt.kernel(self.device, uuid, kernel, xrt.kernel.shared)
        self.max_batch = max_batch
        self._to = xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE
        self._from = xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE
        n_in, n_out = _words(max_batch)
        self.bos = [
            xrt.bo(self.device, 4 * n, xrt.bo.normal, self.kernel.group_id(arg))
            for arg, n in enumerate((3, n_in, n_out))
        ]

    def run(self, cmd: np.ndarray, inputs: np.ndarray, out_words: int) -> np.ndarray:
        for bo, words in zip(self.bos[:2], (cmd, inputs), strict=True):
            data = np.ascontiguousarray(words, np.uint32).tobytes()
            bo.write(data, 0)
            bo.sync(self._to, len(data), 0)
        self.kernel(*self.bos).wait()
        out = self.bos[2]
        out.sync(self._from, 4 * out_words, 0)
        return np.frombuffer(bytes(out.read(4 * out_words, 0)), np.uint32).copy()


def open_board(bitstream: str | Path, driver: str = "auto", **kw) -> Board:
    """The board that runs ``bitstream``, through ``driver`` (``pyxrt``, ``pynq`` or ``auto``:
    the first that opens).

    Raises:
      BackendUnavailable: naming what is missing (no pynq/pyxrt, no board, no bitstream).
      ValueError: an unknown driver.
    """
    return open_with({"pyxrt": XrtBoard, "pynq": PynqBoard}, driver, bitstream, **kw)


def open_with(drivers: dict, driver: str, *args, **kw):
    """``drivers[name](*args, **kw)`` for ``driver``, or for ``auto`` the first of `DRIVERS`
    that opens (`open_board`'s and the learner's links).

    Raises:
      BackendUnavailable: what each driver tried lacked, joined.
      ValueError: an unknown driver.
    """
    if driver not in ("auto", *DRIVERS):
        raise ValueError(f"driver must be auto or one of {DRIVERS}, got {driver!r}")
    tried = []
    for name in DRIVERS if driver == "auto" else (driver,):
        try:
            return drivers[name](*args, **kw)
        except BackendUnavailable as e:
            tried.append(str(e))
    raise BackendUnavailable("; ".join(tried))


def check_build(board: Board, capacity: int, branching: int, frac_bits: int) -> None:
    """Asks ``board`` for its bitstream's build (one info command) and refuses another.

    The command carries a random nonce that the answer echoes: a bitstream older than the op
    leaves the output buffer as it was, and a stale answer there is not taken for its own.

    Raises:
      ValueError: in one line, a bitstream that does not answer the info op (older than
        protocol version `PROTOCOL_VERSION`), that speaks another version, or that was built
        with another K, capacity or F (each differing value, the bitstream's and the given).
    """
    rebuild = (
        f"rebuild it (hls/rmm/run_hls.tcl) with RMM_K={branching} RMM_CAPACITY={capacity} "
        f"RMM_FRAC_BITS={frac_bits}"
    )
    nonce = secrets.randbits(32)
    out = board.run(_cmd(INFO, 1, 0), np.array([nonce], np.uint32), INFO_WORDS)
    words = [int(w) for w in np.asarray(out).reshape(-1)[:INFO_WORDS]]
    if len(words) < INFO_WORDS or words[0] != INFO_MAGIC or words[1] != nonce:
        raise ValueError(
            f"the bitstream does not answer the info op (op {INFO}): it is older than protocol "
            f"version {PROTOCOL_VERSION} and cannot say its K, capacity and F; {rebuild}"
        )
    if words[2] != PROTOCOL_VERSION:
        raise ValueError(
            f"the bitstream speaks protocol version {words[2]}, this host version "
            f"{PROTOCOL_VERSION}; {rebuild}"
        )
    given = {"K": branching, "capacity": capacity, "frac_bits": frac_bits}
    differ = [
        f"{name} {built} (given: {want})"
        for (name, want), built in zip(given.items(), words[3:], strict=True)
        if built != want
    ]
    if differ:
        raise ValueError(
            f"the bitstream was built for {', '.join(differ)}: give BoardTree its values, or "
            f"{rebuild}"
        )


class BoardTree:
    """The replay module's sum tree on a board (`Board`), through the host protocol.

    Args:
      board: an open board (`open_board`, or a stand-in serving the same calls).
      capacity, branching: the leaves and K the bitstream was built with (``RMM_CAPACITY``,
        ``RMM_K``).
      frac_bits: the fraction bits of its leaves (``RMM_FRAC_BITS``), in ``[0, 31]``.
      memory: the board's ``(on-chip bytes, DDR bytes[, URAM blocks])``
        (`drlhet.dse.devices.fpga.board_memory` of its device sheet): a capacity whose
        memories fit in neither is refused (`drlhet.backends.rmm_spec.placement`).

    The bitstream's capacity, K and F are compile-time constants of ``rmm_top``: the tree asks
    them once, by the protocol's info op (``rmm.h``: kInfo; one command, never again), and
    refuses a bitstream built for other values, or one older than the op (it cannot say what it
    was built for, and a mismatch gives wrong samples without an error): rebuild it.

    Raises:
      ValueError: a bad argument (nothing is sent), or a bitstream that is not the caller's
        (`check_build`).
    """

    def __init__(
        self,
        board: Board,
        capacity: int,
        branching: int = 16,
        frac_bits: int = 20,
        memory: tuple | None = None,
    ):
        why = (
            accepts(capacity, branching)
            if capacity >= 1
            else f"capacity must be >= 1, got {capacity}"
        )
        if why:
            raise ValueError(why)
        if not isinstance(frac_bits, int | np.integer) or not 0 <= frac_bits <= 31:
            raise ValueError(f"frac_bits {frac_bits!r} outside [0, 31]")  # as fixed_point.init
        leaves_at = placement(capacity, branching, *memory) if memory else None
        check_build(board, capacity, branching, int(frac_bits))  # the one info command
        self.leaves_at = leaves_at
        self.board, self.capacity, self.branching = board, capacity, branching
        self.frac_bits = int(frac_bits)
        self.depth = layout(capacity, branching).depth

    def _batch(self, n: int, limit: int | None = None) -> None:
        top = min(self.board.max_batch, limit or self.board.max_batch)
        if not 1 <= n <= top:
            raise ValueError(f"a command takes 1..{top} entries, got {n}")

    def write(self, indices: np.ndarray, values: np.ndarray) -> int:
        """Writes leaves ``indices [B]`` with ``values [B]`` (float32 ``p^alpha``; later
        duplicates win); returns how many were clamped to the leaf format's range.

        Raises:
          ValueError: a value that is negative, NaN or infinite, an index that is not an
            integer or is outside ``[0, capacity)``, mismatched shapes or B past the board's
            buffers; nothing is sent.
        """
        raw = np.asarray(indices).reshape(-1)
        v = np.asarray(values, np.float32).reshape(-1)
        if raw.shape != v.shape:
            raise ValueError(f"indices {raw.shape} and values {v.shape} must both be [B]")
        self._batch(raw.size)
        idx = _integers("indices", raw)
        bad = ~np.isfinite(v) | (v < 0)
        if bad.any():
            raise ValueError(f"priorities must be finite and >= 0, got {float(v[bad][0])}")
        out = (idx < 0) | (idx >= self.capacity)
        if out.any():
            raise ValueError(f"index {int(idx[out][0])} outside [0, {self.capacity})")
        words = np.concatenate([idx.astype(np.uint32), v.view(np.uint32)])
        return int(self.board.run(_cmd(WRITE, idx.size, 0), words, 1)[0])

    def sample(
        self, bits: np.ndarray, stratified: bool = True, refuse_empty: bool = True
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """B draws from ``bits [B, 2]`` uint32 random words (high, low): ``(indices [B] int32,
        leaf words [B] uint32, root)``; P(i) = leaf word / root. With ``refuse_empty`` False an
        empty tree answers as the module does (root 0), for a caller that refuses it itself.

        Raises:
          ValueError: an empty tree (root 0; unless ``refuse_empty`` is False), bad shapes, or
            B past the board's buffers (a stratified B past 65536).
        """
        words = np.asarray(bits, np.uint32)
        if words.ndim != 2 or words.shape[1] != 2:
            raise ValueError(f"bits must be [B, 2] uint32, got {words.shape}")
        b = words.shape[0]
        self._batch(b, 1 << 16 if stratified else None)
        cmd = _cmd(SAMPLE, b, STRATIFIED if stratified else 0)
        out = self.board.run(cmd, words.reshape(-1), 2 * b + 2)
        root = (int(out[2 * b]) << 32) | int(out[2 * b + 1])
        if root == 0 and refuse_empty:
            raise ValueError("cannot sample from an empty replay buffer (size 0)")
        return out[:b].astype(np.int32), out[b : 2 * b].copy(), root

    def read(self, level: int, slots: np.ndarray) -> np.ndarray:
        """Values of ``slots [n]`` of ``level`` (0: the root's, ``depth``: the leaves) as
        uint64, read ``max_batch`` at a time (checkpoints).

        Raises:
          ValueError: a level outside ``[0, depth]``, or a slot that is not an integer or is
            outside the level's width; nothing is sent.
        """
        if not isinstance(level, int | np.integer) or not 0 <= level <= self.depth:
            raise ValueError(f"level must be an integer in [0, {self.depth}], got {level!r}")
        raw = np.asarray(slots).reshape(-1)
        if raw.size == 0:
            return np.zeros(0, np.uint64)
        s, width = _integers("slots", raw), layout(self.capacity, self.branching).widths[level]
        past = (s < 0) | (s >= width)
        if past.any():
            raise ValueError(f"slot {int(s[past][0])} outside level {level}'s [0, {width})")
        parts = []
        for start in range(0, s.size, self.board.max_batch):
            chunk = s[start : start + self.board.max_batch].astype(np.uint32)
            out = self.board.run(_cmd(READ, chunk.size, level), chunk, 2 * chunk.size)
            parts.append((out[0::2].astype(np.uint64) << np.uint64(32)) | out[1::2])
        return np.concatenate(parts)

    def leaves(self) -> np.ndarray:
        """Every leaf word ``[capacity]`` uint32 (the tree's state: the sums follow)."""
        return self.read(self.depth, np.arange(self.capacity)).astype(np.uint32)
