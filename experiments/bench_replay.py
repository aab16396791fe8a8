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
``replay_impls.py``; this script picks them, times them and writes the rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal, NamedTuple

import checked_cli
from _common import cpu_model, run_info

XLA_SINGLE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


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
    ops: tuple[Literal["insert", "sample", "update", "step"], ...] = (
        "insert",
        "sample",
        "update",
        "step",
    )
    modes: tuple[Literal["fused", "percall"], ...] = ("fused", "percall")
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
    threading: Literal["default", "pin1", "xla1"] = "default"
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
CLAIMS_ARMS = {
    "drlhet-cuda-tagged": ("cuda_tagged_ab", {"TAGGED_CLAIMS": True, "TAGGED_SIBLINGS": False}),
    "drlhet-cuda-siblings": ("cuda_tagged_ab", {"TAGGED_CLAIMS": True, "TAGGED_SIBLINGS": True}),
}
"""The cuda claims A/Bs: each arm's row name, the option that adds it, and the switches of
`drlhet.backends.cuda` it sets (its rows' ``cuda_<switch>`` say so)."""


def apply_threading(mode: str) -> None:
    """Must run before jax is imported."""
    if mode == "pin1":
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    elif mode == "xla1":
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " " + XLA_SINGLE_THREAD
        ).strip()


def machine() -> str:
    return f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})"


