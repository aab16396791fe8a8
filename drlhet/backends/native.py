"""The native CPU backend: the sum tree as C++/OpenMP XLA FFI custom calls inside ``jit``.

The kernels (``kernels/cpu/sum_tree.cc``, built by scikit-build-core + CMake on ``pip install``)
implement the reference's ``find`` and ``update`` bit for bit, parallel over the batch with
OpenMP; ``update`` writes the tree in place (``input_output_aliases``; donate the buffer state).
Whole training steps stay one XLA program. float32 trees only.

Loading the library is deferred to the first lookup; if it was not built, lookup raises
`BackendUnavailable` with the reason.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.backends.base import CPU, Backend, BackendUnavailable, register
from drlhet.replay.sum_tree import SumTreeState, TreeOps, check_indices

__all__ = [
    "library_path",
    "set_num_threads",
    "get_num_threads",
    "accepts",
    "find",
    "update",
    "ffi_find",
    "ffi_update",
    "probe_memory",
    "MemoryLimits",
]

MAX_BRANCHING = 256  # kMaxBranching in kernels/include/drlhet/sum_tree.h
_LIB_NAMES = ("libdrlhet_cpu.so", "libdrlhet_cpu.dylib", "drlhet_cpu.dll")


def library_path(stem: str = "drlhet_cpu", what: str = "the native CPU kernels") -> Path:
    """Where the built kernel library ``lib{stem}`` is (editable or regular install).

    Raises:
      BackendUnavailable: it was not built (naming ``what`` it holds).
    """
    spec = importlib.util.find_spec("drlhet")
    places = list(spec.submodule_search_locations or []) if spec else []
    names = _LIB_NAMES if stem == "drlhet_cpu" else (f"lib{stem}.so", f"lib{stem}.dylib")
    for place in places:
        for name in names:
            if (Path(place) / name).is_file():
                return Path(place) / name
    raise BackendUnavailable(
        f"{what} are not built (no lib{stem} in {places}); reinstall with `pip install -e .` "
        "(needs CMake, a C++17 compiler, OpenMP; the FPGA C-simulation also hls4ml's ap_types)"
    )


@functools.cache
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_path()))
    for target, symbol in (("drlhet_find", lib.DrlhetFind), ("drlhet_update", lib.DrlhetUpdate)):
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(symbol), platform=CPU)
    lib.drlhet_set_num_threads.argtypes = [ctypes.c_int]
    lib.drlhet_get_num_threads.restype = ctypes.c_int
    return lib


def set_num_threads(n: int) -> None:
    """Sets the OpenMP threads of the native kernels; 0 means all available cores (default)."""
    if n < 0:
        raise ValueError(f"thread count must be >= 0, got {n}")
    _library().drlhet_set_num_threads(int(n))


def get_num_threads() -> int:
    """Threads the native kernels use."""
    return int(_library().drlhet_get_num_threads())


def accepts(capacity: int, branching: int) -> str:
    """Why the native kernels cannot hold ``capacity`` leaves at K ``branching`` (empty: they
    can); asked before a run starts (`Backend.accepts`) and when a tree is traced."""
    del capacity  # any the buffer allows (int32 slots)
    if branching > MAX_BRANCHING:
        return f"the native backend supports K <= {MAX_BRANCHING}, got {branching}"
    return ""


def _check(tree: SumTreeState) -> None:
    _library()  # registers the FFI targets on first use
    if why := accepts(tree.capacity, tree.branching):
        raise ValueError(why)
    if tree.nodes.dtype != jnp.float32:
        raise ValueError(f"the native backend supports float32 trees, got {tree.nodes.dtype}")


def ffi_find(
    target: str, tree: SumTreeState, targets: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`find` through the registered FFI handler ``target`` (this module's and
    `drlhet.backends.cuda`'s): operands ``(nodes, targets [B])``, results ``(indices [B] int32,
    values [B], total [])``, attributes ``branching`` and ``capacity``."""
    targets = jnp.asarray(targets, jnp.float32)
    if targets.shape[-1:] == (0,):  # the reference's contract; the handler wrote no total
        raise ValueError("find needs at least one target per tree (B >= 1), got 0")
    out = (
        jax.ShapeDtypeStruct(targets.shape, jnp.int32),
        jax.ShapeDtypeStruct(targets.shape, jnp.float32),
        jax.ShapeDtypeStruct(targets.shape[:-1], jnp.float32),
    )
    call = jax.ffi.ffi_call(target, out, vmap_method="broadcast_all")
    indices, values, total = call(tree.nodes, targets, **tree_attrs(tree))
    return indices, values, total


