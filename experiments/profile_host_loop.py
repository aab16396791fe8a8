"""Where the host thread's time goes in a split mapping: each stage call and each transfer, timed.

Wraps the jitted stages of the host loops (`drlhet.runtime.stages`) and ``jax.device_put`` with
timers and runs one training configuration; for every stage and for the transfers it reports
the calls, the host time the call took to return (dispatch, or the whole run when XLA executes
it on the calling thread) and the share of the wall time. Two probes test what the pipeline design
rests on (docs/design.md section 6): whether a call on an XLA CPU device returns before its
result is ready and whether a ``device_put`` of a result still being computed waits for it; and
whether the host work of two stage loops (dispatch, transfers) runs faster on two threads.

Usage:
  python experiments/profile_host_loop.py            # k = 4, B 64, 2^20, the lead's mapping
  python experiments/profile_host_loop.py --delay 0 \
      --mapping "actors=cpu:0,replay=native@cpu:1,learner=cpu:1"
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import checked_cli
from _common import run_info


@dataclasses.dataclass
class Args:
    mapping: str = "actors=cpu:0,replay=native@cpu:1,learner=cpu:0"
    delay: int = 4
    batch_size: int = 64
    buffer_size: int = 1 << 20
    chunk_steps: int = 4_000
    chunks: int = 3
    """Chunks per run; the first (compilation) is not counted."""
    out: Path = Path("results/profile_host_loop.json")


class Timers:
    """Host seconds and calls per name, only while ``on``."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self.on = False

    def wrap(self, name, fn):
        return Timed(self, name, fn)


