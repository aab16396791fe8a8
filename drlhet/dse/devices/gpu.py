"""Analytical cost of the loop's primitives on a GPU, from its device sheet (pure).

docs/design.md section 5: a primitive costs its kernel launches x the launch latency + the
bytes it moves / (memory bandwidth x random-access efficiency) + its FLOPs / (FP32 rate x
compute efficiency). The host pays the sheet's ``dispatch_us`` per call. A replay whose buffer
exceeds the GPU's memory (``mem_gb``) cannot be placed there.
"""

from __future__ import annotations

from drlhet.dse.shapes import Shapes

__all__ = ["seconds", "host_overhead", "infeasible", "source"]


def _v(sheet: dict, name: str) -> float:
    return float(sheet["values"][name]["value"])


def seconds(prim: str, sheet: dict, s: Shapes, link: dict) -> float:
    """Seconds of one call of primitive ``prim`` (``actors``, ``insert``, ``sample``,
    ``train``, ``update``) on the GPU of ``sheet`` when fused (no dispatch; ``link``, the
    sheet of its link to the host, costs nothing inside a call)."""
    del link
    launch = _v(sheet, "launch_us") * 1e-6
    bw = _v(sheet, "mem_bw_gbs") * 1e9
    rand_bw = bw * _v(sheet, "random_access_efficiency")
    flops = _v(sheet, "fp32_tflops") * 1e12 * _v(sheet, "compute_efficiency")
    row = s.branching * 4
    if prim == "sample":  # one kernel per level (descent) + RNG, gather, weights
        kernels = s.levels + 4
        nbytes = s.batch * (s.levels * row + s.row_bytes)
        return kernels * launch + nbytes / rand_bw
    if prim in ("update", "insert"):  # scatter leaves + one kernel per level (parent sums)
        n = s.batch if prim == "update" else s.num_envs
        kernels = 2 * s.levels + 2
        nbytes = 2 * n * s.levels * row + (n * s.row_bytes if prim == "insert" else 0)
        return kernels * launch + nbytes / rand_bw
    if prim == "train":  # fwd + 2x bwd of the online net, 2 fwd on next obs (double DQN)
        kernels = 12 * s.layers + 10
        flop = 2 * 5 * s.batch * s.macs_per_sample
        return kernels * launch + flop / flops + 3 * 4 * s.params / bw
    if prim == "actors":  # policy forward + env physics + n-step bookkeeping
        kernels = 3 * s.layers + 20
        return kernels * launch + 2 * s.num_envs * s.macs_per_sample / flops
    raise ValueError(f"no GPU cost for primitive {prim!r}")


def source(group: str) -> str:
    """What the costs of ``group`` on a GPU rest on: its sheet (no GPU kernel measured)."""
    return "sheet"


def host_overhead(sheet: dict) -> float:
    """Seconds of the host thread per call of a stage on the GPU (its dispatch)."""
    return _v(sheet, "dispatch_us") * 1e-6


def infeasible(group: str, sheet: dict, s: Shapes) -> str:
    """Why ``group`` cannot run on this GPU (empty: it can): the replay's transitions and sum
    tree must fit in its memory (``mem_gb``; a lower bound of what it holds: the insertion
    stamps and the other groups' state are not counted)."""
    if group != "replay":
        return ""
    need, have = s.capacity * s.row_bytes + s.tree_bytes, _v(sheet, "mem_gb") * 1e9
    if need <= have:
        return ""
    return (
        f"{sheet['name']}: capacity {s.capacity}: the replay's transitions and sum tree "
        f"({need / 1e9:,.1f} GB) exceed its memory ({have / 1e9:,.0f} GB)"
    )
