"""The links to an FPGA learner module (`drlhet.backends.fpga_learner_board.LearnerBoard`):
XRT's Python binding (an Alveo), pynq, and the synthesized top's own C-simulation.

A link moves the four buffers of ``learner_top(cmd, hyper, in, out)`` (``learner_top.h``):
``cmd`` ``[4]`` uint32 (written back by the store command), ``hyper`` ``[16]`` float64, ``in``
and ``out`` float32, sized for the network of the build (`LearnerBuild.memory_words`) and a
batch of `MAX_BATCH`. pyxrt and pynq are imported lazily; what is missing (the library, a board,
the bitstream, a compiler) raises `BackendUnavailable` naming it.

`SimulatedLearnerBoard` compiles ``hls/learner/learner_top.cpp`` with g++ for one build (its
``LEARNER_*`` macros) and calls it through ctypes: the bitstream's code run on the host, for
checking a host program against the protocol before a board runs it (function, not speed).
"""

from __future__ import annotations

import ctypes
import hashlib
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from drlhet.backends.base import BackendUnavailable
from drlhet.backends.fpga_board import bitstream_file, board_library, open_with
from drlhet.backends.fpga_learner_board import HYPER, INFO_WORDS, MAX_BATCH, LearnerBuild

__all__ = [
    "buffer_words",
    "SimulatedLearnerBoard",
    "PynqLearnerBoard",
    "XrtLearnerBoard",
    "open_learner_board",
]

LEARNER_TOP = Path(__file__).resolve().parents[2] / "hls" / "learner" / "learner_top.cpp"
"""The synthesized top's source (a repository's ``hls/``; an installed wheel has none)."""


def buffer_words(build: LearnerBuild) -> tuple[int, int]:
    """Words of ``in`` and ``out`` for ``build``: the memories, or a batch of `MAX_BATCH` rows
    (DDPG's widest: obs, action, reward, discount, next obs, weight, noise), or the info."""
    rows = MAX_BATCH * (2 * build.obs + 2 * build.actions + 3)
    words = max(build.memory_words(), rows, MAX_BATCH + 3, INFO_WORDS)
    return words, words


def _arrays(cmd, hyper, inputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.ascontiguousarray(cmd, np.uint32),
        np.ascontiguousarray(hyper, np.float64),
        np.ascontiguousarray(inputs, np.float32).ravel(),
    )


class SimulatedLearnerBoard:
    """The top (``learner_top.cpp``) built for ``build`` by g++ into ``folder`` (default: a new
    temporary one) and run through ctypes; its on-chip memories are the library's globals, so
    each instance loads its own copy of the library."""

    def __init__(self, build: LearnerBuild, folder: Path | None = None) -> None:
        cxx = shutil.which("g++") or shutil.which("c++")
        if cxx is None:
            raise BackendUnavailable("no C++ compiler (g++) for the learner top's C-simulation")
        if not LEARNER_TOP.is_file():
            raise BackendUnavailable(f"no HLS sources at {LEARNER_TOP} (a repository has them)")
        self.build = build
        if folder is None:  # the library is loaded: its file is not needed after
            with tempfile.TemporaryDirectory(prefix="drlhet-learner-top-") as tmp:
                self._top = _compiled(cxx, build, Path(tmp))
        else:
            self._top = _compiled(cxx, build, Path(folder))
        self._in, self._out = (np.zeros(n, np.float32) for n in buffer_words(build))

    def run(self, cmd, hyper, inputs, out_words: int) -> tuple[np.ndarray, np.ndarray]:
        cmd, hyper, inputs = _arrays(cmd, hyper, inputs)
        self._in[: inputs.size] = inputs
        self.serve(cmd, hyper, self._in, self._out)
        return cmd.copy(), self._out[:out_words].copy()

    def serve(self, cmd: np.ndarray, hyper: np.ndarray, inputs: np.ndarray, out: np.ndarray):
        """One call of the top on the caller's buffers, in place (uint32, float64, float32,
        float32; ``inputs`` and ``out`` sized for the build: `buffer_words`)."""
        arrays = (cmd, hyper, inputs, out)
        for a, dtype in zip(arrays, (np.uint32, np.float64, np.float32, np.float32), strict=True):
            if a.dtype != dtype or not a.flags.c_contiguous:
                raise ValueError(f"learner top: a buffer of {a.dtype}, not contiguous {dtype}")
        n_in, n_out = buffer_words(self.build)
        if cmd.size < 4 or hyper.size < HYPER or inputs.size < n_in or out.size < n_out:
            raise ValueError("learner top: buffers shorter than the build's (buffer_words)")
        self._top(*(a.ctypes.data_as(ctypes.c_void_p) for a in arrays))


