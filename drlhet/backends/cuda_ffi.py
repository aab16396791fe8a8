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

import jax

from drlhet.backends.base import CPU, GPU, BackendUnavailable
from drlhet.backends.native import library_path

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
