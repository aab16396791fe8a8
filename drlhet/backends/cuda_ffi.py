"""The CUDA backend's libraries and their XLA FFI handlers: which custom-call targets each
library's handlers are registered under, on which platform, and when.

Two libraries hold the same handler bodies (``kernels/cuda/handlers.h``): the GPU's
(``libdrlhet_cuda``, built where nvcc works; platform ``CUDA``) and the host emulation's
(``libdrlhet_cuda_emu``, built everywhere; platform ``cpu``: a functional simulation of the GPU).
Both are registered under the same targets, so one traced program runs on either device.

The *tagged* updates (``kernels/cuda/tag_table.cuh``; `drlhet.backends.cuda.TAGGED_CLAIMS`)
are stateful handlers: each custom call of a program keeps a claims table that XLA makes with
the executable (the FFI's ``instantiate`` stage) and frees with it. Their state's type and
targets are registered on first use only, so that a jax whose FFI refused them would cost that
switch, not the backend.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.backends.base import CPU, GPU, BackendUnavailable
from drlhet.backends.native import library_path
from drlhet.replay.sum_tree import SumTreeState, check_indices

__all__ = [
    "FFI_TARGETS",
    "FFI_SYMBOLS",
    "EMU_SYMBOLS",
    "TAGGED_TARGETS",
    "GPU_LIBRARY",
    "EMU_LIBRARY",
    "gpu_devices",
    "library",
    "tagged",
    "check_nodes",
    "check_rows",
    "check_sample",
    "update_operands",
    "int32_indices",
    "int64_setting",
    "REMOVED",
    "check_switches",
]

FFI_TARGETS = {
    "DrlhetCudaFind": "drlhet_cuda_find",
    "DrlhetCudaUpdate": "drlhet_cuda_update",
    "DrlhetCudaWeigh": "drlhet_cuda_weigh",
    "DrlhetCudaWeighKey": "drlhet_cuda_weigh_key",
    "DrlhetCudaUpdateChecked": "drlhet_cuda_update_checked",
}
"""The FFI handlers the library exports, and the custom-call targets they are registered as."""
TAGGED_TARGETS = {
    "DrlhetCudaUpdateTagged": "drlhet_cuda_update_tagged",
    "DrlhetCudaUpdateCheckedTagged": "drlhet_cuda_update_checked_tagged",
}
"""The tagged updates' handlers (each with the instantiate stage ``DrlhetCudaTagTableInstantiate``
and the state type of ``DrlhetCudaTagTableTypeId`` / ``...TypeInfo``) and their targets."""
FFI_SYMBOLS = (*FFI_TARGETS, *TAGGED_TARGETS, "DrlhetCudaTagTableInstantiate")
EMU_SYMBOLS = {symbol: symbol.replace("DrlhetCuda", "DrlhetEmu") for symbol in FFI_SYMBOLS}
"""The host emulation's handlers (``libdrlhet_cuda_emu``, platform ``cpu``) of each GPU handler:
the same bodies (``kernels/cuda/handlers.h``) under the same targets."""
GPU_LIBRARY = ("drlhet_cuda", "the CUDA kernels (built where nvcc works)")
EMU_LIBRARY = ("drlhet_cuda_emu", "the CUDA kernels' host emulation")
"""Each library's stem and what it holds (`drlhet.backends.native.library_path`'s arguments)."""


def gpu_devices() -> list:
    """JAX's GPU devices (empty when JAX has no GPU backend here)."""
    try:
        return jax.devices(GPU)
    except RuntimeError:
        return []


def _symbol(platform: str, symbol: str) -> str:
    return symbol if platform == "CUDA" else EMU_SYMBOLS[symbol]


@functools.cache
def _open(platform: str) -> ctypes.CDLL:
    """The library of ``platform`` (``"CUDA"``: the GPU's; ``cpu``: the host emulation's).

    Raises:
      BackendUnavailable: that library was not built.
    """
    stem, what = GPU_LIBRARY if platform == "CUDA" else EMU_LIBRARY
    return ctypes.CDLL(str(library_path(stem, what)))