def steps_for(batch: int) -> int:
    return int(min(2048, max(16, 65536 // batch)))


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
    if args.out.is_dir():
        return f"--out {args.out} is a folder; name the JSON file to write"
    return ""


def main(args: Args) -> list[dict]:
    if args.threading_study:
        return threading_study(args)
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


CUDA_SWITCHES = {  # option -> `drlhet.backends.cuda`'s switch, set where the option is given
    "cuda_block_max_batch": "BLOCK_MAX_BATCH",
    "cuda_narrow_max_nodes": "NARROW_MAX_NODES",
    "cuda_cluster_max_batch": "CLUSTER_MAX_BATCH",
    "cuda_tagged_claims": "TAGGED_CLAIMS",
    "cuda_tagged_siblings": "TAGGED_SIBLINGS",
    "cuda_own_sample_max_batch": "OWN_SAMPLE_MAX_BATCH",
    "cuda_spread_min_batch": "SPREAD_MIN_BATCH",
    "cuda_spread_threads": "SPREAD_THREADS",
}


def set_cuda_switches(args: Args) -> None:
    """The cuda backend's switches that this run's options set, for the whole run."""
    given = {name: getattr(args, option) for option, name in CUDA_SWITCHES.items()
             if getattr(args, option) is not None}  # fmt: skip
    if not args.cuda_shared_top:
        given["SHARED_TOP"] = False
    if given:
        from drlhet.backends import cuda

        for name, value in given.items():
            setattr(cuda, name, value)


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


def limits_row(args: Args) -> dict:
    """This machine's memory limits, measured by the native backend, as a row (and printed)."""
    from drlhet.backends import native

    lim = native.probe_memory()
    print(
        f"memory limits, one core, 1 GiB array (measured): dependent read "
        f"{lim.dependent_ns:.0f} ns, independent random reads {lim.independent_per_s:.3g}/s, "
        f"sequential {lim.sequential_gbs:.1f} GB/s"
    )
    return {"impl": "machine-limit", **lim._asdict(), "machine": machine(),
            "threading": args.threading, "measured": True, "device": "cpu",
            "device_kind": cpu_model(), "run": run_info("flashbax", "cpprb")}  # fmt: skip


def build_impls(args: Args, h, cell: Cell, backends: list[str], peer_names: list[str]):
    """Every implementation measured at ``cell``: ``({impl: runners}, {impl: steps a timed
    run})``; drlhet's backends (and their ``-plain`` variants), the in-process A/B arms that
    ``args`` asks for, native on one thread, and the peers (at K 16 only: they have no K)."""
    import replay_impls as ri

    capacity, batch, k = cell
    steps = steps_for(batch)
    impls: dict[str, dict] = {}
    steps_of: dict[str, int] = {}  # calls per timed scan, by implementation

    def ours(n: int, backend: str, **variant):
        return ri.drlhet_ops(h, capacity, batch, k, n, backend, **variant)

    for name in backends:
        on_gpu = ri.device_of(h, name).platform != ri.backends_api.CPU
        n = steps_of[f"drlhet-{name}"] = max(steps, args.gpu_steps) if on_gpu else steps
        try:
            impls[f"drlhet-{name}"] = ours(n, name)
        except ValueError as e:  # a backend built for some K only (fpga: 4..64)
            print(f"note: {name} skipped at K {k}: {e}")
            continue
        ops = ri.backends_api.tree_ops(name)
        if args.plain and (ops.weigh is not None or ops.update is not None):
            steps_of[f"drlhet-{name}-plain"] = n
            impls[f"drlhet-{name}-plain"] = ours(n, name, plain=True)
    if "drlhet-cuda" in impls:
        n = steps_of["drlhet-cuda"]
        for impl, variant, settings in ab_arms(args):
            runners = ours(n, "cuda", **variant)
            steps_of[impl] = n
            impls[impl] = ri.with_cuda(runners, **settings) if settings else runners
    if "native" in backends and args.thread_scaling:
        impls["drlhet-native-1t"] = ri.with_threads(ours(steps, "native"), 1)
    if k == 16:  # peers have no K; measure them once per (capacity, batch)
        fbx_dev = ri.device_of(h, "jax")  # flashbax is pure JAX: where jax runs, as long scans
        on_gpu = fbx_dev.platform != ri.backends_api.CPU
        steps_of["flashbax"] = max(steps, args.gpu_steps) if on_gpu else steps
        for name in peer_names:
            with peer_failure(name, capacity, batch):  # a peer's failure costs only its rows
                if name == "flashbax":
                    impls[name] = ri.flashbax_ops(h, capacity, batch, steps_of[name], fbx_dev)
                else:
                    impls[name] = ri.cpprb_ops(capacity, batch, steps)
    return impls, steps_of


def ab_arms(args: Args) -> list[tuple[str, dict, dict]]:
    """The in-process A/B arms beside ``drlhet-cuda`` that ``args`` asks for, in their order:
    ``(impl, drlhet_ops variant, cuda switches its runs set)``."""
    arms = [(impl, {}, settings) for impl, (flag, settings) in CLAIMS_ARMS.items()
            if getattr(args, flag)]  # fmt: skip
    if args.cuda_find_ab:
        arms.append(("drlhet-cuda-find", {"own_sample": False}, {}))
    for threads in args.cuda_spread_ab:
        spread = {"SPREAD_MIN_BATCH": 1, "SPREAD_THREADS": threads}
        arms.append((f"drlhet-cuda-spread{threads}", {}, spread))
    return arms


def warm_up(args: Args, cell: Cell, impls: dict, keys: list, peer_names: list[str]) -> dict:
    """Runs each ``(impl, op, mode)`` once (compilation and first touch): ``{key: seconds}``,
    less a peer's that failed or took over ``--peer-limit-s`` (a note says which)."""
    compile_s = {}
    for key in keys:
        t = time.perf_counter()
        if key[0] not in peer_names:
            impls[key[0]][key[1:]]()
        else:
            with peer_failure(key[0], cell.capacity, cell.batch):
                impls[key[0]][key[1:]]()
                compile_s[key] = time.perf_counter() - t
            if compile_s.get(key, 0.0) > args.peer_limit_s:
                print(f"note: {key[0]} {key[1]} ({key[2]}) took {compile_s.pop(key):.0f} s "
                      f"to warm up at capacity {cell.capacity}, batch {cell.batch}, over "
                      f"--peer-limit-s {args.peer_limit_s:g}: not repeated")  # fmt: skip
            continue
        compile_s[key] = time.perf_counter() - t
    return compile_s


def measure(args: Args, h, cell: Cell, impls: dict, steps_of: dict, peer_names: list[str]):
    """Times every implementation's ops at ``cell``, alternating them within each of
    ``--repeats`` repeats (after a warm-up), traces the fused ones where ``--trace-dir`` asks;
    returns their rows (items/s: median, min, max over the repeats)."""
    keys = [(impl, op, mode) for impl, runners in impls.items() for op in args.ops
            for mode in args.modes if (op, mode) in runners]  # fmt: skip
    compile_s = warm_up(args, cell, impls, keys, peer_names)
    keys = [key for key in keys if key in compile_s]  # less a peer's failed ones
    times: dict = {key: [] for key in keys}
    for _ in range(args.repeats):  # alternate implementations within each repeat
        for key in keys:
            t = time.perf_counter()
            impls[key[0]][key[1:]]()
            times[key].append(time.perf_counter() - t)
    if args.trace_dir is not None:
        for impl, op, mode in keys:
            if mode == "fused":
                name = f"{impl}-{op}-c{cell.capacity}-b{cell.batch}-k{cell.k}"
                trace_once(impls[impl][(op, mode)], args.trace_dir, name)
    rows = []
    for key in keys:
        impl = key[0]
        n_steps = steps_of.get(impl, steps_for(cell.batch))
        rates = sorted(cell.batch * n_steps / t for t in times[key])
        rows.append(row_of(args, h, cell, key, n_steps, rates, compile_s[key]))
    return rows


def row_of(args: Args, h, cell: Cell, key: tuple, n_steps: int, rates: list, warm_s: float):
    """The JSON row of one ``(impl, op, mode)`` at ``cell``, its repeats' ``rates`` sorted."""
    impl, op, mode = key
    return {
        "impl": impl,
        "op": op,
        "mode": mode,
        "capacity": cell.capacity,
        "batch": cell.batch,
        "branching": cell.k if impl.startswith("drlhet") else None,
        "steps_per_repeat": n_steps,
        "unroll": args.unroll,
        "loop": args.loop,
        **cuda_path(args, impl, cell.batch),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "items_per_s": statistics.median(rates),
        "items_per_s_min": rates[0],
        "items_per_s_max": rates[-1],
        "warmup_s": warm_s,
        "repeats": args.repeats,
        "threading": args.threading,
        "machine": machine(),
        "measured": True,
        **where(h, impl),
        "run": run_info("flashbax", "cpprb"),
    }


# The switches of `drlhet.backends.cuda` every cuda row records (``cuda_<switch>``, as the
# library had them when the row ran), whether or not this run's options set them.
CUDA_PATH_SWITCHES = ("BLOCK_MAX_BATCH", "NARROW_MAX_NODES", "CLUSTER_MAX_BATCH", "TAGGED_CLAIMS",
                      "TAGGED_SIBLINGS", "SPREAD_MIN_BATCH", "SPREAD_THREADS")  # fmt: skip


def cuda_path(args: Args, impl: str, batch: int) -> dict:
    """The cuda settings a row ran with (``cuda_<switch>``; None for other backends)."""
    names = CUDA_PATH_SWITCHES
    if not impl.startswith("drlhet-cuda"):
        return {f"cuda_{n.lower()}": None for n in names} | {
            "cuda_key_targets": None, "cuda_shared_top": None, "cuda_own_sample": None
        }  # fmt: skip
    from drlhet.backends import cuda

    # the sample call (weigh) is the backend's
    spread = re.fullmatch(r"drlhet-cuda-spread(\d+)", impl)
    own_sample = impl == "drlhet-cuda" or impl in CLAIMS_ARMS or spread is not None
    own_sample = own_sample and args.cuda_own_sample and batch <= cuda.OWN_SAMPLE_MAX_BATCH
    key_targets = args.cuda_key_targets and cuda.KEY_TARGETS and own_sample
    shared_top = bool(cuda.SHARED_TOP) and own_sample
    arm = {}
    if impl in CLAIMS_ARMS:
        arm = {f"cuda_{n.lower()}": int(on) for n, on in CLAIMS_ARMS[impl][1].items()}
    if spread is not None:
        arm = {"cuda_spread_min_batch": 1, "cuda_spread_threads": int(spread[1])}
    return {f"cuda_{n.lower()}": int(getattr(cuda, n)) for n in names} | arm | {
        "cuda_key_targets": key_targets, "cuda_shared_top": shared_top,
        "cuda_own_sample": own_sample,
    }  # fmt: skip


def where(h, impl: str) -> dict:
    """The row's device, its kind (the CPU's or GPU's model) and what its speed is the speed
    of."""
    import replay_impls

    name = backend_of(impl)
    on_cpu = {"device": "cpu", "device_kind": cpu_model(), "speed_of": speed_of(impl)}
    if impl == "flashbax":  # a pure-JAX peer: where the jax backend runs
        name = "jax"
    elif not impl.startswith("drlhet-"):
        return on_cpu
    dev = replay_impls.device_of(h, name)
    if dev.platform == replay_impls.backends_api.CPU:
        return on_cpu
    kind = dev.device_kind
    return {"device": str(dev), "device_kind": kind, "speed_of": f"this GPU ({kind})"}


def trace_once(run, folder: Path, name: str) -> Path:
    """``run()`` once under jax's profiler; its trace (Chrome trace JSON, gzipped) copied to
    ``folder/name.trace.json.gz``, which is returned."""
    import jax

    raw = folder / "raw" / name
    with jax.profiler.trace(str(raw)):
        run()
    found = sorted(raw.glob("plugins/profile/*/*.trace.json.gz"), key=lambda f: f.stat().st_mtime)
    if not found:
        raise RuntimeError(f"jax's profiler wrote no *.trace.json.gz under {raw}")
    out = folder / f"{name}.trace.json.gz"
    shutil.copyfile(found[-1], out)
    print(f"traced {name}: {out}")
    return out


@contextlib.contextmanager
def peer_failure(name: str, capacity: int, batch: int):
    """A peer's exception becomes a one-line note, so that its failure (a version of it that
    does not run here, say) costs its own rows, not the run's."""
    try:
        yield
    except Exception as e:  # any failure of a peer's code
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"note: {name} failed at capacity {capacity}, batch {batch}, skipped: "
              f"{type(e).__name__}: {first}")  # fmt: skip


def backend_of(impl: str) -> str:
    """The drlhet backend of a row's implementation (``drlhet-cuda-plain`` -> ``cuda``)."""
    name = re.sub(r"-spread\d+$", "", impl.removeprefix("drlhet-"))
    for variant in ("-1t", "-plain", "-tagged", "-siblings", "-find"):
        name = name.removesuffix(variant)
    return name


def speed_of(impl: str) -> str:
    """What a row's speed is the speed of: the implementation on this CPU, or, for a backend
    that runs here only as a simulation (``fpga``: the replay module's C-simulation; ``cuda``:
    its kernels under the host emulation of CUDA), the simulation's (it proves function; the
    board's speed comes from the cycle model, the GPU's from a GPU)."""
    from drlhet.backends import CPU, get

    name = backend_of(impl)
    if impl.startswith("drlhet-") and get(name).simulates(CPU, "replay"):
        return f"simulation of {name} on this CPU: function only, not the hardware's speed"
    return "this CPU"


def print_table(rows: list[dict], title: str) -> None:
    print(f"\n== {title}: items/s, median [min-max] of repeats (measured) ==")
    print(f"{'impl':<12} {'mode':<8} {'op':<7} {'median':>10} {'min':>10} {'max':>10}")
    for r in rows:
        print(
            f"{r['impl']:<12} {r['mode']:<8} {r['op']:<7} {r['items_per_s']:>10.3g} "
            f"{r['items_per_s_min']:>10.3g} {r['items_per_s_max']:>10.3g}"
            + ("" if r.get("speed_of", "this CPU") == "this CPU" else f"  ({r['speed_of']})")
        )


def print_ratios(rows: list[dict], capacity: int, batch: int, k: int, depth: int) -> None:
    # the peers' rows (no K) belong to the K 16 cell of a (capacity, batch), the one they run
    # in, taking turns with it: at another K they are another measurement's
    def rate(impl: str, op: str, mode: str) -> float | None:
        for r in rows:
            if (r["impl"], r.get("op"), r.get("mode"), r.get("capacity"), r.get("batch")) == (
                impl,
                op,
                mode,
                capacity,
                batch,
            ) and r["branching"] in ((k, None) if k == 16 else (k,)):
                return r["items_per_s"]
        return None

    simulated = {r["impl"] for r in rows if "simulation" in r.get("speed_of", "")}
    for impl in ("drlhet-jax", "drlhet-native", "drlhet-cuda"):
        if impl in simulated:  # a simulation's speed is no speed to compare
            continue
        ours = rate(impl, "step", "fused")
        s, u = rate(impl, "sample", "fused"), rate(impl, "update", "fused")
        if ours and s and u:
            # time per item of step vs (sample + update): ~1 means no hidden copy of the tree
            print(
                f"{impl}: step time / (sample time + update time) = "
                f"{(1 / ours) / (1 / s + 1 / u):.2f}"
            )
        for peer, mode in (("cpprb", "percall"), ("flashbax", "fused")):
            theirs = rate(peer, "step", mode)
            if ours and theirs:
                print(f"step: {impl} fused / {peer} {mode} = {ours / theirs:.2f}x")
    nat, ref = rate("drlhet-native", "step", "fused"), rate("drlhet-jax", "step", "fused")
    one = rate("drlhet-native-1t", "step", "fused")
    names = sorted(  # speeds of a device, not of a simulation
        {r["impl"] for r in rows if "simulation" not in r.get("speed_of", "simulation")}
    )
    for impl in names:  # every backend against jax; one with its own calls against without
        ours = rate(impl, "step", "fused")
        if ours and ref and impl not in ("drlhet-jax", "drlhet-native-1t"):
            print(f"step: {impl} fused / drlhet-jax fused = {ours / ref:.2f}x")
        plain = rate(impl + "-plain", "step", "fused")
        if ours and plain:
            print(f"step: {impl} own sample/update calls / {impl}-plain = {ours / plain:.2f}x")
    for arm in CLAIMS_ARMS:  # the A/Bs of --cuda-tagged-ab, in one run
        for op in ("update", "step"):
            a, b = rate(arm, op, "fused"), rate("drlhet-cuda", op, "fused")
            if a and b and "drlhet-cuda" in names:
                print(f"{op}: {arm} fused / drlhet-cuda fused = {a / b:.2f}x")
    arms = ["drlhet-cuda-find", *(n for n in names if re.fullmatch(r"drlhet-cuda-spread\d+", n))]
    for arm in arms:  # the A/Bs of --cuda-find-ab and --cuda-spread-ab, in one run
        for op in ("sample", "step"):
            a, b = rate(arm, op, "fused"), rate("drlhet-cuda", op, "fused")
            if a and b and "drlhet-cuda" in names:
                print(f"{op}: {arm} fused / drlhet-cuda fused = {a / b:.2f}x")
    if nat and one:
        print(f"step: drlhet-native all threads / 1 thread = {nat / one:.2f}x")
    limit = next((r for r in rows if r["impl"] == "machine-limit"), None)
    if nat and limit:
        # a step item reads one K-child row per level to sample and one per level to update
        lines = 2 * depth
        gather_bound = limit["independent_per_s"] / lines
        latency_bound = 1e9 / (limit["dependent_ns"] * lines)
        print(
            f"native step {nat:.3g} items/s = {nat / gather_bound:.2f} of the independent-read "
            f"bound ({gather_bound:.3g}/s, {lines} row reads per item, one core) and "
            f"{nat / latency_bound:.2f} of the dependent-read bound ({latency_bound:.3g}/s)"
        )


THREADINGS = ("default", "pin1", "xla1")
"""The settings of ``--threading``, in the order the study runs them."""


def study_outputs(out: Path) -> tuple[Path, dict[str, Path]]:
    """Where ``--threading-study`` writes, named after ``--out`` (``<folder>/<name>.json``): all
    the rows in ``<name>_threading.json``, and each setting's run in
    ``<name>_threading_<setting>.json`` beside it."""

    def named(tail: str) -> Path:
        return out.with_name(f"{out.stem}_threading{tail}{out.suffix}")

    return named(""), {mode: named(f"_{mode}") for mode in THREADINGS}


def study_run(args: Args, mode: str, out: Path) -> list[dict]:
    """One setting's run of the study: this script in a process of its own, writing ``out``;
    its rows. A run that fails ends the study (exit status 1) with one line naming its setting,
    exit status, last line on stderr and command."""
    cmd = [sys.executable, __file__, "--quick", "--no-peers", "--threading", mode]
    cmd += ["--ops", "sample", "update", "step", "--modes", "fused", "percall"]
    cmd += ["--repeats", str(args.repeats), "--out", str(out)]
    print("$", shlex.join(cmd), flush=True)
    got = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    if got.returncode == 0:
        sys.stderr.write(got.stderr)  # its warnings, once it has run
        return json.loads(out.read_text())
    last = (got.stderr.strip().splitlines() or ["no output on stderr"])[-1]
    print(
        f"bench_replay: failed: threading study, --threading {mode}: exit status "
        f"{got.returncode} ({last}); {study_outputs(args.out)[0]} not written; command: "
        f"{shlex.join(cmd)}",
        file=sys.stderr,
    )
    raise SystemExit(1)


def threading_study(args: Args) -> list[dict]:
    target, outs = study_outputs(args.out)
    rows = []
    for mode, out in outs.items():
        rows += study_run(args, mode, out)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(rows, indent=1))
    print("\n== threading study, capacity 2^20, K 16, batch 256: items/s (median, measured) ==")
    print(f"{'threading':<10} {'mode':<8} {'sample':>10} {'update':>10} {'step':>10}")
    for mode in THREADINGS:
        for m in ("fused", "percall"):
            r = {
                x["op"]: x["items_per_s"]
                for x in rows
                if x.get("threading") == mode
                and x.get("mode") == m
                and x.get("impl") == "drlhet-jax"
            }
            print(f"{mode:<10} {m:<8} {r['sample']:>10.3g} {r['update']:>10.3g} {r['step']:>10.3g}")
    print(f"wrote {target}")
    return rows


LEAST = {option: 0 for option in CUDA_SWITCHES if option.endswith(("_batch", "_nodes"))}
"""The smallest value of each cuda threshold (`checked_cli.refused_counts`; None: the
library's), as experiments/with_cuda_paths.py takes them."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
