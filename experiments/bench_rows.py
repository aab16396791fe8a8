"""bench_replay.py's rows: what each JSON row says (its rates, device, machine and run) and the
tables and ratios printed from them.

Imports no jax at import time: jax and drlhet's backends are imported where a row is made.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
from typing import TYPE_CHECKING

from _common import cpu_model, run_info
from bench_cuda_paths import SWITCH_ARMS, cuda_path

if TYPE_CHECKING:
    from bench_replay import Args, Cell


def machine() -> str:
    return f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})"


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


def backend_of(impl: str) -> str:
    """The drlhet backend of a row's implementation (``drlhet-cuda-plain`` -> ``cuda``)."""
    name = re.sub(r"-spread\d+$", "", impl.removeprefix("drlhet-"))
    for variant in ("-1t", "-plain", "-tagged", "-siblings", "-wide", "-sorted", "-find"):
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
    for arm in SWITCH_ARMS:  # the A/Bs of --cuda-tagged-ab, -wide-ab and -sorted-ab, in one run
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
