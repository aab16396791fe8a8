"""The FPGA backend: the replay-management module (``hls/rmm``), fixed point, bit-exact.

docs/design.md section 3. On a CPU device the module runs as its **C-simulation**: the HLS
sources compiled with g++ (``kernels/fpga_sim``) behind XLA FFI custom calls, inside the jitted
training program, serving the module's host protocol (command words, buffer layout) on a tree
kept in XLA buffers (a `drlhet.replay.fixed_point.FixedTreeState`, written in place: donate
it). It proves function, bit for bit against `drlhet.replay.fixed_point` (tested), not the
board's speed: the DSE costs the FPGA from the module's cycle model, never from this. The
learner module (``hls/learner``, float32) runs DQN's and DDPG/TD3's learner steps the same way
(`drlhet.backends.fpga_learner`; ``learner=fpga@cpu:0`` in a mapping).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.backends import fpga_learner
from drlhet.backends.base import CPU, FPGA, Backend, register
from drlhet.backends.native import library_path
from drlhet.backends.rmm_spec import BRANCHING, INFO, INFO_WORDS, MAX_CAPACITY, accepts
from drlhet.replay import fixed_point as fp
from drlhet.replay.fixed_point import FixedDraw, FixedTreeState
from drlhet.replay.sum_tree import TreeLayout, TreeOps, layout
from drlhet.replay.uint64 import U64

__all__ = ["write", "draw", "serve", "OPS_NAME", "SUPPORTED_BRANCHING", "MAX_CAPACITY"]

OPS_NAME = "fpga"
SUPPORTED_BRANCHING = BRANCHING
"""K the module is built for (one pipeline stage per level, K children read in one cycle)."""
_WHAT = "the FPGA replay module's C-simulation"


@functools.cache
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_path("drlhet_fpga_sim", _WHAT)))
    for target, symbol in (
        ("drlhet_rmm_write", lib.DrlhetRmmWrite),
        ("drlhet_rmm_sample", lib.DrlhetRmmSample),
        ("drlhet_learner_dqn", lib.DrlhetLearnerDqn),
        ("drlhet_learner_ddpg", lib.DrlhetLearnerDdpg),
    ):
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(symbol), platform=CPU)
    ptr = ctypes.POINTER(ctypes.c_uint32)
    lib.drlhet_rmm_serve.argtypes = [ctypes.c_int64] * 3 + [ptr] * 6
    lib.drlhet_rmm_serve.restype = ctypes.c_int
    return lib


def check(tree: FixedTreeState) -> None:
    """Raises ``ValueError`` for a tree the module cannot hold (K, capacity)."""
    why = accepts(tree.capacity, tree.branching)
    if why:
        raise ValueError(why)


def _attrs(tree: FixedTreeState) -> dict:
    return {
        "capacity": np.int64(tree.capacity),
        "branching": np.int64(tree.branching),
        "frac_bits": np.int64(tree.frac_bits),
    }


def write(
    tree: FixedTreeState, indices: jax.Array, values: jax.Array, keep: jax.Array | None = None
) -> FixedTreeState:
    """The module's write command: ``(tree, indices [B], values [B] float v = p^alpha, keep
    [B] | None) -> tree``, as `drlhet.replay.fixed_point.write` (unchecked: the buffer refuses
    bad batches before; a kept index out of range is skipped by the module)."""
    check(tree)
    _library()
    indices = jnp.asarray(indices, jnp.int32)
    if indices.ndim != 1:  # under vmap too: the mapped axis is not in the shape
        raise ValueError(f"indices must be [B] (one tree; vmap for more), got {indices.shape}")
    if indices.shape[0] == 0:
        return tree
    values = jnp.broadcast_to(jnp.asarray(values, jnp.float32), indices.shape)  # B read each
    keep = jnp.ones(indices.shape, bool) if keep is None else jnp.asarray(keep, bool)
    keep = jnp.broadcast_to(keep, indices.shape)
    state = (tree.leaves, tree.hi, tree.lo, tree.saturated)
    call = jax.ffi.ffi_call(
        "drlhet_rmm_write",
        tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in state),
        vmap_method="broadcast_all",
        input_output_aliases={0: 0, 1: 1, 2: 2, 3: 3},
    )
    leaves, hi, lo, saturated = call(*state, indices, values, keep, **_attrs(tree))
    return FixedTreeState(leaves, hi, lo, saturated, tree.capacity, tree.branching, tree.frac_bits)


def draw(tree: FixedTreeState, bits: jax.Array, stratified: bool = True) -> FixedDraw:
    """The module's sample command: ``(tree, bits [B, 2] uint32) -> FixedDraw``, as
    `drlhet.replay.fixed_point.draw`."""
    check(tree)
    _library()
    bits = jnp.asarray(bits, jnp.uint32)
    if bits.ndim != 2 or bits.shape[-1] != 2:  # the module reads two words a draw
        raise ValueError(f"bits must be [B, 2] uint32 (two words a draw), got {bits.shape}")
    b = bits.shape[0]
    if stratified and b > fp.u64.MAX_DIVISOR:
        raise ValueError(f"stratified sampling takes B <= {fp.u64.MAX_DIVISOR}, got {b}")
    out = (
        jax.ShapeDtypeStruct((b,), jnp.int32),
        jax.ShapeDtypeStruct((b,), jnp.uint32),
        jax.ShapeDtypeStruct((2,), jnp.uint32),
    )
    call = jax.ffi.ffi_call("drlhet_rmm_sample", out, vmap_method="broadcast_all")
    indices, values, root = call(
        tree.leaves, tree.hi, tree.lo, bits, stratified=np.int64(stratified), **_attrs(tree)
    )
    return FixedDraw(indices, values, U64(root[..., 0], root[..., 1]))


def serve(
    capacity: int,
    branching: int,
    frac_bits: int,
    memory: tuple[np.ndarray, np.ndarray, np.ndarray],
    cmd: np.ndarray,
    inputs: np.ndarray,
    out: np.ndarray,
) -> int:
    """Serves one command of the host protocol (``hls/rmm/rmm.h``) on a tree held in NumPy
    ``uint32`` arrays ``memory = (leaves, hi, lo)``, in place: what a board does with its
    buffers (the drivers' stand-in calls it); the info op answers this build's K, capacity and
    ``frac_bits``. Returns 0, -1 for a bad command, -2 for a build the module does not take
    (`drlhet.backends.rmm_spec.accepts`); raises ``ValueError`` for ``frac_bits`` outside
    [0, 31], a buffer that is not contiguous uint32 (``memory`` and ``out`` writable too) or is
    smaller than the layout or the command needs."""
    ptr = ctypes.POINTER(ctypes.c_uint32)
    arrays = (*memory, cmd, inputs, out)
    for a in arrays:
        if a.dtype != np.uint32 or not a.flags.c_contiguous:
            raise ValueError("the module's buffers are contiguous uint32 arrays")
    if not all(a.flags.writeable for a in (*memory, out)):
        raise ValueError("the module writes its memory and out: they must be writable")
    if not isinstance(frac_bits, int | np.integer) or not 0 <= frac_bits <= 31:
        raise ValueError(f"frac_bits {frac_bits!r} outside [0, 31]")
    if capacity < 1 or accepts(capacity, branching):
        return -2  # no layout: nothing read or written
    _check_sizes(layout(capacity, branching), memory, cmd, inputs, out)
    return int(
        _library().drlhet_rmm_serve(
            capacity, branching, frac_bits, *(a.ctypes.data_as(ptr) for a in arrays)
        )
    )


def _check_sizes(lay: TreeLayout, memory, cmd, inputs, out) -> None:
    """Refuses buffers smaller than the layout or the command needs (the module would read
    or write past them): ``ValueError`` naming the buffer."""
    wants = (lay.widths[-1], lay.offsets[-1], lay.offsets[-1])
    for name, a, want in zip(("leaves", "hi", "lo"), memory, wants, strict=True):
        if a.size < want:
            raise ValueError(f"{name} holds {a.size} words; the tree's layout needs {want}")
    if cmd.size < 3:
        raise ValueError(f"cmd holds {cmd.size} words; the protocol's command is 3")
    b = int(cmd[1])
    words = {1: (2 * b, 1), 2: (2 * b, 2 * b + 2), 3: (b, 2 * b), INFO: (1, INFO_WORDS)}
    need = words.get(int(cmd[0]), (0, 0))
    for name, a, n in (("inputs", inputs, need[0]), ("out", out, need[1])):
        if a.size < n:
            raise ValueError(f"{name} holds {a.size} words; op {int(cmd[0])} of B {b} needs {n}")


def _learner_call(target: str, out_types: tuple, aliased: int) -> Callable:
    """A learner module step (``drlhet_learner_dqn`` or ``_ddpg``) as an FFI call
    (`drlhet.backends.fpga_learner`); its first ``aliased`` operands (the parameter memories,
    Adam's counts) are written in place (donate the learner state)."""
    _library()
    return jax.ffi.ffi_call(
        target,
        out_types,
        vmap_method="broadcast_all",
        input_output_aliases={k: k for k in range(aliased)},
    )


def _load_learner() -> Callable:
    _library()  # BackendUnavailable when the C-simulation was not built
    return functools.partial(fpga_learner.wrap, call=_learner_call)


def _load_board_learner(where: str) -> Callable:
    """The learner module's step on a board (`drlhet.backends.fpga_learner_board.board_wrap`)."""
    from drlhet.backends.fpga_learner_board import board_wrap

    return board_wrap(where)


def _load_board_replay(where: str, capacity: int, branching: int, batch: int) -> TreeOps:
    """The replay module's tree on a board (`drlhet.backends.fpga_replay_board`)."""
    _library()  # BackendUnavailable when the C-simulation was not built (`sim` serves with it)
    from drlhet.backends.fpga_replay_board import board_tree_ops

    return board_tree_ops(where, capacity, branching, batch)


def _load() -> TreeOps:
    _library()  # BackendUnavailable when the C-simulation was not built
    holds = lambda capacity, branching, dtype: accepts(capacity, branching)  # noqa: E731
    return TreeOps(None, write, fp.REFERENCE.init, fp.sampler(draw), "fixed", holds=holds)


BACKEND = register(
    Backend(
        name="fpga",
        platforms=(FPGA,),
        provides=("replay", "learner"),
        needs="the FPGA modules' C-simulation built on `pip install` (hls4ml's ap_types "
        "headers); a board: pynq or pyxrt and a bitstream",
        loader=_load,
        learner=_load_learner,
        board_learner=_load_board_learner,
        board_replay=_load_board_replay,
        rank=-10,
        numbers="fixed",
        simulation=(CPU, ("replay", "learner")),
        accepts=accepts,
        holds=f"K in {BRANCHING} and capacity <= {MAX_CAPACITY}",
        summary="HLS replay module (fixed point) and learner module (float32, DQN and "
        "DDPG/TD3): their C-simulation inside jit on a CPU device (function, not speed); the "
        "learner on a board with --learner-board and the replay's tree with --replay-board (a "
        "bitstream, or sim: the module through its host protocol); board speed modeled by "
        "their cycle models",
    )
)
