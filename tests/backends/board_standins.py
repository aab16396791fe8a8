"""Stand-ins for an FPGA board behind pynq's and pyxrt's call shapes: each kernel run executes
the replay module's C-simulation (`drlhet.backends.fpga.serve`) on the board's memory.

Host and device copies of every buffer are kept apart, as on a board: a driver that forgets a
sync (to the device before a run, from it after) reads stale words, and its tests fail. A
`Memory` answers the info op with its own build (capacity, K, F), as a bitstream does with its
macros, or stands for a bitstream of another protocol version (``protocol``; None: older than
the op, which leaves the output buffer untouched).
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np

from drlhet.backends import fpga
from drlhet.backends.rmm_spec import INFO, PROTOCOL_VERSION
from drlhet.replay import fixed_point as fp


class Memory:
    """The module's on-chip memories (``leaves, hi, lo``), its build (capacity, K, F) and the
    protocol version it speaks (None: a bitstream older than the info op)."""

    def __init__(
        self,
        capacity: int,
        branching: int,
        frac_bits: int = fp.DEFAULT_FRAC_BITS,
        protocol: int | None = PROTOCOL_VERSION,
    ):
        tree = fp.init(capacity, branching, frac_bits)
        self.words = tuple(
            np.zeros(np.shape(x), np.uint32) for x in (tree.leaves, tree.hi, tree.lo)
        )
        self.build = (capacity, branching, frac_bits)
        self.protocol = protocol
        self.runs = 0

    def run(self, cmd: np.ndarray, inputs: np.ndarray, out: np.ndarray) -> None:
        self.runs += 1
        if cmd[0] == INFO and self.protocol is None:
            return  # an unknown op: the older rmm_top writes nothing
        assert fpga.serve(*self.build, self.words, cmd, inputs, out) == 0, "bad command"
        if cmd[0] == INFO:
            out[2] = self.protocol


def _bitstream_ok(path: str) -> None:
    if not Path(path).is_file():
        raise FileNotFoundError(path)


# --- pynq -------------------------------------------------------------------------------------


class _PynqBuffer(np.ndarray):
    """``pynq.allocate``'s buffer: a host array with a device copy. As pynq's, a slice is a
    buffer too, at its offset: its sync moves only its own words (``synced`` counts the bytes
    each sync moved, per allocation)."""

    on_board: np.ndarray
    offset: int
    synced: list[tuple[str, int]]

    def __array_finalize__(self, obj) -> None:
        if isinstance(obj, _PynqBuffer) and hasattr(obj, "on_board"):
            self.on_board, self.synced = obj.on_board, obj.synced
            self.offset = obj.offset + (self.ctypes.data - obj.ctypes.data) // self.itemsize

    def _board(self) -> np.ndarray:
        assert self.ndim == 1, "the stand-in syncs 1-D buffers and their slices"
        return self.on_board[self.offset : self.offset + self.size]

    def sync_to_device(self) -> None:
        self._board()[:] = self
        self.synced.append(("to", self.nbytes))

    def sync_from_device(self) -> None:
        self[:] = self._board()
        self.synced.append(("from", self.nbytes))


def pynq_module(memory, boards: int = 1, kernel: str = "rmm") -> types.ModuleType:
    """A ``pynq`` whose ``Overlay`` holds one compute unit, ``kernel`` (``rmm``:
    hls/rmm/u250.cfg), run by ``call``: ``memory.run`` on the buffers' device copies."""
    mod = types.ModuleType("pynq")

    def allocate(shape, dtype, target=None):
        buf = np.zeros(shape, dtype).view(_PynqBuffer)
        buf.on_board, buf.offset, buf.synced = np.zeros(shape, dtype), 0, []
        return buf

    class Kernel:
        def call(self, *buffers):
            memory.run(*(b.on_board for b in buffers))

    class Overlay:
        def __init__(self, path):
            _bitstream_ok(path)
            setattr(self, kernel, Kernel())

    mod.allocate = allocate  # type: ignore[attr-defined]
    mod.Overlay = Overlay  # type: ignore[attr-defined]
    mod.Device = types.SimpleNamespace(devices=[object()] * boards)  # type: ignore[attr-defined]
    return mod


# --- pyxrt ------------------------------------------------------------------------------------


def pyxrt_module(memory, boards: int = 1, kernel_name: str = "rmm_top") -> types.ModuleType:
    """A ``pyxrt`` with ``device``, ``xclbin``, ``kernel`` (called with its buffer objects,
    returning a run to ``wait`` for) and ``bo`` (``write``/``read`` on the host copy, ``sync``
    between the copies)."""
    mod = types.ModuleType("pyxrt")
    to_device, from_device = 0, 1
    mod.xclBOSyncDirection = types.SimpleNamespace(  # type: ignore[attr-defined]
        XCL_BO_SYNC_BO_TO_DEVICE=to_device, XCL_BO_SYNC_BO_FROM_DEVICE=from_device
    )

    class device:  # noqa: N801  (pyxrt's names)
        def __init__(self, index):
            if index >= boards:
                raise RuntimeError(f"No such device {index}")
            self.loaded = None

        def load_xclbin(self, xclbin):
            self.loaded = xclbin.path
            return "uuid"

    class xclbin:  # noqa: N801
        def __init__(self, path):
            _bitstream_ok(path)
            self.path = path

    class bo:  # noqa: N801
        normal = 0

        def __init__(self, dev, size, flags, group):
            assert dev.loaded and size % 4 == 0
            self.host = bytearray(size)
            self.device = np.zeros(size // 4, np.uint32)

        def write(self, data, offset):
            self.host[offset : offset + len(data)] = data

        def read(self, size, offset):
            return np.frombuffer(bytes(self.host[offset : offset + size]), np.uint8)

        def sync(self, direction, size, offset):
            view = self.device.view(np.uint8)
            if direction == to_device:
                view[offset : offset + size] = np.frombuffer(
                    bytes(self.host[offset : offset + size]), np.uint8
                )
            else:
                self.host[offset : offset + size] = view[offset : offset + size].tobytes()

    class Run:
        def __init__(self, bos):
            self.bos = bos

        def wait(self):
            memory.run(*(b.device for b in self.bos))
            return 0

    class kernel:  # noqa: N801
        shared = 1

        def __init__(self, dev, uuid, name, mode):
            assert uuid == "uuid" and name == kernel_name

        def group_id(self, arg):
            return arg

        def __call__(self, *bos):
            return Run(bos)

    mod.device, mod.xclbin, mod.bo, mod.kernel = device, xclbin, bo, kernel  # type: ignore[attr-defined]
    return mod
