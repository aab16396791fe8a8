"""The CUDA backend: the sum tree as CUDA kernels, XLA FFI custom calls inside ``jit`` on a GPU.

The kernels (``kernels/cuda/sum_tree_kernels.cuh``, FFI handlers in ``kernels/cuda/sum_tree.cu``,
built by CMake on ``pip install`` where ``nvcc`` works) implement the reference's ``find`` and
``update`` bit for bit (Zhang, Meng, Prasanna, TPDS 2023, Sec. 5.2: the replay on the GPU). One
thread descends per target; an update resolves duplicates (the last kept entry wins), writes the
winners' leaves, then recomputes their ancestors level by level, each node the sequential sum of
its K children as the reference sums it: in one block per tree (one launch) for a batch of at most
`BLOCK_MAX_BATCH`, in one cluster of blocks per tree (one launch, GPUs of compute capability 9.0
and up) for a batch of at most `CLUSTER_MAX_BATCH` (the blocks over the whole batch, phase by
phase), else one launch per phase and level over the whole batch. The buffer's sample is one
call too (`weigh`; its targets drawn inside it where the kernels reproduce jax's draw bit for
bit: `weigh_key`, `draws_like_jax`).
Every handler is recorded into XLA's command buffers (CUDA graphs) with the rest of the step.
``update`` writes the tree in place (``input_output_aliases``; donate the buffer state) and never
waits on the host: a batch with a bad index or priority is refused whole on the device, as the
reference refuses it inside jit.

On a CPU device the same calls run the same kernels and handler bodies under a host emulation
of the CUDA execution model (``kernels/cuda/emu``: each block's threads as fibers, barriers and
warp collectives between them), registered under the same custom-call targets for the ``cpu``
platform: ``replay=cuda@cpu:0`` is a functional simulation of the GPU (right results, not its
speed; never a default nor a DSE candidate there), which is how the conformance suite tests
this module's calls (shapes, ``vmap``, aliasing, workspaces) on machines without a GPU.

Lookup raises `BackendUnavailable` naming what is missing: with a GPU visible to JAX, the GPU
library (no CUDA compiler at install); without one, the host emulation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.backends import cuda_ffi
from drlhet.backends.base import CPU, GPU, Backend, BackendUnavailable, register
from drlhet.backends.cuda_ffi import (
    EMU_LIBRARY,
    EMU_SYMBOLS,
    FFI_SYMBOLS,
    FFI_TARGETS,
    GPU_LIBRARY,
    gpu_devices,
)
from drlhet.backends.cuda_ffi import library as _library
from drlhet.backends.native import ffi_find, ffi_update, float32_trees, tree_attrs
from drlhet.replay import checks
from drlhet.replay.sum_tree import SumTreeState, TreeOps

__all__ = [
    "FFI_SYMBOLS",
    "FFI_TARGETS",
    "EMU_SYMBOLS",
    "GPU_LIBRARY",
    "EMU_LIBRARY",
    "find",
    "update",
    "weigh",
    "weigh_key",
    "draws_like_jax",
    "update_checked",
    "gpu_devices",
    "accepts",
]

MAX_BRANCHING = 256  # kMaxBranching in kernels/include/drlhet/sum_tree.h
MAX_CAPACITY = 2**31 - 1  # leaf indices are int32
BLOCK_MAX_BATCH = 1024
"""An update of at most this many entries per tree runs as one kernel, one block of 1024 threads
per tree (phases separated by barriers); a larger one takes the next path. Read when a program is
traced (a function JAX has already traced keeps the value it saw). Measured on an H100 at 2^20
leaves, K 16 (the step in a fused scan, third H100 session): B 4096 47.6M items/s with one
block, 70.1M per level; B 256 the block faster (results/bench_replay_gpu_h100_paths.json)."""
NARROW_MAX_NODES = 1024
"""On the per-level path, the levels of at most this many nodes (and no more than the batch)
are recomputed whole by one block of 1024 threads per tree, in one launch; the levels no wider
than the batch but wider than this, by one thread per node over the GPU (coalesced reads of
their children); the levels wider than the batch, one thread per entry (its ancestor). All give
the same bits. Read when a program is traced. Picked on an H100 (2^20 leaves, K 16, the step in
a fused scan, geometric mean over B 16384 and 65536; ``gpu_checks.sh narrow pick``,
results/cuda_paths_h100.json): 785M items/s at 1024, 807M at 256 (under the 1.03 margin),
723M at 0, 714M at 4096."""

CLUSTER_MAX_BATCH = 4096
"""An update or a sample of more than one block's entries per tree (`BLOCK_MAX_BATCH`; 1024 for
the sample) but of at most this many runs as one kernel of one cluster of 8 blocks per tree
(``kernels/cuda/cluster.cuh``: the phases and levels separated by cluster barriers instead of
launches), on GPUs of compute capability 9.0 and up; elsewhere, and above it, per level; 0
turns the path off. Read when a program is traced. Picked on an H100 (2^20 leaves, K 16, the
step in a fused scan; ``experiments/gpu_checks.sh cluster pick``, results/cuda_paths_h100.json):
121.5M against the per-level path's 107.1M items/s at B 4096 (1.13x), 282M against 424M at
B 16384; one cluster of 8 SMs per tree runs out of memory parallelism above that."""

CLUSTER_BLOCKS = 8
"""Blocks in each tree's cluster on the cluster path (1 to 16; past 8 a non-portable size, which
the H100 and H200 allow, elsewhere 8). The same bits at any size (emulation; an H200's 58 GPU
tests). 8: on an H200 (``gpu_checks.sh wide``, results/cuda_paths_h200_s42.json) 16 gave the
step 0.99-1.06x at B 2048-4096 (geometric means 1.029, 1.005). Read when traced."""

SORTED_RUNS = False
"""Whether the cluster path's update first tries a batch as sorted runs (a stratified sample's
indices, written back, are non-decreasing): each run's last thread writes the leaves and
ancestors under its node alone, without claims and with two cluster barriers where the claims
take four (``kernels/cuda/sorted_runs.cuh``); a batch out of order, out of range or with a run
over 64 entries is claimed in the workspace. The same bits (emulation). Off until measured."""

TAGGED_CLAIMS = True
"""Whether the cluster path's update of at most one entry per thread of its cluster (4096 per tree
on a GPU: 8 blocks of at most 512) claims its leaves in a table kept by its custom call between
calls, each slot tagged with the update that claimed it (``kernels/cuda/tag_table.cuh``: no reset
of the workspace's winner slots, no barrier after it; 8 bytes a leaf a tree on the device, per
call site, made at its first update); off: in the call's workspace. The same bits (the host
emulation, with and without `TAGGED_SIBLINGS`; on an H200, 26 GPU tests with it). Picked on an
H200 (2^20 leaves, K 16, the step in a fused scan, ``gpu_checks.sh tagged pick``,
results/cuda_paths_h200.json): 75.2M against 70.1M items/s at B 2048, 132.4M against 127.9M at
B 4096 (geometric mean 1.054x). Read when traced."""
TAGGED_SIBLINGS = False
"""With `TAGGED_CLAIMS`, whether the winners also sum their leaves' parents from the table (each
slot carries its winner's value) instead of from the tree after a barrier over the leaves. The
same bits (emulation; an H200's tests). Off: on an H200 (results/cuda_paths_h200.json) 0.98x
and 0.96x the table's claims without it at B 2048 and 4096. Read when traced."""

SHARED_TOP = True
"""Whether each block of the sample's kernels first copies the top levels of its tree (up to
6144 slots: levels 0..3 at 2^20 leaves and K 16) into shared memory and descends them from
there (the same bits, emulation and H100). On an H100 (2^20 leaves, K 16, ``gpu_checks.sh top``,
results/bench_replay_gpu_h100_latency_cuts_top.json): 0.99-1.03x the step without the copy
from B 256 to 65536 (geometric mean 1.012): kept as a no-loss. Read when traced."""

SPREAD_MIN_BATCH = 1 << 62
"""A sample call (`weigh`, `weigh_key`) of at least this many targets per tree runs as one
cooperative launch spread over the GPU (``kernels/cuda/sample_spread.cuh``, blocks of
`SPREAD_THREADS`) where the GPU holds its blocks at once. The same bits (emulation; an H200's 7
GPU tests). Never: on an H200 (results/cuda_paths_h200.json) the step 0.87-1.02x the own call's
at B 2048 and 4096 over 64, 128 and 256 threads a block. Read when a program is traced."""
SPREAD_THREADS = 128
"""Threads per block of the spread sample (whole warps, 32 to 1024). Read when traced."""

OWN_SAMPLE_MAX_BATCH = 1 << 62
"""The largest batch per tree sampled by cuda's own call (`weigh`, `weigh_key`); above it, by
the buffer's XLA code around `find` (the same bits). Every batch: on an H200
(results/cuda_paths_h200.json) the step around `find` 0.96x and 0.98x the own call's at B 2048
and 4096 (``gpu_checks.sh find`` or ``spread``). Read when a program is traced."""

KEY_TARGETS = True
"""Whether the buffer's sample draws its targets inside the cuda sample call (`weigh_key`)
where `draws_like_jax` allows it; False: XLA draws them and the call is `weigh`. The same bits
(CPU, emulation, H100); the switch is for a GPU where the test comparing the two fails
(``gpu_checks.sh`` then turns it off for its later stages). Read when traced."""


def accepts(capacity: int, branching: int) -> str:
    """Why the kernels cannot hold ``capacity`` leaves at K ``branching`` (empty: they can);
    asked before a run starts (`Backend.accepts`) and when a tree is traced."""
    if branching > MAX_BRANCHING:
        return f"the cuda backend supports K <= {MAX_BRANCHING}, got {branching}"
    if capacity > MAX_CAPACITY:
        return f"the cuda backend supports capacity <= 2^31 - 1, got {capacity}"
    return ""


REMOVED = cuda_ffi.REMOVED


def _check(tree: SumTreeState) -> None:
    _library()
    cuda_ffi.check_switches(globals())
    if why := accepts(tree.capacity, tree.branching):
        raise ValueError(why)
    cuda_ffi.check_nodes(tree)


def find(tree: SumTreeState, targets: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """CUDA `find`: ``(tree, targets [B]) -> (indices [B] int32, values [B], total [])``.

    Same contract as `drlhet.replay.sum_tree.descend`; a target that is not > 0 descends as 0.
    """
    _check(tree)
    cuda_ffi.check_rows("find", tree.nodes.shape[:-1], targets=targets)
    return ffi_find("drlhet_cuda_find", tree, targets)


def update(
    tree: SumTreeState, indices: jax.Array, values: jax.Array, keep: jax.Array | None = None
) -> SumTreeState:
    """CUDA `update`: ``(tree, indices [B], values [B], keep [B] | None) -> tree``.

    Same contract as `drlhet.replay.sum_tree.write` (last kept duplicate wins, dropped entries
    write nothing). A kept index outside ``[0, capacity)`` or a negative, NaN or infinite value
    refuses the whole batch on the device: the tree comes back unchanged. The handler's
    workspace is each leaf's winning entry and the tree's refused flag (C + 1 int32 per tree).
    """
    _check(tree)
    indices, keep = cuda_ffi.update_operands(tree, indices, values, keep)
    target = _update_target("drlhet_cuda_update")
    return ffi_update(target, tree, indices, values, keep, tree.capacity + 1, _paths())


def _update_target(target: str) -> str:
    """The update's custom-call target: its tagged handler's with `TAGGED_CLAIMS` on."""
    return cuda_ffi.tagged(target) if TAGGED_CLAIMS else target


def _attrs(*names: str) -> dict:
    """The path switches ``names`` as the handlers' attributes, as set now (each checked)."""
    return {name.lower(): cuda_ffi.int64_setting(name, globals()[name]) for name in names}


def _paths() -> dict:
    """The update handlers' path attributes, as the module's settings say now."""
    names = ("BLOCK_MAX_BATCH", "NARROW_MAX_NODES", "CLUSTER_MAX_BATCH", "TAGGED_SIBLINGS")
    return _attrs(*names, "CLUSTER_BLOCKS", "SORTED_RUNS")


_SETTINGS = ("BLOCK_MAX_BATCH", "NARROW_MAX_NODES", "CLUSTER_MAX_BATCH", "TAGGED_CLAIMS",
             "TAGGED_SIBLINGS", "SHARED_TOP", "SPREAD_MIN_BATCH", "SPREAD_THREADS",
             "OWN_SAMPLE_MAX_BATCH", "KEY_TARGETS", "CLUSTER_BLOCKS", "SORTED_RUNS")  # fmt: skip


def settings() -> str:
    """Every path switch of this module as it is now, ``name=value`` joined by commas: a GPU
    profile measured with other settings is not reused (`Backend.settings`)."""
    return ",".join(f"{name}={value}" for name, value in _attrs(*_SETTINGS).items())


def weigh(
    tree: SumTreeState, targets: jax.Array, size: jax.Array, beta: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array] | None:
    """CUDA `TreeOps.weigh`, the buffer's sample after its targets in one custom call:
    ``(tree, targets [B], size [] int32, beta [] float32) -> (indices [B] int32, probabilities
    [B], weights [B], error [] int32)``, as `drlhet.replay.buffer_ops.weigh` over `find`.

    One cooperative kernel spread over the GPU from `SPREAD_MIN_BATCH`; else one kernel for a
    batch of at most 1024 per tree (one block each) or, on GPUs of compute capability 9.0 and
    up, `CLUSTER_MAX_BATCH` (one cluster each); else two kernels and a clear of their workspace.
    ``beta`` is compared with [0, 1] in float32. None above `OWN_SAMPLE_MAX_BATCH`.
    """
    _check(tree)
    targets = jnp.asarray(targets, jnp.float32)
    cuda_ffi.check_rows("weigh", tree.nodes.shape[:-1], targets=targets)
    if targets.shape[-1] > OWN_SAMPLE_MAX_BATCH:
        return None
    return _weigh_call("drlhet_cuda_weigh", tree, targets, targets.shape, size, beta)


def _weigh_call(target, tree, second, shape, size, beta, **attrs):
    """The sample's custom call (``target``) with its second operand (targets or key words) and
    its ``[B]`` outputs of ``shape``: (indices, probabilities, weights, error)."""
    if not (32 <= SPREAD_THREADS <= 1024 and SPREAD_THREADS % 32 == 0):
        raise ValueError(f"cuda.SPREAD_THREADS: whole warps, 32 to 1024, got {SPREAD_THREADS}")
    lead, batch = tree.nodes.shape[:-1], shape[-1]  # stacked trees without vmap: one row each
    cuda_ffi.check_sample(target.removeprefix("drlhet_cuda_"), lead, batch, size, beta)
    names = ("CLUSTER_MAX_BATCH", "SHARED_TOP", "SPREAD_MIN_BATCH", "SPREAD_THREADS")
    paths = _attrs(*names, "CLUSTER_BLOCKS")
    # the workspace: 2 int32 a warp where the spread path may take the batch, else 2 (launch.cuh)
    work = 2 * -(-batch // 32) if batch >= paths["spread_min_batch"] else 2
    out = (
        jax.ShapeDtypeStruct(shape, jnp.int32),
        jax.ShapeDtypeStruct(shape, jnp.float32),
        jax.ShapeDtypeStruct(shape, jnp.float32),
        jax.ShapeDtypeStruct(lead, jnp.int32),
        jax.ShapeDtypeStruct((*lead, work), jnp.int32),
    )
    call = jax.ffi.ffi_call(target, out, vmap_method="broadcast_all")
    indices, probs, weights, error, _ = call(
        tree.nodes, second, jnp.asarray(size, jnp.int32), jnp.asarray(beta, jnp.float32),
        err_empty=np.int64(checks.ERR_EMPTY), err_beta=np.int64(checks.ERR_BETA),
        **paths, **attrs, **tree_attrs(tree),
    )  # fmt: skip
    return indices, probs, weights, error


def draws_like_jax(key: jax.Array, batch_size: int, stratified: bool) -> bool:
    """Whether the kernels can draw the buffer's targets from ``key`` bit for bit
    (``kernels/include/drlhet/jax_random.h``): a threefry2x32 key (typed, or raw uint32 words
    under that default) with jax's partitionable layout, and for stratified targets a batch that
    is a power of two (so that ``total / B`` is exact however XLA divides). Decided when traced.
    """
    # a jax without the flag has only the partitionable layout (its default since jax 0.5)
    if not getattr(jax.config, "jax_threefry_partitionable", True):
        return False
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.dtype != jnp.uint32 or key.shape[-1:] != (2,):
            return False
        key = jax.random.wrap_key_data(key)  # raw words: the default generator's key
    generator = str(jax.random.key_impl(key))
    power_of_two = batch_size > 0 and batch_size & (batch_size - 1) == 0
    return generator == "threefry2x32" and (power_of_two or not stratified)


def weigh_key(
    tree: SumTreeState,
    key: jax.Array,
    size: jax.Array,
    beta: jax.Array,
    batch_size: int,
    stratified: bool = True,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array] | None:
    """CUDA `TreeOps.weigh_key`: the buffer's whole sample in one custom call, its targets drawn
    in the descent's kernel from ``key`` as `drlhet.replay.prioritized.sample_targets` draws
    them: ``(tree, key, size [] int32, beta [] float32, B, stratified) -> (indices [B] int32,
    probabilities [B], weights [B], error [] int32)``, equal bit for bit to `weigh` over those
    targets, without XLA's kernel that computes them. None where `draws_like_jax` says no or
    `KEY_TARGETS` is off (XLA draws, `weigh` is called), or above `OWN_SAMPLE_MAX_BATCH`.
    """
    if batch_size > OWN_SAMPLE_MAX_BATCH or not KEY_TARGETS:
        return None
    if not draws_like_jax(key, batch_size, stratified):
        return None
    _check(tree)
    words = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    words = jnp.asarray(words, jnp.uint32)
    cuda_ffi.check_rows("weigh_key", tree.nodes.shape[:-1], (2,), key=words)
    shape = (*tree.nodes.shape[:-1], batch_size)  # stacked trees without vmap: one row each
    return _weigh_call("drlhet_cuda_weigh_key", tree, words, shape, size, beta,
                       stratified=np.int64(stratified))  # fmt: skip


def update_checked(
    tree: SumTreeState,
    indices: jax.Array,
    raw: jax.Array,
    values: jax.Array,
    keep: jax.Array,
    size: jax.Array,
    max_priority: jax.Array,
    error: jax.Array,
) -> tuple[SumTreeState, jax.Array, jax.Array]:
    """CUDA `TreeOps.update`, the buffer's priority update after its leaf values in one custom
    call: ``(tree, indices [B] int32, raw [B], values [B], keep [B] bool, size [], max_priority
    [], error []) -> (tree, max_priority, error)``, as `drlhet.replay.buffer_ops.update` over
    `update` (the index and priority checks, the write, the running maximum and the error bits
    on the device). The tree, maximum and error word are written in place when donated (each
    thread reads its tree's maximum and error word before it writes them); the workspace is each
    leaf's winning entry, the tree's error bits and largest kept priority (C + 2 int32 a tree).
    """
    _check(tree)
    if jnp.shape(indices)[-1:] == (0,):  # nothing to write, nothing checked
        return tree, jnp.asarray(max_priority), jnp.asarray(error)
    lead = tree.nodes.shape[:-1]  # trees stacked without vmap: one row each
    cuda_ffi.check_rows("update_checked", lead, indices=indices, raw=raw, values=values, keep=keep)
    cuda_ffi.check_rows("update_checked", lead, (), size=size, max_priority=max_priority,
                        error=error)  # fmt: skip
    out = (
        jax.ShapeDtypeStruct(tree.nodes.shape, jnp.float32),
        jax.ShapeDtypeStruct(lead, jnp.float32),
        jax.ShapeDtypeStruct(lead, jnp.int32),
        jax.ShapeDtypeStruct((*lead, tree.capacity + 2), jnp.int32),
    )
    # the tree, the running maximum and the error word in place: in a loop carry XLA then needs
    # no copy of the two scalars after the call (two nodes of the step's graph on an H100)
    call = jax.ffi.ffi_call(
        _update_target("drlhet_cuda_update_checked"),
        out,
        vmap_method="broadcast_all",
        input_output_aliases={0: 0, 6: 1, 7: 2},
    )
    nodes, max_out, err_out, _ = call(
        tree.nodes, cuda_ffi.int32_indices(indices), jnp.asarray(raw, jnp.float32),
        jnp.asarray(values, jnp.float32), jnp.asarray(keep, bool), jnp.asarray(size, jnp.int32),
        jnp.asarray(max_priority, jnp.float32), jnp.asarray(error, jnp.int32),
        **_paths(), priority_max=np.float32(checks.PRIORITY_MAX),
        err_index=np.int64(checks.ERR_INDEX), err_priority=np.int64(checks.ERR_PRIORITY),
        **tree_attrs(tree),
    )  # fmt: skip
    return SumTreeState(nodes, tree.capacity, tree.branching), max_out, err_out


def _load() -> TreeOps:
    try:
        _library()
    except BackendUnavailable as e:
        if gpu_devices():
            raise
        raise BackendUnavailable(
            f"no GPU (JAX sees no CUDA device here: jax[cuda] and a driver), and {e}"
        ) from None
    ops = TreeOps(find, update, weigh=weigh, update=update_checked, weigh_key=weigh_key)
    return ops._replace(holds=float32_trees("cuda", accepts))


BACKEND = register(
    Backend(
        name="cuda",
        platforms=(GPU,),
        provides=("replay",),
        needs="a GPU, and the CUDA kernel library built on `pip install` where nvcc works; on a "
        "CPU device, the kernels' host emulation (built on `pip install` everywhere)",
        loader=_load,
        # the GPU's default replay: its fused sample + update step measured 2.9-5.8x the jax
        # backend's on an H100 from B 32 to 65536 at 2^20 leaves, 2026-11-27 (docs/results.md)
        rank=1,
        simulation=(CPU, ("replay",)),
        accepts=accepts,
        holds=f"K <= {MAX_BRANCHING} and capacity <= 2^31 - 1",
        summary="CUDA sum tree as XLA FFI custom calls inside jit (float32 trees); on a CPU "
        "device, its kernels under a host emulation of CUDA (function, not speed)",
        settings=settings,
    )
)