def ffi_update(
    target: str,
    tree: SumTreeState,
    indices: jax.Array,
    values: jax.Array,
    keep: jax.Array | None,
    workspace: int = 0,
    attrs: dict | None = None,
) -> SumTreeState:
    """`update` through the registered FFI handler ``target``: operands ``(nodes, indices [B],
    values [B], keep [B])``, the nodes aliased to the first result (updated in place when
    donated); with ``workspace > 0`` a second result of that many int32 slots per tree, scratch
    for the handler (XLA allocates it); ``attrs``: attributes beyond branching and capacity.
    Concrete indices are checked before the int32 cast (which would wrap ``2**32 + 3`` to 3)."""
    check_indices(tree, indices, keep)
    indices = jnp.asarray(indices, jnp.int32)
    values = jnp.asarray(values, jnp.float32)
    keep = jnp.ones(indices.shape, bool) if keep is None else jnp.asarray(keep, bool)
    if indices.shape[-1:] == (0,):
        return tree
    out = [jax.ShapeDtypeStruct(tree.nodes.shape, jnp.float32)]
    if workspace:  # one row per tree (the vmapped leading dimensions)
        out.append(jax.ShapeDtypeStruct((*tree.nodes.shape[:-1], workspace), jnp.int32))
    call = jax.ffi.ffi_call(
        target, tuple(out), vmap_method="broadcast_all", input_output_aliases={0: 0}
    )
    nodes = call(tree.nodes, indices, values, keep, **tree_attrs(tree), **(attrs or {}))[0]
    return SumTreeState(nodes, tree.capacity, tree.branching)


def tree_attrs(tree: SumTreeState) -> dict:
    """The FFI attributes every tree handler takes: ``branching`` and ``capacity``, int64."""
    return {"branching": np.int64(tree.branching), "capacity": np.int64(tree.capacity)}


def find(tree: SumTreeState, targets: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Native `find`: ``(tree, targets [B]) -> (indices [B] int32, values [B], total [])``.

    Same contract as `drlhet.replay.sum_tree.descend`; non-finite targets are an FFI error.
    """
    _check(tree)
    return ffi_find("drlhet_find", tree, targets)


def update(
    tree: SumTreeState, indices: jax.Array, values: jax.Array, keep: jax.Array | None = None
) -> SumTreeState:
    """Native `update`: ``(tree, indices [B], values [B], keep [B] | None) -> tree``.

    Same contract as `drlhet.replay.sum_tree.write` (last duplicate wins, dropped entries write
    nothing), plus validation: a kept index outside ``[0, capacity)`` or a negative, NaN or
    infinite value is an FFI error, raised before anything is written.
    """
    _check(tree)
    return ffi_update("drlhet_update", tree, indices, values, keep)


def _load() -> TreeOps:
    _library()  # BackendUnavailable when the library was not built
    return TreeOps(find, update, holds=float32_trees("native", accepts))


def float32_trees(name: str, accepts: Any) -> Any:
    """`TreeOps.holds` of backend ``name`` whose kernels take the float32 trees that its
    ``accepts(capacity, K) -> why`` takes."""

    def holds(capacity: int, branching: int, dtype: Any) -> str:
        if why := accepts(capacity, branching):
            return why
        if jnp.dtype(dtype) != jnp.float32:
            return f"the {name} backend supports float32 trees, got {jnp.dtype(dtype)}"
        return ""

    return holds


BACKEND = register(
    Backend(
        name="native",
        platforms=(CPU,),
        provides=("replay",),
        needs="the C++/OpenMP kernel library built on `pip install` (CMake, a C++17 compiler, "
        "OpenMP)",
        loader=_load,
        rank=10,  # 1.1-1.3x the jax replay in the fused loop, measured (docs/results.md)
        accepts=accepts,
        holds=f"K <= {MAX_BRANCHING}",
        summary="C++/OpenMP sum tree as XLA FFI custom calls inside jit (float32 trees)",
    )
)


class MemoryLimits(NamedTuple):
    """One core's memory limits over a large array (measured by the native probes).

    Attributes:
      dependent_ns: nanoseconds per dependent random read (pointer chasing).
      independent_per_s: independent random 8-byte reads per second (a gather).
      sequential_gbs: sequential read bandwidth in GB/s.
      bytes: size of the probed array.
    """

    dependent_ns: float
    independent_per_s: float
    sequential_gbs: float
    bytes: int


def probe_memory(nbytes: int = 1 << 30, seed: int = 1) -> MemoryLimits:
    """Measures this machine's memory limits on one core (a few seconds for 1 GiB)."""
    lib = _library()
    lib.drlhet_probe_dependent_ns.restype = ctypes.c_double
    lib.drlhet_probe_dependent_ns.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_uint64]
    lib.drlhet_probe_independent_rate.restype = ctypes.c_double
    lib.drlhet_probe_independent_rate.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_uint64]
    lib.drlhet_probe_sequential_gbs.restype = ctypes.c_double
    lib.drlhet_probe_sequential_gbs.argtypes = [ctypes.c_int64, ctypes.c_int]
    return MemoryLimits(
        dependent_ns=lib.drlhet_probe_dependent_ns(nbytes, 2_000_000, seed),
        independent_per_s=lib.drlhet_probe_independent_rate(nbytes, 20_000_000, seed),
        sequential_gbs=lib.drlhet_probe_sequential_gbs(nbytes, 2),
        bytes=nbytes,
    )
