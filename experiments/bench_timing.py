"""bench_replay.py's timing of one grid cell: the implementations it builds there (drlhet's
backends and variants, the A/B arms, the peers), their warm-up, the repeats that alternate them,
and the traces ``--trace-dir`` asks for.

Imports no jax at import time: ``replay_impls`` (which does) is imported once a cell is built,
after bench_replay.py has set up its threading.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench_cuda_paths import ab_arms
from bench_rows import row_of

if TYPE_CHECKING:
    from bench_replay import Args, Cell


def steps_for(batch: int) -> int:
    return int(min(2048, max(16, 65536 // batch)))


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