@functools.cache
def _register(platform: str) -> None:
    """Registers the handlers of ``platform`` under `FFI_TARGETS`' names, once."""
    lib = _open(platform)
    for symbol, target in FFI_TARGETS.items():
        handler = getattr(lib, _symbol(platform, symbol))
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform=platform)


def _platforms() -> tuple[str, ...]:
    """Where the handlers run here: the GPU's where JAX sees a GPU, and the host emulation's
    where it is built (needed without a GPU)."""
    if not gpu_devices():
        return (CPU,)
    try:
        _open(CPU)
    except BackendUnavailable:
        return ("CUDA",)  # cuda@cpu is a simulation: a GPU does without it
    return ("CUDA", CPU)


def library() -> None:
    """Registers the handlers of every platform that runs them here (`_platforms`).

    Raises:
      BackendUnavailable: a library that is needed was not built.
    """
    for platform in _platforms():
        _register(platform)


def _capsule(address: int | None):
    """A PyCapsule holding a data pointer (a type's id or info), as jax's FFI takes it."""
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(address, None, None)


@functools.cache
def _register_tagged(platform: str) -> None:
    """Registers the tag table's state type, then the tagged updates with their instantiate
    stage, of ``platform``, once (after `library`: a backend that is up)."""
    lib, prefix = _open(platform), "DrlhetCuda" if platform == "CUDA" else "DrlhetEmu"
    type_id, type_info = (
        getattr(lib, f"{prefix}TagTableTypeId"),
        getattr(lib, f"{prefix}TagTableTypeInfo"),
    )
    type_id.restype = type_info.restype = ctypes.c_void_p
    jax.ffi.register_ffi_type(
        f"drlhet_{platform.lower()}_tag_table",
        {"type_id": _capsule(type_id()), "type_info": _capsule(type_info())},
        platform=platform,
    )
    instantiate = jax.ffi.pycapsule(getattr(lib, f"{prefix}TagTableInstantiate"))
    for symbol, target in TAGGED_TARGETS.items():
        execute = jax.ffi.pycapsule(getattr(lib, _symbol(platform, symbol)))
        stages = {"instantiate": instantiate, "execute": execute}
        jax.ffi.register_ffi_target(target, stages, platform=platform)


def tagged(target: str) -> str:
    """The tagged handler's target of the update ``target`` (registered on every platform here).

    Raises:
      BackendUnavailable: this jax's FFI refused the stateful handlers (the message says why).
    """
    library()
    try:
        for platform in _platforms():
            _register_tagged(platform)
    except (AttributeError, TypeError, ValueError, RuntimeError) as e:
        raise BackendUnavailable(f"the cuda backend's tagged updates: {e}") from None
    return f"{target}_tagged"


def check_rows(call: str, lead: tuple[int, ...], tail: tuple | None = None, **operands) -> None:
    """Refuses, when traced, operands that are not one row per tree of ``lead`` (the leading
    shape of the trees' nodes): each of ``operands`` shaped ``(*lead, *tail)``, or with ``tail``
    None ``(*lead, B)`` with the first one's B. The handlers refuse such shapes only when XLA
    runs them, after a donated tree was given up, in a message naming no shape.

    Raises:
      ValueError: naming the call, the operand and its shape.
    """
    for name, operand in operands.items():
        shape = tuple(jnp.shape(operand))
        if tail is None and len(shape) == len(lead) + 1:
            tail = shape[-1:]  # the first operand's B
        want = (*lead, *(("B",) if tail is None else tail))
        if shape != want:
            raise ValueError(
                f"cuda.{call}: {name} has shape {shape}, expected {want}: one row per tree, as "
                f"the tree's nodes {(*lead, 'N')}"
            )


def check_nodes(tree: SumTreeState) -> None:
    """Refuses, when traced, a tree the handlers do not take: not float32, or whose nodes' last
    axis is not one tree of its layout (the handler would refuse it after a donation).

    Raises:
      ValueError: naming the dtype or the shape.
    """
    if tree.nodes.dtype != jnp.float32:
        raise ValueError(f"the cuda backend supports float32 trees, got {tree.nodes.dtype}")
    if tree.nodes.shape[-1:] != (tree.layout.size,):
        raise ValueError(
            f"a tree of {tree.capacity} leaves at K {tree.branching} has {tree.layout.size} "
            f"nodes, got nodes of shape {tree.nodes.shape}"
        )


