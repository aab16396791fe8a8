"""Replay-buffer throughput: drlhet's prioritized buffer against its peers, in one run.

Operations (items/s = transitions inserted, sampled or re-prioritized per second):
  insert  add B transitions at the running max priority
  sample  draw B transitions (indices, data, IS weights)
  update  set B priorities
  step    sample B, then update the B sampled priorities (what a learner does per SGD step)

Modes:
  fused    S steps inside one jitted ``lax.scan``, buffer donated (how a training loop runs)
  percall  a jitted op called S times from Python (dispatch included)

Peers (the ``bench`` extra), same sizes, same run, alternating with ours per repeat:
flashbax's prioritised flat buffer (fused and per call; pure JAX, so it runs where the ``jax``
backend does: with ``--device gpu``, on the same GPU, with as many steps a timed scan) and
cpprb's PrioritizedReplayBuffer (per call, on the host CPU; a C++ library driven from Python).

Usage:
  python experiments/bench_replay.py --quick           # 2^20, K=16, B=256 (what `make run` does)
  python experiments/bench_replay.py                   # capacity x batch at K=16, K sweep
  python experiments/bench_replay.py --full            # the full product grid
  python experiments/bench_replay.py --threading-study # default vs pinned vs single-thread XLA
  python experiments/bench_replay.py --device gpu      # cuda vs jax on the GPU vs native on the
                                                       # host CPU, 2^14..2^22 x B 32..65536
  python experiments/bench_replay.py --device gpu --trace-dir t  # and each fused run once more
                                                       # under jax's profiler: t/*.trace.json.gz
                                                       # (experiments/kernel_timeline.py)

Threading (``--threading``): ``default`` (XLA's own thread pool over all cores), ``pin1`` (the
process pinned to core 0, like ``taskset -c 0``), ``xla1`` (XLA intra-op threading off).
``--threading-study`` runs this script once per setting and names its files after ``--out``
(``<folder>/<name>.json``): each setting's rows in ``<name>_threading_<setting>.json``, all of
them in ``<name>_threading.json`` (the default ``--out`` gives
``results/bench_replay_threading.json``); a run that fails ends the study with one line naming
its setting, exit status and command (exit status 1), before the combined file is written.
Results: JSON rows in ``--out`` and a printed table. Every number is measured on this machine;
each row names its device (``device``, ``device_kind``: the CPU's or GPU's model) and its run
(``run``: start, command, commit, machine, versions; `_common.run_info`). A run that measures
nothing leaves ``--out`` as it was.
The implementations timed (drlhet's buffer on each backend, the peers) are built by
``replay_impls.py``; this script picks them and times them (``bench_timing.py``), and writes
the rows (``bench_rows.py``); ``bench_threading.py`` holds the threading settings and study,
``bench_cuda_paths.py`` the cuda backend's switches and A/B arms.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Literal, NamedTuple

import checked_cli
from bench_cuda_paths import LEAST, set_cuda_switches
from bench_rows import limits_row, machine, print_ratios, print_table
from bench_threading import apply_threading, threading_study
from bench_timing import build_impls, measure

Op = Literal["insert", "sample", "update", "step"]
Mode = Literal["fused", "percall"]
Threading = Literal["default", "pin1", "xla1"]
"""The values of `Args`' ``ops``, ``modes`` and ``threading`` (primitives_rows.py passes its
own on)."""


@dataclasses.dataclass
class Args:
    quick: bool = False
    """Only capacity 2^20, K 16, batch 256 (about a minute)."""
    full: bool = False
    """The full product of capacities x batches x K (long)."""
    capacities: tuple[int, ...] = (2**14, 2**17, 2**20)
    """Capacities of the grid (each with every batch, at K 16)."""
    batches: tuple[int, ...] = (32, 256, 1024, 4096)
    """Batches of the grid (each with every capacity, at K 16)."""
    branchings: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
    """K swept at one point, capacity 2^20 and batch 256 whatever the grid's (``--full``: at
    every capacity and batch)."""
    repeats: int = 5
    """Timed repeats per measurement (after a warm-up that includes compilation)."""
    ops: tuple[Op, ...] = (
        "insert",
        "sample",
        "update",
        "step",
    )
    modes: tuple[Mode, ...] = ("fused", "percall")
    backends: tuple[str, ...] = ("jax", "native", "fpga")
    """drlhet backends to measure (an unavailable one is skipped with its reason; ``fpga`` is
    the replay module's C-simulation: its rows are labelled function-only)."""
    thread_scaling: bool = True
    """Also measure the native backend with 1 thread (beside all cores)."""
    limits: bool = True
    """Probe this machine's memory limits (1 GiB array, one core) and report against them."""
    peers: bool = True
    """Also measure flashbax (where ``jax`` runs: the GPU with ``--device gpu``) and cpprb (the
    host CPU), each skipped with a note if not installed."""
    peer_limit_s: float = 60.0
    """A peer's op whose warm-up (compilation and one timed run) takes longer than this is not
    repeated: a note says so and the op has no row, so that a peer far slower than the rest
    costs the run one run of it, not ``repeats`` more."""
    threading: Threading = "default"
    threading_study: bool = False
    """Measure sample, update and step (fused and per call) at 2^20/K16/B256 under each
    threading setting, each in a process of its own; the files are named after ``--out``,
    which is not itself written (`study_outputs`)."""
    device: Literal["cpu", "gpu"] = "cpu"
    """``gpu``: the XLA backends (``jax``, ``cuda``) run on the first GPU, ``native`` on the host
    CPU; the grid becomes capacities 2^14..2^22 x batches 32..65536 at K = 16 (unless given)."""
    gpu_steps: int = 512
    """With ``--device gpu``: at least this many steps per timed scan on the GPU (a short scan
    times the program's launch and completion, tens of microseconds per call, more than its
    steps)."""
    unroll: int = 1
    """Steps per iteration of the fused scan's loop (``lax.scan(unroll=...)``). On a GPU each
    iteration of XLA's loop costs a fixed few microseconds between the step's graph launches
    (the gaps of ``gpu_checks.sh trace``), paid by every backend once per iteration; unrolling
    pays it once per ``unroll`` steps, as a training loop may do too."""
    loop: Literal["xs", "carry"] = "xs"
    """How the fused scan feeds its steps: ``xs``, each step's key sliced from a stack of keys
    and its output stacked (two graph memcpy nodes a step on a GPU, their addresses moving
    with the step); ``carry``, as the library's trainer loops (``drlhet.runtime.trainer``): the
    key split in the step from one carried, the outputs summed into the carry, so the step's
    program is the same at every iteration. Rows record it (``loop``)."""
    plain: bool = True
    """For a backend with its own buffer calls (``TreeOps.weigh`` / ``update``: the whole
    sample and the checked update in one custom call each), also measure it without them,
    its ``find`` and ``write`` under the buffer's XLA code (``drlhet-NAME-plain``)."""
    cuda_block_max_batch: int | None = None
    """``drlhet.backends.cuda.BLOCK_MAX_BATCH`` for this run (None: the library's): the largest
    update batch the cuda backend writes with one block per tree."""
    cuda_narrow_max_nodes: int | None = None
    """``drlhet.backends.cuda.NARROW_MAX_NODES`` for this run (None: the library's): on the
    per-level path, the widest level recomputed whole by one block per tree (wider levels no
    wider than the batch: one thread per node)."""
    cuda_cluster_max_batch: int | None = None
    """``drlhet.backends.cuda.CLUSTER_MAX_BATCH`` for this run (None: the library's, 0 = off): the
    largest batch per tree the cuda backend's update and sample run in one cluster of blocks per
    tree (GPUs of compute capability 9.0 and up)."""
    cuda_own_sample_max_batch: int | None = None
    """``drlhet.backends.cuda.OWN_SAMPLE_MAX_BATCH`` for this run (None: the library's): the
    largest batch per tree sampled by cuda's own call; above it, XLA's code around ``find``."""
    cuda_tagged_claims: bool | None = None
    """``drlhet.backends.cuda.TAGGED_CLAIMS`` for this run (None: the library's): the cluster
    path's update claims its leaves in a table kept by its custom call."""
    cuda_tagged_siblings: bool | None = None
    """``drlhet.backends.cuda.TAGGED_SIBLINGS`` for this run (None: the library's): with the
    tagged claims, the winners sum their leaves' parents from the table."""
    cuda_tagged_ab: bool = False
    """Also time ``drlhet-cuda-tagged`` and ``drlhet-cuda-siblings``: the cuda backend with
    ``TAGGED_CLAIMS`` on, ``TAGGED_SIBLINGS`` off and on, beside ``drlhet-cuda`` with them as
    this run sets them, alternating in every repeat (an A/B in one process). Rows record them
    (``cuda_tagged_claims``, ``cuda_tagged_siblings``)."""
    cuda_cluster_blocks: int | None = None
    """``drlhet.backends.cuda.CLUSTER_BLOCKS`` for this run (None: the library's): the blocks of
    each tree's cluster on the cluster path (1 to 16; past 8 where the GPU allows it)."""
    cuda_wide_ab: bool = False
    """Also time ``drlhet-cuda-wide``: the cuda backend with ``CLUSTER_BLOCKS`` 16 (the cluster
    path's clusters of 16 blocks where the GPU allows them), beside ``drlhet-cuda`` with the
    width this run sets, alternating in every repeat (an A/B in one process). Rows record it
    (``cuda_cluster_blocks``)."""
    cuda_sorted_runs: bool | None = None
    """``drlhet.backends.cuda.SORTED_RUNS`` for this run (None: the library's): the cluster
    path's update first tries a batch of sorted indices run by run, without claims."""
    cuda_sorted_ab: bool = False
    """Also time ``drlhet-cuda-sorted``: the cuda backend with ``SORTED_RUNS`` on, beside
    ``drlhet-cuda`` with it as this run sets it, alternating in every repeat (an A/B in one
    process). Rows record it (``cuda_sorted_runs``)."""
    cuda_find_ab: bool = False
    """Also time ``drlhet-cuda-find``: the buffer's sample under XLA's code around the cuda
    backend's ``find`` (XLA draws the targets and computes probabilities and weights), the
    update still the backend's own call, beside ``drlhet-cuda`` alternating in every repeat (an
    A/B in one process; sample-only scans measured cuda-plain's sample 1.04-1.10x the own
    call's at B 4096 on an H100). Rows record it (``cuda_own_sample``)."""
    cuda_spread_min_batch: int | None = None
    """``drlhet.backends.cuda.SPREAD_MIN_BATCH`` for this run (None: the library's): from it the
    cuda sample call is one cooperative launch spread over the GPU."""
    cuda_spread_threads: int | None = None
    """``drlhet.backends.cuda.SPREAD_THREADS`` for this run (None: the library's)."""
    cuda_spread_ab: tuple[int, ...] = ()
    """Also time ``drlhet-cuda-spreadT`` for each T given: the cuda backend's sample call spread
    over the GPU in blocks of T threads (``SPREAD_MIN_BATCH`` 1, ``SPREAD_THREADS`` T), beside
    ``drlhet-cuda`` alternating in every repeat (an A/B in one process; with
    ``--cuda-find-ab``, the sample around ``find`` too). Rows record it
    (``cuda_spread_min_batch``, ``cuda_spread_threads``)."""
    cuda_key_targets: bool = True
    """Let the cuda backend draw the sample's targets inside its sample call from the key
    (``TreeOps.weigh_key``, where it reproduces jax's draw); ``--no-cuda-key-targets``: the
    targets from XLA's kernel, as before. Rows record it (``cuda_key_targets``)."""
    cuda_own_sample: bool = True
    """Let the buffer's sample be the backend's own call (``TreeOps.weigh`` / ``weigh_key``: the
    targets, descents, probabilities and IS weights in one custom call);
    ``--no-cuda-own-sample``: the sample under the buffer's XLA code around the backend's
    ``find``, as ``drlhet-cuda-plain``'s, while the update stays the backend's own call. Rows
    record it (``cuda_own_sample``)."""
    cuda_shared_top: bool = True
    """Let the cuda backend's sample kernels descend the top levels of the tree from a copy in
    each block's shared memory (``drlhet.backends.cuda.SHARED_TOP``); ``--no-cuda-shared-top``:
    every level from the tree in global memory. The same bits either way. Rows record it
    (``cuda_shared_top``)."""
    trace_dir: Path | None = None
    """Also run each fused measurement once more, untimed, under jax's profiler (CUPTI's GPU
    trace on a GPU; needs no Nsight Systems) and write its trace as
    ``TRACE_DIR/<impl>-<op>-c<capacity>-b<batch>-k<K>.trace.json.gz`` (Chrome trace JSON:
    ``experiments/kernel_timeline.py --trace-files`` reads it)."""
    trace_command_buffers: bool = True
    """With ``--trace-dir``: keep XLA's command buffers (CUDA graphs) while the profiler runs
    (``--xla_enable_command_buffers_during_profiling``), so that the trace is of the program
    that the timed runs ran; ``--no-trace-command-buffers``: XLA's default under a profiler,
    every thunk launched on its own (op by op)."""
    out: Path = Path("results/bench_replay.json")


TRACE_COMMAND_BUFFERS = "--xla_enable_command_buffers_during_profiling=true"


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line naming the option and value, or "" (checked before
    anything is measured or written, so that a bad value leaves the results file alone)."""
    sizes = [
        ("--capacities", args.capacities, 1, (1 << 31) - 1),
        ("--batches", args.batches, 1, 1 << 24),
        ("--branchings", args.branchings, 2, (1 << 31) - 1),
    ]
    for option, values, low, high in sizes:
        bad = [v for v in values if not low <= v <= high]
        if not values or bad:
            return f"{option} must be integers in [{low}, {high}], got {bad or 'none'}"
    for option, value in [("--repeats", args.repeats), ("--gpu-steps", args.gpu_steps)]:
        if value < 1:
            return f"{option} must be >= 1, got {value}"
    if args.unroll < 1:
        return f"--unroll must be >= 1, got {args.unroll}"
    if not args.peer_limit_s > 0:  # NaN too: every peer's op would be dropped as over it
        return f"--peer-limit-s must be a positive number of seconds, got {args.peer_limit_s}"
    if not args.ops or not args.modes:
        return "--ops and --modes each name at least one"
    if not args.backends and not args.peers:
        return "--backends names none and --no-peers: nothing to measure"
    threads = [*args.cuda_spread_ab]
    if args.cuda_spread_threads is not None:
        threads.append(args.cuda_spread_threads)
    if bad := [t for t in threads if not (32 <= t <= 1024 and t % 32 == 0)]:
        return f"--cuda-spread-ab / --cuda-spread-threads take whole warps, 32 to 1024, got {bad}"
    if args.cuda_cluster_blocks is not None and not 1 <= args.cuda_cluster_blocks <= 16:
        return f"--cuda-cluster-blocks must be 1 to 16, got {args.cuda_cluster_blocks}"
    if args.out.is_dir():
        return f"--out {args.out} is a folder; name the JSON file to write"
    return ""


def main(args: Args) -> list[dict]:
    if args.threading_study:
        return threading_study(args, __file__)
    rows = measure_grid(args)
    if not any("op" in r for r in rows):  # an empty file would replace the last run's rows
        from drlhet.runtime.config import ConfigError

        raise ConfigError(
            f"nothing measured (no backend of --backends {' '.join(args.backends) or '(none)'} "
            f"runs here{'' if args.peers else ' and --no-peers'}, or every batch exceeds its "
            f"capacity); {args.out} left as it was"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {len(rows)} rows to {args.out}")
    return rows


def measure_grid(args: Args) -> list[dict]:
    """Every row of the run ``args`` asks for (the machine's limits, then each cell's
    implementations), printed as it goes; writes nothing. Raises `ConfigError` for a backend
    name that is not registered, before anything is measured."""
    apply_threading(args.threading)
    if args.trace_dir is not None and args.trace_command_buffers:  # before jax is imported
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TRACE_COMMAND_BUFFERS}"

    import jax
    import replay_impls

    from drlhet.backends.cuda_ffi import gpu_devices
    from drlhet.runtime.config import ConfigError

    if args.device == "gpu" and not gpu_devices():  # one line, as every refused value
        platforms = sorted({d.platform for d in jax.devices()})
        raise ConfigError(f"--device gpu: JAX has no GPU here (platforms: {', '.join(platforms)})")
    h = replay_impls.Harness(
        device=args.device, loop=args.loop, unroll=args.unroll,
        own_sample=args.cuda_own_sample, key_targets=args.cuda_key_targets,
    )  # fmt: skip
    grid = grid_of(args)
    peer_names = installed_peers(args)
    set_cuda_switches(args)
    backends = available_backends(args.backends)
    rows: list[dict] = []
    print(f"machine: {machine()}; threading: {args.threading}; jax {jax.__version__}")
    if args.limits and "native" in backends:
        rows.append(limits_row(args))
    for cell in grid:
        capacity, batch, k = cell
        if batch > capacity:  # an insert of B > C transitions is refused
            print(f"note: batch {batch} > capacity {capacity}: skipped")
            continue
        t0 = time.perf_counter()
        impls, steps_of = build_impls(args, h, cell, backends, peer_names)
        rows += measure(args, h, cell, impls, steps_of, peer_names)
        print_table(
            [r for r in rows if r.get("capacity") == capacity and r.get("batch") == batch
             and r.get("branching") in (k, None)],
            f"capacity 2^{capacity.bit_length() - 1}, "
            f"batch {batch}, K {k}  ({time.perf_counter() - t0:.0f} s)",
        )  # fmt: skip
        print_ratios(rows, capacity, batch, k, depth_of(capacity, k))
    return rows


class Cell(NamedTuple):
    """One point of the grid: the buffer's capacity, the batch B and the tree's branching K."""

    capacity: int
    batch: int
    k: int


def depth_of(capacity: int, k: int) -> int:
    from drlhet.replay.sum_tree import layout

    return layout(capacity, k).depth


def grid_of(args: Args) -> list[Cell]:
    """The run's (capacity, batch, K) points; with ``--device gpu``, the GPU's defaults for the
    backends, capacities and batches not given (set in ``args``)."""
    if args.device == "gpu":
        if args.backends == Args.backends:
            args.backends = ("cuda", "jax", "native")
        if args.capacities == Args.capacities:
            args.capacities = tuple(2**e for e in range(14, 23, 2))
        if args.batches == Args.batches:
            args.batches = (32, 256, 1024, 4096, 16384, 65536)
    if args.quick:
        return [Cell(2**20, 256, 16)]
    if args.full:
        return [Cell(c, b, k) for c in args.capacities for b in args.batches
                for k in args.branchings]  # fmt: skip
    grid = [Cell(c, b, 16) for c in args.capacities for b in args.batches]
    return grid + [Cell(2**20, 256, k) for k in args.branchings if k != 16]


def installed_peers(args: Args) -> list[str]:
    """The peers to measure (``--peers``) that are installed; a note for each that is not."""
    names: list[str] = []
    for name in ("flashbax", "cpprb") if args.peers else ():
        try:
            __import__(name)
            names.append(name)
        except ImportError:
            print(f"note: {name} not installed (pip install -e '.[bench]'); skipped")
    return names


def available_backends(names: tuple[str, ...]) -> list[str]:
    """``names`` less the backends that cannot run here (a note names each, with why); a name
    that is not registered (a typo, not a backend missing here) raises `ConfigError`."""
    from drlhet import backends as backends_api
    from drlhet.runtime.config import ConfigError

    if names and (why := checked_cli.unknown_names("--backends", names, backends_api.names())):
        raise ConfigError(why)
    found: list[str] = []
    for name in names:
        try:
            backends_api.tree_ops(name)
            found.append(name)
        except backends_api.BackendUnavailable as e:
            print(f"note: backend {name} unavailable: {e}")
    return found


if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