class Timed:
    """``fn``'s calls timed into ``timers`` under ``name``; every other attribute is ``fn``'s
    (a jitted stage's ``lower``, which the pipeline compiles its evaluation with)."""

    def __init__(self, timers: Timers, name: str, fn):
        self.timers, self.name, self.fn = timers, name, fn

    def __call__(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            if self.timers.on:
                self.timers.seconds[self.name] += time.perf_counter() - t
                self.timers.calls[self.name] += 1

    def __getattr__(self, attr):
        return getattr(self.fn, attr)


def config(args: Args):
    """The training configuration profiled (a `TrainConfig`)."""
    from drlhet.agents.dqn import DQNConfig
    from drlhet.runtime.config import TrainConfig

    return TrainConfig(
        batch_size=args.batch_size,
        buffer_size=args.buffer_size,
        delay=args.delay,
        sgd_steps=2,
        warmup=max(1_000, args.batch_size),
        eval_every=args.chunk_steps,
        eval_envs=2,
        steps=1_000 + args.chunks * args.chunk_steps,
        dqn=DQNConfig(hidden=(64, 64)),
    )


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": the configuration, or a mapping that does
    not parse or names a backend or device that is not here; asked before the probes run."""
    import jax

    jax.config.update("jax_num_cpu_devices", 2)  # before jax starts, as main does
    return checked_cli.refused_config(config(args), args.mapping, "--mapping")


def profile_loop(args: Args) -> dict:
    """Runs the configuration with every stage and transfer timed (after the first chunk)."""
    import jax

    from drlhet.runtime import host_loop, pipeline, stages
    from drlhet.runtime.run import run

    timers = Timers()

    def timed_stages(builder):
        def build(*a, **k):
            st = builder(*a, **k)
            fields = {
                f: timers.wrap(f, getattr(st, f)) if callable(getattr(st, f)) else getattr(st, f)
                for f in st._fields
            }
            return type(st)(**fields)

        return build

    host_loop.iteration_stages = timed_stages(stages.iteration_stages)  # type: ignore[assignment]
    pipeline.pipeline_stages = timed_stages(stages.pipeline_stages)  # type: ignore[assignment]
    jax.device_put = timers.wrap("device_put", jax.device_put)
    cfg = config(args)
    marks: list[float] = []

    def on_chunk(row):
        marks.append(time.perf_counter())
        timers.on = True  # from the end of the first (compiling) chunk on

    # the host-driven loops (a mapping with an accelerator runs them), whose stage calls and
    # transfers these timers see: a split of CPU devices otherwise runs in-program channels,
    # one program a chunk, with no stage call on the host to time
    with pipeline.host_driven():
        _, rows = run(cfg, args.mapping, on_chunk=on_chunk)
    wall = marks[-1] - marks[0]
    return {
        "wall_s": wall,
        "trained_samples_per_s": sorted(r["trained_samples_per_s"] for r in rows[1:])[
            len(rows[1:]) // 2
        ],
        "host": {
            name: {
                "calls": timers.calls[name],
                "seconds": timers.seconds[name],
                "ms_per_call": 1e3 * timers.seconds[name] / max(timers.calls[name], 1),
                "share_of_wall": timers.seconds[name] / wall,
            }
            for name in sorted(timers.seconds)
        },
    }


def probe_dispatch() -> dict:
    """Does a call on a CPU device return before it is done, and does a device_put of its
    result wait for it? For a sequential program (a scan: what the stages are) and a parallel
    one (large matrix products)."""
    import jax
    import jax.numpy as jnp

    d0, d1 = jax.devices("cpu")[:2]

    @jax.jit
    def sequential(x):
        return jax.lax.scan(lambda c, _: (jnp.sin(c) * 0.99 + 0.01, None), x, None, length=200_000)[
            0
        ]

    @jax.jit
    def parallel(x):
        return jax.lax.fori_loop(0, 40, lambda i, y: jnp.tanh(y @ y) * 0.5, x)

    out = {}
    for name, fn, x in (
        ("sequential scan", sequential, jnp.ones((8,))),
        ("parallel matmuls", parallel, jnp.ones((512, 512)) * 0.01),
    ):
        x = jax.device_put(x, d0)
        jax.block_until_ready(fn(x))
        rows = []
        for _ in range(5):
            t0 = time.perf_counter()
            y = fn(x)
            t1 = time.perf_counter()
            z = jax.device_put(y, d1)
            t2 = time.perf_counter()
            jax.block_until_ready(z)
            t3 = time.perf_counter()
            rows.append((t1 - t0, t2 - t1, t3 - t0))
        med = [sorted(r[i] for r in rows)[2] for i in range(3)]
        out[name] = {
            "call_returns_ms": 1e3 * med[0],
            "device_put_returns_ms": 1e3 * med[1],
            "result_ready_ms": 1e3 * med[2],
        }
    return out


def probe_put(repeats: int = 2_000) -> dict:
    """Host microseconds per CPU-to-CPU ``device_put`` of a list of float32 leaves, by the
    number and the size of the leaves."""
    import jax
    import jax.numpy as jnp

    d0, d1 = jax.devices("cpu")[:2]
    out = {}
    for n, size in ((1, 512), (6, 512), (1, 3072), (30, 64)):
        x = jax.device_put([jnp.ones((size,)) for _ in range(n)], d0)
        for _ in range(50):
            jax.block_until_ready(jax.device_put(x, d1))
        t = time.perf_counter()
        for _ in range(repeats):
            y = jax.device_put(x, d1)
        jax.block_until_ready(y)
        out[f"{n} x {size} floats"] = 1e6 * (time.perf_counter() - t) / repeats
    return out


def probe_threads(steps: int = 3_000) -> dict:
    """Host work of a stage loop (a small jitted call on a 6-leaf pytree, optionally two
    ``device_put`` hops) on one thread for both devices, then one thread per device: does a
    second host thread add throughput?"""
    import threading

    import jax
    import jax.numpy as jnp

    d0, d1 = jax.devices("cpu")[:2]
    f = jax.jit(lambda t: jax.tree.map(lambda x: x * 1.0001 + 0.1, t))

    def make(d):
        return jax.device_put({f"a{i}": jnp.ones((64, 8)) for i in range(6)}, d)

    def loop(x, home, other, put):
        for _ in range(steps):
            x = f(x)
            if put:
                x = jax.device_put(jax.device_put(x, other), home)
        jax.block_until_ready(x)

    x0, x1 = make(d0), make(d1)
    jax.block_until_ready((f(x0), f(x1)))
    out = {}
    for put in (False, True):
        t = time.perf_counter()
        loop(x0, d0, d1, put)
        loop(x1, d1, d0, put)
        one = time.perf_counter() - t
        threads = [
            threading.Thread(target=loop, args=(x0, d0, d1, put)),
            threading.Thread(target=loop, args=(x1, d1, d0, put)),
        ]
        t = time.perf_counter()
        for h in threads:
            h.start()
        for h in threads:
            h.join()
        two = time.perf_counter() - t
        out["call + 2 puts" if put else "call"] = {
            "one_thread_us_per_step": 1e6 * one / (2 * steps),
            "two_threads_us_per_step": 1e6 * two / (2 * steps),
            "speedup": one / two,
        }
    return out


def main(args: Args) -> dict:
    import jax

    jax.config.update("jax_num_cpu_devices", 2)
    result: dict[str, Any] = {
        "args": {k: str(v) for k, v in dataclasses.asdict(args).items()},
        "machine": f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})",
        "measured": time.strftime("%Y-%m-%d"),
        "run": run_info(),
        "dispatch": probe_dispatch(),
        "threads": probe_threads(),
        "put_us": probe_put(),
        "loop": profile_loop(args),
    }
    for name, r in result["dispatch"].items():
        print(
            f"{name:<17} call returns after {r['call_returns_ms']:7.2f} ms; device_put of the "
            f"result returns after {r['device_put_returns_ms']:6.2f} ms; ready at "
            f"{r['result_ready_ms']:7.2f} ms (measured)"
        )
    for name, r in result["threads"].items():
        print(
            f"host work '{name}': one thread {r['one_thread_us_per_step']:.1f} us/step, one "
            f"thread per device {r['two_threads_us_per_step']:.1f} us/step ({r['speedup']:.2f}x)"
        )
    puts = ", ".join(f"{k}: {v:.1f} us" for k, v in result["put_us"].items())
    print(f"one device_put (measured): {puts}")
    loop = result["loop"]
    print(
        f"\n{args.mapping}, k={args.delay}, B {args.batch_size}, capacity {args.buffer_size}: "
        f"{loop['trained_samples_per_s']:,.0f} trained samples/s; host time per name (measured):"
    )
    for name, h in loop["host"].items():
        print(
            f"  {name:<14} {h['calls']:>7} calls {h['ms_per_call']:8.3f} ms/call "
            f"{100 * h['share_of_wall']:5.1f}% of wall"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"rows: {args.out}")
    return result


LEAST = {"delay": 0, "batch_size": 1, "buffer_size": 1, "chunk_steps": 1, "chunks": 2}
"""The smallest value of each count (`checked_cli.refused_counts`; the first chunk compiles, and
is not counted)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