def check_sample(call: str, lead: tuple[int, ...], batch: int, size: Any, beta: Any) -> None:
    """Refuses, when traced, a sample (``call``) of no target per tree, or whose ``size`` or
    ``beta`` is not one per tree of ``lead``.

    Raises:
      ValueError: naming the batch or the operand's shape.
    """
    if batch < 1:
        raise ValueError(f"cuda.{call} needs at least one target per tree (B >= 1), got {batch}")
    check_rows(call, lead, (), size=size, beta=beta)


def update_operands(tree: SumTreeState, indices: Any, values: Any, keep: Any) -> tuple:
    """A plain update's ``(indices int32, keep)`` as its handler takes them, refused when
    traced where they are not one ``[B]`` row per tree (a scalar ``keep`` is the batch's, as in
    the reference) and eagerly where a kept index is outside the tree (named as given).

    Raises:
      ValueError: naming the operand's shape, or the index.
    """
    if keep is not None and jnp.ndim(keep) == 0:
        keep = jnp.broadcast_to(keep, jnp.shape(indices))
    rows = {"indices": indices, "values": values} | ({} if keep is None else {"keep": keep})
    check_rows("update", tree.nodes.shape[:-1], **rows)
    check_indices(tree, indices, keep)
    return int32_indices(indices), keep


def int32_indices(indices: Any) -> jax.Array:
    """Integer ``indices`` as the kernels' int32, an index int32 cannot hold as -1 (refused
    where kept, as the buffer passes such an index), not wrapped into range by the cast (under
    x64, int64 ``2**32 + 3`` would be slot 3). No operation where the dtype fits in int32.

    Raises:
      ValueError: the dtype is not an integer's.
    """
    indices = jnp.asarray(indices)
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise ValueError(f"indices must have an integer dtype, got {indices.dtype}")
    info, lo, hi = jnp.iinfo(indices.dtype), -(2**31), 2**31 - 1
    if info.min >= lo and info.max <= hi:
        return indices.astype(jnp.int32)
    fits = (indices >= max(int(info.min), lo)) & (indices <= hi)
    return jnp.where(fits, indices.astype(jnp.int32), -1)


def int64_setting(name: str, value: Any) -> np.int64:
    """The path switch ``cuda.<name>`` as the handlers' int64 attribute.

    Raises:
      ValueError: ``value`` is not an integer int64 holds (``math.inf``, ``2**63``, 1.5), named.
    """
    try:
        whole = int(value)
        fits = whole == value and -(2**63) <= whole < 2**63
    except (TypeError, ValueError, OverflowError):
        fits = False
    if not fits:
        raise ValueError(f"cuda.{name} must be an integer in int64's range, got {value!r}")
    return np.int64(whole)


REMOVED = {
    "REGION_MAX_BATCH": "the region update path",
    "SHARED_CLAIMS": "the cluster update's claims in shared memory",
}
"""Switches `drlhet.backends.cuda` had and no longer reads (removed 2026-11-28, measured no faster
on an H100; docs/design.md, "tried and removed"), with what they turned on. Setting one is
refused when a program is traced (`check_switches`), not ignored."""


def check_switches(switches: dict[str, Any]) -> None:
    """Refuses, naming it, a removed switch set in the cuda module's ``switches`` (its globals)
    or a `CLUSTER_BLOCKS` outside 1..16.

    Raises:
      ValueError: the first such switch.
    """
    if stale := sorted(set(REMOVED) & set(switches)):
        name = stale[0]
        raise ValueError(
            f'cuda.{name} was removed with {REMOVED[name]} (docs/design.md, "tried and '
            f'removed"); delete the assignment'
        )
    blocks = switches["CLUSTER_BLOCKS"]
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 1 <= blocks <= 16:
        raise ValueError(f"cuda.CLUSTER_BLOCKS must be an integer 1 to 16, got {blocks!r}")
