"""The CUDA backend's kernels through CuPy: the same kernels, on CuPy arrays, outside XLA.

CMake compiles ``kernels/cuda/sum_tree_kernels.cuh`` twice where ``nvcc`` works: into the FFI
library JAX calls (`drlhet.backends.cuda`) and into ``drlhet_cuda_kernels.fatbin``, which
`CupyTree` loads with ``cupy.RawModule`` and launches on CuPy's current stream. Arrays cross
between JAX and CuPy without a copy through DLPack (`to_cupy`, `to_jax`). For use outside a jitted
program: profiling the GPU's replay primitives, or a replay driven from host code.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from drlhet.backends.base import BackendUnavailable

__all__ = ["FATBIN", "fatbin_path", "CupyTree", "to_cupy", "to_jax", "narrow_top"]

FATBIN = "drlhet_cuda_kernels.fatbin"
_THREADS = 256
_BLOCK_THREADS = 1024  # drlhet_cuda_update_top: one block per tree
NARROW_MAX_NODES = _BLOCK_THREADS
"""The widest level the update recomputes whole, in one block per tree: the default of
``drlhet.backends.cuda.NARROW_MAX_NODES`` (the launches here recompute every wider level one
thread per entry)."""


def narrow_top(capacity: int, branching: int, batch: int, max_nodes: int) -> int:
    """The shared header's ``NarrowTop``: the deepest level L above the leaves such that levels
    0..L each have at most ``min(batch, max_nodes)`` nodes in use, or -1. An update of ``batch``
    entries recomputes every node of those levels once, not one ancestor per winning entry
    (the same bits: every parent already holds the sequential sum of its children)."""
    from drlhet.replay.sum_tree import layout

    depth = layout(capacity, branching).depth
    nodes = [capacity]  # nodes[d]: nodes in use d levels above the leaves
    for _ in range(depth):
        nodes.append(-(-nodes[-1] // branching))
    top = -1
    for level in range(depth):
        if nodes[depth - level] > min(batch, max_nodes):
            break
        top = level
    return top


def fatbin_path() -> Path:
    """Where the kernels' fatbin is installed.

    Raises:
      BackendUnavailable: it was not built (no CUDA compiler at install).
    """
    spec = importlib.util.find_spec("drlhet")
    for place in list(spec.submodule_search_locations or []) if spec else []:
        if (Path(place) / FATBIN).is_file():
            return Path(place) / FATBIN
    raise BackendUnavailable(f"the CUDA kernels' {FATBIN} is not built (no nvcc at install)")


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as e:
        raise BackendUnavailable(f"no cupy (pip install drlhet[cuda]): {e}") from e
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise BackendUnavailable("no GPU: CuPy sees no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        raise BackendUnavailable(f"no GPU: {e}") from e
    return cupy


@functools.cache
def _module() -> Any:
    return _cupy().RawModule(path=str(fatbin_path()))


def to_cupy(x: Any) -> Any:
    """A JAX array on a GPU as a CuPy array (the same memory)."""
    return _cupy().from_dlpack(x)


def to_jax(x: Any) -> Any:
    """A CuPy array as a JAX array (the same memory)."""
    import jax.dlpack

    return jax.dlpack.from_dlpack(x)


def _int32(cp: Any, indices: Any) -> Any:
    """Integer ``indices`` as the kernels' int32, one int32 cannot hold as -1 (refused where
    kept), not wrapped into range by the cast (int64 ``2**32 + 3`` is not slot 3)."""
    a = cp.asarray(indices)
    if a.dtype.kind not in "iu":
        raise ValueError(f"CupyTree: indices must have an integer dtype, got {a.dtype}")
    info, lo, hi = np.iinfo(a.dtype), -(2**31), 2**31 - 1
    if info.min < lo or info.max > hi:
        fits = (a >= max(int(info.min), lo)) & (a <= hi)
        a = cp.where(fits, a.astype(cp.int32), cp.int32(-1))
    return cp.ascontiguousarray(a, dtype=cp.int32)


class CupyTree:
    """One or more K-ary sum trees in a CuPy array, operated on by the CUDA kernels.

    Args:
      nodes: float32 ``[T]`` or ``[V, T]`` (V trees), laid out as `drlhet.replay.sum_tree`.
      capacity: leaves per tree (C).
      branching: K.
    """

    def __init__(self, nodes: Any, capacity: int, branching: int):
        from drlhet.replay.sum_tree import layout

        cp = _cupy()
        self.nodes = cp.ascontiguousarray(nodes, dtype=cp.float32)
        self.capacity, self.branching = int(capacity), int(branching)
        size = layout(self.capacity, self.branching).size  # ValueError: no such tree
        if self.nodes.ndim not in (1, 2) or self.nodes.shape[-1] != size:
            raise ValueError(
                f"CupyTree: a tree of {capacity} leaves at K {branching} has {size} nodes; "
                f"nodes must be [{size}] or [V, {size}], got {tuple(self.nodes.shape)}"
            )
        self.trees = 1 if self.nodes.ndim == 1 else int(self.nodes.shape[0])

    def _rows(self, **arrays: Any) -> None:
        """Refuses arrays that are not one ``[B]`` row per tree, all of one shape (the kernels
        would read or write past them)."""
        lead, first = tuple(self.nodes.shape[:-1]), None
        for name, a in arrays.items():
            shape = tuple(a.shape)
            first = shape if first is None else first
            if len(shape) != len(lead) + 1 or shape[:-1] != lead or shape != first:
                raise ValueError(
                    f"CupyTree: {name} has shape {shape}, expected one [B] row per tree "
                    f"({(*lead, 'B')}) of one shape with the others ({first})"
                )

    def _launch(self, name: str, n: int, *args: Any) -> None:
        kernel = _module().get_function(name)
        kernel(((n + _THREADS - 1) // _THREADS,), (_THREADS,), args)

    def find(self, targets: Any) -> tuple[Any, Any, Any]:
        """``targets [B]`` (``[V, B]``) -> ``(indices int32, values float32, totals [V])``."""
        cp = _cupy()
        t = cp.ascontiguousarray(targets, dtype=cp.float32)
        self._rows(targets=t)
        n = int(t.size)
        indices, values = cp.empty(t.shape, cp.int32), cp.empty(t.shape, cp.float32)
        totals = cp.empty(t.shape[:-1], cp.float32)
        if n:
            name = "drlhet_cuda_find_k16" if self.branching == 16 else "drlhet_cuda_find"
            self._launch(name, n, self.nodes, *self._shape(), t, np.int64(n // self.trees),
                         np.int64(n), indices, values, totals)  # fmt: skip
        return indices, values, totals

    def update(self, indices: Any, values: Any, keep: Any = None) -> bool:
        """Writes ``values`` at ``indices`` (last kept duplicate wins) in place. Returns False,
        the trees unchanged, when a kept index or value was invalid (checked on the device)."""
        cp = _cupy()
        idx = _int32(cp, indices)
        val = cp.ascontiguousarray(values, dtype=cp.float32)
        kp = cp.ones(idx.shape, bool) if keep is None else cp.ascontiguousarray(keep, dtype=bool)
        self._rows(indices=idx, values=val, keep=kp)
        n, batch = int(idx.size), np.int64(idx.size // self.trees)
        winner = cp.full(self.trees * self.capacity, -1, cp.int32)
        bad = cp.zeros(self.trees, cp.int32)
        if n == 0:
            return True
        cap, k = self._shape()
        self._launch("drlhet_cuda_update_claim", n, idx, val, kp, batch, np.int64(n), cap,
                     winner, bad)  # fmt: skip
        self._launch("drlhet_cuda_update_leaves", n, self.nodes, cap, k, idx, val, kp, batch,
                     np.int64(n), winner, bad)  # fmt: skip
        from drlhet.replay.sum_tree import layout

        top = narrow_top(self.capacity, self.branching, int(batch), NARROW_MAX_NODES)
        for level in range(layout(self.capacity, self.branching).depth - 1, top, -1):
            self._launch("drlhet_cuda_update_level", n, self.nodes, cap, k, idx, kp, batch,
                         np.int64(n), winner, bad, np.int32(level))  # fmt: skip
        if top >= 0:  # the narrow levels, whole: one block per tree
            kernel = _module().get_function("drlhet_cuda_update_top")
            kernel((self.trees,), (_BLOCK_THREADS,), (self.nodes, cap, k, bad, np.int32(top)))
        return not bool(bad.any())

    def _shape(self) -> tuple[np.int64, np.int32]:
        return np.int64(self.capacity), np.int32(self.branching)