def _compiled(cxx: str, build: LearnerBuild, folder: Path):
    """``learner_top`` of the top compiled for ``build`` into ``folder``, loaded (ctypes).

    Raises:
      ValueError: a network the module refuses (its ``static_assert``s), named.
    """
    key = hashlib.sha256(repr(sorted(build.macros().items())).encode()).hexdigest()[:12]
    lib = folder / f"learner_top_{key}_{secrets.token_hex(4)}.so"  # each its own globals
    macros = [f"-D{k}={v}" for k, v in build.macros().items()]
    cmd = [cxx, "-std=c++17", "-O2", "-w", "-shared", "-fPIC", *macros]
    cmd += [f"-I{LEARNER_TOP.parent}", str(LEARNER_TOP), "-o", str(lib)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        why = next((ln for ln in done.stderr.splitlines() if "error" in ln), done.stderr)
        raise ValueError(f"the learner top does not build for {build}: {why.strip()}")
    top = ctypes.CDLL(str(lib)).learner_top
    top.argtypes = [ctypes.c_void_p] * 4
    return top


class PynqLearnerBoard:
    """The module through pynq: ``Overlay(bitstream)``, buffers from ``pynq.allocate``, synced
    each way around the kernel's ``call``; ``kernel``: the compute unit's name
    (``hls/learner/u250.cfg``)."""

    def __init__(self, bitstream: str | Path, build: LearnerBuild, kernel: str = "learner") -> None:
        pynq = board_library("pynq")
        path = bitstream_file(bitstream, "hls/learner/run_hls.tcl")
        if not list(getattr(pynq.Device, "devices", [])):
            raise BackendUnavailable("no board: pynq finds no FPGA device")
        overlay = pynq.Overlay(str(path))
        if not hasattr(overlay, kernel):
            raise BackendUnavailable(f"no kernel {kernel!r} in {path}")
        self.kernel = getattr(overlay, kernel)
        n_in, n_out = buffer_words(build)
        shapes = ((4, np.uint32), (HYPER, np.float64), (n_in, np.float32), (n_out, np.float32))
        self.bufs = [pynq.allocate((n,), dtype) for n, dtype in shapes]

    def run(self, cmd, hyper, inputs, out_words: int) -> tuple[np.ndarray, np.ndarray]:
        cmd_buf, hyper_buf, in_buf, out_buf = self.bufs
        cmd, hyper, inputs = _arrays(cmd, hyper, inputs)
        cmd_buf[:], hyper_buf[:] = cmd, hyper
        in_buf[: inputs.size] = inputs
        # only the words this command uses cross the link (a slice of a pynq buffer syncs its
        # own range): the memories or a batch in, the memories or the step's outputs back
        for buf in (cmd_buf, hyper_buf, in_buf[: inputs.size]):
            if buf.size:
                buf.sync_to_device()
        self.kernel.call(*self.bufs)
        cmd_buf.sync_from_device()
        if out_words:
            out_buf[:out_words].sync_from_device()
        return np.array(cmd_buf, np.uint32), np.array(out_buf[:out_words], np.float32)


class XrtLearnerBoard:
    """The module on an Alveo through pyxrt: the device, the ``xclbin`` loaded, the kernel and
    four buffer objects (written, synced each way, read) around a run waited for."""

    def __init__(
        self, bitstream: str | Path, build: LearnerBuild, kernel: str = "learner_top", index=0
    ) -> None:
        xrt = board_library("pyxrt")
        path = bitstream_file(bitstream, "hls/learner/run_hls.tcl")
        try:
            self.device = xrt.device(index)
        except Exception as e:  # noqa: BLE001 - pyxrt raises a RuntimeError without a device
            raise BackendUnavailable(f"no board: XRT opens no device {index} ({e})") from e
        uuid = self.device.load_xclbin(xrt.xclbin(str(path)))
        self.kernel = xrt.kernel(self.device, uuid, kernel, xrt.kernel.shared)
        self._to = xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE
        self._from = xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE
        n_in, n_out = buffer_words(build)
        sizes = (4 * 4, 8 * HYPER, 4 * n_in, 4 * n_out)
        self.bos = [
            xrt.bo(self.device, size, xrt.bo.normal, self.kernel.group_id(arg))
            for arg, size in enumerate(sizes)
        ]

    def run(self, cmd, hyper, inputs, out_words: int) -> tuple[np.ndarray, np.ndarray]:
        for bo, data in zip(self.bos[:3], _arrays(cmd, hyper, inputs), strict=True):
            raw = data.tobytes()
            bo.write(raw, 0)
            bo.sync(self._to, len(raw), 0)
        self.kernel(*self.bos).wait()
        back = []
        for bo, size, dtype in (
            (self.bos[0], 16, np.uint32),
            (self.bos[3], 4 * out_words, np.float32),
        ):
            bo.sync(self._from, size, 0)
            back.append(np.frombuffer(bytes(bo.read(size, 0)), dtype).copy())
        return back[0], back[1]


def open_learner_board(bitstream: str | Path, build: LearnerBuild, driver: str = "auto", **kw):
    """The board that runs ``bitstream`` (built for ``build``), through ``driver`` (``pyxrt``,
    ``pynq`` or ``auto``: the first that opens).

    Raises:
      BackendUnavailable: naming what is missing (no pynq/pyxrt, no board, no bitstream).
      ValueError: an unknown driver.
    """
    drivers = {"pyxrt": XrtLearnerBoard, "pynq": PynqLearnerBoard}
    return open_with(drivers, driver, bitstream, build, **kw)
